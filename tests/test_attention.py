"""Attention over explicit positions: chunked == full (with ALiBi), causal masks from positions."""

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import posenc
from posenc import attention as attention_mod
from posenc.attention import attention

RNG = np.random.default_rng(0)


def alibi_fn(slopes):
    """ALiBi as a bias function of positions (what posenc.alibi.Alibi.bias gives attention), or None."""
    return None if slopes is None else (lambda q_pos, k_pos, *_: posenc.alibi_bias(slopes, q_pos, k_pos))


def qkv(b=2, t=37, n=4, h=8):
    return [jnp.asarray(RNG.normal(size=(b, t, n, h)), jnp.float32) for _ in range(3)]


def reference(q, k, v, q_pos, k_pos, slopes=None):
    """float64 numpy: softmax(q·k/sqrt(h) − m(i − j)) over keys with 0 <= k_pos <= q_pos."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    s = np.einsum("bqnh,bknh->bnqk", q, k) / np.sqrt(q.shape[-1])
    qp, kp = np.broadcast_to(q_pos, q.shape[:2]), np.broadcast_to(k_pos, k.shape[:2])
    if slopes is not None:
        s = s - np.asarray(slopes)[None, :, None, None] * (qp[:, None, :, None] - kp[:, None, None, :])
    mask = (kp[:, None, None, :] <= qp[:, None, :, None]) & (kp[:, None, None, :] >= 0)
    s = np.where(mask, s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("bnqk,bknh->bqnh", p, v)


@pytest.mark.parametrize("alibi", [False, True])
@pytest.mark.parametrize("chunk,key_block", [(0, 0), (1, 0), (8, 0), (16, 0), (37, 0), (64, 0), (8, 5), (16, 37),
                                             (1, 4), (12, 8)])
def test_chunked_equals_full_and_reference(alibi, chunk, key_block):
    """Query chunks, and with `key_block` key tiles under the online softmax (37 keys: a padded last tile)."""
    q, k, v = qkv()
    pos = jnp.arange(37)[None]
    slopes = posenc.alibi_slopes(4) if alibi else None
    out = attention(q, k, v, pos, pos, bias_fn=alibi_fn(slopes), chunk_size=chunk, key_block=key_block)
    np.testing.assert_allclose(out, reference(q, k, v, pos, pos, slopes), atol=2e-5)


@pytest.mark.parametrize("groups", [1, 2, 4])
@pytest.mark.parametrize("bias", ["none", "per_head", "shared", "from_q_and_k"])
def test_head_groups_equal_the_float64_oracle(groups, bias):
    """Chunked attention in key tiles with its heads split into independent loops: every bias shape the
    encodings give (one per head as ALiBi's, one broadcast over the heads, one computed from the group's own q
    and k as CoPE's) reaches each group's heads, equal to the float64 oracle. (Whole key rows in chunks run
    with the CPU default of 2 groups in test_chunked_equals_full_and_reference and, for CoPE, test_encodings.)"""
    q, k, v = qkv(t=23)
    pos = jnp.arange(23)[None]
    table = RNG.normal(size=(23, 23))
    fns = {
        "none": None,
        "per_head": alibi_fn(posenc.alibi_slopes(4)),
        "shared": lambda qp, kp, *_: jnp.asarray(table)[qp[0][:, None], kp[0][None, :]][None, None],
        "from_q_and_k": lambda qp, kp, qq, kk, vis: jnp.tanh(jnp.einsum("bnqh,bnkh->bnqk", qq, kk)),
    }
    with jax.enable_x64(True):
        q64, k64, v64 = (jnp.asarray(np.asarray(a), jnp.float64) for a in (q, k, v))
        got = attention(q64, k64, v64, pos, pos, bias_fn=fns[bias], chunk_size=5, key_block=6, groups=groups)
        if bias in ("none", "per_head"):
            want = reference(q64, k64, v64, pos, pos, posenc.alibi_slopes(4) if bias == "per_head" else None)
        else:  # unchunked attention, every head at once (tested against the oracle above)
            want = attention(q64, k64, v64, pos, pos, bias_fn=fns[bias])
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-10, atol=1e-12)


def test_head_groups_keep_grouped_query_heads():
    """Grouped-query attention (4 query heads over 2 key/value heads) in head groups: each query head keeps its
    key/value head (n // 2), equal to the same keys and values repeated and attended whole."""
    q, _, _ = qkv(t=19)
    k, v = (jnp.asarray(RNG.normal(size=(2, 19, 2, 8)), jnp.float32) for _ in range(2))
    pos = jnp.arange(19)[None]
    want = reference(q, jnp.repeat(k, 2, axis=2), jnp.repeat(v, 2, axis=2), pos, pos)
    for groups in (2, 4):
        got = attention(q, k, v, pos, pos, chunk_size=4, key_block=5, groups=groups)
        np.testing.assert_allclose(np.asarray(got), want, atol=2e-5)


def test_head_groups_choice_and_errors():
    assert attention_mod.head_groups(4, backend="cpu") == 2 and attention_mod.head_groups(3, backend="cpu") == 1
    assert attention_mod.head_groups(4, backend="gpu") == 1
    q, k, v = qkv(t=12)
    pos = jnp.arange(12)[None]
    for groups, chunk in ((0, 4), (3, 4), (3, 0)):  # also where no chunking would use it
        with pytest.raises(ValueError, match=f"groups={groups} must be a positive divisor of the 4 heads"):
            attention(q, k, v, pos, pos, chunk_size=chunk, key_block=4, groups=groups)


@pytest.mark.parametrize("alibi", [False, True])
def test_key_tiles_match_the_float64_oracle_with_a_cache_and_unsorted_positions(alibi):
    """Key tiles against the float64 oracle where skipping could go wrong: a cache whose later slots are
    empty (position −1, whole tiles of them skipped), queries at the end, and keys in no particular order (a
    tile is skipped only when no query of the chunk may see any of its keys)."""
    q, k, v = qkv(t=40)
    k_pos = np.where(np.arange(40) < 29, np.arange(40), -1)[None]
    shuffled = np.random.default_rng(1).permutation(29)
    k_pos_shuffled = np.concatenate([shuffled, -np.ones(11, int)])[None]
    slopes = posenc.alibi_slopes(4) if alibi else None
    with jax.enable_x64(True):
        q64, k64, v64 = (jnp.asarray(np.asarray(a), jnp.float64) for a in (q, k, v))
        for kp in (k_pos, k_pos_shuffled):
            q_pos = np.arange(17, 29)[None]
            got = attention(q64[:, 17:29], k64, v64, q_pos, kp, bias_fn=alibi_fn(slopes), chunk_size=5, key_block=6)
            want = reference(q64[:, 17:29], k64, v64, q_pos, kp, slopes)
            np.testing.assert_allclose(np.asarray(got), want, rtol=1e-10, atol=1e-12)


def test_fewer_queries_than_keys_uses_positions_not_indices():
    """The last 3 queries against 37 keys (a KV cache / query chunk): bottom-right aligned by position."""
    q, k, v = qkv()
    pos = jnp.arange(37)[None]
    full = attention(q, k, v, pos, pos)
    tail = attention(q[:, -3:], k, v, pos[:, -3:], pos)
    np.testing.assert_allclose(tail, full[:, -3:], atol=1e-5)


def test_negative_key_positions_are_never_attended():
    q, k, v = qkv(t=6)
    pos = jnp.arange(6)[None]
    k_pos = jnp.array([[0, 1, 2, -1, -1, -1]])  # empty cache slots
    out = attention(q[:, :3], k, v, pos[:, :3], k_pos)
    np.testing.assert_allclose(out, attention(q[:, :3], k[:, :3], v[:, :3], pos[:, :3], pos[:, :3]), atol=1e-6)


def test_chunked_attention_jits_and_bounds_scores():
    q, k, v = qkv(b=1, t=64)
    pos = jnp.arange(64)[None]
    f = jax.jit(lambda a, b, c: attention(a, b, c, pos, pos, chunk_size=16))
    text = f.lower(q, k, v).as_text()
    assert "64x64" not in text.replace(" ", "")  # no [.., 64, 64] score matrix materialised
    np.testing.assert_allclose(f(q, k, v), attention(q, k, v, pos, pos), atol=1e-5)


@pytest.mark.parametrize("alibi", [False, True])
@pytest.mark.parametrize("t,block", [(64, 16), (64, 32), (37, 16), (16, 16)])
def test_block_causal_equals_full(alibi, t, block):
    from posenc.attention import block_causal_attention

    q, k, v = qkv(t=t)
    pos = jnp.arange(t)[None]
    slopes = posenc.alibi_slopes(4) if alibi else None
    out = block_causal_attention(q, k, v, pos, pos, bias_fn=alibi_fn(slopes), block=block)
    np.testing.assert_allclose(out, reference(q, k, v, pos, pos, slopes), atol=2e-5)


def _plain_attention_64(q, k, v, q_pos, k_pos, slopes=None):
    """The textbook formula in jnp (autodiff through its softmax), for float64 gradient oracles."""
    s = jnp.einsum("bqnh,bknh->bnqk", q, k) / np.sqrt(q.shape[-1])
    if slopes is not None:
        s = s - jnp.asarray(slopes)[None, :, None, None] * (q_pos[:, None, :, None] - k_pos[:, None, None, :])
    mask = (k_pos[:, None, None, :] <= q_pos[:, None, :, None]) & (k_pos[:, None, None, :] >= 0)
    p = jax.nn.softmax(jnp.where(mask, s, -jnp.inf), axis=-1)
    return jnp.einsum("bnqk,bknh->bqnh", p, v)


@pytest.mark.parametrize("alibi", [False, True])
@pytest.mark.parametrize("mode", ["full", "chunked", "block", "cache", "tiled", "tiled cache"])
def test_gradients_equal_float64_autodiff(mode, alibi):
    """The hand-written backward (FlashAttention's dS = P ∘ (dP − rowsum(dO ∘ O))) equals autodiff of the
    textbook formula, in float64, for q, k and v, in every way the model calls attention."""
    from posenc.attention import block_causal_attention

    t = 32
    q, k, v, g = (RNG.normal(size=(2, t, 4, 8)) for _ in range(4))
    pos = np.arange(t)[None]
    cache = mode.endswith("cache")
    k_pos = np.where(np.arange(t) < 20, np.arange(t), -1)[None] if cache else pos
    q_pos = pos[:, 12:20] if cache else pos
    if cache:
        q, g = q[:, 12:20], g[:, 12:20]
    slopes = posenc.alibi_slopes(4) if alibi else None
    fn = {
        "full": lambda a, b, c: attention(a, b, c, q_pos, k_pos, bias_fn=alibi_fn(slopes)),
        "chunked": lambda a, b, c: attention(a, b, c, q_pos, k_pos, bias_fn=alibi_fn(slopes), chunk_size=12),
        "block": lambda a, b, c: block_causal_attention(a, b, c, q_pos, k_pos, bias_fn=alibi_fn(slopes), block=8),
        "cache": lambda a, b, c: attention(a, b, c, q_pos, k_pos, bias_fn=alibi_fn(slopes)),
        "tiled": lambda a, b, c: attention(a, b, c, q_pos, k_pos, bias_fn=alibi_fn(slopes), chunk_size=12, key_block=5),
        "tiled cache": lambda a, b, c: attention(a, b, c, q_pos, k_pos, bias_fn=alibi_fn(slopes), chunk_size=3,
                                                 key_block=7),
    }[mode]
    with jax.enable_x64(True):
        args = [jnp.asarray(a, jnp.float64) for a in (q, k, v)]
        ours = jax.grad(lambda *a: jnp.sum(fn(*a) * g), argnums=(0, 1, 2))(*args)
        oracle = jax.grad(lambda *a: jnp.sum(_plain_attention_64(*a, jnp.asarray(q_pos), jnp.asarray(k_pos), slopes) * g),
                          argnums=(0, 1, 2))(*args)
    for a, b in zip(ours, oracle, strict=True):
        assert a.dtype == jnp.float64
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("mode", ["plain", "block"])
def test_bfloat16_gradients_keep_dtype_and_track_float64(mode):
    """bf16 inputs: outputs and gradients stay bf16 (scores and probabilities accumulate in float32) and
    agree with the float64 oracle to bf16 precision, also block-causal (blocks' gradients summed in float32)."""
    from posenc.attention import block_causal_attention

    q, k, v, g = (RNG.normal(size=(2, 32, 4, 8)) for _ in range(4))
    pos = np.arange(32)[None]
    args = [jnp.asarray(a, jnp.bfloat16) for a in (q, k, v)]
    fn = attention if mode == "plain" else functools.partial(block_causal_attention, block=8)
    ours = jax.grad(lambda *a: jnp.sum(fn(*a, pos, pos).astype(jnp.float32) * g), argnums=(0, 1, 2))(*args)
    with jax.enable_x64(True):
        exact = [np.asarray(a, np.float64) for a in args]  # the same bf16-rounded inputs
        oracle = jax.grad(lambda *a: jnp.sum(_plain_attention_64(*a, jnp.asarray(pos), jnp.asarray(pos)) * g),
                          argnums=(0, 1, 2))(*map(jnp.asarray, exact))
    for a, b in zip(ours, oracle, strict=True):
        assert a.dtype == jnp.bfloat16
        np.testing.assert_allclose(np.asarray(a, np.float64), b, atol=0.03 * np.abs(b).max())


@pytest.mark.parametrize("mode", ["full", "chunked", "block", "cache", "tiled", "tiled cache"])
def test_learned_bias_gets_the_gradient_of_the_textbook_formula(mode):
    """A bias with parameters (here a free [N, T, T] table, broadcast over the batch) gets dS summed over
    the batch, equal to float64 autodiff of softmax(q·kᵀ/√H + bias) v, in every way the model attends."""
    from posenc.attention import block_causal_attention

    t = 32
    q, k, v, g = (RNG.normal(size=(2, t, 4, 8)) for _ in range(4))
    table = RNG.normal(size=(4, t, t))
    pos = np.arange(t)[None]
    cache = mode.endswith("cache")
    k_pos = np.where(np.arange(t) < 20, np.arange(t), -1)[None] if cache else pos
    q_pos = pos[:, 12:20] if cache else pos
    if cache:
        q, g = q[:, 12:20], g[:, 12:20]

    def bias_fn(w):  # a function of positions, as an encoding's bias is
        return lambda qp, kp, *_: w[:, jnp.clip(qp, 0)[0][:, None], jnp.clip(kp, 0)[0][None, :]][None]

    fn = {
        "full": lambda w: attention(*args, q_pos, k_pos, bias_fn=bias_fn(w)),
        "chunked": lambda w: attention(*args, q_pos, k_pos, bias_fn=bias_fn(w), chunk_size=12),
        "block": lambda w: block_causal_attention(*args, q_pos, k_pos, bias_fn=bias_fn(w), block=8),
        "cache": lambda w: attention(*args, q_pos, k_pos, bias_fn=bias_fn(w)),
        "tiled": lambda w: attention(*args, q_pos, k_pos, bias_fn=bias_fn(w), chunk_size=12, key_block=5),
        "tiled cache": lambda w: attention(*args, q_pos, k_pos, bias_fn=bias_fn(w), chunk_size=3, key_block=7),
    }[mode]

    def textbook(w):
        a, b, c = args
        s = jnp.einsum("bqnh,bknh->bnqk", a, b) / np.sqrt(a.shape[-1]) + bias_fn(w)(jnp.asarray(q_pos),
                                                                                   jnp.asarray(k_pos))
        mask = (k_pos[:, None, None, :] <= q_pos[:, None, :, None]) & (k_pos[:, None, None, :] >= 0)
        return jnp.einsum("bnqk,bknh->bqnh", jax.nn.softmax(jnp.where(mask, s, -jnp.inf), axis=-1), c)

    with jax.enable_x64(True):
        args = [jnp.asarray(a, jnp.float64) for a in (q, k, v)]
        w = jnp.asarray(table, jnp.float64)
        ours = jax.grad(lambda w: jnp.sum(fn(w) * g))(w)
        oracle = jax.grad(lambda w: jnp.sum(textbook(w) * g))(w)
    assert np.abs(np.asarray(oracle)).max() > 1e-3  # the bias matters
    np.testing.assert_allclose(ours, oracle, rtol=1e-9, atol=1e-12)


def test_one_place_chooses_the_fused_kernel():
    choose = functools.partial(attention_mod.implementation, aligned=True, has_bias=False, plain=True,
                               dtype=jnp.bfloat16, head_dim=64)
    assert choose("auto", backend="gpu") == "cudnn" and choose("auto", backend="cpu") == "posenc"
    assert choose("auto", backend="gpu", dtype=jnp.float32) == "posenc"  # cuDNN's kernel is half precision
    assert choose("auto", backend="gpu", head_dim=256) == "posenc"
    assert attention_mod.implementation("auto", aligned=False, has_bias=False, plain=True, dtype=jnp.bfloat16,
                                        head_dim=64, backend="gpu") == "posenc"  # a cache or chunks
    assert attention_mod.implementation("auto", aligned=True, has_bias=True, plain=True, dtype=jnp.bfloat16,
                                        head_dim=64, backend="gpu") == "posenc"  # ALiBi & co.
    with pytest.raises(ValueError, match="does not apply to a logit bias"):
        attention_mod.implementation("xla", aligned=True, has_bias=True, plain=True, dtype=jnp.bfloat16, head_dim=64)
    with pytest.raises(ValueError, match="attn_impl must be one of"):
        choose("flash")
    with pytest.raises(ValueError, match="attn_impl='cudnn'.*float32 with head_dim 64"):  # cuDNN's limits, said first
        choose("cudnn", dtype=jnp.float32, backend="gpu")
    with pytest.raises(ValueError, match="attn_impl='cudnn'.*bfloat16 with head_dim 256"):
        choose("cudnn", head_dim=256, backend="gpu")
    assert choose("cudnn", backend="gpu") == "cudnn" and choose("xla", dtype=jnp.float32, head_dim=256) == "xla"


def test_cudnn_requested_off_a_gpu_is_refused_naming_the_field():
    """cuDNN's kernel runs only on an NVIDIA GPU: 'cudnn' asked for on a CPU is a ValueError naming
    model.attn_impl and the backend, not jax's "cuDNN is not detected" at the first forward pass."""
    choose = functools.partial(attention_mod.implementation, "cudnn", aligned=True, has_bias=False, plain=True,
                               dtype=jnp.bfloat16, head_dim=64)
    with pytest.raises(ValueError, match="attn_impl='cudnn'.*the cpu backend under cuDNN.*use 'auto' or 'posenc'"):
        choose(backend="cpu")
    assert choose(backend="gpu") == "cudnn"


@pytest.mark.parametrize("kw", [{}, {"num_kv_heads": 1}, {"attn_window": 5}])
def test_the_fused_call_equals_posenc_attention_on_cpu(kw):
    """The code path a GPU takes (jax.nn.dot_product_attention, here its 'xla' implementation) gives the
    model's logits: causal alignment, grouped heads and the sliding window are passed as posenc means them."""
    from flax import nnx

    from posenc.model import ModelConfig, Transformer

    cfg = ModelConfig(d_model=32, num_layers=2, num_heads=4, mlp_dim=64, **kw)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    fused = Transformer(dataclasses.replace(cfg, attn_impl="xla"), rngs=nnx.Rngs(0))
    x = jnp.asarray(np.random.RandomState(0).randint(0, 256, (2, 24)))
    np.testing.assert_allclose(np.asarray(fused(x)), np.asarray(model(x)), atol=2e-5, rtol=2e-5)


@pytest.mark.skipif(jax.default_backend() != "gpu",
                    reason="cuDNN's fused kernel runs only on an NVIDIA GPU; on a CPU the test above runs the same "
                           "call through its 'xla' implementation")
@pytest.mark.parametrize("kw", [{}, {"num_kv_heads": 1}, {"attn_window": 5}])
def test_cudnn_attention_is_as_close_to_float32_as_posenc_bf16_on_gpu(kw):
    """On a GPU, `auto` in bf16 takes cuDNN's fused kernel; its logits and its loss's gradient are as close to
    float32 posenc attention as posenc's own bf16 attention is (both round products to bf16)."""
    from flax import nnx

    from posenc.model import ModelConfig, Transformer

    cfg = ModelConfig(d_model=128, num_layers=2, num_heads=2, mlp_dim=256, **kw)  # head_dim 64
    x = jnp.asarray(np.random.RandomState(0).randint(0, 256, (2, 48)))

    def logits_and_grad(**over):
        model = Transformer(dataclasses.replace(cfg, **over), rngs=nnx.Rngs(0))
        graphdef, params = nnx.split(model)

        def loss(p):
            logits = nnx.merge(graphdef, p)(x).astype(jnp.float32)
            return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits[:, :-1]), x[:, 1:, None], -1)), logits

        (_, logits), grad = jax.value_and_grad(loss, has_aux=True)(params)
        return np.asarray(logits), np.concatenate([np.ravel(g) for g in jax.tree.leaves(grad)])

    assert attention_mod.implementation("auto", aligned=True, has_bias=False, plain=True, dtype=jnp.bfloat16,
                                        head_dim=64) == "cudnn"
    # float32 activations in every arm: only the attention kernel and its bf16 operands differ
    ref_logits, ref_grad = logits_and_grad(attn_impl="posenc", dtype="float32")
    bf_logits, bf_grad = logits_and_grad(attn_impl="posenc", dtype="bfloat16", act_dtype="float32")
    cu_logits, cu_grad = logits_and_grad(attn_impl="cudnn", dtype="bfloat16", act_dtype="float32")
    for ours, bf, ref in ((cu_logits, bf_logits, ref_logits), (cu_grad, bf_grad, ref_grad)):
        bf_err, cu_err = np.abs(bf - ref).max(), np.abs(ours - ref).max()
        assert 0 < bf_err and cu_err <= 2 * bf_err, (cu_err, bf_err)


def test_key_tiles_give_a_query_that_sees_no_key_zero_not_nan():
    """Queries before every key (no visible pair): the tiled path returns 0 for them instead of 0 / 0."""
    q, k, v = qkv(t=12)
    out = attention(q[:, :4], k, v, jnp.arange(4)[None], jnp.arange(100, 112)[None], chunk_size=2, key_block=4)
    assert np.isfinite(np.asarray(out)).all() and np.abs(np.asarray(out)).max() == 0.0
    # a chunk some of whose queries see keys in a tile: the queries that see none still get 0 (not the mean of
    # the tile's values), and the others their exact attention
    q, k, v = qkv(t=8)
    k_pos = jnp.asarray([[2, 50, 51, 52, 53, 54, 55, 56]])
    out = np.asarray(attention(q[:, :6], k, v, jnp.arange(6)[None], k_pos, chunk_size=4, key_block=4))
    assert np.abs(out[:, :2]).max() == 0.0  # queries 0 and 1 come before every key
    np.testing.assert_allclose(out[:, 2:], np.asarray(attention(q[:, 2:6], k, v, jnp.arange(2, 6)[None], k_pos)),
                               atol=1e-6)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("shape", [(6, 5), (2, 3, 6, 5)])
def test_swap_last_copy_is_swapaxes_with_its_gradient(dtype, shape):
    from posenc.attention import swap_last_copy

    x = jnp.asarray(RNG.normal(size=shape), dtype)
    g = jnp.asarray(RNG.normal(size=shape[:-2] + shape[-2:][::-1]), jnp.float32)
    out = jax.jit(swap_last_copy)(x)
    assert out.dtype == dtype and out.shape == x.swapaxes(-1, -2).shape
    np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(x.swapaxes(-1, -2), np.float32))
    grad = jax.grad(lambda a: jnp.sum(swap_last_copy(a).astype(jnp.float32) * g))(x)
    np.testing.assert_array_equal(np.asarray(grad, np.float32), np.asarray(g.swapaxes(-1, -2).astype(dtype), np.float32))


@pytest.mark.parametrize("kw", [{}, {"chunk_size": 8, "key_block": 8}], ids=["whole", "tiled"])
def test_a_far_branch_never_leaks_nan_from_pairs_it_may_not_score(kw):
    """The far branch's inputs at pairs it never scores may be NaN (LM-Infinite's query rotated at L, outside
    the rotation table when the window is the training length): with every key within the window and empty
    cache slots (position −1, at distance L from the last query: neither near nor visible), the output is the
    plain attention's, finite; the far scores it does use still count."""
    rng = np.random.default_rng(0)
    b, t, n, h, empty = 1, 24, 2, 8, 3
    q, k, v = (jnp.asarray(rng.standard_normal((b, t + empty, n, h)), jnp.float32) for _ in range(3))
    q = q[:, :t]
    q_pos = jnp.arange(t)[None]
    k_pos = jnp.concatenate([jnp.full((1, empty), -1), q_pos], axis=1)  # a cache's empty slots first
    far = attention_mod.Far(q=jnp.full_like(q, jnp.nan), k=k, q_pos=q_pos, k_pos=jnp.maximum(k_pos, 0),
                            visible=lambda i, j: jnp.broadcast_to(j[:, None, None, :] < 2,
                                                                  (1, 1, i.shape[1], j.shape[1])))

    def within(w):
        return lambda i, j: i[:, None, :, None] - j[:, None, None, :] < w

    plain = attention(q, k, v, q_pos, k_pos, **kw)
    np.testing.assert_allclose(attention(q, k, v, q_pos, k_pos, near_fn=within(t), far=far, **kw), plain,
                               rtol=1e-5, atol=1e-6)
    # a window of 4: the far pairs (keys 0 and 1) are scored, and a NaN far query shows where it is used
    out = np.asarray(attention(q, k, v, q_pos, k_pos, near_fn=within(4), far=far, **kw))
    assert np.isfinite(out[:, :4]).all() and np.isnan(out[:, 4:]).all()  # query 4 is the first to see key 0 far


def test_the_model_takes_the_fused_kernel_on_a_gpu_exactly_where_it_applies(monkeypatch):
    """The model's own arguments to the one choice, on a GPU (faked: `implementation` told backend='gpu', the
    fused call run by its 'xla' implementation): a bf16 forward at default positions takes the fused kernel in
    every layer, and its logits are posenc attention's to bf16 rounding; explicit positions, a KV cache, a
    logit bias, a training-free method and float32 operands all stay with posenc's attention."""
    from flax import nnx

    from posenc import model as model_mod
    from posenc.model import ModelConfig, Transformer
    from posenc.training_free import Method

    fused = []

    def on_gpu(*args, **kw):
        return attention_mod.implementation(*args, **kw, backend="gpu")

    def fused_attention(q, k, v, *, impl, window=None):
        fused.append(impl)
        return attention_mod.fused_attention(q, k, v, impl="xla", window=window)

    monkeypatch.setattr(model_mod, "implementation", on_gpu)
    monkeypatch.setattr(model_mod, "fused_attention", fused_attention)
    x = jnp.asarray(np.random.RandomState(0).randint(0, 256, (2, 16)))
    cfg = ModelConfig(d_model=64, num_layers=2, num_heads=2, mlp_dim=64, dtype="bfloat16", act_dtype="float32")

    def calls(c=cfg, **kw):
        fused.clear()
        out = Transformer(c, rngs=nnx.Rngs(0))(x, **kw)
        return list(fused), out

    got, logits = calls()
    assert got == ["cudnn", "cudnn"]
    posenc_logits = Transformer(dataclasses.replace(cfg, attn_impl="posenc"), rngs=nnx.Rngs(0))(x)
    np.testing.assert_allclose(np.asarray(logits), np.asarray(posenc_logits), atol=0.05)
    assert calls(positions=jnp.arange(16)[None])[0] == []
    assert calls(dataclasses.replace(cfg, posenc="alibi"))[0] == []
    assert calls(dataclasses.replace(cfg, dtype="float32"))[0] == []
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    fused.clear()
    model(x, positions=jnp.arange(16)[None], cache=model.init_cache(2, 32))
    assert fused == []
    method = Method("lm_infinite", window=6, n_global=2).args(model.encoding)
    fused.clear()
    model(x, method=method)
    assert fused == []
