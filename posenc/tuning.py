"""A fair tuning budget for the hand-set RoPE scaling rules: each rule's free parameters are searched on the
validation split with as many evaluations as the LongRoPE search spent, and the choice is then scored on test.

LongRoPE (Ding et al. 2024, arXiv 2402.13753; `posenc.longrope`) fits per-pair factors with an evolutionary
search of a few hundred validation evaluations, while PI, NTK and YaRN come with fixed rules. Comparing them
as they come credits the search with its tuning. Here each rule gets a random search of the same size
(`budget`, by default LongRoPE's own count of evaluations, `longrope_evaluations`) over the space of its
free parameters (`SPACES`), seeded, whose first point is the rule's published default (so a tuned rule is never
worse than its default on validation). The point with the lowest validation bits per byte at the target
length wins; the default and the winner are then scored on the test split. Points are evaluated through the
eval sweep (`posenc.sweep.run_eval_sweep`: one compiled forward for all of them, and a rerun resumes).

The spaces, with s = target length / training length (the sampled parameters; the rest as the rule sets them):

| rule | parameters | range | default |
|---|---|---|---|
| `linear` (PI) | factor | [1, 2s], log-uniform | s |
| `ntk` | factor (α of b' = b·α^(d/(d−2))) | [1, 4s], log-uniform | s |
| `dynamic_ntk` | factor of Hugging Face's slope formula | [1, 4s], log-uniform | 1 (length-tracking) |
| `yarn` (factor s) | beta_fast; beta_slow; attention_factor | [8, 128], [1/8, 4] log-uniform; [0.8, 1.6] | 32; 1; 0.1 ln s + 1 |
| `dynamic_yarn` | the same, s = max(1, T / L) | as `yarn` | as `yarn` |
| `dynamic_linear` | none: s = max(1, T / L) | — | — |

A rule without free parameters is evaluated once, whatever the budget, and says so (`evaluations`: 1).
The budget is the search's count over all its stages (its second stage evaluates at the training length),
while every evaluation of a rule is at the target; `scripts/tune_scaling.py` makes each as large as the
search's evaluations at the target (`longrope_bytes`).

A tuned point is one scaling, applied unchanged at every test length: a factor tuned for the target stays
that factor at shorter or longer windows (as a deployed static scaling does), whereas the evaluation's named
scalings (`posenc.evaluate.scaling_for`) use s = L / L0 at each length L. Its scores away from the target are
labelled so (`test_scaling` in the result).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import zlib
from typing import Any, Sequence

import numpy as np

from posenc import jobs, sweep

RULES = ("linear", "ntk", "dynamic_ntk", "yarn", "dynamic_yarn", "dynamic_linear")
LENGTH_TRACKING = ("dynamic_yarn", "dynamic_linear")  # RopeScaling(dynamic=True): s = max(1, T / L)
_YARN_SPACE = {"beta_fast": (8.0, 128.0, "log"), "beta_slow": (0.125, 4.0, "log"), "attention_factor": (0.8, 1.6, "linear")}


def space(rule: str, s: float) -> dict[str, tuple[float, float, str]]:
    """The sampled parameters of `rule` at scale `s`: {field: (low, high, 'log' | 'linear')}."""
    check_rule(rule)
    if rule == "linear":
        return {"factor": (1.0, 2.0 * s, "log")}
    if rule in ("ntk", "dynamic_ntk"):
        return {"factor": (1.0, 4.0 * s, "log")}
    if rule in ("yarn", "dynamic_yarn"):
        return dict(_YARN_SPACE)
    return {}


def check_rule(rule: str) -> None:
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")


def kind_of(rule: str) -> str:
    """The RopeScaling kind a rule's points modify (`dynamic_yarn` is `yarn` with dynamic=True)."""
    check_rule(rule)
    return rule if rule == "dynamic_ntk" else rule.removeprefix("dynamic_")


def default_point(rule: str, s: float) -> dict[str, Any]:
    """The rule as published, as an eval-sweep point."""
    check_rule(rule)
    if rule in LENGTH_TRACKING:
        return {"dynamic": True}
    if rule == "dynamic_ntk":  # s = max(1, T / L) (YaRN paper §3.3): slope 1 in Hugging Face's formula
        return {"factor": 1.0}
    if rule == "yarn":
        return {"factor": float(s), "beta_fast": 32.0, "beta_slow": 1.0}  # attention factor: 0.1 ln s + 1
    return {"factor": float(s)}


def sample_points(rule: str, s: float, budget: int, seed: int = 0) -> list[dict[str, Any]]:
    """`budget` eval-sweep points of `rule` (one for a rule without free parameters): its default first, then
    independent draws from `space(rule, s)`, a pure function of (rule, s, budget, seed)."""
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget must be an integer >= 1 (validation evaluations per rule), got {budget!r}")
    if not (math.isfinite(s) and s > 1):
        raise ValueError(f"the scale s = target_len / the run's original length must be > 1, got {s!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    fields = space(rule, s)
    first = default_point(rule, s)
    if not fields:
        return [first]
    rng = np.random.default_rng([seed, zlib.crc32(rule.encode())])
    points = [first]
    fixed = {"dynamic": True} if rule in LENGTH_TRACKING else {"factor": float(s)} if rule == "yarn" else {}
    while len(points) < budget:
        point = dict(fixed)
        for field, (lo, hi, scale) in fields.items():
            u = rng.uniform()
            value = math.exp(math.log(lo) + u * (math.log(hi) - math.log(lo))) if scale == "log" else lo + u * (hi - lo)
            point[field] = round(float(value), 6)
        points.append(point)
    return points


def longrope_evaluations(path: str | pathlib.Path) -> int:
    """The validation evaluations a LongRoPE search spent (`evaluations` in its longrope.json, all stages)."""
    result = json.loads(pathlib.Path(path).read_text())
    if "evaluations" not in result:
        raise ValueError(f"{path} has no 'evaluations' count: its search ran before the count was kept. Rerun "
                         "scripts/search_longrope.py into a fresh --out (a search resumed from the old stage*.json "
                         "states cannot count the generations they hold), or give the budget directly")
    return int(result["evaluations"])


def longrope_bytes(path: str | pathlib.Path, target_len: int) -> int:
    """The validation bytes each evaluation of a LongRoPE search scored at `target_len`
    (`bytes_per_evaluation` in its longrope.json): what a tuned rule's evaluations score for an equal budget."""
    result = json.loads(pathlib.Path(path).read_text())
    per = result.get("bytes_per_evaluation", {})
    if str(target_len) not in per:
        raise ValueError(f"{path} records no bytes per evaluation at {target_len} (its search ran at "
                         f"{result.get('target_len')}, or before the bytes were kept): give --num_bytes")
    return int(per[str(target_len)])


def tune(workdir: str, rule: str, target_len: int, budget: int, root: str, *, seed: int = 0,
         num_bytes: int | None = None, test_lengths: Sequence[int] | None = None, test_num_bytes: int | None = None,
         budget_source: str = "given", progress: bool = True) -> dict[str, Any]:
    """Tunes `rule` for run `workdir` at `target_len` on validation (`num_bytes` per evaluation), scores the
    default and the winner on test (`test_num_bytes`, default `num_bytes`, at `test_lengths` and the target:
    bits per byte `test_bpb`, their 95% bootstrap interval over windows `test_ci`, each window's bits per byte
    `test_window_bpb` (for a paired comparison with another scaling on the same windows) and the n-gram floor on
    the same windows `test_floor`, each by length), and writes `root/<rule>_<target_len>.json` (the trials, the choice and
    both test scores). The sweep's point records go to `root/<rule>_<target_len>/` (a rerun resumes from them; a
    rerun with another budget or seed is refused before any work, as is one whose points would overwrite finished
    ones of other settings)."""
    from posenc.evaluate import load_run  # noqa: PLC0415

    from posenc.evaluate import check_num_bytes, run_stream  # noqa: PLC0415

    run = load_run(workdir)
    if not run.cfg.encoding.takes_rope_scaling:
        raise ValueError(f"tuning a RoPE scaling needs a run whose encoding takes one; {workdir!r} has "
                         f"posenc={run.cfg.posenc!r}")
    s = target_len / run.base_len
    root = pathlib.Path(root).expanduser()
    out = root / f"{rule}_{target_len}.json"
    if out.exists():  # another budget or seed would replace the finished result with another search's
        old = json.loads(out.read_text())
        differ = [f"{f}: {old.get(f)!r} in {out}, {v!r} now" for f, v in (("budget", budget), ("seed", seed))
                  if old.get(f) != v]
        if differ:
            raise ValueError(f"{out} holds a tuning of {rule} at {target_len} with other settings ({'; '.join(differ)}): "
                             "give this one its own root")
    points = sample_points(rule, s, budget, seed)
    lengths = sorted(set(test_lengths or []) | {target_len})
    for split, n, ls in (("validation", num_bytes, [target_len]), ("test", test_num_bytes or num_bytes, lengths)):
        check_num_bytes(run_stream(run, split)[0], ls, n, default_windows=8, what=f"the {split} split")  # before any work
    named = [(f"{rule}-{i:04d}", p) for i, p in enumerate(points)]
    folder = root / f"{rule}_{target_len}"
    kind = kind_of(rule)
    key = f"bpb_L{target_len}"
    val = sweep.run_eval_sweep(workdir, str(folder / "validation"), named, lengths=[target_len], scaling=kind,
                               num_bytes=num_bytes, split="validation", progress=progress)
    trials = [{"name": r["name"], "point": r["point"], "status": r["status"], "val_bpb": r.get(key),
               **({"error": r["error"]} if r["status"] != "done" else {})} for r in val]
    scored = [t for t in trials if t["status"] == "done" and t["val_bpb"] is not None and math.isfinite(t["val_bpb"])]
    if not scored:
        raise RuntimeError(f"every {rule} point failed on validation (first error: {trials[0].get('error')})")
    best = min(scored, key=lambda t: t["val_bpb"])  # ties: the earlier point (the default comes first)
    default = trials[0]
    chosen = [(default["name"], default["point"])] + ([(best["name"], best["point"])] if best is not default else [])
    test = {r["name"]: r for r in sweep.run_eval_sweep(workdir, str(folder / "test"), chosen, lengths=lengths,
                                                       scaling=kind, num_bytes=test_num_bytes or num_bytes, split="test",
                                                       progress=progress, windows=True)}

    def summary(trial):  # test bits per byte with their 95% bootstrap interval over windows and the n-gram floor
        record = test[trial["name"]]
        return {"name": trial["name"], "point": trial["point"], "val_bpb": trial["val_bpb"],
                "test_bpb": {str(n): record.get(f"bpb_L{n}") for n in lengths},
                "test_ci": {str(n): None if record.get(f"ci_L{n}") is None else list(record[f"ci_L{n}"])
                            for n in lengths},
                "test_window_bpb": {str(n): record.get(f"window_bpb_L{n}") for n in lengths},
                "test_floor": {str(n): record.get(f"floor_L{n}") for n in lengths}, "test_status": record["status"]}

    result = {"rule": rule, "kind": kind, "run": workdir, "step": run.step, "train_len": run.base_len,
              "target_len": target_len, "s": s, "budget": budget, "budget_source": budget_source,
              "evaluations": len(trials), "seed": seed, "space": {k: list(v) for k, v in space(rule, s).items()},
              "selection": {"split": "validation", "metric": f"bits per byte at {target_len}",
                            "num_bytes": val[0]["num_bytes"]},
              "test_num_bytes": next(iter(test.values()))["num_bytes"],
              "test_scaling": "each point applied unchanged at every test length (tuned for the target)",
              "default": summary(default), "best": summary(best), "trials": trials}
    out.parent.mkdir(parents=True, exist_ok=True)
    jobs.write_atomic(out, json.dumps(result, indent=1))
    return result


def same_run(workdir: str, name: str) -> bool:
    """Whether an evaluation row's run `name` (`posenc.evaluate.Run.name`: the workdir's last folder, or the whole
    workdir) names the run at `workdir`."""
    if os.path.normpath(name) == os.path.normpath(workdir):
        return True
    return os.sep not in name and "/" not in name and name == pathlib.PurePath(os.path.normpath(workdir)).name


def paired_gap(tuned: dict[str, Any], row: dict[str, Any]) -> tuple[float, float, int] | None:
    """(lo, hi, windows): the paired 95% bootstrap interval (`posenc.evaluate.paired_interval`) of another scaling's
    test bits per byte minus the tuned rule's, over the same test windows at the target: `row`, an evaluation row of
    the other scaling (`posenc.evaluate.evaluate`'s, with its `window_bpb`), `tuned`, a `tune` result (its best
    point's `test_window_bpb`); None where the tuned result kept no per-window scores (a rerun of `tune` scores
    them) or where there is one window only (no interval). A row of another run, split or checkpoint (`step`), or
    windows of other bytes or lengths, are refused. The run is matched by name: `tuned['run']` is the workdir
    `tune` was given, `row['run']` the evaluation's name of its run (the workdir's last folder, or the whole
    workdir where two runs of one evaluation share it)."""
    target = tuned["target_len"]
    windows = tuned["best"].get("test_window_bpb", {}).get(str(target))
    if windows is None:
        return None
    if not same_run(tuned["run"], row["run"]):
        raise ValueError(f"the tuned {tuned['rule']} result is of run {tuned['run']!r}, the other row of run "
                         f"{row['run']!r}: not the same model's windows to pair")
    if (row["split"], row["step"]) != ("test", tuned["step"]):
        raise ValueError(f"the tuned {tuned['rule']} result was scored on the test split of step {tuned['step']}, the "
                         f"other row on split {row['split']!r} of step {row['step']}: not the same windows to pair")
    if (tuned["test_num_bytes"], target) != (row["num_bytes"], row["length"]) or len(windows) != len(row["window_bpb"]):
        raise ValueError(f"the tuned {tuned['rule']} result was scored on {tuned['test_num_bytes']} test bytes at "
                         f"{target} ({len(windows)} windows), the other row on {row['num_bytes']} at {row['length']} "
                         f"({len(row['window_bpb'])} windows): not the same windows to pair")
    from posenc.evaluate import paired_interval  # noqa: PLC0415

    interval = paired_interval(row["window_bpb"], windows)  # None for fewer than 2 windows
    return None if interval is None else (*interval, len(windows))
