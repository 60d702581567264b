r"""Regenerates tests/data/hf_config_rope_reference.json: each model family's rotary embedding, as
transformers builds it from a whole `config.json`.

    python -m venv /tmp/hf && /tmp/hf/bin/pip install torch==2.13.0 transformers==5.23.0 numpy
    /tmp/hf/bin/python scripts/make_hf_config_reference.py

For every case, the config dict goes through `AutoConfig.for_model` and the family's own
`<Family>RotaryEmbedding`, which is run once at `seq_len` positions so that length-dependent types
(dynamic, LongRoPE) update as they do in the model; its `inv_freq` and `attention_scaling` are recorded.
The configs are public configs of each family with their RoPE fields kept and their sizes shrunk.
Not a dependency of posenc: the JSON is committed so that tests need no torch.
"""

from __future__ import annotations

import importlib
import json
import pathlib

import numpy as np
import torch
import transformers
from transformers import AutoConfig

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "hf_config_rope_reference.json"
PHI3_SHORT = [float(x) for x in np.linspace(1.0, 1.2, 48)]
PHI3_LONG = [float(x) for x in np.linspace(1.0, 30.0, 48)]
PHI4_SHORT = [float(x) for x in np.linspace(1.0, 1.1, 48)]
PHI4_LONG = [float(x) for x in np.linspace(1.0, 20.0, 48)]

CASES = [
    ("llama2", {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "rope_theta": 10000.0,
                "max_position_embeddings": 4096}, None, None),
    ("llama2-dynamic", {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "rope_theta": 10000.0,
                        "max_position_embeddings": 4096, "rope_scaling": {"type": "dynamic", "factor": 2.0}},
     None, 8192),
    ("llama3.1", {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 4, "rope_theta": 500000.0,
                  "max_position_embeddings": 131072,
                  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192, "rope_type": "llama3"}}, None, None),
    ("llama3.2", {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4, "head_dim": 64,
                  "rope_theta": 500000.0, "max_position_embeddings": 131072,
                  "rope_scaling": {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192, "rope_type": "llama3"}}, None, None),
    ("mistral-nemo", {"model_type": "mistral", "hidden_size": 512, "num_attention_heads": 8, "head_dim": 128,
                      "rope_theta": 1000000.0, "max_position_embeddings": 1024000}, None, None),
    ("qwen2.5-yarn", {"model_type": "qwen2", "hidden_size": 512, "num_attention_heads": 4, "rope_theta": 1000000.0,
                      "max_position_embeddings": 32768,
                      "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}},
     None, None),
    ("qwen3-yarn", {"model_type": "qwen3", "hidden_size": 256, "num_attention_heads": 4, "head_dim": 128,
                    "rope_theta": 1000000.0, "max_position_embeddings": 40960,
                    "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}},
     None, None),
    ("qwen3-v5-rope-parameters", {"model_type": "qwen3", "hidden_size": 256, "num_attention_heads": 4,
                                  "head_dim": 128, "max_position_embeddings": 40960,
                                  "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 1000000.0,
                                                      "original_max_position_embeddings": 32768}}, None, None),
    # both keys: transformers 5.23 takes rope_scaling (convert_rope_params_to_dict)
    ("qwen3-both-keys", {"model_type": "qwen3", "hidden_size": 256, "num_attention_heads": 4, "head_dim": 128,
                         "max_position_embeddings": 40960, "rope_theta": 1000000.0,
                         "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1000000.0},
                         "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                          "original_max_position_embeddings": 32768}}, None, None),
    ("phi3-mini-128k-short", {"model_type": "phi3", "hidden_size": 384, "num_attention_heads": 4,
                              "rope_theta": 10000.0, "max_position_embeddings": 131072,
                              "original_max_position_embeddings": 4096,
                              "rope_scaling": {"type": "longrope", "short_factor": PHI3_SHORT,
                                               "long_factor": PHI3_LONG}}, None, 4096),
    ("phi3-mini-128k-long", {"model_type": "phi3", "hidden_size": 384, "num_attention_heads": 4,
                             "rope_theta": 10000.0, "max_position_embeddings": 131072,
                             "original_max_position_embeddings": 4096,
                             "rope_scaling": {"type": "longrope", "short_factor": PHI3_SHORT,
                                              "long_factor": PHI3_LONG}}, None, 8192),
    # Phi-3 (model_type phi3) ignores LongRoPE's short_mscale / long_mscale; Phi-3.5-MoE (phimoe) applies them
    ("phi3-longrope-mscale-ignored", {"model_type": "phi3", "hidden_size": 384, "num_attention_heads": 4,
                                      "rope_theta": 10000.0, "max_position_embeddings": 131072,
                                      "original_max_position_embeddings": 4096,
                                      "rope_scaling": {"type": "longrope", "short_factor": PHI3_SHORT,
                                                       "long_factor": PHI3_LONG, "short_mscale": 1.243,
                                                       "long_mscale": 1.243}}, None, 8192),
    ("phi4-mini-partial", {"model_type": "phi3", "hidden_size": 512, "num_attention_heads": 4,
                           "partial_rotary_factor": 0.75, "rope_theta": 10000.0, "max_position_embeddings": 131072,
                           "original_max_position_embeddings": 4096,
                           "rope_scaling": {"type": "longrope", "short_factor": PHI4_SHORT,
                                            "long_factor": PHI4_LONG}}, None, 8192),
    ("deepseek-v3", {"model_type": "deepseek_v3", "hidden_size": 512, "num_attention_heads": 4,
                     "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "kv_lora_rank": 64,
                     "q_lora_rank": 96, "rope_theta": 10000.0, "max_position_embeddings": 163840,
                     "rope_scaling": {"type": "yarn", "factor": 40.0, "beta_fast": 32, "beta_slow": 1,
                                      "mscale": 1.0, "mscale_all_dim": 1.0,
                                      "original_max_position_embeddings": 4096}}, None, None),
    ("deepseek-v3-mscale", {"model_type": "deepseek_v3", "hidden_size": 512, "num_attention_heads": 4,
                            "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "kv_lora_rank": 64,
                            "q_lora_rank": 96, "rope_theta": 10000.0, "max_position_embeddings": 163840,
                            "rope_scaling": {"type": "yarn", "factor": 40.0, "beta_fast": 32, "beta_slow": 1,
                                             "mscale": 0.707, "mscale_all_dim": 1.0,
                                             "original_max_position_embeddings": 4096}}, None, None),
    ("deepseek-v3-mscale-zero", {"model_type": "deepseek_v3", "hidden_size": 512, "num_attention_heads": 4,
                                 "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128,
                                 "kv_lora_rank": 64, "q_lora_rank": 96, "rope_theta": 10000.0,
                                 "max_position_embeddings": 163840,
                                 "rope_scaling": {"type": "yarn", "factor": 40.0, "mscale": 0.0, "mscale_all_dim": 1.0,
                                                  "original_max_position_embeddings": 4096}}, None, None),
    # keys a type does not take: transformers warns and ignores them (linear / dynamic / llama3 their
    # attention_factor, dynamic its original length); posenc refuses them (tests/test_hf.py)
    ("llama2-linear-attention-factor", {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
                                        "rope_theta": 10000.0, "max_position_embeddings": 4096,
                                        "rope_scaling": {"rope_type": "linear", "factor": 2.0,
                                                         "attention_factor": 1.5}}, None, None),
    ("llama2-dynamic-original", {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
                                 "rope_theta": 10000.0, "max_position_embeddings": 4096,
                                 "rope_scaling": {"rope_type": "dynamic", "factor": 2.0, "attention_factor": 1.5,
                                                  "original_max_position_embeddings": 2048}}, None, 8192),
    ("llama3.1-attention-factor", {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 4,
                                   "rope_theta": 500000.0, "max_position_embeddings": 131072,
                                   "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                    "original_max_position_embeddings": 8192, "rope_type": "llama3",
                                                    "attention_factor": 2.0}}, None, None),
    ("pythia", {"model_type": "gpt_neox", "hidden_size": 512, "num_attention_heads": 8, "rotary_pct": 0.25,
                "rotary_emb_base": 10000, "max_position_embeddings": 2048}, None, None),
    ("gemma3-global", {"model_type": "gemma3_text", "hidden_size": 640, "num_attention_heads": 4, "head_dim": 256,
                       "num_hidden_layers": 6, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                       "max_position_embeddings": 131072, "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
     "full_attention", None),
    ("gemma3-local", {"model_type": "gemma3_text", "hidden_size": 640, "num_attention_heads": 4, "head_dim": 256,
                      "num_hidden_layers": 6, "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
                      "max_position_embeddings": 131072, "rope_scaling": {"rope_type": "linear", "factor": 8.0}},
     "sliding_attention", None),
    ("proportional", {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
                      "max_position_embeddings": 4096,
                      "rope_parameters": {"rope_type": "proportional", "rope_theta": 10000.0,
                                          "partial_rotary_factor": 0.5}}, None, None),
]

# model_type -> (transformers.models.<module>, <Prefix>RotaryEmbedding)
ROTARY = {"llama": ("llama", "Llama"), "mistral": ("mistral", "Mistral"), "qwen2": ("qwen2", "Qwen2"),
          "qwen3": ("qwen3", "Qwen3"), "phi3": ("phi3", "Phi3"), "deepseek_v3": ("deepseek_v3", "DeepseekV3"),
          "gpt_neox": ("gpt_neox", "GPTNeoX"), "gemma3_text": ("gemma3", "Gemma3")}


def hf_rope(config: dict, layer_type, seq_len):
    model_type = config["model_type"]
    hf_config = AutoConfig.for_model(**config)
    name, prefix = ROTARY[model_type]
    module = importlib.import_module(f"transformers.models.{name}.modeling_{name}")
    rotary = getattr(module, f"{prefix}RotaryEmbedding")(hf_config)
    n = seq_len or 8
    x = torch.zeros(1, n, 4)
    positions = torch.arange(n)[None]
    if layer_type is None:
        rotary(x, positions)
        return rotary.inv_freq, rotary.attention_scaling
    rotary(x, positions, layer_type)
    return getattr(rotary, f"{layer_type}_inv_freq"), getattr(rotary, f"{layer_type}_attention_scaling")


def main():
    cases = []
    for name, config, layer_type, seq_len in CASES:
        inv_freq, attention_factor = hf_rope(json.loads(json.dumps(config)), layer_type, seq_len)
        cases.append({"name": name, "config": config, "layer_type": layer_type, "seq_len": seq_len,
                      "inv_freq": inv_freq.double().tolist(), "attention_factor": float(attention_factor)})
        print(f"{name}: {len(cases[-1]['inv_freq'])} frequencies, attention factor {attention_factor:.6f}")
    OUT.write_text(json.dumps({"transformers": transformers.__version__, "torch": torch.__version__, "cases": cases}))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
