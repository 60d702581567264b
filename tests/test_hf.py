"""rope_from_hf_config against the rotary embeddings transformers 5.23 builds from whole config.json
dicts of each family (tests/data/hf_config_rope_reference.json, scripts/make_hf_config_reference.py)."""

import json
import pathlib

import numpy as np
import pytest

import posenc
from posenc.hf import rope_from_hf_config

REF = json.loads((pathlib.Path(__file__).parent / "data" / "hf_config_rope_reference.json").read_text())


@pytest.mark.parametrize("case", REF["cases"], ids=lambda c: c["name"])
def test_frequencies_and_attention_factor_equal_transformers(case):
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
                            ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0}, "'high_freq_factor'")):
        with pytest.raises(ValueError, match=f"requires \\[{missing}\\]"):  # transformers: a KeyError, never 1.0
            rope_from_hf_config({**llama, "rope_scaling": params})
    # keys transformers ignores for a type, ignored by the bare-dict reader too
    plain = posenc.RopeScaling.from_hf({"rope_type": "linear", "factor": 2.0})
    assert posenc.RopeScaling.from_hf({"rope_type": "linear", "factor": 2.0, "attention_factor": 1.5}) == plain
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 1024}
    assert posenc.RopeScaling.from_hf(dynamic, max_position_embeddings=4096).original_max_len == 4096
    # the bare-dict reader keeps working; a yarn factor of None is the ratio of the lengths (DeepSeek-V3)
    assert posenc.RopeScaling.from_hf({"rope_type": "linear", "factor": 2.0}).factor == 2.0
    yarn = {"rope_type": "yarn", "factor": None, "original_max_position_embeddings": 4096}
    assert posenc.RopeScaling.from_hf(yarn, max_position_embeddings=16384).factor == 4.0
