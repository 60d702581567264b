"""Rotary position embedding (RoPE): rotate q and k by angles proportional to their positions.

Su et al. 2021, "RoFormer: Enhanced Transformer with Rotary Position Embedding", arXiv 2104.09864.

For each pair i of features, position m rotates the pair by the angle m·θ_i:

    (x'_a, x'_b) = (x_a cos mθ_i − x_b sin mθ_i,  x_a sin mθ_i + x_b cos mθ_i)

so that ⟨f(q, m), f(k, n)⟩ depends only on m − n (the seeds' derivation; see tests/test_rope.py).

Layouts (which features form pair i; q and k must use the same one):
  * `half`: (i, i + r) with r = len(inv_freq) — `rotate_half` of GPT-NeoX and Hugging Face LLaMA.
  * `interleaved`: (2i, 2i + 1) — as the seeds and RoFormer write it; GPT-J, Meta's LLaMA reference.
Only the first 2r features rotate (partial rotary, GPT-NeoX `rotary_pct`); the rest pass through.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

LAYOUTS = ("half", "interleaved")


def rope_angles_dtype(inv_freq) -> jnp.dtype:
    """Angles are computed in float32, or float64 when given float64 frequencies with x64 enabled."""
    return jnp.promote_types(jnp.float32, jnp.asarray(inv_freq).dtype)


def _materialize(cos, sin):
    """Returns (cos, sin) unchanged, computed once as small `[..., T, r]` tables.

    Left alone, XLA fuses sin/cos into the big elementwise loop over x and recomputes them for every head
    and batch row: 2-3x slower on CPU (scripts/benchmark_rope.py). `lax.optimization_barrier` is removed
    before fusion on CPU; a dot is never fused into a loop, so an exact identity matmul (one 1 and one 0
    per output, `precision='highest'`) pins the tables in memory for the cost of 4 flops per entry.
    """
    cs = jnp.stack([cos, sin], axis=-1)
    eye = jnp.eye(2, dtype=cs.dtype)
    cs = jnp.dot(cs.reshape(-1, 2), eye, precision=jax.lax.Precision.HIGHEST).reshape(cs.shape)
    return cs[..., 0], cs[..., 1]


def apply_rope(x, positions, inv_freq, *, layout: str = "half", attention_factor=1.0, original_inv_freq=None,
               unscaled_positions=0):
    """Rotates the features of `x` by RoPE angles `positions · inv_freq`.

    Args:
      x: `[..., T, N, H]` (batch…, time, heads, head_dim: the layout of `jax.nn.dot_product_attention`).
      positions: integer or float positions `[..., T]`, broadcastable against `x.shape[:-2]`. Offsets
        (KV cache), packing and left padding are just other position values.
      inv_freq: θ, `[r]` with 2r ≤ H (from `posenc.rope_frequencies`).
      layout: `half` or `interleaved` (see the module docstring).
      attention_factor: multiplies cos and sin (YaRN's sqrt(1/t), LongRoPE's factor); scalar or
        array. As in Hugging Face, the pass-through features are not scaled.
      original_inv_freq, unscaled_positions: LongRoPE's n̂ (arXiv 2402.13753 §3.2): positions
        p < unscaled_positions use `original_inv_freq` (the unscaled θ) instead of `inv_freq`, so the
        first n̂ tokens are not interpolated. `unscaled_positions` may be traced.

    Returns:
      The rotated `x`, same shape and dtype. Angles and the rotation are computed in float32 or better
      (never in bf16: a bf16 angle is wrong by whole radians at positions of a few thousand); only the
      result is cast back.
    """
    if layout not in LAYOUTS:
        raise ValueError(f"apply_rope: layout must be one of {LAYOUTS}, got {layout!r}")
    x = jnp.asarray(x)
    if x.ndim < 3:
        raise ValueError(f"apply_rope: x must be [..., T, N, H], got shape {x.shape}")
    inv_freq = jnp.asarray(inv_freq) if not isinstance(inv_freq, np.ndarray) else inv_freq
    if inv_freq.ndim != 1:
        raise ValueError(f"apply_rope: inv_freq must be a vector [rotary_dim // 2], got shape {inv_freq.shape}")
    r, head_dim = inv_freq.shape[0], x.shape[-1]
    if r == 0 or 2 * r > head_dim:
        raise ValueError(
            f"apply_rope: rotary_dim = 2 · len(inv_freq) = {2 * r} must be in [2, head_dim = {head_dim}]"
        )
    positions = jnp.asarray(positions)
    if positions.ndim == 0 or positions.shape[-1] not in (1, x.shape[-3]):
        raise ValueError(f"apply_rope: positions must be [..., T] with T = {x.shape[-3]}, got shape {positions.shape}")
    try:
        np.broadcast_shapes(positions.shape, x.shape[:-2])
    except ValueError:
        raise ValueError(
            f"apply_rope: positions {positions.shape} do not broadcast against x's leading dims {x.shape[:-2]}"
        ) from None

    ft = rope_angles_dtype(inv_freq)
    pos = positions.astype(ft)[..., None]
    angles = pos * jnp.asarray(inv_freq, ft)  # [..., T, r]
    if original_inv_freq is not None:
        original = jnp.asarray(original_inv_freq, ft)
        if original.shape != inv_freq.shape:
            raise ValueError(f"apply_rope: original_inv_freq {original.shape} must match inv_freq {inv_freq.shape}")
        angles = jnp.where(pos < unscaled_positions, pos * original, angles)
    cos, sin = _materialize(jnp.cos(angles) * attention_factor, jnp.sin(angles) * attention_factor)
    cos, sin = cos[..., None, :], sin[..., None, :]  # [..., T, 1, r]: broadcast over heads
    # One fused elementwise pass: split the rotary features into their pairs with a reshape (free), rotate,
    # and stack the halves back. Measured on CPU (scripts/benchmark_rope.py), `stack` fuses into a single
    # loop, while `concatenate` of the halves or a `rotate_half` via roll/reverse costs 1.5–2.5× more.
    rot = x[..., :2 * r].astype(ft) if 2 * r < head_dim else x.astype(ft)
    if layout == "half":
        pairs = rot.reshape(*x.shape[:-1], 2, r)
        xa, xb = pairs[..., 0, :], pairs[..., 1, :]
        rot = jnp.stack([xa * cos - xb * sin, xb * cos + xa * sin], axis=-2)
    else:
        pairs = rot.reshape(*x.shape[:-1], r, 2)
        xa, xb = pairs[..., 0], pairs[..., 1]
        rot = jnp.stack([xa * cos - xb * sin, xa * sin + xb * cos], axis=-1)
    rot = rot.reshape(*x.shape[:-1], 2 * r).astype(x.dtype)
    if 2 * r == head_dim:
        return rot
    return jnp.concatenate([rot, x[..., 2 * r:]], axis=-1)  # partial rotary: the tail passes through


def relative_decay_bound(distances, rotary_dim: int, base: float = 10000.0) -> np.ndarray:
    """RoFormer's long-term decay bound (Su et al. 2021, §3.4.3), float64.

    By Abel summation, |Σ_i h_i e^{i r θ_i}| ≤ max_i |h_{i+1} − h_i| · Σ_j |S_j| with
    S_j = Σ_{k<j} e^{i r θ_k}; the plotted quantity is the mean over j = 1 … d/2 of |S_j| at relative
    distance r. At r = 0 every |S_j| = j, so the bound is (d/2 + 1) / 2 exactly.

    Args:
      distances: relative distances r, `[n]`.
      rotary_dim: d (even).
      base: RoPE base.

    Returns:
      `[n]` float64.
    """
    theta = 1.0 / (float(base) ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim))
    phases = np.exp(1j * np.asarray(distances, np.float64)[:, None] * theta)  # [n, d/2]
    partial_sums = np.cumsum(phases, axis=-1)  # S_1 … S_{d/2}
    return np.abs(partial_sums).mean(axis=-1)
