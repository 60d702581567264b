r"""Regenerates tests/data/hf_models/: tiny random Hugging Face checkpoints of each family and their logits.

    python -m venv /tmp/hf && /tmp/hf/bin/pip install torch==2.13.0 transformers==5.23.0 safetensors tokenizers numpy
    /tmp/hf/bin/python scripts/make_hf_model_reference.py

For each family (Llama, Mistral, Qwen2, Qwen3, Phi-3, GPT-NeoX) a config with the family's features (grouped
query attention, biases, q/k norms, fused projections, partial rotary, parallel residual, tied embeddings,
sliding windows, and a RoPE scaling of its own: linear, YaRN, Llama-3, LongRoPE; and GPT-NeoX's sequential
residual and Llama's biases as two more checkpoints), shrunk to a few thousand parameters and a short
original length (so that the fixtures test past it), is built by `AutoModelForCausalLM.from_config` with a
fixed seed and saved with `save_pretrained` (safetensors; Llama sharded, with `model.safetensors.index.json`).
Its float32 logits on fixed tokens, at a length within the original one and at one past it, go to
`reference.npz`; `manifest.json` records the versions this ran with. A character-level `tokenizer.json` (the `tokenizers` package) is saved with every checkpoint. Not a
dependency of posenc: the files are committed, so tests need no torch.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import string

import numpy as np
import tokenizers
import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoConfig, AutoModelForCausalLM

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "hf_models"
VOCAB = 96
COMMON = {"vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
          "num_attention_heads": 4, "torch_dtype": "float32"}
LENGTHS = {"within": 24, "past": 80}

FAMILIES = {
    "llama": {"model_type": "llama", **COMMON, "num_key_value_heads": 2, "max_position_embeddings": 64,
              "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 16}},
    "mistral": {"model_type": "mistral", **COMMON, "num_key_value_heads": 1, "max_position_embeddings": 64,
                "sliding_window": 20, "rms_norm_eps": 1e-6, "rope_theta": 1000.0},
    "qwen2": {"model_type": "qwen2", **COMMON, "num_key_value_heads": 2, "max_position_embeddings": 64,
              "tie_word_embeddings": True, "rope_theta": 10000.0,
              "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}},
    "qwen3": {"model_type": "qwen3", **COMMON, "num_key_value_heads": 2, "head_dim": 16,
              "max_position_embeddings": 64, "rope_theta": 10000.0,
              "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "phi3": {"model_type": "phi3", **COMMON, "num_key_value_heads": 2, "pad_token_id": 0, "max_position_embeddings": 128,
             "original_max_position_embeddings": 32, "partial_rotary_factor": 0.75, "rope_theta": 10000.0,
             "rope_scaling": {"type": "longrope", "short_factor": [1.0, 1.1, 1.2],
                              "long_factor": [1.0, 3.0, 9.0]}, "sliding_window": None},
    "gpt_neox": {"model_type": "gpt_neox", "vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64,
                 "num_hidden_layers": 2, "num_attention_heads": 4, "rotary_pct": 0.25, "rotary_emb_base": 10000,
                 "max_position_embeddings": 64, "use_parallel_residual": True, "hidden_act": "gelu",
                 "layer_norm_eps": 1e-5, "tie_word_embeddings": False, "torch_dtype": "float32"},
    # the other branches of the same families: GPT-NeoX's sequential residual, without attention biases, with
    # gelu_new and two rotated pairs (so that the base and the rotate_half pairing show); Llama's q/k/v/o and MLP
    # biases, with one key/value head, a head_dim of its own and tied embeddings
    "gpt_neox_sequential": {"model_type": "gpt_neox", "vocab_size": VOCAB, "hidden_size": 32, "intermediate_size": 64,
                            "num_hidden_layers": 2, "num_attention_heads": 4, "rotary_pct": 0.5, "rotary_emb_base": 500,
                            "max_position_embeddings": 64, "use_parallel_residual": False, "hidden_act": "gelu_new",
                            "attention_bias": False, "layer_norm_eps": 1e-3, "tie_word_embeddings": False,
                            "torch_dtype": "float32"},
    "llama_bias": {"model_type": "llama", **COMMON, "num_key_value_heads": 1, "head_dim": 16,
                   "max_position_embeddings": 64, "rms_norm_eps": 1e-2, "rope_theta": 100.0, "attention_bias": True,
                   "mlp_bias": True, "tie_word_embeddings": True},
}


def tokenizer() -> Tokenizer:
    chars = list(string.printable[:VOCAB - 1])
    vocab = {"<unk>": 0, **{c: i + 1 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(pattern="", behavior="isolated")
    tok.decoder = decoders.Fuse()  # characters back together, without spaces between them
    return tok


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, VOCAB, (2, LENGTHS["past"]))
    arrays = {"tokens": tokens.astype(np.int32)}
    for name, fields in FAMILIES.items():
        torch.manual_seed(0)
        fields = dict(fields)
        config = AutoConfig.for_model(fields.pop("model_type"), **fields)
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.float32).eval()
        with torch.no_grad():  # random weights are small: make attention and the biases matter
            for p in model.parameters():
                p.mul_(4.0 if p.ndim == 2 else 1.0).add_(0.1 * torch.randn_like(p) if p.ndim == 1 else 0)
        path = OUT / name
        model.save_pretrained(path, max_shard_size="40KB" if name == "llama" else "10GB")
        tokenizer().save(str(path / "tokenizer.json"))
        for which, t in LENGTHS.items():
            with torch.no_grad():
                logits = model(torch.as_tensor(tokens[:, :t])).logits.float().numpy()
            arrays[f"{name}/{which}"] = logits.astype(np.float32)
    np.savez_compressed(OUT / "reference.npz", **arrays)
    (OUT / "manifest.json").write_text(json.dumps({
        "transformers": transformers.__version__, "torch": torch.__version__, "tokenizers": tokenizers.__version__,
        "lengths": LENGTHS, "families": list(FAMILIES)}, indent=1) + "\n")
    size = sum(p.stat().st_size for p in OUT.rglob("*") if p.is_file())
    print(f"wrote {OUT} ({size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
