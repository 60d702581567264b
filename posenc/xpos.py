"""xPos: RoPE with a per-pair exponential decay, so that attention scores shrink with distance.

Sun et al. 2022, "A Length-Extrapolatable Transformer", arXiv 2212.10554, §3.2; reference implementation
`rotary_embedding_torch.RotaryEmbedding(use_xpos=True)` (used by x-transformers). Pair i gets
ζ_i = (2i + 0.4·d) / (1.4·d) ∈ [0.29, 1) (d the rotary dimension, γ = `scale_base`); at position n

    q'_n = ζ^((n − c)/γ) ∘ RoPE(q_n, n),     k'_m = ζ^(−(m − c)/γ) ∘ RoPE(k_m, m)

so a score sums terms ζ_i^((n − m)/γ) · (rotation by (n − m)θ_i): it depends on n − m only (any centre c
cancels), and for a key behind the query (n > m) each pair is damped by ζ_i^((n−m)/γ) ≤ 1. The centre
c keeps both factors near 1 (the reference uses half the sequence length; posenc uses half the training
length, a constant, so that cached keys keep their values). Float range: with ζ_0 = 2/7 the key's factor
ζ_0^(−(p − c)/γ) leaves float32 at |p − c| = γ · ln(float32 max) / ln(7/2) ≈ 70.8·γ, and the rotated features
(sums of two such products) and the scores before that, where a score becomes inf or NaN. `XPos.context`
refuses sequences whose factors leave [1e-30, 1e30] (`max_offset`: |p − c| ≤ γ · ln(1e30) / ln(7/2) ≈ 55.1·γ,
about 28k positions for γ = 512), leaving eight decades of float32 for the features and their sums; it is
defined for the first `XPos.max_positions` positions, and evaluation reports longer lengths undefined.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

from posenc.rope import LAYOUTS, Rope, apply_rope, rope_angles_dtype


def xpos_zeta(rotary_dim: int, dtype=jnp.float32):
    """ζ_i = (2i + 0.4·d) / (1.4·d), `[d/2]`."""
    return (jnp.arange(0, rotary_dim, 2, dtype=dtype) + 0.4 * rotary_dim) / (1.4 * rotary_dim)


FACTOR_BOUND = 1e30  # xPos's factors ζ^(±(p − c)/γ) stay in [1 / FACTOR_BOUND, FACTOR_BOUND]


def max_offset(scale_base: float) -> float:
    """The largest |p − c| at which every ζ_i^(±(p − c)/γ) is within [1e-30, 1e30] (ζ_0 = 2/7 is the smallest
    ζ): γ · ln(FACTOR_BOUND) / ln(7/2)."""
    return scale_base * math.log(FACTOR_BOUND) / math.log(7 / 2)


def xpos_scale(positions, rotary_dim: int, scale_base: float, center: float = 0.0, dtype=jnp.float32):
    """ζ^((p − c)/γ) `[..., T, d/2]` at positions `[..., T]`."""
    power = (jnp.asarray(positions).astype(dtype) - center)[..., None] / scale_base
    return xpos_zeta(rotary_dim, dtype) ** power


def apply_xpos(q, k, positions, inv_freq, *, scale_base: float = 512.0, layout: str = "interleaved",
               center: float = 0.0, k_positions=None):
    """(q', k'): RoPE by `inv_freq` at `positions` with xPos's scale ζ^(n/γ) on q and ζ^(−m/γ) on k.

    Args:
      q, k: `[..., T, N, H]`; positions `[..., T]` (of q; `k_positions` for k, default the same).
      inv_freq: θ `[r]`, 2r ≤ H.
      scale_base: γ.
      layout: `half` or `interleaved` (the reference's pairs are interleaved).
      center: c, subtracted from every position (cancels in q'·k').
    """
    if layout not in LAYOUTS:
        raise ValueError(f"apply_xpos: layout must be one of {LAYOUTS}, got {layout!r}")
    if not scale_base > 0:
        raise ValueError(f"apply_xpos: scale_base must be > 0, got {scale_base!r}")
    d, ft = 2 * jnp.asarray(inv_freq).shape[-1], rope_angles_dtype(inv_freq)
    k_positions = positions if k_positions is None else k_positions
    q_scale = xpos_scale(positions, d, scale_base, center, ft)  # [..., T, r]
    k_scale = 1.0 / xpos_scale(k_positions, d, scale_base, center, ft)
    return (apply_rope(q, positions, inv_freq, layout=layout, attention_factor=q_scale),
            apply_rope(k, k_positions, inv_freq, layout=layout, attention_factor=k_scale))


class XPos(Rope):
    """RoPE (`model.rope.base`, `layout`, `fraction`) with xPos's decay; takes no RoPE scaling."""

    name = "xpos"
    paper = "Sun et al. 2022, arXiv 2212.10554"
    takes_rope_scaling = False
    options = {"scale_base": (512.0, "γ: the decay ζ^(distance/γ) per pair")}

    def __init__(self, cfg, *, rngs):
        super().__init__(cfg, rngs=rngs)
        self.scale_base = self.option_values(cfg)["scale_base"]

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        if cfg.rope_scaling.kind != "none":
            raise ValueError(f"posenc='xpos' takes no RoPE scaling (model.rope.scaling.kind='none'), got "
                             f"{cfg.rope_scaling.kind!r}")
        gamma = cls.option_values(cfg)["scale_base"]
        if not (math.isfinite(gamma) and gamma > 0):
            raise ValueError(f"model.xpos.scale_base must be a finite number > 0, got {gamma!r}")

    @classmethod
    def length_dependent(cls, cfg, scaling=None) -> bool:
        return False

    @classmethod
    def max_positions(cls, cfg) -> int | None:
        """Positions 0 … P − 1 keep every factor ζ^(±(p − c)/γ) within [1e-30, 1e30] (c = max_len // 2,
        `max_offset`): P = ⌊c + max_offset(γ)⌋ + 1, or 0 when c itself is past the offset."""
        center, limit = cfg.max_len // 2, max_offset(cls.option_values(cfg)["scale_base"])
        return int(center + limit) + 1 if center <= limit else 0

    @classmethod
    def undefined_past(cls, cfg) -> str:
        gamma = cls.option_values(cfg)["scale_base"]
        return (f"xPos's factors ζ^(±(p − c)/γ) leave [1e-30, 1e30] at |p − c| > {max_offset(gamma):.0f} ≈ 55.1·γ, "
                f"c = max_len // 2 = {cfg.max_len // 2}; a larger model.xpos.scale_base (γ = {gamma:g}) reaches farther")

    def context(self, positions, seq_len: int, rope=None):
        """RoPE's context, for sequences whose positions 0 … seq_len − 1 keep xPos's factors finite.

        Raises:
          ValueError: a position farther than `max_offset(γ)` from the centre c = max_len // 2.
        """
        center, limit = self.cfg.max_len // 2, max_offset(self.scale_base)
        if max(seq_len - 1 - center, center) > limit:
            raise ValueError(
                f"posenc='xpos': positions up to {seq_len - 1} lie up to {max(seq_len - 1 - center, center)} from its "
                f"centre {center} (max_len // 2), past {limit:.0f} (≈ 55.1 · model.xpos.scale_base = "
                f"{self.scale_base:g}), where ζ^(±(p − c)/γ) leaves [1e-30, 1e30] and, by ≈ 70.8 · γ, float32 (scores "
                f"become inf or NaN); " + (f"use sequences of at most {int(center + limit) + 1} tokens or a larger "
                                          "model.xpos.scale_base" if center <= limit else
                                          "use a larger model.xpos.scale_base or a smaller model.max_len"))
        return super().context(positions, seq_len, rope)

    def rotate(self, x, positions, ctx, layer: int, role: str):
        scale = xpos_scale(positions, self.cfg.rotary_dim, self.scale_base, center=self.cfg.max_len // 2)
        return apply_rope(x, positions, ctx.inv_freq, layout=self.cfg.rope_layout,
                          attention_factor=scale if role == "q" else 1.0 / scale, inv_freq_lo=ctx.inv_freq_lo)
