"""Hugging Face checkpoints (posenc.hf.load_pretrained): every family's logits against transformers', within
and past the original length, with each checkpoint's own RoPE scaling.

The fixtures (tests/data/hf_models/) are tiny random checkpoints and the logits transformers computed for
them, made by scripts/make_hf_model_reference.py (versions in manifest.json); no torch is needed here.
"""

import json
import pathlib
import shutil

import jax.numpy as jnp
import numpy as np
import pytest

from posenc import hf

DATA = pathlib.Path(__file__).resolve().parent / "data" / "hf_models"
REF = np.load(DATA / "reference.npz")
MANIFEST = json.loads((DATA / "manifest.json").read_text())


@pytest.mark.parametrize("family", MANIFEST["families"])
@pytest.mark.parametrize("which", ["within", "past"])
def test_logits_match_transformers(family, which):
    model = hf.load_pretrained(DATA / family)
    t = MANIFEST["lengths"][which]
    tokens = jnp.asarray(REF["tokens"][:, :t])
    want = REF[f"{family}/{which}"]
    got = np.asarray(model(tokens))
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, atol=2e-5 * scale, rtol=2e-5)
    assert scale > 1.0  # the fixtures' logits are not all ~0: a wrong weight shows


def test_the_families_exercise_their_features():
    cfgs = {f: hf.load_pretrained(DATA / f).cfg for f in MANIFEST["families"]}
    assert cfgs["llama"].kv_heads == 2 and cfgs["llama"].rope_scaling.kind == "llama3"
    assert cfgs["mistral"].attn_window == 20 and cfgs["mistral"].kv_heads == 1
    assert cfgs["qwen2"].qkv_bias and cfgs["qwen2"].tie_embeddings and cfgs["qwen2"].rope_scaling.kind == "yarn"
    assert cfgs["qwen3"].qk_norm and cfgs["qwen3"].head_dim == 16
    assert cfgs["phi3"].rotary_dim == 6 and cfgs["phi3"].rope_scaling.kind == "longrope"
    neox = cfgs["gpt_neox"]
    assert neox.parallel_residual and neox.norm == "layer" and neox.mlp_act == "gelu" and neox.rotary_dim == 2
    assert (DATA / "llama" / "model.safetensors.index.json").exists()  # the sharded case


def test_bf16_on_request():
    model = hf.load_pretrained(DATA / "qwen2", dtype="bfloat16")
    assert model.embed.embedding[...].dtype == jnp.bfloat16
    assert model.blocks[0].attn.qkv.kernel[...].dtype == jnp.bfloat16
    got = np.asarray(model(jnp.asarray(REF["tokens"][:, :24])))
    want = REF["qwen2/within"]
    assert got.dtype == np.float32
    assert np.abs(got - want).max() < 0.05 * np.abs(want).max()  # bf16 rounding, not another model


def test_errors_name_the_problem(tmp_path):
    with pytest.raises(ValueError, match="no config.json"):
        hf.load_pretrained(tmp_path)
    bad = tmp_path / "bad"
    shutil.copytree(DATA / "mistral", bad)
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "model_type": "falcon"}))
    with pytest.raises(ValueError, match="model_type='falcon' is not supported; supported"):
        hf.load_pretrained(bad)
    (bad / "config.json").write_text(json.dumps({**config, "hidden_act": "relu"}))
    with pytest.raises(ValueError, match="hidden_act='relu'"):
        hf.load_pretrained(bad)
    (bad / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 1}))
    with pytest.raises(ValueError, match="no place for: \\['model.layers.1"):
        hf.load_pretrained(bad)
    (bad / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    with pytest.raises(ValueError, match="no tensor 'model.layers.2"):
        hf.load_pretrained(bad)
    with pytest.raises(ValueError, match="dtype must be"):
        hf.load_pretrained(DATA / "mistral", dtype="float16")
