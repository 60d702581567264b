"""xPos: scores equal rotary-embedding-torch's `use_xpos` (the x-transformers implementation), depend only
on m − n, decay with distance, and reduce to RoPE as γ → ∞."""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import posenc
from posenc.xpos import apply_xpos, xpos_zeta

REF = json.loads((pathlib.Path(__file__).parent / "data" / "encoding_reference.json").read_text())["xpos"]


def scores(q, k):
    return np.einsum("qnh,knh->nqk", np.asarray(q, np.float64), np.asarray(k, np.float64))


@pytest.mark.parametrize("center", [0.0, 24.0, 1000.0])
def test_scores_equal_rotary_embedding_torch(center):
    q = np.asarray(REF["q"], np.float32).transpose(1, 0, 2)  # [N, T, H] -> [T, N, H]
    k = np.asarray(REF["k"], np.float32).transpose(1, 0, 2)
    pos = np.arange(q.shape[0])
    inv = posenc.rope_frequencies(REF["dim"])[0]
    q2, k2 = apply_xpos(q, k, pos, inv, scale_base=REF["scale_base"], layout="interleaved", center=center)
    np.testing.assert_allclose(scores(q2, k2), REF["scores"], rtol=1e-4, atol=1e-4)  # any centre cancels


def test_float64_oracle_relative_and_decaying():
    d, gamma = 8, 16.0
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(1, 1, d)), rng.normal(size=(1, 1, d))
    inv = posenc.rope_frequencies(d)[0]
    zeta = (np.arange(0, d, 2) + 0.4 * d) / (1.4 * d)  # float64
    np.testing.assert_allclose(np.asarray(xpos_zeta(d)), zeta, rtol=1e-7)

    def score(m, n):
        with jax.enable_x64(True):
            a, b = apply_xpos(jnp.asarray(q), jnp.asarray(k), np.array([m]), jnp.asarray(inv, jnp.float64),
                              scale_base=gamma, layout="half", k_positions=np.array([n]))
            return float(jnp.sum(a * b))

    # oracle: Σ_i ζ_i^((m−n)/γ) · Re[(q_a + i q_b)(k_a − i k_b) e^{i(m−n)θ_i}] in the half layout
    def oracle(m, n):
        r = d // 2
        qa, qb, ka, kb = q[0, 0, :r], q[0, 0, r:], k[0, 0, :r], k[0, 0, r:]
        z = (qa + 1j * qb) * (ka - 1j * kb) * np.exp(1j * (m - n) * inv)
        return float(np.sum(zeta ** ((m - n) / gamma) * z.real))

    for m, n in [(5, 2), (40, 0), (100, 97), (3, 3)]:
        assert score(m, n) == pytest.approx(oracle(m, n), rel=1e-10, abs=1e-12)
        assert score(m + 50, n + 50) == pytest.approx(score(m, n), rel=1e-10, abs=1e-12)  # only m − n
    # the scale of each pair decays with distance: |ζ^(Δ/γ)| < 1 for Δ > 0
    assert np.all(zeta ** (40 / gamma) < 1)


def test_large_scale_base_is_rope():
    rng = np.random.default_rng(1)
    q, k = rng.normal(size=(6, 2, 8)).astype(np.float32), rng.normal(size=(6, 2, 8)).astype(np.float32)
    pos = np.arange(6)
    inv = posenc.rope_frequencies(8)[0]
    q2, k2 = apply_xpos(q, k, pos, inv, scale_base=1e12, layout="half")
    np.testing.assert_allclose(q2, posenc.apply_rope(q, pos, inv), atol=1e-6)
    np.testing.assert_allclose(k2, posenc.apply_rope(k, pos, inv), atol=1e-6)
