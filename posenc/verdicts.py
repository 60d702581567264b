"""How firmly a claim's verdict rests on per-seed measurements: the experiments' reports state it next to
each verdict (experiments/*/report.py).

A verdict rule is a list of conditions, each a measured quantity compared with a threshold. Per seed, a
condition's *margin* is the quantity minus the threshold, signed so that it is positive where the condition
holds. Its firmness is the one-sample t statistic of the margins signed to the side they fell (Student 1908):
**strong** when the 95% t-interval of the mean excludes 0, **moderate** when the 80% one does, **weak**
otherwise, on the threshold, or without a spread to judge it by: from one run, or from runs whose margins are all
equal (counts at a floor or a ceiling, e.g. 0 of 20 at every seed). A margin measured from counts can pass its
own standard error as a floor under the spread (`min_sd`): then equal margins are judged by that noise, and more
agreement between seeds never reads as weaker evidence. A verdict whose conditions all hold is as firm as the
weakest; one decided by failed conditions is as firm as the firmest failure; an inconclusive one is weak.
"""

from __future__ import annotations

import math

import numpy as np

ORDER = ("weak", "moderate", "strong")


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b), by its continued fraction (modified Lentz; Numerical Recipes
    §6.4), on the side of x where it converges fast."""
    if x <= 0.0 or x >= 1.0:
        return 0.0 if x <= 0.0 else 1.0
    if x > (a + 1.0) / (a + b + 2.0):
        return 1.0 - _betainc(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 10_000):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile F⁻¹_df(p) for p in [0.5, 1): the t with F(t) = 1 − I_{df/(df+t²)}(df/2, 1/2) / 2 = p,
    by bisection to 1e-12 (`t_quantile(0.975, n − 1)` is the half-width factor of a 95% interval over n seeds)."""
    if isinstance(df, bool) or not isinstance(df, int) or df < 1 or not 0.5 <= p < 1:
        raise ValueError(f"t_quantile: df must be a positive integer and p in [0.5, 1), got df={df!r}, p={p!r}")
    if p == 0.5:
        return 0.0  # the median (a relative stopping rule never reaches a root at 0)
    lo, hi = 0.0, 1.0
    while 1.0 - _betainc(df / 2, 0.5, df / (df + hi * hi)) / 2 < p:
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-12 * hi:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1.0 - _betainc(df / 2, 0.5, df / (df + mid * mid)) / 2 < p else (lo, mid)
    return (lo + hi) / 2


def t95(df: int) -> float:
    """The two-sided 95% Student t quantile at `df` degrees of freedom (12.706 at 1, 2.262 at 9, 2.101 at 18)."""
    return t_quantile(0.975, df)


def t80(df: int) -> float:
    """The two-sided 80% Student t quantile at `df` degrees of freedom."""
    return t_quantile(0.9, df)


def strength(margins, min_sd: float = 0.0) -> tuple[str, str]:
    """('weak' | 'moderate' | 'strong', a description) of margins that should be positive; `min_sd`: a floor
    under their standard deviation (one seed's measurement noise)."""
    m = np.asarray(margins, float)
    if m.size == 0 or not np.isfinite(m).all():
        raise ValueError(f"margins must be finite, one per run, got {m.tolist()}: a missing measurement is no "
                         "evidence (leave the claim unmeasured)")
    if not (math.isfinite(min_sd) and min_sd >= 0):
        raise ValueError(f"min_sd (a floor under the margins' standard deviation) must be finite and >= 0, got {min_sd!r}")
    if m.size < 2:
        return "weak", f"{m.mean():+.3f} (one run)"
    if m.mean() == 0:
        return "weak", f"0 (on the threshold, {m.size} seeds)"
    sd = max(m.std(ddof=1), min_sd)
    if sd <= 1e-12 * max(1.0, abs(m.mean())):  # equal up to rounding, and no floor given
        return "weak", f"{m.mean():+.3f} (the same at all {m.size} seeds: no spread to judge it by)"
    t = m.mean() / (sd / math.sqrt(m.size))
    label = "strong" if t >= t95(m.size - 1) else "moderate" if t >= t80(m.size - 1) else "weak"
    return label, f"{m.mean():+.3f} (t = {t:.1f}, {m.size} seeds)"


def _parts(conditions: dict) -> dict:
    if not conditions:
        raise ValueError("conditions must name at least one condition of the verdict: (held, per-seed margins)")
    return {k: (c[0], *strength((1.0 if c[0] else -1.0) * np.asarray(c[1], float), *c[2:]))
            for k, c in conditions.items()}


def firmness(conditions: dict, verdict: str = "") -> str:
    """The verdict's firmness, 'weak' | 'moderate' | 'strong': the weakest condition's when all hold, else the
    firmest failure's; 'weak' for an `inconclusive` verdict. `conditions`: name → (held, per-seed margins, the
    measured quantity minus the rule's threshold, positive where the condition holds[, min_sd: `strength`'s])."""
    if verdict.startswith("inconclusive"):
        return "weak"
    parts = _parts(conditions)
    failed = {k: v for k, v in parts.items() if not v[0]}
    pick = max if failed else min
    return pick((v[1] for v in (failed or parts).values()), key=ORDER.index)


def evidence(conditions: dict, verdict: str = "") -> str:
    """The verdict's firmness (`firmness`) and each condition's margin; arguments as in `firmness`."""
    return (f"**{firmness(conditions, verdict)}** (" + ("inconclusive; " if verdict.startswith("inconclusive") else "")
            + "; ".join(f"{k} {'holds' if held else 'fails'} by {text}"
                        for k, (held, _, text) in _parts(conditions).items()) + ")")
