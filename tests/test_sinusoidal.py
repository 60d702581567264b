"""Sinusoidal encoding: the formula as a float64 oracle and the seeds' derivations (seeds/004, "Sinusoidal")."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import posenc


def oracle(num_positions, dim, base=10000.0):
    pe = np.zeros((num_positions, dim))
    for p in range(num_positions):
        for i in range(dim // 2):
            pe[p, 2 * i] = np.sin(p / base ** (2 * i / dim))
            pe[p, 2 * i + 1] = np.cos(p / base ** (2 * i / dim))
    return pe


@pytest.mark.parametrize("n,d,base", [(50, 16, 10000.0), (7, 6, 100.0)])
def test_matches_vaswani_formula_float64(n, d, base):
    with jax.enable_x64(True):
        table = np.asarray(posenc.sinusoidal_table(n, d, base, dtype=jnp.float64))
    np.testing.assert_allclose(table, oracle(n, d, base), atol=1e-13)


def test_float32_and_bf16_return_their_dtype():
    assert posenc.sinusoidal_table(8, 4).dtype == jnp.float32
    table = posenc.sinusoidal_table(3000, 8, dtype=jnp.bfloat16)
    assert table.dtype == jnp.bfloat16
    # angles in float32: at p = 2999 only bf16 output rounding remains (a bf16 angle would be off by radians)
    np.testing.assert_allclose(np.asarray(table, np.float32), oracle(3000, 8), atol=1e-2)


def test_offset_is_a_fixed_rotation_per_pair():
    """Seeds: (PE[p+k,2i], PE[p+k,2i+1]) = [[cos Δ, sin Δ], [−sin Δ, cos Δ]] (PE[p,2i], PE[p,2i+1]), Δ = k·ω_i."""
    d, k = 16, 13
    with jax.enable_x64(True):
        pe = np.asarray(posenc.sinusoidal_table(200, d, dtype=jnp.float64))
    omega = 10000.0 ** (-np.arange(0, d, 2) / d)
    for i, w in enumerate(omega):
        delta = k * w
        m = np.array([[np.cos(delta), np.sin(delta)], [-np.sin(delta), np.cos(delta)]])
        pairs = pe[:, 2 * i:2 * i + 2]
        np.testing.assert_allclose(pairs[:-k] @ m.T, pairs[k:], atol=1e-12)


def test_neighbours_more_similar_than_distant_positions_on_average():
    """Seeds: the dot product of PE(p) and PE(p+k) is larger for small k, on average over p."""
    pe = np.asarray(posenc.sinusoidal_table(2048, 128), np.float64)
    mean_sim = [np.mean(np.sum(pe[:-k] * pe[k:], axis=-1)) for k in (1, 4, 16, 64, 256)]
    assert all(a > b for a, b in zip(mean_sim, mean_sim[1:])), mean_sim
    # the dot product depends only on k: PE(p)·PE(p+k) = Σ_i cos(k ω_i)
    dots = np.sum(pe[:-5] * pe[5:], axis=-1)
    np.testing.assert_allclose(dots, dots[0], atol=1e-3)


def test_encoding_at_arbitrary_positions_matches_table():
    table = posenc.sinusoidal_table(64, 8)
    pos = jnp.array([[3, 63], [0, 10]])
    np.testing.assert_allclose(posenc.sinusoidal_encoding(pos, 8), table[pos], atol=1e-6)
    jitted = jax.jit(lambda p: posenc.sinusoidal_encoding(p, 8))(pos)
    np.testing.assert_allclose(jitted, table[pos], atol=1e-6)


@pytest.mark.parametrize("args,match", [((4, 7), "dim must be"), ((0, 8), "num_positions"), ((4, 8, 0.0), "base")])
def test_bad_inputs_raise(args, match):
    with pytest.raises(ValueError, match=match):
        posenc.sinusoidal_table(*args)


def test_model_config_refuses_an_odd_d_model_naming_the_field():
    from posenc.model import ModelConfig

    with pytest.raises(ValueError, match=r"model\.d_model must be even for posenc='sinusoidal', got 33"):
        ModelConfig(posenc="sinusoidal", d_model=33, num_heads=1)
