"""posenc/verdicts.py: a verdict's firmness from the per-seed margins of its conditions."""

import math

import numpy as np
import pytest

from posenc import verdicts


def test_strength_follows_the_t_statistic():
    # mean 0.2, sd 0.1 over 3 seeds: t = 0.2 / (0.1 / √3) = 3.46, between t80 (1.886) and t95 (4.303) at df 2
    label, text = verdicts.strength([0.1, 0.2, 0.3])
    assert label == "moderate" and f"t = {0.2 / (0.1 / math.sqrt(3)):.1f}" in text
    assert verdicts.strength([1.0, 1.1, 0.9])[0] == "strong"  # t = 17
    assert verdicts.strength([0.1, -0.1, 0.05])[0] == "weak"
    assert verdicts.strength([0.5])[0] == "weak"  # one run: no spread to judge by
    assert verdicts.strength([0.0, 0.0])[0] == "weak"
    label, text = verdicts.strength([0.2, 0.2, 0.2])  # no spread at all (a floor at every seed): nothing to judge by
    assert label == "weak" and "the same at all 3 seeds" in text


def test_student_quantiles():
    """The two-sided 95% and 80% quantiles, checked against a Monte Carlo of t at df 2."""
    rng = np.random.default_rng(0)
    z = rng.standard_normal((400_000, 3))
    t = z.mean(1) / (z.std(1, ddof=1) / math.sqrt(3))
    assert abs(np.mean(np.abs(t) < verdicts.t95(2)) - 0.95) < 0.003
    assert abs(np.mean(np.abs(t) < verdicts.t80(2)) - 0.80) < 0.003


@pytest.mark.parametrize("df", [*range(1, 13), 18, 26, 44, 120, 1000])
def test_student_quantiles_at_any_df_match_the_t_distribution(df):
    """Each quantile solves F_df(t) = 0.975 or 0.9 for Student's t CDF, F(t) = 1 − I_{df / (df + t²)}(df / 2, 1 / 2)
    / 2 (the regularized incomplete beta, mpmath at 30 digits), to 1e-9: at every df, not a table that stops at 9
    (whose last entry, 2.262, made 19 groups' interval 8% too wide)."""
    import mpmath  # noqa: PLC0415

    mpmath.mp.dps = 30

    def quantile(p):
        cdf = lambda t: 1 - mpmath.betainc(df / 2, 0.5, 0, df / (df + t * t), regularized=True) / 2  # noqa: E731
        return float(mpmath.findroot(lambda t: cdf(t) - p, 2.0))

    assert verdicts.t95(df) == pytest.approx(quantile(0.975), rel=1e-9)
    assert verdicts.t80(df) == pytest.approx(quantile(0.9), rel=1e-9)


def test_strength_reads_the_quantile_of_its_own_df():
    """12 seeds with t = 2.23: above the 95% quantile at df 11 (2.201), below the one at df 9 (2.262)."""
    d = np.array([1.0, -1.0] * 6)  # mean 0
    m = d + 2.23 * d.std(ddof=1) / math.sqrt(12)  # mean 2.23 · sd / √12, the same sd: t = 2.23
    t = m.mean() / (m.std(ddof=1) / math.sqrt(12))
    assert verdicts.t95(11) < t < verdicts.t95(9)
    assert verdicts.strength(m)[0] == "strong"
    with pytest.raises(ValueError, match="df must be a positive integer"):
        verdicts.t95(0)
    assert verdicts.t_quantile(0.5, 3) == 0.0  # the median
    for bad in (float("nan"), -0.1):  # a floor that is no floor would pass silently
        with pytest.raises(ValueError, match=r"min_sd \(a floor under the margins' standard deviation\) must be"):
            verdicts.strength(m, min_sd=bad)
    with pytest.raises(ValueError, match="conditions must name at least one condition"):
        verdicts.firmness({})


def test_evidence_rests_on_the_weakest_hold_or_the_firmest_failure():
    held = verdicts.evidence({"a": (True, [1.0, 1.1, 0.9]), "b": (True, [0.1, 0.2, 0.3])})
    assert held.startswith("**moderate**") and "a holds by" in held and "b holds by" in held
    failed = verdicts.evidence({"a": (True, [1.0, 1.1, 0.9]), "b": (False, [-1.0, -1.1, -0.9])})
    assert failed.startswith("**strong**") and "b fails by +1.000" in failed  # margins signed to the side they fell


def test_firmness_is_the_label_evidence_states():
    held = {"a": (True, [0.5, 0.6, 0.55]), "b": (True, [0.1, -0.2, 0.5])}
    assert verdicts.firmness(held) == "weak" and verdicts.evidence(held).startswith("**weak**")
    mixed = {"a": (True, [0.5, 0.6, 0.55]), "b": (False, [-0.5, -0.6, -0.55])}
    assert verdicts.firmness(mixed) == "strong" and verdicts.evidence(mixed).startswith("**strong**")
    assert verdicts.firmness({"a": (True, [0.5, 0.6, 0.55])}) == "strong"


def test_a_floor_under_the_spread_keeps_more_agreement_from_reading_weaker():
    """Equal margins (0 of 10 at every seed) have no spread: weak, unless the measurement's own noise is given as a
    floor, under which equal and nearly equal margins are judged alike."""
    assert verdicts.strength([0.2, 0.2, 0.2])[0] == "weak"
    assert verdicts.strength([0.2, 0.2, 0.19])[0] == "strong"  # t = 59 from a tiny spread
    for margins in ([0.2, 0.2, 0.2], [0.2, 0.2, 0.19]):
        label, text = verdicts.strength(margins, min_sd=0.1)  # t = mean / (0.1 / √3) ≈ 3.4–3.5: between t80 and t95
        assert label == "moderate" and f"t = {np.mean(margins) / (0.1 / math.sqrt(3)):.1f}" in text
    assert verdicts.firmness({"a": (True, [1.0, 1.1, 0.9])}, "inconclusive") == "weak"
    text = verdicts.evidence({"a": (True, [1.0, 1.1, 0.9])}, "inconclusive (no power)")
    assert text.startswith("**weak** (inconclusive; a holds by +1.000")
    assert verdicts.firmness({"a": (True, [0.2, 0.2], 0.1)}) == "weak"  # t = 2.8 < t80 at df 1


def test_no_measurement_is_refused_rather_than_called_weak():
    for margins in ([], [float("nan"), 0.5, 0.6], [0.1, float("inf")]):
        with pytest.raises(ValueError, match="margins must be finite"):
            verdicts.strength(margins)
