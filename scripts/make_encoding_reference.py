r"""Regenerates tests/data/encoding_reference.json from the reference implementations themselves.

    python -m venv /tmp/hf && /tmp/hf/bin/pip install torch==2.13.0 transformers==5.23.0 \
        rotary-embedding-torch==0.9.1 numpy
    /tmp/hf/bin/python scripts/make_encoding_reference.py

Not a dependency of posenc: it runs in its own environment once, and the JSON it writes is committed so
that tests can check posenc against the references without installing torch:
  * T5's relative position buckets (`transformers`' `T5Attention._relative_position_bucket`, the port of
    Mesh TensorFlow's), causal and bidirectional, far past `max_distance`;
  * xPos attention scores (`rotary_embedding_torch.RotaryEmbedding(use_xpos=True)`, the implementation
    x-transformers uses), interleaved pairs;
  * p-RoPE's inverse frequencies (`transformers`' `proportional` rope type).
"""

from __future__ import annotations

import json
import pathlib

import rotary_embedding_torch
import torch
import transformers
from rotary_embedding_torch import RotaryEmbedding
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaConfig
from transformers.models.t5.modeling_t5 import T5Attention

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "encoding_reference.json"
T5_CASES = [(False, 32, 128), (True, 32, 128), (False, 16, 64), (True, 64, 256)]
T5_RANGE = 3000


def main():
    rel = torch.arange(-T5_RANGE, T5_RANGE + 1)
    t5 = []
    for bidirectional, num_buckets, max_distance in T5_CASES:
        buckets = T5Attention._relative_position_bucket(rel, bidirectional=bidirectional, num_buckets=num_buckets,
                                                        max_distance=max_distance)
        t5.append({"bidirectional": bidirectional, "num_buckets": num_buckets, "max_distance": max_distance,
                   "relative_position_start": -T5_RANGE, "buckets": buckets.tolist()})

    gen = torch.Generator().manual_seed(0)
    dim, seq, heads, scale_base = 16, 48, 2, 64
    q = torch.randn(1, heads, seq, dim, generator=gen)
    k = torch.randn(1, heads, seq, dim, generator=gen)
    rotary = RotaryEmbedding(dim=dim, use_xpos=True, xpos_scale_base=scale_base)
    q_rot, k_rot = rotary.rotate_queries_and_keys(q, k)
    scores = torch.einsum("bnqh,bnkh->bnqk", q_rot.double(), k_rot.double())
    xpos = {"dim": dim, "scale_base": scale_base, "q": q[0].tolist(), "k": k[0].tolist(), "scores": scores[0].tolist()}

    p_rope = []
    for head_dim, p in [(16, 0.5), (16, 0.75), (64, 0.25), (32, 1.0)]:
        config = LlamaConfig(hidden_size=head_dim * 2, num_attention_heads=2, head_dim=head_dim,
                             rope_parameters={"rope_type": "proportional", "rope_theta": 10000.0,
                                              "partial_rotary_factor": p})
        inv_freq, _ = ROPE_INIT_FUNCTIONS["proportional"](config, "cpu")
        p_rope.append({"head_dim": head_dim, "p": p, "inv_freq": inv_freq.double().tolist()})

    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"transformers": transformers.__version__, "torch": torch.__version__,
                               "rotary_embedding_torch": rotary_embedding_torch.__version__ if hasattr(
                                   rotary_embedding_torch, "__version__") else "0.9.1",
                               "t5_buckets": t5, "xpos": xpos, "p_rope": p_rope}))
    print(f"wrote {OUT}: {len(t5)} T5 bucket cases, xPos scores {tuple(scores.shape)}")


if __name__ == "__main__":
    main()
