"""xPos: scores equal rotary-embedding-torch's `use_xpos` (the x-transformers implementation), depend only
on m − n, decay with distance, and reduce to RoPE as γ → ∞."""

import dataclasses
import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import posenc
from posenc.model import ModelConfig
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


def test_model_rotation_equals_rotary_embedding_torch():
    """`XPos.rotate`, what the model applies (its own code, not `apply_xpos`), grows q and shrinks k as the
    reference does: the scores equal rotary-embedding-torch's (inverting the two factors makes them grow with
    distance, which translation invariance and cached decoding do not see)."""
    cfg = ModelConfig(posenc="xpos", d_model=2 * REF["dim"], num_heads=2, num_layers=1, mlp_dim=8, max_len=64,
                      rope_layout="interleaved", encoding_options=(("scale_base", float(REF["scale_base"])),))
    enc = cfg.encoding(cfg, rngs=nnx.Rngs(0))
    q = np.asarray(REF["q"], np.float32).transpose(1, 0, 2)[None]  # [N, T, H] -> [1, T, N, H]
    k = np.asarray(REF["k"], np.float32).transpose(1, 0, 2)[None]
    pos = jnp.arange(q.shape[1])[None]
    ctx = enc.context(pos, q.shape[1])
    q2, k2 = enc.rotate(q, pos, ctx, 0, "q"), enc.rotate(k, pos, ctx, 0, "k")
    np.testing.assert_allclose(scores(q2[0], k2[0]), REF["scores"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("gamma", [0.0, -1.0, float("inf"), float("nan")])
def test_scale_base_must_be_finite_and_positive(gamma):
    """γ = inf would be plain RoPE, but `max_positions` (evaluation, decoding) cannot bound it."""
    with pytest.raises(ValueError, match=r"model\.xpos\.scale_base must be a finite number > 0"):
        ModelConfig(posenc="xpos", encoding_options=(("scale_base", gamma),))


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


def test_positions_past_the_float32_range_are_refused():
    """ζ_0^(−(p − c)/γ) overflows float32 by |p − c| = γ·ln(float32 max)/ln(7/2) ≈ 70.8γ: a score is inf or
    NaN there (the unchecked functions show it) and finite at the model's limit ≈ 55.1γ (factors in
    [1e-30, 1e30]); the model refuses a sequence that passes its limit."""
    from flax import nnx

    from posenc.model import ModelConfig, Transformer
    from posenc.xpos import max_offset

    gamma, d = 4.0, 8
    limit = max_offset(gamma)
    assert limit == pytest.approx(gamma * np.log(1e30) / np.log(3.5), rel=1e-12)
    overflow = gamma * np.log(float(np.finfo(np.float32).max)) / np.log(3.5)
    inv = posenc.rope_frequencies(d)[0]
    q = k = np.ones((1, 1, d), np.float32)

    def score(p):
        a, b = apply_xpos(q, k, np.array([p]), inv, scale_base=gamma, layout="half")
        return float(jnp.sum(a * b))

    assert np.isfinite(score(int(limit))) and not np.isfinite(score(int(overflow) + 1))
    cfg = ModelConfig(posenc="xpos", d_model=16, num_heads=2, num_layers=1, mlp_dim=8, max_len=8,
                      encoding_options=(("scale_base", gamma),))
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    ok = 4 + int(limit) + 1  # positions up to 4 + ⌊limit⌋ from the centre 4
    assert np.isfinite(np.asarray(model(jnp.zeros((1, ok), jnp.int32)))).all()
    with pytest.raises(ValueError, match="model.xpos.scale_base"):
        model(jnp.zeros((1, ok + 1), jnp.int32))
    # the pipelines ask the class (evaluation reports an undefined row, decoding refuses the request)
    assert cfg.encoding.max_positions(cfg) == ok and "reaches farther" in cfg.encoding.undefined_past(cfg)
    far = dataclasses.replace(cfg, max_len=2 * int(limit) + 4)  # the centre itself past the limit: none defined
    assert far.encoding.max_positions(far) == 0
