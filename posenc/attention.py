"""Causal multi-head attention over explicit positions, optionally chunked over the queries.

Masks and biases come from positions, never from array indices: query i sees key j iff
`0 ≤ k_pos[j] ≤ q_pos[i]`. So the same function serves training (q_pos = k_pos = 0…T−1), chunked
evaluation (a block of queries against all keys) and a KV cache (new queries at the end; empty cache
slots carry position −1). `jax.nn.dot_product_attention(is_causal=True)` would align the mask top-left
and be wrong whenever there are fewer queries than keys.

Chunked attention (evaluation at long lengths) goes over the keys in tiles with FlashAttention's online
softmax (`_tiled_attend`), skipping the tiles no query of the chunk may see: the causal half of `[T, T]` and
empty cache slots are never scored, nor sliced out of the keys. On CPU the heads are split into two groups,
each its own loop over the chunks (`head_groups`): XLA:CPU runs the two loops' small per-tile products and
softmax passes side by side on its threads. `scripts/benchmark_eval.py` measures it against PyTorch's SDPA
(`--head_groups` for the ablation).

The public functions take the model's `[B, T, N, H]` layout and transpose once to head-major
`[B, N, T, H]`, the layout XLA's batched products want (the per-block slices and products of
`block_causal_attention` then need no transposed copies). The softmax-attention itself (`_softmax_attend`)
has a hand-written backward pass, the one of FlashAttention (Dao et al. 2022, arXiv 2205.14135, Alg. 2):
with P the probabilities and O = P V,

    dV = Pᵀ dO,   dP = dO Vᵀ,   dS = P ∘ (dP − rowsum(dO ∘ O)),   dQ = dS K,   dK = dSᵀ Q,

where rowsum(dO ∘ O) = rowsum(P ∘ dP) is computed from the `[Tq, H]` outputs instead of the `[Tq, Tk]`
scores: one pass over the score matrix fewer than autodiff of the softmax (tested against autodiff in
float64; what it is worth: experiments/benchmarks, `scripts/benchmark_train.py --without=attention_vjp`).

Logit biases (`bias_fn(q_pos, k_pos, q, k, visible) -> [B|1, N|1, Tq, Tk]`: ALiBi, T5, KERPLE, FIRE from
positions; CoPE from q and k too) are added to the scores, in whole, chunked and block-causal attention
alike, and get the gradient dS (summed over the axes they broadcast along): a learned bias trains, and a
bias computed from q and k passes its gradient on to them. When the bias is only the mask, XLA removes
that sum.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

_MASKED = float(jnp.finfo(jnp.float32).min)


def _acc(dtype):
    """Accumulation dtype of scores and probabilities: float32, or float64 for float64 inputs."""
    return jnp.promote_types(dtype, jnp.float32)


def swap_last_copy(x):
    """`x.swapaxes(-1, -2)`, written out as a row-major copy when `x` is 16-bit (bfloat16, float16).

    XLA:CPU's libraries multiply bfloat16 only with the contracted axis of the left operand last and in
    memory order; a transposed operand (a contraction over the tokens, as in the weight gradient xᵀ·dy, or
    over the queries, as in attention's dK = dSᵀ·Q) makes XLA upcast both operands to float32 and multiply
    without AMX. A plain transpose is folded into the product or becomes a layout of it; the transpose
    through a trailing unit axis behind an `optimization_barrier` stays an explicit copy. float32 products
    are left to XLA (measured no faster with the copy)."""
    if jnp.dtype(x.dtype).itemsize != 2:
        return x.swapaxes(-1, -2)
    return jax.lax.optimization_barrier(x[..., None].swapaxes(-3, -2))[..., 0]


def _einsum(eq, a, b):
    """`jnp.einsum` accumulated in float32 (float64 for float64) and rounded to the operands' dtype: XLA:CPU
    runs bfloat16 products natively only with a float32 result (`posenc.model.dense`)."""
    return jnp.einsum(eq, a, b, preferred_element_type=_acc(a.dtype)).astype(jnp.result_type(a, b))


def _probs(q, k, bias):
    scores = jnp.einsum("bnqh,bnkh->bnqk", q, k, preferred_element_type=_acc(q.dtype)) + bias
    return jax.nn.softmax(scores, axis=-1)


@jax.custom_vjp
def _softmax_attend(q, k, v, bias):
    """softmax(q kᵀ + bias) v, head-major: q `[B, N, Tq, H]` (already scaled), k/v `[B, N, Tk, H]`, bias
    `[B|1, N|1, Tq, Tk]` (float32; the mask as −3.4e38) → `[B, N, Tq, H]`. The bias's gradient is dS."""
    return _einsum("bnqk,bnkh->bnqh", _probs(q, k, bias).astype(v.dtype), v)


def _softmax_attend_fwd(q, k, v, bias):
    p = _probs(q, k, bias)
    out = _einsum("bnqk,bnkh->bnqh", p.astype(v.dtype), v)
    return out, (q, k, v, p, out, jnp.zeros((0,) + bias.shape, bias.dtype))


def _sum_to(x, shape):
    """Sums `x` over the axes where `shape` has size 1 (the axes a bias was broadcast along)."""
    axes = tuple(i for i, (a, b) in enumerate(zip(x.shape, shape)) if b == 1 and a != 1)
    return jnp.sum(x, axis=axes, keepdims=True) if axes else x


def _softmax_attend_bwd(residuals, d_out):
    q, k, v, p, out, bias_like = residuals
    acc = _acc(p.dtype)
    dp = jnp.einsum("bnqh,bnkh->bnqk", d_out, v, preferred_element_type=acc)
    row = jnp.sum(d_out.astype(acc) * out.astype(acc), axis=-1, keepdims=True)
    ds = p * (dp - row)
    dq = _einsum("bnqk,bnkh->bnqh", ds.astype(k.dtype), k).astype(q.dtype)
    dk = _einsum("bnkq,bnqh->bnkh", swap_last_copy(ds.astype(q.dtype)), q).astype(k.dtype)
    dv = _einsum("bnkq,bnqh->bnkh", swap_last_copy(p.astype(d_out.dtype)), d_out).astype(v.dtype)
    return dq, dk, dv, _sum_to(ds, bias_like.shape[1:]).astype(bias_like.dtype)


_softmax_attend.defvjp(_softmax_attend_fwd, _softmax_attend_bwd)


def _visible(q_pos, k_pos, window=None, keep=None):
    """The pairs attention may score, `[B|1, 1, Tq, Tk]` bool: causal by position, keys at position ≥ 0, at
    distance < `window` if given, and only the `keep` pairs if given."""
    visible = (k_pos[:, None, None, :] <= q_pos[:, None, :, None]) & (k_pos[:, None, None, :] >= 0)
    if window is not None:
        visible &= q_pos[:, None, :, None] - k_pos[:, None, None, :] < window
    if keep is not None:
        visible &= keep
    return visible


def _bias(q_pos, k_pos, bias_fn, q, k, window=None, keep=None, bias_pos=None):
    """The causal mask from positions (0 or −3.4e38 outside `_visible(q_pos, k_pos, window, keep)`), plus
    `bias_fn(q_pos, k_pos, q, k, visible)` (at `bias_pos = (q_pos', k_pos')` if given): `[B|1, N|1, Tq, Tk]`."""
    visible = _visible(q_pos, k_pos, window, keep)
    bias = jnp.where(visible, 0.0, _MASKED).astype(jnp.float32)  # float64 scores promote it
    if bias_fn is not None:
        bias = bias + bias_fn(*(bias_pos or (q_pos, k_pos)), q, k, visible)
    return bias


class Far(NamedTuple):
    """The far branch of a training-free method (`posenc.training_free`): q `[B, Tq, N, H]` and k
    `[B, Tk, N, H]` transformed at the far positions `q_pos` `[B|1, Tq]` / `k_pos` `[B|1, Tk]` (which the
    bias sees), and `visible(q_pos, k_pos)` of the true positions → the pairs the far branch may score."""

    q: Any
    k: Any
    q_pos: Any
    k_pos: Any
    visible: Callable


def _far_scores(qf, kf, bias_far, far_visible, acc):
    """qf kfᵀ + bias_far where the far branch may score (`far_visible`), masked elsewhere. The far positions
    of the pairs it never scores may lie outside a rotation table (LM-Infinite's query at L in range), whose
    NaN must not reach the softmax through a masked score."""
    s_far = jnp.einsum("bnqh,bnkh->bnqk", qf, kf, preferred_element_type=acc) + bias_far
    return jnp.where(far_visible, s_far, jnp.asarray(_MASKED, s_far.dtype))


def _two_branch_attend(q, k, v, bias_near, s_far, use_near):
    """softmax(where(use_near, q kᵀ + bias_near, s_far)) v (`_far_scores`): the merge of Self-Extend's and
    ReRoPE's references (one softmax over the merged scores). Inference only: plain autodiff."""
    acc = _acc(q.dtype)
    s_near = jnp.einsum("bnqh,bnkh->bnqk", q, k, preferred_element_type=acc) + bias_near
    p = jax.nn.softmax(jnp.where(use_near, s_near, s_far), axis=-1)
    return _einsum("bnqk,bnkh->bnqh", p.astype(v.dtype), v)


def _head_major(q, k, v, kv_head_major: bool = False):
    """q scaled by 1/√H, and k, v with their heads repeated to q's (grouped-query attention: query head n
    uses key/value head n // (N / N_kv), as `repeat_kv` in Hugging Face), all `[B, N, T, H]`. With
    `kv_head_major`, k and v come as `[B, N_kv, T, H]` already (a KV cache's layout: no copy per step)."""
    scale = q.shape[-1] ** -0.5
    if not kv_head_major:
        k, v = k.swapaxes(1, 2), v.swapaxes(1, 2)
    rep = q.shape[2] // k.shape[1]
    if rep > 1:
        k, v = jnp.repeat(k, rep, axis=1), jnp.repeat(v, rep, axis=1)
    return (q * jnp.asarray(scale, q.dtype)).swapaxes(1, 2), k, v


def _attend(q, k, v, q_pos, k_pos, bias_fn, window=None, near_fn=None, far=None):
    """Head-major unchunked attention. q [B,N,Tq,H] (scaled), k/v [B,N,Tk,H], q_pos [B|1,Tq], k_pos [B|1,Tk];
    `near_fn(q_pos, k_pos)` → the pairs kept (or, with `far`, scored by the near branch)."""
    keep = None if near_fn is None else near_fn(q_pos, k_pos)
    bias = _bias(q_pos, k_pos, bias_fn, q, k, window, keep)
    if far is None:
        return _softmax_attend(q, k, v, bias)
    far_keep = ~keep & far.visible(q_pos, k_pos)
    bias_far = _bias(q_pos, k_pos, bias_fn, far.q, far.k, window, far_keep, bias_pos=(far.q_pos, far.k_pos))
    s_far = _far_scores(far.q, far.k, bias_far, _visible(q_pos, k_pos, window, far_keep), _acc(q.dtype))
    return _two_branch_attend(q, k, v, bias, s_far, keep)


IMPLEMENTATIONS = ("auto", "posenc", "xla", "cudnn")


def implementation(requested: str, *, aligned: bool, has_bias: bool, plain: bool, dtype, head_dim: int,
                   backend: str | None = None) -> str:
    """The one place that chooses how a layer attends: 'posenc' (this module's attention, any mask, bias,
    window, cache or training-free method) or a `jax.nn.dot_product_attention` implementation — 'cudnn', the
    fused GPU kernel (FlashAttention-style), or 'xla' (its reference; CPU tests run the same call).

    `auto` picks 'cudnn' on a GPU where the kernel applies — default positions 0 … T−1 for queries and keys
    (`is_causal` aligns the mask top-left, exact only then), no logit bias, no training-free method, bf16 or
    fp16 activations, head_dim ≤ 128 and a multiple of 8 (cuDNN's limits) — and 'posenc' everywhere else.
    An explicit 'xla' or 'cudnn' where the kernel does not apply (for 'cudnn' also: off a GPU) is a ValueError
    naming why.
    """
    if requested not in IMPLEMENTATIONS:
        raise ValueError(f"model.attn_impl must be one of {IMPLEMENTATIONS}, got {requested!r}")
    if requested == "posenc":
        return "posenc"
    on_gpu = (backend or jax.default_backend()) == "gpu"
    why = None
    if requested == "cudnn" and not on_gpu:
        why = f"the {backend or jax.default_backend()} backend under cuDNN (an NVIDIA GPU's kernel)"
    elif not aligned:
        why = "positions other than 0 … T−1 (a KV cache, chunks or explicit positions)"
    elif has_bias:
        why = "a logit bias (ALiBi, T5, KERPLE, FIRE, CoPE)"
    elif not plain:
        why = "a training-free method"
    fused_ok = why is None and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16) and head_dim <= 128 and head_dim % 8 == 0
    if requested == "auto":
        return "cudnn" if on_gpu and fused_ok else "posenc"
    if why is None and requested == "cudnn" and not fused_ok:
        why = (f"dtype {jnp.dtype(dtype).name} with head_dim {head_dim} under cuDNN (it takes bfloat16 or float16 "
               "activations and a head_dim ≤ 128 that is a multiple of 8)")
    if why is not None:
        raise ValueError(f"model.attn_impl={requested!r}: jax.nn.dot_product_attention does not apply to {why}; "
                         "use 'auto' or 'posenc'")
    return requested


def fused_attention(q, k, v, *, impl: str, window: int | None = None):
    """`jax.nn.dot_product_attention` for default positions: q `[B, T, N, H]`, k/v `[B, T, N_kv, H]` (grouped
    heads as they are), causal, with a sliding `window` as `local_window_size=(window − 1, 0)`."""
    local = None if window is None else (window - 1, 0)
    return jax.nn.dot_product_attention(q, k, v, is_causal=True, local_window_size=local, implementation=impl)


def block_causal_attention(q, k, v, q_pos, k_pos, *, bias_fn=None, block: int = 128, window: int | None = None):
    """Causal attention for aligned, sorted positions (q_pos == k_pos == 0 … T−1), skipping the blocks of
    keys that lie entirely in the future of a block of queries: block i of queries attends only to the keys
    of blocks 0 … i, so about (n + 1) / 2n of the `[T, T]` scores are computed (n = T / block). Masks still
    come from positions, inside the diagonal block. Falls back to `attention` when T is not a multiple of
    `block`. Only valid when every key past the last query of a block is in its future: the model calls it
    for its default positions (training, full-sequence evaluation), never with a cache.
    """
    t = q.shape[1]
    if block <= 0 or t % block or t <= block or k.shape[1] != t:
        return attention(q, k, v, q_pos, k_pos, bias_fn=bias_fn, window=window)
    dtype = q.dtype
    # Sliced in float32 and rounded per block, so that the blocks' gradients are summed in float32 (XLA:CPU
    # emulates bfloat16 additions with a rounding after each). 16-bit blocks pass an optimization_barrier
    # with a trailing unit axis: otherwise the last block (all of k and v) keeps the head-major transpose as
    # a layout, and XLA:CPU upcasts its products to float32 (`swap_last_copy`).
    q, k, v = (a.astype(_acc(dtype)) for a in _head_major(q, k, v))  # scaled in dtype, as `attention`
    outs = []
    for i in range(t // block):
        lo, hi = i * block, (i + 1) * block
        qkv = q[:, :, lo:hi].astype(dtype), k[:, :, :hi].astype(dtype), v[:, :, :hi].astype(dtype)
        if jnp.dtype(dtype).itemsize == 2:
            qkv = tuple(a[..., 0] for a in jax.lax.optimization_barrier(tuple(a[..., None] for a in qkv)))
        outs.append(_attend(*qkv, q_pos[:, lo:hi], k_pos[:, :hi], bias_fn, window))
    return jnp.concatenate(outs, axis=2).swapaxes(1, 2)


def _key_tiles(pos, block: int, fill):
    """Key positions `[B, Tk]` → `[Tk / block, B, block]` tiles (padded with `fill`)."""
    pos = _pad_keys(pos, block, fill)
    return pos.reshape(pos.shape[0], -1, block).swapaxes(0, 1)


def _pad_keys(x, block: int, fill):
    """`[B, N, Tk, H]` (or `[B|1, Tk]` positions) padded with `fill` along the keys to a multiple of `block`."""
    axis = 2 if x.ndim == 4 else 1
    pad = -x.shape[axis] % block
    if not pad:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, pad)
    return jnp.pad(x, widths, constant_values=fill)


def _tiled_attend(q, q_pos, keys, pos_tiles, block, bias_fn, window=None, near_fn=None, far=None):
    """Head-major attention of q `[B, N, Tq, H]` (scaled) at `q_pos` `[B|1, Tq]` over the keys `(k, v, far k)`
    `[B, N, Tk, H]` (padded to a multiple of `block`) in tiles of `block`, whose positions `(k_pos, far k_pos)`
    are stacked on a leading axis (`_key_tiles`), with the online softmax of FlashAttention (Dao et al. 2022,
    Alg. 1): per tile j, with S_j its scores (bias and mask added),

        m ← max(m, rowmax S_j),   ℓ ← ℓ e^{m_old − m} + rowsum e^{S_j − m},   O ← O e^{m_old − m} + e^{S_j − m} V_j,

    and the output O / ℓ. A tile none of whose keys any query may see (all in the future, before the window,
    or empty cache slots at position −1) is skipped (`lax.cond`), and its keys are never sliced out: the scores
    held at once are `[B, N, Tq, block]`, and about half of the causal `[Tq, Tk]` is never computed. The bias
    must be a function of each pair alone (not CoPE's, which sums gates over the keys between the two)."""
    acc = _acc(q.dtype)
    b, n, tq, h = q.shape
    q_hi, q_lo = jnp.max(q_pos), jnp.min(q_pos)
    k_all, v_all, fk_all = keys

    def body(carry, tile):
        j, kp, fkp = tile
        live = (kp >= 0) & (kp <= q_hi)
        whole = (kp >= 0) & (kp <= q_lo)  # seen by every query
        if window is not None:
            live &= q_lo - kp < window
            whole &= q_hi - kp < window

        def update(carry, masked=True):
            m, l, o = carry
            kt, vt = (jax.lax.dynamic_slice_in_dim(x, j * block, block, axis=2) for x in (k_all, v_all))
            keep = None if near_fn is None else near_fn(q_pos, kp)
            s = jnp.einsum("bnqh,bnkh->bnqk", q, kt, preferred_element_type=acc)
            if masked:
                s = s + _bias(q_pos, kp, bias_fn, q, kt, window, keep)
            if far is not None:
                fkt = jax.lax.dynamic_slice_in_dim(fk_all, j * block, block, axis=2)
                far_keep = ~keep & far.visible(q_pos, kp)
                bias_far = _bias(q_pos, kp, bias_fn, far.q, fkt, window, far_keep, bias_pos=(far.q_pos, fkp))
                s = jnp.where(keep, s, _far_scores(far.q, fkt, bias_far, _visible(q_pos, kp, window, far_keep), acc))
            m_new = jnp.maximum(m, jnp.max(s, axis=-1, keepdims=True))
            p = jnp.exp(s - m_new)
            scale = jnp.exp(m - m_new)
            o = o * scale + jnp.einsum("bnqk,bnkh->bnqh", p.astype(vt.dtype), vt, preferred_element_type=acc)
            return m_new, l * scale + jnp.sum(p, axis=-1, keepdims=True), o

        if bias_fn is None and near_fn is None:  # a tile every query sees whole needs no mask
            branch = jnp.where(jnp.all(whole), 2, jnp.where(jnp.any(live), 1, 0))
            return jax.lax.switch(branch, (lambda c: c, update, lambda c: update(c, masked=False)), carry), None
        return jax.lax.cond(jnp.any(live), update, lambda c: c, carry), None

    # the running max starts above a masked score (_MASKED / 2): a tile whose keys a query may not see then adds
    # exp(_MASKED / 2) = 0 for it, where a start at _MASKED would count each masked key as exp(0) = 1
    init = (jnp.full((b, n, tq, 1), _MASKED / 2, acc), jnp.zeros((b, n, tq, 1), acc), jnp.zeros((b, n, tq, h), acc))
    tiles = (jnp.arange(pos_tiles[0].shape[0]),) + tuple(pos_tiles)
    (_, l, o), _ = jax.lax.scan(body, init, tiles)
    # a query that sees no key at all (only possible with a method's mask emptying its row) gets 0, not 0 / 0
    return (o / jnp.where(l == 0, 1, l)).astype(q.dtype)


def head_groups(num_heads: int, backend: str | None = None) -> int:
    """How many independent loops chunked attention splits its heads into: 2 on CPU when the heads split
    evenly, else 1. XLA:CPU runs the two loops' small per-tile products and softmax passes concurrently on its
    threads, where one loop leaves them waiting on each other (`scripts/benchmark_eval.py --head_groups`
    measures it, experiments/benchmarks); on other backends each op fills the device and one loop is best."""
    on_cpu = (backend or jax.default_backend()) == "cpu"
    return 2 if on_cpu and num_heads % 2 == 0 else 1


def _group_bias(bias_fn, heads: slice, num_heads: int):
    """`bias_fn` for the heads `heads` of `num_heads`: a bias over all heads is sliced, one broadcast over the
    heads (`N|1` = 1) or computed from the group's own q and k is kept as it is."""
    if bias_fn is None:
        return None

    def fn(*args):
        bias = bias_fn(*args)
        return bias[:, heads] if bias.shape[1] == num_heads else bias

    return fn


def attention(q, k, v, q_pos, k_pos, *, bias_fn=None, chunk_size: int = 0, window: int | None = None,
              near_fn=None, far: Far | None = None, key_block: int = 0, groups: int | None = None,
              kv_head_major: bool = False):
    """softmax(q kᵀ / sqrt(H) + bias, masked causally by position) v.

    Args:
      q: `[B, Tq, N, H]`; k, v: `[B, Tk, N, H]`, or `[B, N, Tk, H]` with `kv_head_major` (also `far.k`: the
        layout of a KV cache, which the keys then need not be transposed out of at every decoding step).
      q_pos: `[B|1, Tq]`, k_pos: `[B|1, Tk]` integer positions; keys at position < 0 are never attended.
      bias_fn: `bias_fn(q_pos [B|1, Tq'], k_pos [B|1, Tk'], q [B, N, Tq', H], k [B, N, Tk', H], visible
        [B|1, 1, Tq', Tk']) -> [B|1, N|1, Tq', Tk']`, a logit bias (ALiBi's −m·(i − j), T5's buckets, CoPE's
        contextual positions, …; called per chunk or block, with q already scaled by 1/√H; CoPE's sums over
        the key axis, so its keys must come in position order, as the model passes them), or None. With
        chunks it is called per head group: q and k hold that group's N / groups heads, and a bias it returns
        over all N heads is sliced to the group's (one computed from q and k has the group's heads already;
        a bias must not infer N from q).
      chunk_size: if 0 < chunk_size < Tq, process the queries in chunks of this size with `lax.map`, so that
        at most `[B, N, chunk_size, Tk]` scores exist at once (memory O(T) instead of O(T²)).
      window: sliding-window attention: query i sees key j only if i − window < j ≤ i (None: no window).
      near_fn: `near_fn(q_pos, k_pos) -> [B|1, 1, Tq', Tk']` bool: the pairs kept (a training-free method's
        mask), or with `far` the pairs scored as usual.
      far: a training-free method's far branch (`Far`): the other pairs are scored with `far.q`, `far.k` and
        the bias at the far positions, where `far.visible`; the two are merged before one softmax.
      key_block: with chunks, if 0 < key_block < Tk, each chunk of queries goes over the keys in tiles of this
        size with the online softmax (`_tiled_attend`), skipping the tiles no query of the chunk may see; so
        at most `[B, N, chunk_size, key_block]` scores exist at once. Only for biases of each pair alone
        (the model passes 0 for encodings whose bias needs every key, `Encoding.bias_needs_all_keys`).
      groups: with chunks, the heads are split into this many groups, each its own independent loop over the
        chunks (None: `head_groups`, 2 on CPU when N is even; must divide N). Forward passes (evaluation,
        decoding) are what it is for: differentiated, each live tile adds its gradient into full-size k and v
        cotangents, so training with `model.attn_chunk` set is slower than with `model.attn_block`.

    Returns:
      `[B, Tq, N, H]`.
    """
    tq = q.shape[1]
    if groups is not None and (groups < 1 or q.shape[2] % groups):
        raise ValueError(f"attention: groups={groups} must be a positive divisor of the {q.shape[2]} heads")
    q, k, v = _head_major(q, k, v, kv_head_major)
    if far is not None:
        fq, fk, _ = _head_major(far.q, far.k, far.k, kv_head_major)
        far = far._replace(q=fq, k=fk, q_pos=jnp.broadcast_to(far.q_pos, (q.shape[0], tq)))
    if chunk_size <= 0 or chunk_size >= tq:
        return _attend(q, k, v, q_pos, k_pos, bias_fn, window, near_fn, far).swapaxes(1, 2)
    num_chunks = -(-tq // chunk_size)
    pad = num_chunks * chunk_size - tq
    q_pos = jnp.broadcast_to(q_pos, (q.shape[0], tq))
    b, n, _, h = q.shape
    groups = head_groups(n) if groups is None else groups

    def chunks(x, p):
        if pad:  # padded queries get the last position: harmless rows, sliced off below
            x = jnp.pad(x, ((0, 0), (0, 0), (0, pad), (0, 0)))
            p = jnp.pad(p, ((0, 0), (0, pad)), mode="edge")
        return (x.reshape(b, x.shape[1], num_chunks, chunk_size, h).transpose(2, 0, 1, 3, 4),
                p.reshape(b, num_chunks, chunk_size).swapaxes(0, 1))

    tiled = 0 < key_block < k.shape[2]
    fk = k if far is None else far.k
    if tiled:
        k_pos = jnp.broadcast_to(k_pos, (b, k.shape[2]))
        fkp = k_pos if far is None else jnp.broadcast_to(far.k_pos, (b, k.shape[2]))
        pos_tiles = (_key_tiles(k_pos, key_block, -1), _key_tiles(fkp, key_block, 0))
        k, v, fk = (_pad_keys(x, key_block, 0) for x in (k, v, fk))

    outs = []
    for heads in (slice(i * n // groups, (i + 1) * n // groups) for i in range(groups)):
        g_bias = _group_bias(bias_fn, heads, n) if groups > 1 else bias_fn
        g_k, g_v, g_fk = k[:, heads], v[:, heads], fk[:, heads]
        xs = chunks(q[:, heads], q_pos)
        if far is not None:
            xs = xs + chunks(far.q[:, heads], far.q_pos)

        def one(c, g_bias=g_bias, g_k=g_k, g_v=g_v, g_fk=g_fk):
            f = None if far is None else far._replace(q=c[2], q_pos=c[3], k=g_fk)
            if tiled:
                return _tiled_attend(c[0], c[1], (g_k, g_v, g_fk), pos_tiles, key_block, g_bias, window, near_fn, f)
            return _attend(c[0], g_k, g_v, c[1], k_pos, g_bias, window, near_fn, f)

        outs.append(jax.lax.map(one, xs))  # [num_chunks, B, N / groups, chunk, H]
    out = jnp.concatenate(outs, axis=2)
    return out.transpose(1, 0, 3, 2, 4).reshape(b, num_chunks * chunk_size, n, h)[:, :tq]
