"""Writes experiments/yarn_sweep/README.md and its figures from results/seed<n>.json (run.py)."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))
from posenc import timing, verdicts  # noqa: E402

# run.py under its own name: other experiments' run.py may already be imported as `run` (the tests)
_spec = importlib.util.spec_from_file_location("yarn_sweep_run", HERE / "run.py")
run = sys.modules.setdefault("yarn_sweep_run", importlib.util.module_from_spec(_spec))
_spec.loader.exec_module(run)
ATTENTION_FACTORS, BASE_LEN, BETA_FAST, BETA_SLOW = run.ATTENTION_FACTORS, run.BASE_LEN, run.BETA_FAST, run.BETA_SLOW
BETA_SCALE, SCALES, yarn_default_af = run.BETA_SCALE, run.SCALES, run.yarn_default_af

GRID_STEP = 0.1  # of ATTENTION_FACTORS: a choice within one step of YaRN's value is as close as the grid can say


def load() -> list[dict]:
    results = [json.loads(p.read_text()) for p in sorted((HERE / "results").glob("seed*.json"))]
    if not results:
        raise SystemExit(f"no results in {HERE / 'results'}: run experiments/yarn_sweep/run.py first")
    return sorted(results, key=lambda r: r["seed"])


def mean_sd(values) -> str:
    v = np.asarray(values, float)
    return f"{v.mean():.3f}" if v.size < 2 else f"{v.mean():.3f} ± {v.std(ddof=1):.3f}"


def render(results: list[dict]) -> str:
    seeds = [r["seed"] for r in results]
    n = len(results)
    timed = {r["seed"]: r["timing"]["sweeps_s"] for r in results if r["timing"].get("resumed") is False}
    # the machines the quoted times ran on (all seeds' where none was timed): CPU model, family and cores
    machines = timing.machines_text([r["timing"] for r in results if r["seed"] in timed or not timed])
    took = (f"sweeps took {min(timed.values()):.0f}–{max(timed.values()):.0f} s per seed" if len(timed) > 1 else
            f"seed {next(iter(timed))}'s sweeps took {next(iter(timed.values())):.0f} s" if timed else
            "no seed's sweeps were timed in one sitting")
    untimed = [r["seed"] for r in results if r["seed"] not in timed]
    took += (f" (seed(s) {', '.join(map(str, untimed))}: resumed, or run before results recorded whether they were)"
             if timed and untimed else "")
    floors = {json.dumps(r["test"]["ngram_floor"], sort_keys=True) for r in results}
    if len(floors) != 1:
        raise ValueError("the seeds' n-gram floors differ: they were scored on other bytes")
    spread = "mean ± standard deviation over seeds" if n > 1 else "one seed: no spread"

    # temperature: the validation choices, then the test scores
    choice_rows, test_rows, conditions = [], [], {}
    for s in SCALES:
        key, length = str(s), BASE_LEN * s
        chosen = [r["chosen"]["temperature"][key] for r in results]
        default = yarn_default_af(s)
        choice_rows.append(f"| {s} (L={length}) | " + " | ".join(f"{a:g}" for a in chosen)
                           + f" | {default:.3f} |")
        t = [r["test"]["temperature"][key] for r in results]
        test_rows.append(f"| {s} (L={length}) | " + " | ".join(mean_sd(v) for v in (
            [r["test"]["no_scaling"][str(length)] for r in results], [x["no_temperature"] for x in t],
            [x["yarn_default"] for x in t], [x["chosen"] for x in t]))
            + f" | {results[0]['test']['ngram_floor'][str(length)]:.3f} |")
        margins = [GRID_STEP - abs(a - default) for a in chosen]  # >= 0: within one grid step of YaRN's value
        conditions[f"s = {s}: |choice − (0.1·ln s + 1)| ≤ {GRID_STEP:g}"] = (  # held on the mean over seeds
            float(np.mean(margins)) >= -1e-9, margins)
    follows = all(held for held, _ in conditions.values())
    verdict = "reproduced" if follows else "not reproduced"
    helps = {s: [r["test"]["temperature"][str(s)]["no_temperature"] - r["test"]["temperature"][str(s)]["yarn_default"]
                 for r in results] for s in SCALES}
    gap = {s: [r["test"]["temperature"][str(s)]["yarn_default"] - r["test"]["temperature"][str(s)]["chosen"]
               for r in results] for s in SCALES}

    # betas
    b_choice = [r["chosen"]["betas"] for r in results]
    b_default = [r["test"]["betas"]["yarn_default"] for r in results]
    b_chosen = [r["test"]["betas"]["chosen"] for r in results]
    b_gain = [d - c for d, c in zip(b_default, b_chosen)]
    b_strength = verdicts.strength(b_gain)
    val_grid = np.array([[[r["validation"]["betas"][f"{f:g},{b:g}"] for b in BETA_SLOW] for f in BETA_FAST]
                         for r in results])  # [seed, beta_fast, beta_slow]
    beta_rows = [f"| {f:g} | " + " | ".join(mean_sd(val_grid[:, i, j]) for j in range(len(BETA_SLOW))) + " |"
                 for i, f in enumerate(BETA_FAST)]
    same = [(a, b) for i, (a, b) in enumerate(zip(BETA_FAST, BETA_FAST[1:])) if np.array_equal(val_grid[:, i], val_grid[:, i + 1])]
    same_text = "".join(f" Rows beta_fast = {a:g} and {b:g} are identical: at L0 = {BASE_LEN} the correction dimension "
                        "of both floors to pair 0 (experiments/figures/yarn_regions.png)." for a, b in same)

    ctx = results[0]["test"]["ngram_context"]
    return f"""# YaRN on the extrapolation study's RoPE runs: attention factor and betas

Generated by `report.py` from `results/seed*.json`. Regenerate (resumable; trains a seed's RoPE run if its
checkpoint is missing):

```bash
python experiments/yarn_sweep/run.py && python experiments/yarn_sweep/report.py
```

Runs: RoPE runs of the extrapolation study's config (`experiments/extrapolation/config.py`: train_len
{BASE_LEN}), seeds {", ".join(map(str, seeds))}, trained by run.py where their checkpoints were missing (training is not
bitwise reproducible across CPU kinds, so these need not be the runs the study's own tables scored). Every setting is **chosen on the validation split** and **scored on the test split**,
{results[0]["num_bytes"]:,} bytes of each (non-overlapping windows), YaRN applied at inference time (no
retraining). {took[0].upper() + took[1:]}, on {machines}.

## Does the best attention factor follow 0.1·ln s + 1 for a byte-level model?

YaRN (Peng et al. 2023, eq. 22) sets the attention factor sqrt(1/t) = 0.1·ln s + 1 at scale s. Here each
seed picks its factor from {{{", ".join(f"{a:g}" for a in ATTENTION_FACTORS)}}} by validation bits per byte at
L = {BASE_LEN}·s (`RopeScaling.attention_factor` multiplies cos and sin, so the logits by its square).

Validation choice per seed:

| s | {" | ".join(f"seed {s}" for s in seeds)} | 0.1·ln s + 1 |
|---|{"---|" * (n + 1)}
{chr(10).join(choice_rows)}

Test bits per byte ({spread}; no scaling and the n-gram floor — interpolated Witten–Bell, {ctx}-byte context,
fit on train — are the baselines on the same windows):

| s | no scaling | YaRN, factor 1 | YaRN, 0.1·ln s + 1 | YaRN, validation choice | n-gram floor |
|---|---|---|---|---|---|
{chr(10).join(test_rows)}

**Verdict: {verdict}** — evidence {verdicts.evidence(conditions, verdict)}. Rule: at every s, the
seeds' choices are within {GRID_STEP:g} (the grid's step: as close as this grid can tell) of 0.1·ln s + 1 on
the mean of 0.1 − |choice − (0.1·ln s + 1)| over seeds.
On test, YaRN's temperature against none (factor 1 minus 0.1·ln s + 1, positive where the temperature
helps): {"; ".join(f"s = {s}: {_direction(helps[s], 'helps', 'hurts')}" for s in SCALES)}.
The validation choice against YaRN's value (positive where the choice is better on test):
{"; ".join(f"s = {s}: {verdicts.strength(gap[s])[1]}" for s in SCALES)}.

![chosen attention factor](best_attention_factor.png)

## beta_fast × beta_slow at s = {BETA_SCALE} (L = {BASE_LEN * BETA_SCALE})

Validation bits per byte ({spread}), YaRN's default attention factor:

| beta_fast \\ beta_slow | {" | ".join(f"{b:g}" for b in BETA_SLOW)} |
|---|{"---|" * len(BETA_SLOW)}
{chr(10).join(beta_rows)}

Validation choice per seed: {"; ".join(f"seed {s}: beta_fast = {c['beta_fast']:g}, beta_slow = {c['beta_slow']:g}" for s, c in zip(seeds, b_choice))}.
On test: YaRN's defaults 32 / 1 give {mean_sd(b_default)} bits per byte, the validation choice {mean_sd(b_chosen)}
(defaults minus choice: {b_strength[1]}, **{b_strength[0]}**).{same_text} YaRN's defaults were chosen for
2k–4k original contexts; at a {BASE_LEN}-byte original length a smaller beta_fast keeps more high-frequency pairs
intact.

![betas](betas.png)
"""


def _direction(diffs, up: str, down: str) -> str:
    """'+0.060 (t = 6.1, 3 seeds): helps, strong' — the firmness of the side the mean falls on."""
    mean = float(np.mean(diffs))
    label, text = verdicts.strength(diffs if mean >= 0 else -np.asarray(diffs))  # text: "<mean> (<t, seeds>)"
    return f"{mean:+.3f}{text[text.index(' '):]}: {up if mean >= 0 else down}, {label}"


def _figures(results: list[dict]) -> None:
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for i, r in enumerate(results):  # open markers shrinking seed by seed: seeds with the same choices stay visible
        ax.plot(SCALES, [r["chosen"]["temperature"][str(s)] for s in SCALES], "os^Dv"[i % 5] + "-", alpha=0.8,
                markersize=12 - 3 * (i % 3), markerfacecolor="none", markeredgewidth=1.5,
                label=f"validation choice, seed {r['seed']}")
    grid = np.geomspace(min(SCALES), max(SCALES), 100)
    ax.plot(grid, [yarn_default_af(g) for g in grid], "k--", label="0.1·ln s + 1 (YaRN)")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("scale s (evaluated at 256·s bytes)")
    ax.set_ylabel("attention factor sqrt(1/t)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(HERE / "best_attention_factor.png", dpi=100)
    plt.close(fig)

    grid = np.array([[[r["validation"]["betas"][f"{f:g},{b:g}"] for b in BETA_SLOW] for f in BETA_FAST]
                     for r in results]).mean(axis=0)
    fig, ax = plt.subplots(figsize=(5.5, 4.5))
    im = ax.imshow(grid, cmap="viridis_r", origin="lower", aspect="auto")
    ax.set_xticks(range(len(BETA_SLOW)), [f"{b:g}" for b in BETA_SLOW])
    ax.set_yticks(range(len(BETA_FAST)), [f"{f:g}" for f in BETA_FAST])
    ax.set_xlabel("beta_slow")
    ax.set_ylabel("beta_fast")
    for (i, j), v in np.ndenumerate(grid):
        ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white")
    fig.colorbar(im, ax=ax, label=f"validation bits per byte at L={BASE_LEN * BETA_SCALE} (mean over seeds)")
    fig.tight_layout()
    fig.savefig(HERE / "betas.png", dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    results = load()
    text = render(results)
    _figures(results)
    (HERE / "README.md").write_text(text)
    print(text)
