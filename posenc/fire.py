"""FIRE: functional interpolation for relative positions, a learned MLP of a normalised distance.

Li et al. 2023, "Functional Interpolation for Relative Positions Improves Long Context Transformers",
arXiv 2310.04418, eq. (3) and the PyTorch listing of its appendix. For query i and key j ≤ i,

    bias_h(i, j) = f_θ(ψ(i − j) / ψ(max(L, i)))_h,   ψ(x) = log(c·x + 1),

with f_θ an MLP 1 → width → num_heads (ReLU), c learned (init 0.1) and the threshold L = |λ · L0|, λ learned
(init 1) and L0 = the training length. The normalised distance lies in [0, 1] at every length (ψ is
increasing and i − j ≤ i ≤ max(L, i)): FIRE interpolates, never extrapolates, its input. As in the
reference, ψ takes |c·x| and the denominator gets + 1e-6.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from flax import nnx

from posenc.encoding import Encoding

EPS = 1e-6


def fire_normalized_distance(q_pos, k_pos, c, threshold):
    """ψ(i − j) / ψ(max(L, i)) `[..., Tq, Tk]` for positions `[..., Tq]`, `[..., Tk]`, in float32 (float64 for
    float64 c and threshold)."""
    dtype = jnp.promote_types(jnp.result_type(c, threshold), jnp.float32)
    i = jnp.asarray(q_pos, dtype)[..., :, None]
    j = jnp.asarray(k_pos, dtype)[..., None, :]
    rel = jnp.log(jnp.abs(c * (i - j)) + 1.0)
    norm = jnp.log(jnp.abs(c * jnp.maximum(i, threshold)) + 1.0) + EPS
    return rel / norm


class FireMLP(nnx.Module):
    def __init__(self, width: int, num_heads: int, init_c: float, init_len: float, *, rngs: nnx.Rngs):
        self.fc = nnx.Linear(1, width, rngs=rngs)
        self.out = nnx.Linear(width, num_heads, rngs=rngs)
        self.c = nnx.Param(jnp.asarray(init_c, jnp.float32))
        self.length_multiplier = nnx.Param(jnp.asarray(1.0, jnp.float32))
        self.init_len = init_len

    def __call__(self, q_pos, k_pos):
        threshold = jnp.abs(self.length_multiplier[...] * self.init_len)
        x = fire_normalized_distance(q_pos, k_pos, self.c[...], threshold)[..., None]  # [B|1, Tq, Tk, 1]
        return jnp.moveaxis(self.out(jax.nn.relu(self.fc(x))), -1, -3)  # [B|1, N, Tq, Tk]


class Fire(Encoding):
    """A FIRE bias per layer (or one shared, `model.fire.shared`)."""

    name = "fire"
    position_kind = "bias"
    translation_invariant = False  # the distance is normalised by ψ(max(i, L))
    paper = "Li et al. 2023, arXiv 2310.04418"
    has_bias = True
    options = {
        "width": (32, "hidden width of the MLP f_θ"),
        "init_c": (0.1, "initial c of ψ(x) = log(c·x + 1)"),
        "shared": (False, "one MLP for all layers; False: one per layer"),
    }

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        self.cfg = cfg
        opts = self.option_values(cfg)
        count = 1 if opts["shared"] else cfg.num_layers
        self.mlps = nnx.List([FireMLP(opts["width"], cfg.num_heads, opts["init_c"], float(cfg.max_len), rngs=rngs)
                              for _ in range(count)])

    @classmethod
    def check(cls, cfg) -> None:
        opts = cls.option_values(cfg)
        if opts["width"] < 1:
            raise ValueError(f"model.fire.width must be >= 1, got {opts['width']}")
        if not (math.isfinite(opts["init_c"]) and opts["init_c"] > 0):
            raise ValueError(f"model.fire.init_c must be a finite number > 0 (c of ψ(x) = log(c·x + 1); 0 makes every "
                             f"distance 0), got {opts['init_c']!r}")

    def bias(self, q_pos, k_pos, q, k, visible, ctx, layer: int):
        return self.mlps[layer if len(self.mlps) > 1 else 0](q_pos, k_pos)
