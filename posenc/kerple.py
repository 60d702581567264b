"""KERPLE: kernelized relative positional embeddings, a learned conditionally positive definite bias.

Chi et al. 2022, "KERPLE: Kernelized Relative Positional Embedding for Length Extrapolation",
arXiv 2205.09921, §4 (reference code github.com/chijames/KERPLE). Per head, with r1, r2 > 0 learned and
m − n the query-key distance,

    log variant:    bias = −r1 · log(1 + r2 · |m − n|)
    power variant:  bias = −r1 · |m − n|^r2,   0 < r2 ≤ 2

r1 and r2 are kept positive as ε + softplus of free parameters (the power variant's r2 in (0, 2] as
ε + (2 − ε)·sigmoid), ε = 1e-6, so no step can leave the kernel's valid range. ALiBi is the power variant at r2 = 1.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from posenc.encoding import Encoding

KINDS = ("log", "power")


def kerple_bias(q_pos, k_pos, r1, r2, kind: str):
    """The KERPLE bias `[..., N, Tq, Tk]` for positions `[..., Tq]`, `[..., Tk]` and per-head r1, r2 `[N]`."""
    if kind not in KINDS:
        raise ValueError(f"kerple_bias: kind must be one of {KINDS}, got {kind!r}")
    dist = jnp.abs(jnp.asarray(q_pos, jnp.float32)[..., None, :, None] - jnp.asarray(k_pos, jnp.float32)[..., None, None, :])
    r1, r2 = jnp.asarray(r1)[:, None, None], jnp.asarray(r2)[:, None, None]
    if kind == "log":
        return -r1 * jnp.log1p(r2 * dist)
    return -r1 * jnp.where(dist > 0, dist, 1.0) ** r2 * (dist > 0)  # 0^r2 = 0 with a finite gradient


EPS = 1e-6


def _inverse_softplus(y):
    return np.log(np.expm1(y))


class Kerple(Encoding):
    """`kerple_bias` on every layer, r1 and r2 learned per layer and head (initialised to 1 and 1)."""

    name = "kerple"
    position_kind = "bias"
    paper = "Chi et al. 2022, arXiv 2205.09921"
    has_bias = True
    options = {"kind": ("log", "log: −r1·log(1 + r2·|m−n|); power: −r1·|m−n|^r2 (0 < r2 ≤ 2)")}

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.kind = self.option_values(cfg)["kind"]
        shape = (cfg.num_layers, cfg.num_heads)
        self.raw_r1 = nnx.Param(jnp.full(shape, _inverse_softplus(1.0 - EPS), jnp.float32))
        r2 = _inverse_softplus(1.0 - EPS) if self.kind == "log" else 0.0  # power: ε + (2 − ε)/2 ≈ 1
        self.raw_r2 = nnx.Param(jnp.full(shape, r2, jnp.float32))

    @classmethod
    def check(cls, cfg) -> None:
        kind = cls.option_values(cfg)["kind"]
        if kind not in KINDS:
            raise ValueError(f"model.kerple.kind must be one of {KINDS}, got {kind!r}")

    def coefficients(self, layer: int):
        """(r1, r2) `[N]` of a layer, in their valid ranges."""
        r1 = EPS + jax.nn.softplus(self.raw_r1[...][layer])
        raw = self.raw_r2[...][layer]
        return r1, EPS + (jax.nn.softplus(raw) if self.kind == "log" else (2.0 - EPS) * jax.nn.sigmoid(raw))

    def bias(self, q_pos, k_pos, q, k, visible, ctx, layer: int):
        return kerple_bias(q_pos, k_pos, *self.coefficients(layer), self.kind)
