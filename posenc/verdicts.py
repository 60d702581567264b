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

# two-sided Student t quantiles by degrees of freedom (95% and 80% intervals)
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}
T80 = {1: 3.078, 2: 1.886, 3: 1.638, 4: 1.533, 5: 1.476, 6: 1.440, 7: 1.415, 8: 1.397, 9: 1.383}
ORDER = ("weak", "moderate", "strong")


def strength(margins, min_sd: float = 0.0) -> tuple[str, str]:
    """('weak' | 'moderate' | 'strong', a description) of margins that should be positive; `min_sd`: a floor
    under their standard deviation (one seed's measurement noise)."""
    m = np.asarray(margins, float)
    if m.size == 0 or not np.isfinite(m).all():
        raise ValueError(f"margins must be finite, one per run, got {m.tolist()}: a missing measurement is no "
                         "evidence (leave the claim unmeasured)")
    if m.size < 2:
        return "weak", f"{m.mean():+.3f} (one run)"
    if m.mean() == 0:
        return "weak", f"0 (on the threshold, {m.size} seeds)"
    sd = max(m.std(ddof=1), min_sd)
    if sd <= 1e-12 * max(1.0, abs(m.mean())):  # equal up to rounding, and no floor given
        return "weak", f"{m.mean():+.3f} (the same at all {m.size} seeds: no spread to judge it by)"
    t = m.mean() / (sd / math.sqrt(m.size))
    df = min(m.size - 1, max(T95))
    label = "strong" if t >= T95[df] else "moderate" if t >= T80[df] else "weak"
    return label, f"{m.mean():+.3f} (t = {t:.1f}, {m.size} seeds)"


def _parts(conditions: dict) -> dict:
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
