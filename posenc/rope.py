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

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from posenc.encoding import Encoding
from posenc.rope_scaling import RopeScaling, factors_fit, is_length_dependent, rope_frequencies, rope_inputs

LAYOUTS = ("half", "interleaved")


def rope_angles_dtype(inv_freq) -> jnp.dtype:
    """Angles are computed in float32, or float64 when given float64 frequencies with x64 enabled."""
    return jnp.promote_types(jnp.float32, jnp.asarray(inv_freq).dtype)


# Range reduction of the angles p·θ in float32 (Cody–Waite): p = p_hi·K + p_lo, and K·θ reduced mod 2π with
# 2π = C1 + C2, C1 short enough that n·C1 is exact for every n ≤ K/2π + 1.
_SPLIT = 4096  # K, a power of two: K·θ is exact in float32
_TWO_PI_HI = 6.28125  # 201/32: 8 significant bits
_TWO_PI_LO = float(np.float32(2 * np.pi - 6.28125))


def rope_angles(positions, inv_freq, inv_freq_lo=None):
    """The angles p·θ `[..., T, r]`, accurate in float32 at large integer positions.

    For float32 θ and integer positions: with p = p_hi·K + p_lo (K = 4096) and c = K·θ mod 2π (K·θ is exact,
    the reduction by a two-part 2π nearly so),

        p·θ ≡ p_hi·c + p_lo·θ + p·θ_lo   (mod 2π),

    each term small, so the angle is within ~5e-4 rad of float64 up to |p| ≈ 2·10⁶ (`p·θ` rounded directly
    is off by up to 0.03 rad at p = 10⁶, as in Hugging Face and MaxText). θ_lo = `rope_scaling.inv_freq_residual(θ64)`
    restores the digits θ lost when it was rounded to float32. Float positions or float64 θ: `p·θ` directly.
    """
    ft = rope_angles_dtype(inv_freq)
    positions = jnp.asarray(positions)
    theta = jnp.asarray(inv_freq, ft)
    if ft != jnp.float32 or not jnp.issubdtype(positions.dtype, jnp.integer):
        angles = positions.astype(ft)[..., None] * theta
        return angles if inv_freq_lo is None else angles + positions.astype(ft)[..., None] * jnp.asarray(inv_freq_lo, ft)
    p = positions.astype(jnp.int32)[..., None]
    p_hi, p_lo = (p // _SPLIT).astype(ft), (p % _SPLIT).astype(ft)
    x = theta * _SPLIT
    n = jnp.round(x / (2 * np.pi))
    c = (x - n * _TWO_PI_HI) - n * _TWO_PI_LO
    angles = p_hi * c + p_lo * theta
    if inv_freq_lo is not None:
        angles = angles + p.astype(ft) * jnp.asarray(inv_freq_lo, ft)
    return angles


def _materialize(cos, sin):
    """Returns (cos, sin) unchanged, computed once as small `[..., T, r]` tables.

    Left alone, XLA fuses sin/cos into the big elementwise loop over x and recomputes them for every head
    and batch row. scripts/benchmark_rope.py times `apply_rope` with the tables pinned (against an elementwise
    pass over the same bytes: experiments/benchmarks/rope.log); no committed result times it without them.
    `lax.optimization_barrier` is removed before fusion on CPU; a dot is never fused into a loop, so an exact
    identity matmul (one 1 and one 0 per output, `precision='highest'`) pins the tables in memory for the cost of
    4 flops per entry.
    """
    cs = jnp.stack([cos, sin], axis=-1)
    eye = jnp.eye(2, dtype=cs.dtype)
    cs = jnp.dot(cs.reshape(-1, 2), eye, precision=jax.lax.Precision.HIGHEST).reshape(cs.shape)
    return cs[..., 0], cs[..., 1]


def apply_rope(x, positions, inv_freq, *, layout: str = "half", attention_factor=1.0, original_inv_freq=None,
               unscaled_positions=0, inv_freq_lo=None):
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
        p < unscaled_positions use `original_inv_freq` (the unscaled θ) instead of `inv_freq`, and are not
        multiplied by `attention_factor`, so the first n̂ tokens rotate as without a scaling (microsoft/LongRoPE,
        rope/LlamaSPIScaledStartTokenRotaryEmbedding.py: the original cos/sin, without mscale, over the first
        `start_token` positions). `unscaled_positions` may be traced.
      inv_freq_lo: optional `rope_scaling.inv_freq_residual(θ64)` `[r]`: the float64 digits of θ, for angles within
        ~5e-4 rad of float64 at positions up to ~2·10⁶ (see `rope_angles`).

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

    cos, sin = rope_cos_sin(positions, inv_freq, attention_factor=attention_factor,
                            original_inv_freq=original_inv_freq, unscaled_positions=unscaled_positions,
                            inv_freq_lo=inv_freq_lo)
    return rotate_pairs(x, cos, sin, layout)


def rope_cos_sin(positions, inv_freq, *, attention_factor=1.0, original_inv_freq=None, unscaled_positions=0,
                 inv_freq_lo=None):
    """`(cos, sin)` of the angles `positions · inv_freq`, each `[..., T, r]`, times `attention_factor` (the
    arguments of `apply_rope`), materialized as tables (`_materialize`). With `original_inv_freq`, positions
    below `unscaled_positions` (LongRoPE's n̂) take the cos/sin of `positions · original_inv_freq` without
    `attention_factor`, as microsoft/LongRoPE's start-token path (rope/LlamaSPIScaledStartTokenRotaryEmbedding.py)."""
    ft = rope_angles_dtype(inv_freq)
    if inv_freq_lo is not None and jnp.shape(inv_freq_lo) != jnp.shape(inv_freq):
        raise ValueError(f"rope_cos_sin (as apply_rope): inv_freq_lo {jnp.shape(inv_freq_lo)} must match inv_freq {jnp.shape(inv_freq)}")
    angles = rope_angles(positions, inv_freq, inv_freq_lo)  # [..., T, r]
    if original_inv_freq is not None:
        original = jnp.asarray(original_inv_freq, ft)
        if original.shape != jnp.shape(inv_freq):
            raise ValueError(f"rope_cos_sin (as apply_rope): original_inv_freq {original.shape} must match inv_freq {jnp.shape(inv_freq)}")
        below = jnp.asarray(positions).astype(ft)[..., None] < unscaled_positions  # [..., T, 1]
        angles = jnp.where(below, rope_angles(positions, original), angles)
        attention_factor = jnp.where(below, 1.0, attention_factor)  # n̂'s positions: the original cos/sin
    return _materialize(jnp.cos(angles) * attention_factor, jnp.sin(angles) * attention_factor)


def rotate_pairs(x, cos, sin, layout: str = "half"):
    """Rotates the first 2r features of `x` `[..., T, N, H]` pair by pair by the angles whose cosines and
    sines are `cos`, `sin` `[..., T, r]` (broadcast over heads); the rest pass through. Computed in float32
    or better (the dtype of `cos`), cast back to `x.dtype`."""
    r, head_dim, ft = cos.shape[-1], x.shape[-1], jnp.promote_types(cos.dtype, jnp.float32)
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


class RopeTable(NamedTuple):
    """`cos`, `sin` `[P, r]` of positions `low` … `low` + P − 1 (`rope_cos_sin`): one step's rotations for all
    layers and batch rows, gathered by `apply_rope_table`."""
    cos: jax.Array
    sin: jax.Array
    low: int = 0


def rope_table(low: int, high: int, inv_freq, **kwargs) -> RopeTable:
    """The `RopeTable` of positions low … high−1 (`kwargs`: those of `rope_cos_sin`)."""
    return RopeTable(*rope_cos_sin(jnp.arange(low, high, dtype=jnp.int32), inv_freq, **kwargs), low)


def apply_rope_table(x, positions, table: RopeTable, layout: str = "half"):
    """`apply_rope` with the rotations looked up in `table` at integer `positions` `[..., T]` instead of
    computed: with keys rotated at use in a KV cache, every layer and batch row rotates its `[B, S]` cached
    keys at the same positions, so one `[P, r]` table per step replaces a `[B, S, r]` sin/cos per layer. A
    position outside the table gathers NaN (never a clamped neighbour)."""
    positions = jnp.asarray(positions)
    if not jnp.issubdtype(positions.dtype, jnp.integer):
        raise ValueError(f"apply_rope_table: positions must be integers, got {positions.dtype}")
    take = functools.partial(jnp.take, indices=positions - table.low, axis=0, mode="fill", fill_value=jnp.nan)
    return rotate_pairs(x, take(table.cos), take(table.sin), layout)


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


class RopeContext(NamedTuple):
    inv_freq: jax.Array  # [r] or per layer [num_layers, r]
    attention_factor: jax.Array  # multiplies cos and sin
    n_hat: jax.Array | int  # LongRoPE: positions below it use original_inv_freq
    original_inv_freq: jax.Array | None  # the unscaled θ, only when n̂ may be non-zero
    inv_freq_lo: jax.Array | None = None  # the float64 digits of inv_freq (`inv_freq_residual`), or None
    table: RopeTable | None = None  # rotations tabulated once per step (`Rope.tabulate`), or None


class Rope(Encoding):
    """q and k rotated by `apply_rope` with `model.rope.base`, `layout`, `fraction` of each head and the
    `RopeScaling` `model.rope.scaling`; per-layer LongRoPE factors pick row `layer`."""

    name = "rope"
    position_kind = "rotary"
    paper = "Su et al. 2021, arXiv 2104.09864"
    takes_rope_scaling = True
    model_fields = ("rope_base", "rope_layout", "rope_fraction")

    @classmethod
    def check(cls, cfg) -> None:
        if cfg.rope_layout not in LAYOUTS:
            raise ValueError(f"model.rope.layout must be one of {LAYOUTS}, got {cfg.rope_layout!r}")
        if not 0 < cfg.rope_fraction <= 1:
            raise ValueError(f"model.rope.fraction must be in (0, 1], got {cfg.rope_fraction!r}")
        if cfg.rotary_dim < 2 or cfg.rotary_dim % 2:
            raise ValueError(
                f"model.rope: the rotary dimension head_dim · fraction = {cfg.head_dim} · {cfg.rope_fraction} "
                f"= {cfg.head_dim * cfg.rope_fraction:g} must be an even integer ≥ 2 "
                f"(head_dim = d_model / num_heads = {cfg.head_dim})"
            )
        if not (math.isfinite(cfg.rope_base) and cfg.rope_base > 0):  # as `rope_frequencies` requires
            raise ValueError(f"model.rope.base must be a finite number > 0, got {cfg.rope_base!r}")
        if not isinstance(cfg.rope_scaling, RopeScaling):
            raise ValueError(f"model.rope.scaling must be a RopeScaling, got {type(cfg.rope_scaling).__name__}")
        factors = cfg.rope_scaling.long_factor
        if factors is not None and not factors_fit(factors, cfg.rotary_dim, cfg.num_layers):
            raise ValueError(
                f"model.rope.scaling long_factor/short_factor must be [{cfg.rotary_dim // 2}] or "
                f"[num_layers={cfg.num_layers}, {cfg.rotary_dim // 2}], got {np.shape(factors)}"
            )

    @classmethod
    def length_dependent(cls, cfg, scaling=None) -> bool:
        return is_length_dependent(cfg.rope_scaling if scaling is None else scaling)

    def context(self, positions, seq_len: int, rope=None) -> RopeContext:
        cfg = self.cfg
        if rope is None:
            rope = rope_inputs(cfg.rotary_dim, cfg.rope_base, cfg.rope_scaling, seq_len)
        inv_freq, attention_factor, n_hat, lo = tuple(rope) + (0, None)[len(rope) - 2:]  # n̂ = 0, lo = None if absent
        original = None
        if not (isinstance(n_hat, int) and n_hat == 0):
            original = jnp.asarray(rope_frequencies(cfg.rotary_dim, base=cfg.rope_base)[0], jnp.float32)
        lo = None if lo is None else jnp.asarray(lo, jnp.float32)
        return RopeContext(jnp.asarray(inv_freq, jnp.float32), attention_factor, n_hat, original, lo)

    def tabulate(self, ctx: RopeContext, low: int, high: int) -> RopeContext:
        """`ctx` with the rotations of positions low … high−1 tabulated once (`RopeTable`), which `rotate`
        then gathers at integer positions; per-layer frequencies are left computed per layer."""
        if ctx.inv_freq.ndim == 2:
            return ctx
        return ctx._replace(table=rope_table(low, high, ctx.inv_freq, attention_factor=ctx.attention_factor,
                                             original_inv_freq=ctx.original_inv_freq, unscaled_positions=ctx.n_hat,
                                             inv_freq_lo=ctx.inv_freq_lo))

    def rotate(self, x, positions, ctx: RopeContext, layer: int, role: str):
        if ctx.table is not None and jnp.issubdtype(jnp.asarray(positions).dtype, jnp.integer):
            return apply_rope_table(x, positions, ctx.table, self.cfg.rope_layout)
        per_layer = ctx.inv_freq.ndim == 2
        inv = ctx.inv_freq[layer] if per_layer else ctx.inv_freq
        lo = ctx.inv_freq_lo[layer] if per_layer and ctx.inv_freq_lo is not None else ctx.inv_freq_lo
        return apply_rope(x, positions, inv, layout=self.cfg.rope_layout, attention_factor=ctx.attention_factor,
                          original_inv_freq=ctx.original_inv_freq, unscaled_positions=ctx.n_hat, inv_freq_lo=lo)
