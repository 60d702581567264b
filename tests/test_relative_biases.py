"""T5 buckets, KERPLE and FIRE: float64 oracles of their formulas, T5 against transformers' own buckets,
and their properties (constant past max_distance, positivity, FIRE's input in [0, 1] at any length)."""

import json
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posenc.fire import Fire, fire_normalized_distance
from posenc.kerple import Kerple, kerple_bias
from posenc.model import ModelConfig
from posenc.t5 import T5Bias, t5_relative_bucket

REF = json.loads((pathlib.Path(__file__).parent / "data" / "encoding_reference.json").read_text())
TINY = dict(d_model=32, num_layers=2, num_heads=2, mlp_dim=64, max_len=16)


@pytest.mark.parametrize("case", REF["t5_buckets"], ids=lambda c: f"bi={c['bidirectional']}-{c['num_buckets']}")
def test_t5_buckets_equal_transformers_integer_for_integer(case):
    rel = np.arange(case["relative_position_start"], case["relative_position_start"] + len(case["buckets"]))
    ours = t5_relative_bucket(rel, bidirectional=case["bidirectional"], num_buckets=case["num_buckets"],
                              max_distance=case["max_distance"])
    np.testing.assert_array_equal(np.asarray(ours), case["buckets"])


def t5_bucket_oracle(n, bidirectional, num_buckets, max_distance):
    """The definition in exact arithmetic (Python ints and float64), one relative position at a time."""
    bucket = 0
    if bidirectional:
        num_buckets //= 2
        bucket += num_buckets if n > 0 else 0
        n = abs(n)
    else:
        n = max(-n, 0)
    exact = num_buckets // 2
    if n < exact:
        return bucket + n
    return bucket + min(num_buckets - 1, exact + int(math.log(n / exact) / math.log(max_distance / exact)
                                                     * (num_buckets - exact)))


def test_t5_buckets_float64_oracle_and_properties():
    rel = np.arange(-5000, 200)
    ours = np.asarray(t5_relative_bucket(rel, bidirectional=False, num_buckets=32, max_distance=128))
    oracle = np.asarray([t5_bucket_oracle(int(n), False, 32, 128) for n in rel])
    assert np.mean(ours == oracle) == 1.0
    assert np.all(ours[rel >= 0] == 0)  # causal: the future and the present share bucket 0
    assert np.all(np.diff(ours[::-1]) >= 0)  # non-decreasing with distance
    assert set(ours[rel <= -128]) == {31}  # constant from max_distance on, however far
    first = math.ceil(16 * (128 / 16) ** (15 / 16))  # the last bucket starts short of max_distance, at 113
    assert first == 113 and ours[rel == -first] == 31 and ours[rel == -first + 1] == 30
    np.testing.assert_array_equal(ours[(rel > -16) & (rel <= 0)], -rel[(rel > -16) & (rel <= 0)])  # exact buckets


def test_t5_bias_layer_reads_its_table_by_bucket():
    cfg = ModelConfig(posenc="t5", **TINY)
    enc = T5Bias(cfg, rngs=nnx.Rngs(0))
    table = np.asarray(enc.table[...])
    q_pos, k_pos = jnp.arange(40, 48)[None], jnp.arange(0, 48)[None]
    bias = np.asarray(enc.bias(q_pos, k_pos, None, None, None, None, 1))
    assert bias.shape == (1, 2, 8, 48) and table.shape == (1, 32, 2)  # shared by the layers (T5)
    for i, j in [(0, 0), (3, 40), (7, 47), (5, 2)]:
        b = t5_bucket_oracle(int(k_pos[0, j] - q_pos[0, i]), False, 32, 128)
        np.testing.assert_array_equal(bias[0, :, i, j], table[0, b])


@pytest.mark.parametrize("kind", ["log", "power"])
def test_kerple_float64_oracle(kind):
    rng = np.random.default_rng(0)
    r1, r2 = rng.uniform(0.1, 2, 3), rng.uniform(0.1, 1.9, 3)
    q_pos, k_pos = np.arange(5, 12)[None], np.arange(0, 12)[None]
    with jax.enable_x64(True):
        ours = np.asarray(kerple_bias(q_pos, k_pos, jnp.asarray(r1), jnp.asarray(r2), kind))
    d = np.abs(q_pos[0][:, None] - k_pos[0][None, :]).astype(np.float64)
    expected = -r1[:, None, None] * (np.log1p(r2[:, None, None] * d) if kind == "log" else d ** r2[:, None, None])
    np.testing.assert_allclose(ours[0], expected, rtol=1e-6, atol=1e-6)
    assert np.all(ours <= 0) and np.all(ours[0][:, np.arange(7), np.arange(5, 12)] == 0)  # 0 at distance 0
    with pytest.raises(ValueError, match="kind must be one of"):
        kerple_bias(q_pos, k_pos, r1, r2, "cubic")


def test_kerple_power_at_r2_one_is_alibi_shaped_and_coefficients_stay_valid():
    cfg = ModelConfig(posenc="kerple", encoding_options=(("kind", "power"),), **TINY)
    enc = Kerple(cfg, rngs=nnx.Rngs(0))
    r1, r2 = enc.coefficients(0)
    np.testing.assert_allclose(r2, 1.0, rtol=1e-6)  # the init: −r1·|m−n|, ALiBi's shape
    enc.raw_r1[...] = enc.raw_r1[...] - 100.0
    enc.raw_r2[...] = enc.raw_r2[...] + 100.0
    r1, r2 = enc.coefficients(1)
    assert np.all(np.asarray(r1) > 0) and np.all(np.asarray(r2) <= 2) and np.all(np.asarray(r2) > 0)


def test_fire_normalized_distance_oracle_and_range_at_any_length():
    c, threshold = 0.1, 16.0
    q_pos, k_pos = np.arange(0, 4096, 7)[None], np.arange(0, 4096, 5)[None]
    with jax.enable_x64(True):  # float64 c and threshold: computed in float64
        ours = fire_normalized_distance(q_pos, k_pos, c, threshold)
        assert ours.dtype == jnp.float64
    ours = np.asarray(ours)[0]
    i, j = q_pos[0][:, None].astype(np.float64), k_pos[0][None, :].astype(np.float64)
    expected = np.log(np.abs(c * (i - j)) + 1) / (np.log(np.abs(c * np.maximum(i, threshold)) + 1) + 1e-6)
    np.testing.assert_allclose(ours, expected, rtol=1e-12, atol=1e-15)
    float32 = np.asarray(fire_normalized_distance(q_pos, k_pos, c, threshold))[0]  # the model's precision
    assert float32.dtype == np.float32
    np.testing.assert_allclose(float32, expected, rtol=2e-5, atol=1e-6)
    causal = j <= i
    assert np.all(ours[np.broadcast_to(causal, ours.shape)] >= 0)
    assert np.all(ours[np.broadcast_to(causal, ours.shape)] <= 1)  # in [0, 1] for every key in the past


def test_fire_bias_is_its_mlp_of_the_normalized_distance():
    cfg = ModelConfig(posenc="fire", **TINY)
    enc = Fire(cfg, rngs=nnx.Rngs(0))
    assert len(enc.mlps) == 2  # one per layer by default
    mlp = enc.mlps[1]
    q_pos, k_pos = jnp.arange(3, 9)[None], jnp.arange(9)[None]
    bias = np.asarray(enc.bias(q_pos, k_pos, None, None, None, None, 1))
    x = np.asarray(fire_normalized_distance(q_pos, k_pos, 0.1, 16.0))[0]
    w1, b1 = np.asarray(mlp.fc.kernel[...]), np.asarray(mlp.fc.bias[...])
    w2, b2 = np.asarray(mlp.out.kernel[...]), np.asarray(mlp.out.bias[...])
    expected = np.maximum(x[..., None] * w1[0] + b1, 0) @ w2 + b2  # [Tq, Tk, N]
    np.testing.assert_allclose(bias[0], np.moveaxis(expected, -1, 0), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("init_c", [0.0, -0.1, float("inf"), float("nan")])
def test_fire_init_c_must_be_finite_and_positive(init_c):
    """c = 0 makes every normalised distance 0 (a position-blind bias), NaN makes NaN logits; c > 0 as in
    ψ(x) = log(c·x + 1)."""
    with pytest.raises(ValueError, match=r"model\.fire\.init_c must be a finite number > 0"):
        ModelConfig(posenc="fire", encoding_options=(("init_c", init_c),))
    ModelConfig(posenc="fire", encoding_options=(("init_c", 0.5),))


def test_t5_buckets_refuse_fractional_positions_and_a_non_integer_bucket_count():
    """A fractional relative position has no bucket (casting would truncate −2.5 toward zero, to bucket 2), and
    num_buckets = 32.0 would give float buckets: both are ValueErrors naming the argument."""
    with pytest.raises(ValueError, match="relative_position must be integers"):
        t5_relative_bucket(np.array([-2.5, -300.0]), bidirectional=False)
    for bad in (32.0, True):
        with pytest.raises(ValueError, match="num_buckets must be an integer"):
            t5_relative_bucket(np.arange(-3, 1), bidirectional=False, num_buckets=bad)
    cfg = ModelConfig(posenc="t5", **TINY)
    with pytest.raises(ValueError, match="relative_position must be integers"):
        T5Bias(cfg, rngs=nnx.Rngs(0)).bias(jnp.arange(4.0)[None] / 2, jnp.arange(4.0)[None] / 2, None, None, None,
                                           None, 0)


def test_t5_per_layer_tables_are_read_by_layer():
    """`model.t5.shared=False`: one table per layer, layer l reading its own."""
    cfg = ModelConfig(posenc="t5", encoding_options=(("shared", False),), **TINY)
    enc = T5Bias(cfg, rngs=nnx.Rngs(0))
    table = np.asarray(enc.table[...])
    assert table.shape == (2, 32, 2) and not np.allclose(table[0], table[1])
    q_pos, k_pos = jnp.arange(150, 152)[None], jnp.arange(0, 152)[None]
    for layer in (0, 1):
        bias = np.asarray(enc.bias(q_pos, k_pos, None, None, None, None, layer))
        for i, j in [(0, 0), (1, 151), (1, 140), (0, 148)]:
            b = t5_bucket_oracle(int(k_pos[0, j] - q_pos[0, i]), False, 32, 128)
            np.testing.assert_array_equal(bias[0, :, i, j], table[layer, b])
