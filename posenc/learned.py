"""Learned absolute positions: a `[max_len, d_model]` table added to the token embeddings (GPT-2, BERT).

Undefined past its table: asking for more positions is a `ValueError` unless `model.learned_beyond` is
`interpolate`, which resamples the table linearly to the longer length (`interpolate_table`: Position
Interpolation for a learned table, the "interpolation" of the seeds). The resampled table depends on that
length (`seq_len`): every position's embedding changes with it, so a prefix's logits depend on the length
the forward pass is asked for (in `posenc.decode`, the request's prompt + max_new_tokens).
"""

from __future__ import annotations

import jax.numpy as jnp
from flax import nnx

from posenc.encoding import Encoding

LEARNED_BEYOND = ("error", "interpolate")


def interpolate_table(table, new_len: int):
    """Linearly resamples a learned position table `[L, d]` to `[new_len, d]`.

    Row p of the result is the table at fractional position p · (L − 1) / (new_len − 1): the endpoints
    are kept and every gap is stretched by the same factor (Position Interpolation for a learned table).
    """
    old_len = table.shape[0]
    if new_len <= old_len:
        return table[:new_len]
    src = jnp.arange(new_len, dtype=jnp.float32) * ((old_len - 1) / (new_len - 1))
    lo = jnp.floor(src).astype(jnp.int32)
    hi = jnp.minimum(lo + 1, old_len - 1)
    w = (src - lo)[:, None]
    return table[lo] * (1 - w) + table[hi] * w


class Learned(Encoding):
    """`table[p]` added to the embedding at position p; `table` is N(0, 1/2) at init, the per-feature RMS
    of the sinusoidal encoding, so both absolute encodings start at one scale."""

    name = "learned"
    position_kind = "absolute"
    model_fields = ("learned_beyond",)
    paper = "Radford et al. 2019 (GPT-2); Devlin et al. 2019, arXiv 1810.04805"

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.table = nnx.Param(nnx.initializers.normal(2**-0.5)(rngs.params(), (cfg.max_len, cfg.d_model)))

    @classmethod
    def check(cls, cfg) -> None:
        if cfg.learned_beyond not in LEARNED_BEYOND:
            raise ValueError(f"model.learned_beyond must be one of {LEARNED_BEYOND}, got {cfg.learned_beyond!r}")

    @classmethod
    def max_positions(cls, cfg) -> int | None:
        return cfg.max_len if cfg.learned_beyond == "error" else None

    @classmethod
    def undefined_past(cls, cfg) -> str:
        return f"a learned table of max_len={cfg.max_len}; learned_beyond='interpolate' resamples it"

    def absolute(self, positions, ctx):
        table, seq_len = self.table[...], ctx
        if seq_len > self.cfg.max_len:
            if self.cfg.learned_beyond == "error":
                raise ValueError(
                    f"posenc='learned' is undefined past its table: sequence length {seq_len} > "
                    f"model.max_len={self.cfg.max_len}. Set model.learned_beyond='interpolate' to resample the "
                    "table to the new length."
                )
            table = interpolate_table(table, seq_len)
        # mode='fill': an out-of-range position gives NaN, never JAX's silent clamp to the last row; a negative
        # one is sent past the table first (take would count it from the end, as NumPy does)
        positions = jnp.where(positions < 0, table.shape[0], positions)
        return jnp.take(table, positions, axis=0, mode="fill", fill_value=jnp.nan)

    def context(self, positions, seq_len: int, rope=None):
        return seq_len  # static: how far the table must reach
