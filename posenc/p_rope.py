"""p-RoPE: RoPE in which only the fastest fraction p of the frequencies rotate.

Barbero et al. 2024, "Round and Round We Go! What makes Rotary Positional Encodings useful?",
arXiv 2410.06205, §6; Hugging Face's `proportional` rope type (`_compute_proportional_rope_parameters`).
With r = head_dim / 2 pairs and θ_i = base^(−2i/head_dim) (the exponent of the whole head, unlike partial
rotary), pairs i < ⌊p · head_dim / 2⌋ rotate by m·θ_i and the others get θ_i = 0: they pass through
unrotated, a position-free "semantic" channel, so no slow frequency is left to be misused at lengths it
never completed a turn in. p = 1 is RoPE; p = 0 is NoPE.
"""

from __future__ import annotations

import jax.numpy as jnp

from posenc.rope import Rope, RopeContext


def p_rope_mask(num_pairs: int, head_dim: int, p: float):
    """1.0 for the pairs that rotate (i < ⌊p · head_dim / 2⌋, Hugging Face's rounding), 0.0 for the rest."""
    return (jnp.arange(num_pairs) < int(p * head_dim // 2)).astype(jnp.float32)


class PRope(Rope):
    """`rope` with the slowest 1 − p of the frequencies set to 0 (after any RoPE scaling)."""

    name = "p_rope"
    paper = "Barbero et al. 2024, arXiv 2410.06205"
    options = {"p": (0.75, "fraction of the frequencies, the fastest, that rotate (1 = RoPE, 0 = NoPE)")}

    def __init__(self, cfg, *, rngs):
        super().__init__(cfg, rngs=rngs)
        self.p = self.option_values(cfg)["p"]

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        p = cls.option_values(cfg)["p"]
        if not 0 <= p <= 1:
            raise ValueError(f"model.p_rope.p must be in [0, 1], got {p!r}")
        if cfg.rope_fraction != 1.0:
            raise ValueError(f"posenc='p_rope' uses model.p_rope.p instead of partial rotary: model.rope.fraction "
                             f"must be 1.0, got {cfg.rope_fraction!r}")

    def context(self, positions, seq_len: int, rope=None) -> RopeContext:
        ctx = super().context(positions, seq_len, rope)
        mask = p_rope_mask(ctx.inv_freq.shape[-1], self.cfg.head_dim, self.p)
        lo = None if ctx.inv_freq_lo is None else ctx.inv_freq_lo * mask
        original = None if ctx.original_inv_freq is None else ctx.original_inv_freq * mask  # LongRoPE's n̂ positions
        return ctx._replace(inv_freq=ctx.inv_freq * mask, inv_freq_lo=lo, original_inv_freq=original)
