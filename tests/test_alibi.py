"""ALiBi slopes and bias against the paper's rule (Press et al. 2022, arXiv 2108.12409)."""

import numpy as np
import pytest

import posenc


def paper_get_slopes(n):
    """The reference `get_slopes` from github.com/ofirpress/attention_with_linear_biases."""
    import math

    def get_slopes_power_of_2(n):
        start = 2 ** (-2 ** -(math.log2(n) - 3))
        ratio = start
        return [start * ratio**i for i in range(n)]

    if math.log2(n).is_integer():
        return get_slopes_power_of_2(n)
    closest_power_of_2 = 2 ** math.floor(math.log2(n))
    return (get_slopes_power_of_2(closest_power_of_2)
            + paper_get_slopes(2 * closest_power_of_2)[0::2][: n - closest_power_of_2])


def test_published_slopes_for_8_heads():
    """Paper §3: for 8 heads the slopes are 1/2, 1/4, …, 1/256."""
    np.testing.assert_allclose(posenc.alibi_slopes(8), [2.0 ** -(h + 1) for h in range(8)], rtol=1e-15)


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 12, 16, 20, 24, 96])
def test_slopes_match_reference_rule(n):
    np.testing.assert_allclose(posenc.alibi_slopes(n), paper_get_slopes(n), rtol=1e-15)
    assert len(posenc.alibi_slopes(n)) == n


def test_bias_is_negative_slope_times_distance():
    slopes = posenc.alibi_slopes(4)
    q, k = np.array([5, 9]), np.array([0, 3, 5, 9])
    bias = np.asarray(posenc.alibi_bias(slopes, q, k))
    assert bias.shape == (4, 2, 4)
    for h in range(4):
        for i, qi in enumerate(q):
            for j, kj in enumerate(k):
                assert bias[h, i, j] == pytest.approx(-slopes[h] * (qi - kj), rel=1e-6)
    # translation invariance: only the distance matters (positions are data, so KV caches are just offsets)
    np.testing.assert_allclose(posenc.alibi_bias(slopes, q + 1000, k + 1000), bias, atol=1e-3)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="num_heads"):
        posenc.alibi_slopes(0)
    with pytest.raises(ValueError, match="slopes"):
        posenc.alibi_bias(np.ones((2, 2)), np.arange(3), np.arange(3))
