"""ALiBi: attention with linear biases (no position embedding at all).

Press, Smith & Lewis 2022, "Train Short, Test Long", arXiv 2108.12409. Head h adds to the logit of
query i and key j the bias −m_h · (i − j), a penalty linear in distance; slopes are a geometric
sequence. Reference: the paper's `get_slopes` (github.com/ofirpress/attention_with_linear_biases).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from posenc.encoding import Encoding


def alibi_slopes(num_heads: int) -> np.ndarray:
    """Per-head slopes m_h, float64 `[num_heads]`.

    For n a power of two: m_h = 2^(−8(h+1)/n), h = 0 … n−1. Otherwise (the paper's rule): the slopes of
    the closest power of two c below n, followed by every other slope of 2c, to make n in all.
    """
    if isinstance(num_heads, bool) or not isinstance(num_heads, (int, np.integer)) or num_heads <= 0:
        raise ValueError(f"alibi_slopes: num_heads must be a positive integer, got {num_heads!r}")

    def power_of_two(n: int) -> list[float]:
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start**h for h in range(n)]

    if math.log2(num_heads).is_integer():
        return np.asarray(power_of_two(num_heads))
    closest = 2 ** math.floor(math.log2(num_heads))
    extra = alibi_slopes(2 * closest)[0::2][: num_heads - closest]
    return np.concatenate([power_of_two(closest), extra])


def alibi_bias(slopes, q_positions, k_positions, dtype=jnp.float32):
    """The bias −m_h · (i − j) for query positions i and key positions j.

    Args:
      slopes: `[N]`.
      q_positions: `[..., Tq]`.
      k_positions: `[..., Tk]` (same leading dims, or broadcastable).

    Returns:
      `[..., N, Tq, Tk]`. Future keys (j > i) get a positive bias: the causal mask must remove them.
    """
    slopes = jnp.asarray(slopes, jnp.float32)
    if slopes.ndim != 1:
        raise ValueError(f"alibi_bias: slopes must be [num_heads], got shape {slopes.shape}")
    q = jnp.asarray(q_positions, jnp.float32)[..., None, :, None]
    k = jnp.asarray(k_positions, jnp.float32)[..., None, None, :]
    return (-slopes[:, None, None] * (q - k)).astype(dtype)


class Alibi(Encoding):
    """The bias −m_h · (i − j) on every layer's logits, slopes `alibi_slopes(num_heads)` (not learned)."""

    name = "alibi"
    position_kind = "bias"
    paper = "Press et al. 2022, arXiv 2108.12409"
    has_bias = True

    def context(self, positions, seq_len: int, rope=None):
        return jnp.asarray(alibi_slopes(self.cfg.num_heads), jnp.float32)

    def bias(self, q_pos, k_pos, q, k, visible, ctx, layer: int):
        return alibi_bias(ctx, q_pos, k_pos)
