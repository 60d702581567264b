"""CoPE: a float64 oracle of contextual positions and their interpolated embeddings, its reductions, finite
gradients at any score, and cached decoding equal to the full forward pass."""

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
        ours = cope_bias(jnp.asarray(q) / 2.0, jnp.asarray(k), visible, jnp.asarray(emb))
        assert ours.dtype == jnp.float64  # float64 inputs are computed in float64
    expected = oracle(q, k, emb, npos_max)
    np.testing.assert_allclose(np.where(visible, np.asarray(ours), 0), expected, rtol=1e-10, atol=1e-12)


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


@pytest.mark.parametrize("where", ["future key", "visible key"])
def test_gradients_are_finite_at_very_negative_scores(where):
    """A score of −800 (σ' = 0, but exp(800) overflows float32) leaves the gradients of q, k and e finite, on a
    masked future key too: the gate is `jax.nn.sigmoid`, not 1 / (1 + exp(−s)), whose 0 · inf is NaN."""
    emb = jnp.asarray(RNG.normal(size=(8, 4)), jnp.float32)
    visible = jnp.asarray(np.tril(np.ones((3, 3), bool)))[None, None]
    q = np.array([[10.0, 0, 0, 0], [0, 1, 0, 0], [0, 1, 0, 0]], np.float32)
    k = np.array([[0.0, 1, 0, 0], [0, 1, 0, 0], [0, 1, 0, 0]], np.float32)
    if where == "future key":
        k[2] = [-80, 0, 0, 0]  # the score of (0, 2), in the future of query 0, is −800; every visible one ≥ 0
    else:
        k[0], q[2] = [-80, 0, 0, 0], [10, 0, 0, 0]  # the visible pair (2, 0) scores −800
    q, k = jnp.asarray(q)[None, None], jnp.asarray(k)[None, None]
    loss = lambda q, k, e: jnp.sum(jnp.where(visible, cope_bias(q, k, visible, e), 0.0))  # noqa: E731
    grads = jax.grad(loss, argnums=(0, 1, 2))(q, k, emb)
    for g in grads:
        assert np.isfinite(np.asarray(g)).all()
    assert np.abs(np.asarray(grads[2])).max() > 0


def test_model_gradients_are_finite_with_large_logits():
    """q·k/√H of several hundred (no QK-norm; logits grow in training) gives finite gradients everywhere."""
    m = Transformer(ModelConfig(posenc="cope", d_model=32, num_heads=2, num_layers=2, mlp_dim=64, max_len=16),
                    rngs=nnx.Rngs(0))
    for block in m.blocks:
        block.attn.qkv.kernel[...] = block.attn.qkv.kernel[...] * 100
    graphdef, state = nnx.split(m)
    x = jnp.asarray(RNG.integers(0, 256, size=(2, 16)))
    grads = jax.grad(lambda s: jnp.mean(nnx.merge(graphdef, s)(x) ** 2))(state)
    assert all(np.isfinite(np.asarray(g)).all() for g in jax.tree.leaves(grads))


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


@pytest.mark.parametrize("kind", ["attn_window", "sinks", "lm_infinite"])
def test_cached_decoding_through_a_ring_cache_equals_the_forward_pass(kind):
    """A windowed layer (and lm_infinite / sinks) caches keys in a ring, slot = position mod size: once it wraps,
    its slots are out of position order, and CoPE's p_ij = Σ_{t=j..i} g_it must still count the keys between j
    and i by position, not by slot (summed by slot, it counted older keys that sit in later slots: 3e-2 off)."""
    from posenc.training_free import Method

    x = jnp.asarray(RNG.integers(0, 256, size=(2, 30)), jnp.int32)
    if kind == "attn_window":
        graphdef, params = nnx.split(model(attn_window=5))
        cached = decode.teacher_forced_logits(graphdef, params, x, prefill_len=3)
        want = decode.recompute_logits(graphdef, params, x)
    else:
        graphdef, params = nnx.split(model())
        method = Method(kind, window=9, **({"num_sinks": 2} if kind == "sinks" else {"n_global": 2}))
        cached = decode.teacher_forced_logits(graphdef, params, x, prefill_len=5, method=method,
                                              cache_size=sum(method.cache_layout()))
        m = nnx.merge(graphdef, params)
        want = m(x, method=method.args(m.cfg.encoding))  # causal: position p of the whole pass is prefix p's
    np.testing.assert_allclose(cached, want, atol=1e-5, rtol=1e-5)
