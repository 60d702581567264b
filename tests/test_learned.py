"""The learned position table: read row by row, undefined (an error or NaN) past it, never clamped or wrapped,
and resampled linearly only when `model.learned_beyond='interpolate'` asks for it."""

import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posenc.learned import Learned, interpolate_table
from posenc.model import ModelConfig

TINY = dict(d_model=8, num_layers=1, num_heads=2, mlp_dim=16, max_len=6)


def learned(**kw):
    return Learned(ModelConfig(posenc="learned", **{**TINY, **kw}), rngs=nnx.Rngs(0))


def test_rows_at_their_positions_and_nan_outside_the_table():
    """Positions 0 … max_len − 1 read their rows; a position outside the table, past its end or negative, gives
    NaN: not the last row (JAX's clamp) nor a row counted from the end (NumPy's wrap of −1)."""
    enc = learned()
    table = np.asarray(enc.table[...])
    np.testing.assert_array_equal(enc.absolute(jnp.array([[0, 5, 2]]), 6)[0], table[[0, 5, 2]])
    out = np.asarray(enc.absolute(jnp.array([[-1, 0, 6, -6]]), 6))[0]
    assert np.isnan(out[[0, 2, 3]]).all(), out
    np.testing.assert_array_equal(out[1], table[0])


def test_longer_than_the_table_is_an_error_naming_the_field():
    with pytest.raises(ValueError, match=r"sequence length 7 > model\.max_len=6.*learned_beyond='interpolate'"):
        learned().absolute(jnp.arange(7)[None], 7)


def test_interpolate_resamples_linearly_keeping_both_ends():
    """Row p of the table resampled to n rows is the table at p·(L − 1)/(n − 1), linear between rows: a float64
    oracle of `interpolate_table`, and the encoding's output at a length past its table."""
    table = np.random.default_rng(0).normal(size=(6, 8))
    ours = np.asarray(interpolate_table(jnp.asarray(table, jnp.float32), 16))
    src = np.arange(16) * 5 / 15
    expected = np.stack([np.interp(src, np.arange(6), table[:, f]) for f in range(8)], axis=-1)
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ours[[0, -1]], table[[0, -1]], rtol=1e-6)
    np.testing.assert_array_equal(interpolate_table(jnp.asarray(table, jnp.float32), 4), table[:4].astype(np.float32))
    enc = learned(learned_beyond="interpolate")
    out = enc.absolute(jnp.arange(16)[None], 16)[0]
    np.testing.assert_allclose(out, interpolate_table(enc.table[...], 16), rtol=1e-6)
    np.testing.assert_array_equal(enc.absolute(jnp.arange(6)[None], 6)[0], enc.table[...])  # within: the table


def test_table_starts_at_the_scale_of_the_sinusoidal_encoding():
    """The table starts N(0, 1/2), not the "small Gaussian" of seed 004 (BERT/GPT-2 use std 0.02): its mean square is
    1/2, as every sinusoidal PE's is (‖PE(p)‖² = d/2 at every p), so both absolute encodings start at one scale
    against the token embeddings."""
    import jax  # noqa: PLC0415

    from posenc.sinusoidal import sinusoidal_table  # noqa: PLC0415

    table = np.asarray(learned(max_len=256, d_model=64, num_heads=2).table[...], np.float64)
    assert abs(table.mean()) < 0.02 and abs(np.mean(table ** 2) - 0.5) < 0.02, (table.mean(), np.mean(table ** 2))
    with jax.enable_x64(True):
        pe = np.asarray(sinusoidal_table(256, 64, dtype=jnp.float64))
    np.testing.assert_allclose(np.mean(pe ** 2, axis=-1), 0.5, rtol=1e-12)
