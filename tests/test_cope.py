"""CoPE: a float64 oracle of contextual positions and their interpolated embeddings, its reductions, and
cached decoding equal to the full forward pass."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posenc import decode
from posenc.cope import cope_bias, cope_positions
from posenc.model import ModelConfig, Transformer

RNG = np.random.default_rng(0)


def oracle(q, k, emb, npos_max):
    """Loops over i, j in float64: p_ij = Σ_{t=j..i} σ(q_i·k_t/√H), bias = interpolated q_i·e[p_ij]."""
    b, n, t, h = q.shape
    out = np.zeros((b, n, t, t))
    for bi in range(b):
        for ni in range(n):
            for i in range(t):
                for j in range(i + 1):
                    s = q[bi, ni, i] @ k[bi, ni, j:i + 1].T / np.sqrt(h)
                    p = min(np.sum(1 / (1 + np.exp(-s))), npos_max - 1)
                    lo, w = int(np.floor(p)), p - np.floor(p)
                    hi = min(lo + 1, npos_max - 1)
                    out[bi, ni, i, j] = (1 - w) * q[bi, ni, i] @ emb[lo] + w * q[bi, ni, i] @ emb[hi]
    return out


@pytest.mark.parametrize("npos_max", [3, 64])
def test_bias_equals_float64_oracle(npos_max):
    q, k = RNG.normal(size=(2, 2, 9, 4)), RNG.normal(size=(2, 2, 9, 4))
    emb = RNG.normal(size=(npos_max, 4))
    visible = np.tril(np.ones((9, 9), bool))[None, None]
    with jax.enable_x64(True):
        ours = np.asarray(cope_bias(jnp.asarray(q) / 2.0, jnp.asarray(k), visible, jnp.asarray(emb)))
    expected = oracle(q, k, emb, npos_max)
    np.testing.assert_allclose(np.where(visible, ours, 0), expected, rtol=1e-5, atol=1e-5)


def test_positions_count_gates_and_are_monotone():
    scores = np.full((1, 1, 6, 6), 50.0)  # every gate open: p_ij = i − j + 1, a plain (relative) count
    visible = np.tril(np.ones((6, 6), bool))[None, None]
    pos = np.asarray(cope_positions(scores, visible, 100))[0, 0]
    i, j = np.meshgrid(np.arange(6), np.arange(6), indexing="ij")
    np.testing.assert_allclose(np.where(visible[0, 0], pos, 0), np.where(visible[0, 0], i - j + 1, 0), atol=1e-6)
    closed = np.asarray(cope_positions(np.full((1, 1, 6, 6), -50.0), visible, 100))[0, 0]
    assert np.abs(closed).max() < 1e-12  # every gate shut: position 0 everywhere
    rnd = np.asarray(cope_positions(RNG.normal(size=(1, 1, 6, 6)), visible, 100))[0, 0]
    assert np.all(np.diff(np.where(visible[0, 0], rnd, 0), axis=1)[np.tril(np.ones((6, 5), bool), -1)] <= 1e-12)


def model(**kw):
    m = Transformer(ModelConfig(posenc="cope", d_model=32, num_heads=2, num_layers=2, mlp_dim=64, max_len=16, **kw),
                    rngs=nnx.Rngs(0))
    m.encoding.emb[...] = jnp.asarray(RNG.normal(size=m.encoding.emb.shape), jnp.float32)
    for block in m.blocks:
        block.attn.qkv.kernel[...] = block.attn.qkv.kernel[...] * 8
    return m


def test_zero_embeddings_are_nope_and_cached_decoding_equals_full():
    m = model()
    x = jnp.asarray(RNG.integers(0, 256, size=(2, 24)))
    none = Transformer(ModelConfig(posenc="none", d_model=32, num_heads=2, num_layers=2, mlp_dim=64, max_len=16),
                       rngs=nnx.Rngs(0))
    for a, b in zip(none.blocks, m.blocks):
        a.attn.qkv.kernel[...] = b.attn.qkv.kernel[...]
    assert not np.allclose(m(x), none(x), atol=1e-3)  # learned contextual positions matter
    m.encoding.emb[...] = jnp.zeros_like(m.encoding.emb[...])
    np.testing.assert_allclose(m(x), none(x), atol=1e-5)  # e = 0: no positional signal, NoPE
    m = model()
    graphdef, params = nnx.split(m)
    cached = decode.teacher_forced_logits(graphdef, params, x, prefill_len=5)
    np.testing.assert_allclose(cached, decode.recompute_logits(graphdef, params, x), atol=2e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="model.cope.npos_max must be"):
        ModelConfig(posenc="cope", encoding_options=(("npos_max", 1),))
