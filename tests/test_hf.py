"""rope_from_hf_config against the rotary embeddings transformers 5.23 builds from whole config.json
dicts of each family (tests/data/hf_config_rope_reference.json, scripts/make_hf_config_reference.py)."""

import json
import pathlib

import numpy as np
import pytest

import posenc
from posenc.hf import rope_from_hf_config

REF = json.loads((pathlib.Path(__file__).parent / "data" / "hf_config_rope_reference.json").read_text())


# Cases whose RoPE dict carries a key transformers ignores (the recorded values): posenc refuses it, naming it — a
# key its type does not take (transformers warns "Unrecognized keys"), or dynamic's original length where it is
# not the max_position_embeddings transformers scales from.
REFUSED = {"llama2-linear-attention-factor": r"unknown keys \[.*'attention_factor'.*\] for rope_type",
           "llama2-dynamic-original": r"original_max_position_embeddings=2048: transformers scales dynamic NTK",
           "llama3.1-attention-factor": r"unknown keys \[.*'attention_factor'.*\] for rope_type"}


@pytest.mark.parametrize("case", REF["cases"], ids=lambda c: c["name"])
def test_frequencies_and_attention_factor_equal_transformers(case):
    if case["name"] in REFUSED:
        with pytest.raises(ValueError, match=REFUSED[case["name"]]):
            rope_from_hf_config(case["config"], layer_type=case["layer_type"], seq_len=case["seq_len"])
        return
    inv_freq, attention_factor = rope_from_hf_config(case["config"], layer_type=case["layer_type"],
                                                     seq_len=case["seq_len"])
    np.testing.assert_allclose(inv_freq, case["inv_freq"], rtol=2e-6, atol=1e-30)
    assert attention_factor == pytest.approx(case["attention_factor"], rel=1e-6)


def by_name(name):
    return next(c for c in REF["cases"] if c["name"] == name)


def test_phi3_reads_the_top_level_original_length_and_switches_factors():
    config = by_name("phi3-mini-128k-long")["config"]
    short, af = rope_from_hf_config(config, seq_len=4096)
    long, _ = rope_from_hf_config(config, seq_len=4097)
    assert af == pytest.approx(np.sqrt(1 + np.log(32) / np.log(4096)))  # 1.190, not 1.0
    np.testing.assert_allclose(short * np.asarray(config["rope_scaling"]["short_factor"]),
                               long * np.asarray(config["rope_scaling"]["long_factor"]), rtol=1e-12)


def test_errors_name_the_key_or_field():
    llama = dict(by_name("llama2")["config"])
    with pytest.raises(ValueError, match=r"unknown keys \['cubic'\]"):
        rope_from_hf_config({**llama, "rope_scaling": {"rope_type": "linear", "factor": 2.0, "cubic": 1}})
    with pytest.raises(ValueError, match="rope_type must be one of"):
        rope_from_hf_config({**llama, "rope_scaling": {"rope_type": "quartic", "factor": 2.0}})
    with pytest.raises(ValueError, match="gives no RoPE base"):
        rope_from_hf_config({k: v for k, v in llama.items() if k != "rope_theta"})
    gemma = by_name("gemma3-global")["config"]
    with pytest.raises(ValueError, match=r"per layer type \['full_attention', 'sliding_attention'\]"):
        rope_from_hf_config(gemma)
    with pytest.raises(ValueError, match="leave layer_type None"):
        rope_from_hf_config(llama, layer_type="full_attention")
    for params, missing in (({"rope_type": "yarn"}, "'factor'"), ({"type": "dynamic"}, "'factor'"),
                            ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "original_max_position_embeddings": 8192},
                             "'high_freq_factor'")):
        with pytest.raises(ValueError, match=f"requires \\[{missing}\\]"):  # transformers: a KeyError, never 1.0
            rope_from_hf_config({**llama, "rope_scaling": params})
    # a key of another type is refused, naming the key, the type and the keys it takes
    with pytest.raises(ValueError, match=r"unknown keys \['beta_fast'\] for rope_type 'linear'; valid keys for it "
                                         r"are \['factor', 'partial_rotary_factor', 'rope_theta', 'rope_type', 'type'\]"):
        rope_from_hf_config({**llama, "rope_scaling": {"rope_type": "linear", "factor": 2.0, "beta_fast": 8}})
    with pytest.raises(ValueError, match=r"unknown keys \['factor'\] for rope_type 'default'"):
        rope_from_hf_config({**llama, "rope_scaling": {"rope_type": "default", "factor": 8.0}})
    with pytest.raises(ValueError, match="transformers has no 'ntk' type"):
        rope_from_hf_config({**llama, "rope_scaling": {"rope_type": "ntk", "factor": 2.0}})
    dynamic = {"rope_type": "dynamic", "factor": 2.0}
    assert posenc.RopeScaling.from_hf(dynamic, max_position_embeddings=4096).original_max_len == 4096
    # the bare-dict reader keeps working; a yarn factor of None is the ratio of the lengths (DeepSeek-V3)
    assert posenc.RopeScaling.from_hf({"rope_type": "linear", "factor": 2.0}).factor == 2.0
    yarn = {"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 4096}
    assert posenc.RopeScaling.from_hf(yarn, max_position_embeddings=16384).factor == 4.0


def test_phi3_legacy_types_are_longrope_and_mscales_only_phi3_ignores():
    config = by_name("phi3-mini-128k-long")["config"]
    want = rope_from_hf_config(config, seq_len=8192)
    for legacy in ("su", "yarn"):  # Phi3Config renames both to longrope
        got = rope_from_hf_config({**config, "rope_scaling": {**config["rope_scaling"], "type": legacy}}, seq_len=8192)
        np.testing.assert_array_equal(got[0], want[0])
        assert got[1] == want[1]
    with pytest.raises(ValueError, match="model_type='phi3'.*got 'linear'"):
        rope_from_hf_config({**config, "rope_scaling": {"type": "linear", "factor": 2.0}})
    mscale = by_name("phi3-longrope-mscale-ignored")["config"]  # phi3: ignored (the parametrized test)
    with pytest.raises(ValueError, match=r"\['short_mscale', 'long_mscale'\] are not supported for model_type='phimoe'"):
        rope_from_hf_config({**mscale, "model_type": "phimoe"}, seq_len=8192)
    llama = by_name("llama2")["config"]
    with pytest.raises(ValueError, match="for model_type='phi3' only"):
        rope_from_hf_config({**llama, "rope_scaling": {"type": "su", **{k: v for k, v in config["rope_scaling"].items()
                                                                       if k != "type"}}})


def test_gpt_neox_reads_rotary_emb_base_and_rotary_pct_default_as_transformers():
    """GPTNeoXConfig: rope_parameters' own values, else rotary_emb_base and rotary_pct, whose default is 0.25; it
    reads no top-level rope_theta / partial_rotary_factor (a contradicting one is an error)."""
    pythia = by_name("pythia")["config"]
    want = np.asarray(by_name("pythia")["inv_freq"])
    assert len(want) == 64 * 0.25 / 2  # head 64, a quarter rotates
    no_pct = {k: v for k, v in pythia.items() if k != "rotary_pct"}
    np.testing.assert_allclose(rope_from_hf_config(no_pct)[0], want, rtol=2e-6)  # transformers' default 0.25
    v5 = {**no_pct, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25}}
    np.testing.assert_allclose(rope_from_hf_config({k: v for k, v in v5.items() if k != "rotary_emb_base"})[0], want,
                               rtol=2e-6)
    np.testing.assert_allclose(rope_from_hf_config({**pythia, "rope_theta": 10000})[0], want, rtol=2e-6)  # agrees
    with pytest.raises(ValueError, match="top-level rope_theta=500000.0, which transformers' GPTNeoXConfig does not "
                                         "read: it uses 10000"):
        rope_from_hf_config({**pythia, "rope_theta": 500000.0})
    with pytest.raises(ValueError, match="gpt_neox config gives no RoPE base"):
        rope_from_hf_config({**{k: v for k, v in pythia.items() if k != "rotary_emb_base"}, "rope_theta": 10000.0})
    with pytest.raises(ValueError, match="top-level partial_rotary_factor=1.0.*it uses 0.25"):
        rope_from_hf_config({**pythia, "partial_rotary_factor": 1.0})
    with pytest.raises(ValueError, match=r"must be a number in \(0, 1\], got None"):
        rope_from_hf_config({**pythia, "rotary_pct": None})
    # other families read neither GPT-NeoX key
    llama = by_name("llama2")["config"]
    np.testing.assert_array_equal(rope_from_hf_config({**llama, "rotary_pct": 0.25})[0], rope_from_hf_config(llama)[0])
    with pytest.raises(ValueError, match="gives no RoPE base.*rotary_emb_base is GPT-NeoX's only"):
        rope_from_hf_config({**{k: v for k, v in llama.items() if k != "rope_theta"}, "rotary_emb_base": 10000})


MODELS = pathlib.Path(__file__).parent / "data" / "hf_models"
DROP = object()  # model_config(family, key=DROP) removes the key


def model_config(family, **changes):
    """A checkpoint fixture's config.json with keys changed (or dropped)."""
    config = json.loads((MODELS / family / "config.json").read_text())
    config.update(changes)
    return {k: v for k, v in config.items() if v is not DROP}


def test_gpt_neox_model_config_base_fraction_and_layout():
    """Config level (the checkpoint fixture rotates a single pair, so its logits cannot tell the base or layout):
    rotary_emb_base, rotary_pct's default 0.25, and the half (rotate_half) layout of transformers' GPT-NeoX."""
    from posenc.hf import model_config_from_hf

    cfg = model_config_from_hf(model_config("gpt_neox", hidden_size=64, rope_parameters=DROP, rotary_emb_base=500))
    assert cfg.head_dim == 16 and cfg.rotary_dim == 4 and cfg.rope_fraction == 0.25
    assert cfg.rope_base == 500.0 and cfg.rope_layout == "half"
    cfg = model_config_from_hf(model_config("gpt_neox", hidden_size=64, rope_parameters=DROP, rotary_emb_base=500,
                                            rotary_pct=0.5))
    assert cfg.rotary_dim == 8


def test_sliding_window_only_where_transformers_applies_it():
    from posenc.hf import model_config_from_hf

    # Llama and GPT-NeoX have no sliding window in transformers: the key is not read
    assert model_config_from_hf(model_config("llama", sliding_window=8)).attn_window == 0
    assert model_config_from_hf(model_config("gpt_neox", sliding_window=8)).attn_window == 0
    # Mistral and Phi-3: every layer; null is full attention; MistralConfig's default 4096 is not guessed
    assert model_config_from_hf(model_config("mistral")).attn_window == 20
    assert model_config_from_hf(model_config("mistral", sliding_window=None)).attn_window == 0
    with pytest.raises(ValueError, match="mistral config has no sliding_window"):
        model_config_from_hf(model_config("mistral", sliding_window=DROP))
    assert model_config_from_hf(model_config("phi3", sliding_window=16)).attn_window == 16
    assert model_config_from_hf(model_config("phi3", sliding_window=DROP)).attn_window == 0
    # Qwen2 / Qwen3: only with use_sliding_window, on the layers i >= max_window_layers (or layer_types')
    for family in ("qwen2", "qwen3"):
        assert model_config_from_hf(model_config(family, sliding_window=8)).attn_window == 0
        on = dict(use_sliding_window=True, sliding_window=8, layer_types=DROP)
        assert model_config_from_hf(model_config(family, **on, max_window_layers=0)).attn_window == 8
        assert model_config_from_hf(model_config(family, **on, max_window_layers=2)).attn_window == 0
        with pytest.raises(ValueError, match="sliding windows on some layers only"):
            model_config_from_hf(model_config(family, **on, max_window_layers=1))
        with pytest.raises(ValueError, match="neither layer_types nor max_window_layers"):
            model_config_from_hf(model_config(family, **on, max_window_layers=DROP))
        sliding = ["sliding_attention"] * 2
        assert model_config_from_hf(model_config(family, **{**on, "layer_types": sliding})).attn_window == 8
        with pytest.raises(ValueError, match="sliding window is null"):
            model_config_from_hf(model_config(family, layer_types=sliding))


def test_partial_rotary_factor_only_for_the_families_whose_transformers_model_reads_it():
    """Llama, Mistral, Qwen2 and Qwen3 rotate every dimension in transformers (5.23): their default RoPE ignores a
    partial_rotary_factor (a random llama checkpoint with 0.5: posenc's partial rotation gave logits 18% off
    transformers') and their scaled types fail on it (a shape error in apply_rotary_pos_emb). posenc refuses it."""
    from posenc.hf import model_config_from_hf

    for family in ("llama", "mistral", "qwen2", "qwen3"):
        params = model_config(family)["rope_parameters"]
        with pytest.raises(ValueError, match=f"the {family} config has partial_rotary_factor=0.5"):
            model_config_from_hf(model_config(family, rope_parameters={**params, "partial_rotary_factor": 0.5}))
        assert model_config_from_hf(model_config(family, rope_parameters={**params, "partial_rotary_factor": 1.0}))
    llama = by_name("llama2")["config"]
    with pytest.raises(ValueError, match="the llama config has partial_rotary_factor=0.25"):
        rope_from_hf_config({**llama, "partial_rotary_factor": 0.25})
    assert model_config_from_hf(model_config("phi3")).rotary_dim == 6  # Phi-3 and GPT-NeoX rotate a part
    assert model_config_from_hf(model_config("gpt_neox")).rotary_dim == 2


def test_gpt_neox_hidden_act_defaults_to_transformers_gelu():
    from posenc.hf import model_config_from_hf

    assert model_config_from_hf(model_config("gpt_neox", hidden_act=DROP)).mlp_act == "gelu"  # GPTNeoXConfig's default
    assert model_config_from_hf(model_config("llama", hidden_act=DROP)).mlp_act == "swiglu"  # LlamaConfig's silu
