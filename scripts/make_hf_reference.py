r"""Regenerates tests/data/hf_rope_reference.json from Hugging Face transformers itself.

    python -m venv /tmp/hf && /tmp/hf/bin/pip install torch==2.13.0 transformers==5.23.0 numpy
    /tmp/hf/bin/python scripts/make_hf_reference.py

Not a dependency of posenc: it runs in its own environment once, and the JSON it writes is committed so
that tests/test_hf_reference.py can check posenc against transformers' `ROPE_INIT_FUNCTIONS` (inverse
frequencies and attention factors of every rope_type) and `apply_rotary_pos_emb` without installing torch.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import torch
import transformers
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaConfig, LlamaRotaryEmbedding, apply_rotary_pos_emb

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "hf_rope_reference.json"
HEAD_DIM, HEADS, MAX_POS = 64, 2, 2048

CASES = [
    {"rope_type": "default", "rope_theta": 10000.0},
    {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0, "seq_len": 2048},
    {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0, "seq_len": 6000},
    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 2048},
    {"rope_type": "yarn", "rope_theta": 500000.0, "factor": 8.0, "original_max_position_embeddings": 1024,
     "beta_fast": 16.0, "beta_slow": 2.0, "truncate": False},
    {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 40.0, "original_max_position_embeddings": 2048,
     "mscale": 1.0, "mscale_all_dim": 0.5},
    {"rope_type": "longrope", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 256,
     "short_factor": list(np.linspace(1.0, 1.3, HEAD_DIM // 2)), "long_factor": list(np.linspace(1.0, 9.0, HEAD_DIM // 2)),
     "seq_len": 256},
    {"rope_type": "longrope", "rope_theta": 10000.0, "factor": 8.0, "original_max_position_embeddings": 256,
     "short_factor": list(np.linspace(1.0, 1.3, HEAD_DIM // 2)), "long_factor": list(np.linspace(1.0, 9.0, HEAD_DIM // 2)),
     "seq_len": 257},
    {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "original_max_position_embeddings": 8192,
     "low_freq_factor": 1.0, "high_freq_factor": 4.0},
]


def main():
    cases = []
    for case in CASES:
        params = {k: v for k, v in case.items() if k != "seq_len"}
        if params["rope_type"] == "longrope":
            params["short_factor"] = [float(v) for v in params["short_factor"]]
            params["long_factor"] = [float(v) for v in params["long_factor"]]
        config = LlamaConfig(hidden_size=HEAD_DIM * HEADS, num_attention_heads=HEADS, head_dim=HEAD_DIM,
                             max_position_embeddings=case.get("original_max_position_embeddings", MAX_POS),
                             rope_parameters=dict(params))
        if params["rope_type"] == "default":  # transformers 5 keeps the default in the model's rotary class
            inv_freq, attention_factor = LlamaRotaryEmbedding.compute_default_rope_parameters(config)
        else:
            inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[params["rope_type"]](config, "cpu",
                                                                                  seq_len=case.get("seq_len"))
        cases.append({"rope_parameters": params, "seq_len": case.get("seq_len"), "head_dim": HEAD_DIM,
                      "max_position_embeddings": config.max_position_embeddings,
                      "inv_freq": inv_freq.double().tolist(), "attention_factor": float(attention_factor)})

    # apply_rotary_pos_emb (rotate_half layout) on random q, k at positions past 2048.
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, HEADS, 8, HEAD_DIM, generator=gen)  # HF layout [B, N, T, H]
    k = torch.randn(1, HEADS, 8, HEAD_DIM, generator=gen)
    positions = torch.tensor([[0, 1, 2, 100, 2047, 2048, 4000, 8191]])
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
    freqs = positions[..., None].float() * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)
    q_rot, k_rot = apply_rotary_pos_emb(q, k, emb.cos(), emb.sin())
    apply = {"positions": positions[0].tolist(), "q": q[0].tolist(), "k": k[0].tolist(),
             "q_rot": q_rot[0].tolist(), "k_rot": k_rot[0].tolist()}

    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"transformers": transformers.__version__, "torch": torch.__version__,
                               "cases": cases, "apply_rotary_pos_emb": apply}, indent=1))
    print(f"wrote {OUT} ({len(cases)} rope cases) with transformers {transformers.__version__}")


if __name__ == "__main__":
    main()
