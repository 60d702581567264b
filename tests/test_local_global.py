"""Local/global layers: sliding-window attention against a float64 oracle, reductions to RoPE, a scaling
that moves only the global layers, and a KV cache whose local layers hold `window` slots."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import posenc
from posenc.attention import attention, block_causal_attention
from posenc.model import ModelConfig, Transformer

RNG = np.random.default_rng(0)
TINY = dict(d_model=32, num_layers=3, num_heads=2, mlp_dim=64, max_len=16)


def windowed_oracle(q, k, v, window):
    t, h = q.shape[1], q.shape[-1]
    s = np.einsum("bqnh,bknh->bnqk", q, k) / np.sqrt(h)
    i, j = np.meshgrid(np.arange(t), np.arange(t), indexing="ij")
    s = np.where((j <= i) & (i - j < window), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return np.einsum("bnqk,bknh->bqnh", p / p.sum(-1, keepdims=True), v)


@pytest.mark.parametrize("window", [1, 5, 16, 100])
def test_sliding_window_attention_equals_oracle_whole_chunked_and_blocked(window):
    q, k, v = (RNG.normal(size=(2, 32, 2, 8)) for _ in range(3))
    pos = np.arange(32)[None]
    expected = windowed_oracle(q, k, v, window)
    with jax.enable_x64(True):
        args = [jnp.asarray(a) for a in (q, k, v)]
        for out in (attention(*args, pos, pos, window=window), attention(*args, pos, pos, window=window, chunk_size=7),
                    attention(*args, pos, pos, window=window, chunk_size=7, key_block=3),
                    block_causal_attention(*args, pos, pos, window=window, block=8)):
            np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-10, atol=1e-12)


def make(name="local_global", **kw):
    model = Transformer(ModelConfig(posenc=name, **{**TINY, **kw}), rngs=nnx.Rngs(0))
    for block in model.blocks:
        block.attn.qkv.kernel[...] = block.attn.qkv.kernel[...] * 8
    return model


def test_reductions_to_rope():
    x = jnp.asarray(RNG.integers(0, 256, size=(2, 24)))
    rope = make("rope")
    np.testing.assert_allclose(make(encoding_options=(("pattern", "G"),))(x), rope(x), atol=1e-6)
    wide = make(encoding_options=(("pattern", "LGL"), ("window", 24), ("local_base", 10000.0)))
    np.testing.assert_allclose(wide(x), rope(x), atol=1e-6)  # a window over the whole sequence, the same base
    narrow = make(encoding_options=(("pattern", "LGL"), ("window", 4)))
    assert not np.allclose(narrow(x), rope(x), atol=1e-3)


def test_a_scaling_moves_only_the_global_layers():
    cfg = ModelConfig(posenc="local_global", rope_scaling=posenc.RopeScaling("linear", 4.0), rope_base=1e6,
                      encoding_options=(("local_base", 1e4),), **TINY)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    global_ctx, local_ctx = model.encoding.context(None, 32)
    np.testing.assert_allclose(global_ctx.inv_freq, posenc.rope_frequencies(16, base=1e6)[0] / 4, rtol=1e-6)
    np.testing.assert_allclose(local_ctx.inv_freq, posenc.rope_frequencies(16, base=1e4)[0], rtol=1e-6)
    assert [model.encoding.window(cfg, i) for i in range(3)] == [64, None, 64]  # pattern LG, window 64


def test_local_layers_rotate_with_local_base_and_global_layers_with_rope_base():
    """With the two bases apart (they are both 10⁴ by default), layer 0 (L) rotates by `local_base` and layer 1
    (G) by `model.rope.base`."""
    cfg = ModelConfig(posenc="local_global", rope_base=1e6, encoding_options=(("pattern", "LG"), ("local_base", 100.0)),
                      **{**TINY, "num_layers": 2})
    enc = cfg.encoding(cfg, rngs=nnx.Rngs(0))
    pos = jnp.arange(8)[None]
    ctx = enc.context(pos, 8)
    x = jnp.asarray(RNG.normal(size=(1, 8, 2, 16)), jnp.float32)
    for layer, base in ((0, 100.0), (1, 1e6)):
        want = posenc.apply_rope(x, pos, posenc.rope_frequencies(16, base=base)[0], layout=cfg.rope_layout)
        np.testing.assert_allclose(enc.rotate(x, pos, ctx, layer, "q"), want, atol=1e-5)


@pytest.mark.parametrize("base", [0.0, -1.0, float("inf"), float("nan")])
def test_local_base_must_be_finite_and_positive(base):
    """As `rope_frequencies` requires, refused by the config check rather than at the first forward pass."""
    with pytest.raises(ValueError, match=r"model\.local_global\.local_base must be a finite number > 0"):
        ModelConfig(posenc="local_global", encoding_options=(("local_base", base),))


def test_cache_of_local_layers_is_bounded_by_the_window():
    model = make(encoding_options=(("pattern", "LLG"), ("window", 6)))
    cache = model.init_cache(2, 1000)
    assert [k.shape[2] for k in cache.k] == [6, 6, 1000] and [p.shape[1] for p in cache.pos] == [6, 6, 1000]
    with pytest.raises(ValueError, match="pattern must be a non-empty string of L"):
        ModelConfig(posenc="local_global", encoding_options=(("pattern", "LX"),))
