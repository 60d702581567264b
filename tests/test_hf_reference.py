"""posenc against Hugging Face transformers' own RoPE code, through values it computed.

tests/data/hf_rope_reference.json is written by scripts/make_hf_reference.py, which runs transformers'
`ROPE_INIT_FUNCTIONS` and `apply_rotary_pos_emb` (versions recorded in the file). HF computes in float32,
so agreement is to float32 precision.
"""

import json
import pathlib

import numpy as np
import pytest

import posenc

REF = json.loads((pathlib.Path(__file__).parent / "data" / "hf_rope_reference.json").read_text())


@pytest.mark.parametrize("case", REF["cases"], ids=lambda c: f"{c['rope_parameters']['rope_type']}-{c['seq_len']}")
def test_frequencies_match_transformers(case):
    params = dict(case["rope_parameters"])
    base = params.pop("rope_theta")
    scaling = posenc.RopeScaling.from_hf(params, max_position_embeddings=case["max_position_embeddings"])
    inv_freq, attention_factor = posenc.rope_frequencies(case["head_dim"], base=base, scaling=scaling,
                                                         seq_len=case["seq_len"])
    np.testing.assert_allclose(inv_freq, case["inv_freq"], rtol=2e-6, atol=0)
    assert attention_factor == pytest.approx(case["attention_factor"], rel=1e-6)


def test_apply_rope_half_layout_matches_apply_rotary_pos_emb():
    ref = REF["apply_rotary_pos_emb"]
    head_dim = len(ref["q"][0][0])
    inv_freq = posenc.rope_frequencies(head_dim)[0]
    for name in ("q", "k"):
        x = np.asarray(ref[name], np.float32).transpose(1, 0, 2)  # HF [N, T, H] -> posenc [T, N, H]
        out = np.asarray(posenc.apply_rope(x, np.asarray(ref["positions"]), inv_freq, layout="half"))
        expected = np.asarray(ref[f"{name}_rot"], np.float32).transpose(1, 0, 2)
        # float32 angles at positions up to 8191 differ by ~ulp(8191) ≈ 1e-3 rad between implementations
        np.testing.assert_allclose(out, expected, atol=2e-3 * np.abs(x).max())
        np.testing.assert_allclose(out[:3], expected[:3], atol=1e-5)  # small positions: to float32 precision
