"""T5's relative position bias: a learned scalar per head and bucket of the relative position.

Raffel et al. 2020, "Exploring the Limits of Transfer Learning with a Unified Text-to-Text Transformer",
arXiv 1910.10683, §2.1; reference: Mesh TensorFlow's `_relative_position_bucket`, as in Hugging Face's
`T5Attention._relative_position_bucket`. With n = k_pos − q_pos, the bucket of a causal (unidirectional)
model is, for d = max(−n, 0), B = num_buckets and E = B / 2 exact buckets,

    bucket(d) = d                                                        if d < E
              = min(B − 1, E + ⌊ln(d / E) / ln(max_distance / E) · (B − E)⌋)   otherwise

(bidirectional: half the buckets for each sign, the upper half for n > 0). The last bucket starts short of
`max_distance`, at the first d ≥ E · (max_distance / E)^((B − E − 1) / (B − E)) (113 for T5's B = 32 and
max_distance = 128), and holds every distance beyond, so the bias is constant there: T5's own way of
extrapolating. The logarithm is taken in float32, like the reference code, so that buckets agree integer
for integer. The bias table `[num_buckets, num_heads]` is shared by all layers, as in T5 (`model.t5.shared`).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from flax import nnx

from posenc.encoding import Encoding


def t5_relative_bucket(relative_position, *, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128):
    """T5's bucket of `relative_position = k_pos − q_pos` (int array) → int32 array of the same shape.

    Raises:
      ValueError: a relative position that is not an integer array (buckets are defined for whole distances;
        a cast would truncate −2.5 to bucket 2 without a word), or num_buckets not an integer ≥ 2 (≥ 4
        bidirectional), or max_distance ≤ the exact buckets.
    """
    minimum = 4 if bidirectional else 2
    if isinstance(num_buckets, bool) or not isinstance(num_buckets, (int, np.integer)) or num_buckets < minimum:
        raise ValueError(f"t5_relative_bucket: num_buckets must be an integer >= {minimum}, got {num_buckets!r}")
    n = jnp.asarray(relative_position)
    if not jnp.issubdtype(n.dtype, jnp.integer):
        raise ValueError(f"t5_relative_bucket: relative_position must be integers (positions are whole numbers), "
                         f"got dtype {n.dtype}")
    n = n.astype(jnp.int32)
    buckets = jnp.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (n > 0).astype(jnp.int32) * num_buckets
        n = jnp.abs(n)
    else:
        n = -jnp.minimum(n, 0)
    max_exact = num_buckets // 2
    if max_distance <= max_exact:
        raise ValueError(f"t5_relative_bucket: max_distance must exceed num_buckets / 4 (bidirectional) or / 2, got "
                         f"{max_distance}")
    is_small = n < max_exact
    # float32 throughout (the Python scalar is weakly typed), in the reference's order of operations
    scaled = jnp.log(jnp.maximum(n, 1).astype(jnp.float32) / max_exact) / math.log(max_distance / max_exact)
    large = max_exact + (scaled * (num_buckets - max_exact)).astype(jnp.int32)
    large = jnp.minimum(large, num_buckets - 1)
    return buckets + jnp.where(is_small, n, large)


class T5Bias(Encoding):
    """bias[h, i, j] = table[bucket(k_pos_j − q_pos_i), h]: a learned logit bias per head and bucket."""

    name = "t5"
    position_kind = "bias"
    paper = "Raffel et al. 2020, arXiv 1910.10683"
    has_bias = True
    options = {
        "num_buckets": (32, "relative-position buckets (half exact, half log-spaced up to max_distance)"),
        "max_distance": (128, "distances from here on share the last bucket"),
        "shared": (True, "one bias table for all layers (T5); False: one per layer"),
    }

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        self.cfg = cfg
        opts = self.option_values(cfg)
        self.num_buckets, self.max_distance = opts["num_buckets"], opts["max_distance"]
        shape = (1 if opts["shared"] else cfg.num_layers, self.num_buckets, cfg.num_heads)
        self.table = nnx.Param(nnx.initializers.normal(0.02)(rngs.params(), shape))

    @classmethod
    def check(cls, cfg) -> None:
        opts = cls.option_values(cfg)
        if opts["num_buckets"] < 2:
            raise ValueError(f"model.t5.num_buckets must be >= 2, got {opts['num_buckets']}")
        if opts["max_distance"] <= opts["num_buckets"] // 2:
            raise ValueError(f"model.t5.max_distance must exceed num_buckets / 2 = {opts['num_buckets'] // 2}, "
                             f"got {opts['max_distance']}")

    def bias(self, q_pos, k_pos, q, k, visible, ctx, layer: int):
        rel = k_pos[..., None, :] - q_pos[..., :, None]  # [B|1, Tq, Tk]
        bucket = t5_relative_bucket(rel, bidirectional=False, num_buckets=self.num_buckets,
                                    max_distance=self.max_distance)
        table = self.table[...][layer if self.table.shape[0] > 1 else 0]  # [buckets, N]
        return jnp.moveaxis(table[bucket], -1, -3)  # [B|1, N, Tq, Tk]
