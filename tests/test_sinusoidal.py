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


@pytest.mark.parametrize("d,base", [(64, 10000.0), (16, 100.0)])
def test_wavelengths_are_geometric_from_2pi_and_stop_short_of_2pi_times_base(d, base):
    """Seeds (波长构成一个从 2π 到 10000·2π 的几何级数, as Vaswani et al. §3.5 put it): the wavelengths 2π/ω_i,
    read off the table (ω_i is the angle of pair i at position 1), are geometric with ratio base^(2/d) from 2π; the
    last is 2π·base^((d−2)/d) (47,117 at d = 64), short of 2π·base (62,832), which only the limit d → ∞ reaches."""
    with jax.enable_x64(True):
        pe1 = np.asarray(posenc.sinusoidal_encoding(jnp.asarray([1]), d, base, dtype=jnp.float64))[0]
    omega = np.arctan2(pe1[0::2], pe1[1::2])  # PE[1, 2i] = sin ω_i, PE[1, 2i+1] = cos ω_i, 0 < ω_i ≤ 1
    wavelength = 2 * np.pi / omega
    np.testing.assert_allclose(wavelength[0], 2 * np.pi, rtol=1e-14)
    np.testing.assert_allclose(wavelength[1:] / wavelength[:-1], base ** (2 / d), rtol=1e-12)
    np.testing.assert_allclose(wavelength[-1], 2 * np.pi * base ** ((d - 2) / d), rtol=1e-12)
    assert wavelength[-1] < 0.95 * 2 * np.pi * base  # not the seeds' upper end


def test_offsets_keep_their_distance_at_every_position():
    """Seeds, 局限性 (高频消失, 分辨率损失): past pos ≈ 10000 "the denominators become very large" and far positions'
    encodings "become too dense". The denominators 10000^(2i/d) do not depend on pos: every PE has norm √(d/2), and
    ‖PE(p+k) − PE(p)‖² = 2·Σ_i (1 − cos kω_i) at every p, so positions 10⁶ apart from the training range are as far
    from their neighbours as positions 0 … 10; the fastest pair still turns ω_0 = 1 rad per step. What fails past
    the training length is the model's use of unseen encodings, not the formula's resolution (float64 oracle)."""
    d = 64
    omega = 10000.0 ** (-np.arange(0, d, 2) / d)
    offsets = np.array([1, 2, 7, 100])
    want = 2 * np.sum(1 - np.cos(offsets[:, None] * omega), axis=-1)  # [k]
    with jax.enable_x64(True):
        for p in (0, 10_000, 100_017, 1_000_000):
            pe = np.asarray(posenc.sinusoidal_encoding(jnp.asarray(np.concatenate([[p], p + offsets])), d,
                                                       dtype=jnp.float64))
            np.testing.assert_allclose(np.sum(pe * pe, axis=-1), d / 2, rtol=1e-12)
            np.testing.assert_allclose(np.sum((pe[1:] - pe[0]) ** 2, axis=-1), want, rtol=1e-8, err_msg=f"p = {p}")
            turn = np.angle((pe[1, 0] + 1j * pe[1, 1]) / (pe[0, 0] + 1j * pe[0, 1]))  # pair 0 from p to p + 1
            assert turn == pytest.approx(-1.0, abs=1e-8)  # (sin, cos): a clockwise turn by ω_0 = 1


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
