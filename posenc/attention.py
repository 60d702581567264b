"""Causal multi-head attention over explicit positions, optionally chunked over the queries.

Masks and biases come from positions, never from array indices: query i sees key j iff
`0 ≤ k_pos[j] ≤ q_pos[i]`. So the same function serves training (q_pos = k_pos = 0…T−1), chunked
evaluation (a block of queries against all keys) and a KV cache (new queries at the end; empty cache
slots carry position −1). `jax.nn.dot_product_attention(is_causal=True)` would align the mask top-left
and be wrong whenever there are fewer queries than keys.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from posenc.alibi import alibi_bias


def _attend(q, k, v, q_pos, k_pos, alibi_slopes):
    """Unchunked attention. q [B,Tq,N,H], k/v [B,Tk,N,H], q_pos [B|1,Tq], k_pos [B|1,Tk] -> [B,Tq,N,H]."""
    scale = q.shape[-1] ** -0.5
    scores = jnp.einsum("bqnh,bknh->bnqk", q, k, preferred_element_type=jnp.float32) * scale
    if alibi_slopes is not None:
        scores = scores + alibi_bias(alibi_slopes, q_pos, k_pos)  # [B|1, N, Tq, Tk]
    visible = (k_pos[:, None, None, :] <= q_pos[:, None, :, None]) & (k_pos[:, None, None, :] >= 0)
    scores = jnp.where(visible, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    return jnp.einsum("bnqk,bknh->bqnh", probs, v)


def block_causal_attention(q, k, v, q_pos, k_pos, *, alibi_slopes=None, block: int = 128):
    """Causal attention for aligned, sorted positions (q_pos == k_pos == 0 … T−1), skipping the blocks of
    keys that lie entirely in the future of a block of queries: block i of queries attends only to the keys
    of blocks 0 … i, so about (n + 1) / 2n of the `[T, T]` scores are computed (n = T / block). Masks still
    come from positions, inside the diagonal block. Falls back to `attention` when T is not a multiple of
    `block`. Only valid when every key past the last query of a block is in its future: the model calls it
    for its default positions (training, full-sequence evaluation), never with a cache.
    """
    t = q.shape[1]
    if block <= 0 or t % block or t <= block or k.shape[1] != t:
        return _attend(q, k, v, q_pos, k_pos, alibi_slopes)
    outs = []
    for i in range(t // block):
        lo, hi = i * block, (i + 1) * block
        outs.append(_attend(q[:, lo:hi], k[:, :hi], v[:, :hi], q_pos[:, lo:hi], k_pos[:, :hi], alibi_slopes))
    return jnp.concatenate(outs, axis=1)


def attention(q, k, v, q_pos, k_pos, *, alibi_slopes=None, chunk_size: int = 0):
    """softmax(q kᵀ / sqrt(H) + bias, masked causally by position) v.

    Args:
      q: `[B, Tq, N, H]`; k, v: `[B, Tk, N, H]`.
      q_pos: `[B|1, Tq]`, k_pos: `[B|1, Tk]` integer positions; keys at position < 0 are never attended.
      alibi_slopes: `[N]` to add ALiBi's −m·(i − j), or None.
      chunk_size: if 0 < chunk_size < Tq, process the queries in chunks of this size with `lax.map`, so that
        at most `[B, N, chunk_size, Tk]` scores exist at once (memory O(T) instead of O(T²)).

    Returns:
      `[B, Tq, N, H]`.
    """
    tq = q.shape[1]
    if chunk_size <= 0 or chunk_size >= tq:
        return _attend(q, k, v, q_pos, k_pos, alibi_slopes)
    num_chunks = -(-tq // chunk_size)
    pad = num_chunks * chunk_size - tq
    q_pos = jnp.broadcast_to(q_pos, (q.shape[0], tq))
    if pad:  # padded queries get the last position: harmless rows, sliced off below
        q = jnp.pad(q, ((0, 0), (0, pad), (0, 0), (0, 0)))
        q_pos = jnp.pad(q_pos, ((0, 0), (0, pad)), mode="edge")
    b, _, n, h = q.shape
    q_chunks = q.reshape(b, num_chunks, chunk_size, n, h).swapaxes(0, 1)
    pos_chunks = q_pos.reshape(b, num_chunks, chunk_size).swapaxes(0, 1)
    out = jax.lax.map(lambda c: _attend(c[0], k, v, c[1], k_pos, alibi_slopes), (q_chunks, pos_chunks))
    return out.swapaxes(0, 1).reshape(b, num_chunks * chunk_size, n, h)[:, :tq]
