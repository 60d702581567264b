"""Sinusoidal absolute position encoding, added to the token embeddings.

Vaswani et al. 2017, "Attention Is All You Need", arXiv 1706.03762, §3.5:

    PE[p, 2i]     = sin(p / base^(2i/d))
    PE[p, 2i + 1] = cos(p / base^(2i/d))

the interleaved form the seeds write. For every offset k, (PE[p+k, 2i], PE[p+k, 2i+1]) is a fixed
rotation by k·ω_i of (PE[p, 2i], PE[p, 2i+1]) — the "linear relation" the seeds derive (tests/test_sinusoidal.py).
"""

from __future__ import annotations

import math

import jax.numpy as jnp

from posenc.encoding import Encoding


def sinusoidal_encoding(positions, dim: int, base: float = 10000.0, dtype=jnp.float32):
    """PE at arbitrary (integer or float) positions.

    Args:
      positions: `[...]` positions.
      dim: d, even.
      base: the wavelength base (10000 in the paper).
      dtype: result dtype; angles are computed in float32 or better whatever it is.

    Returns:
      `[..., d]` with sin in even and cos in odd features.
    """
    if isinstance(dim, bool) or not isinstance(dim, int) or dim <= 0 or dim % 2:
        raise ValueError(f"sinusoidal: dim must be a positive even integer, got {dim!r}")
    if not base > 0:
        raise ValueError(f"sinusoidal: base must be > 0, got {base!r}")
    ft = jnp.promote_types(jnp.float32, dtype)
    omega = 1.0 / (base ** (jnp.arange(0, dim, 2, dtype=ft) / dim))  # [d/2]
    angles = jnp.asarray(positions).astype(ft)[..., None] * omega  # [..., d/2]
    pe = jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1)  # [..., d/2, 2]
    return pe.reshape(*angles.shape[:-1], dim).astype(dtype)


def sinusoidal_table(num_positions: int, dim: int, base: float = 10000.0, dtype=jnp.float32):
    """The table `[num_positions, dim]` of `sinusoidal_encoding` at positions 0 … num_positions − 1."""
    if isinstance(num_positions, bool) or not isinstance(num_positions, int) or num_positions <= 0:
        raise ValueError(f"sinusoidal_table: num_positions must be a positive integer, got {num_positions!r}")
    return sinusoidal_encoding(jnp.arange(num_positions), dim, base, dtype)


class Sinusoidal(Encoding):
    """`sinusoidal_encoding(p, d_model, model.sinusoidal_base)` added to the embedding at position p."""

    name = "sinusoidal"
    position_kind = "absolute"
    model_fields = ("sinusoidal_base",)
    paper = "Vaswani et al. 2017, arXiv 1706.03762"

    @classmethod
    def check(cls, cfg) -> None:
        if cfg.d_model % 2:
            raise ValueError(f"model.d_model must be even for posenc='sinusoidal', got {cfg.d_model}")
        if not (math.isfinite(cfg.sinusoidal_base) and cfg.sinusoidal_base > 0):
            raise ValueError(f"model.sinusoidal_base must be a finite number > 0, got {cfg.sinusoidal_base!r}")

    def absolute(self, positions, ctx):
        return sinusoidal_encoding(positions, self.cfg.d_model, self.cfg.sinusoidal_base)
