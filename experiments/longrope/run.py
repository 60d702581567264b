r"""LongRoPE against hand-set scalings at 4x and 8x, without fine-tuning. From the repository root:

    python experiments/longrope/run.py [--workdir=runs/extrapolation/rope-s0]

Searches shared and per-layer LongRoPE factors (validation split) for targets 1024 and 2048 on a RoPE run
trained at train_len 256 (the extrapolation study's seed-0 run), then scores PI, NTK, dynamic NTK, YaRN and
both LongRoPE variants on the test split, and writes experiments/longrope/README.md (`write_report`: rendered
from results/ alone, the wall times naming the machine each was measured on). Resumable: the searches
keep their populations under runs/longrope/, finished evaluations are kept in results/. A search folder holding
a stage or result of another search version (posenc.longrope.SEARCH_VERSION), which search_run would refuse to
resume, is moved aside to <folder>.search_v<versions> and searched again (`set_aside_stale`); the evaluations of
a search whose result changed are redone.
"""

import json
import pathlib
import shutil
import time

from absl import app, flags, logging

from posenc import evaluate as ev
from posenc import jobs, malloc
from posenc import tuning
from posenc.longrope import SEARCH_VERSION, SearchConfig, saved_versions, search_run
from posenc.timing import machine_record, machines_text

HERE = pathlib.Path(__file__).resolve().parent
_WORKDIR = flags.DEFINE_string("workdir", "runs/extrapolation/rope-s0", "RoPE run trained at 256.")
_ROOT = flags.DEFINE_string("root", "runs/longrope", "Search state.")
_TARGETS = flags.DEFINE_list("targets", ["1024", "2048"], "Target lengths.")
_POP = flags.DEFINE_integer("population", 16, "Population (paper: 64).")
_GENS = flags.DEFINE_integer("generations", 10, "Generations (paper: 40).")
_NUM_BYTES = flags.DEFINE_integer("num_bytes", 32768, "Test bytes scored.")

SEARCH = dict(mutations=8, crossovers=8, parents=8, mutation_prob=0.3, seed=0)
RULES = ("linear", "ntk", "dynamic_ntk", "yarn", "dynamic_yarn")  # tuned with the per-layer search's budget


def main(argv):
    malloc.keep_buffers()  # before JAX starts its threads: posenc/malloc.py
    del argv
    logging.set_verbosity(logging.ERROR)
    results_dir = HERE / "results"
    results_dir.mkdir(exist_ok=True)
    timing_path = results_dir / "timing.json"
    timing = json.loads(timing_path.read_text()) if timing_path.exists() else {}
    cfg = SearchConfig(population=_POP.value, generations=_GENS.value, **SEARCH)
    for target in map(int, _TARGETS.value):
        files = {}
        for variant in ("shared", "per_layer"):
            out = pathlib.Path(_ROOT.value) / f"{variant}_{target}"
            set_aside_stale(out)  # (the shared folder first: the per-layer one copies its stage 1 below)
            if variant == "per_layer":  # reuse the shared stage-1 search instead of repeating it
                out.mkdir(parents=True, exist_ok=True)
                src = pathlib.Path(_ROOT.value) / f"shared_{target}" / "stage1_shared.json"
                if src.exists() and not (out / "stage1_shared.json").exists():
                    shutil.copy(src, out / "stage1_shared.json")
            fresh = not (out / "longrope.json").exists()
            t0 = time.time()
            # every time: a finished search resumes to its result, or refuses other settings, or runs on to more
            # --generations
            search_run(_WORKDIR.value, target, cfg, per_layer=variant == "per_layer", out=str(out),
                       short_generations=max(1, _GENS.value // 2))
            if fresh:
                timing[f"search/{variant}_{target}"] = time.time() - t0
                timing.setdefault("machines", {})[f"search/{variant}_{target}"] = machine_record()
                jobs.write_atomic(timing_path, json.dumps(timing, indent=1))
            files[variant] = out / "longrope.json"
            kept = results_dir / f"longrope_{variant}_{target}.json"  # the factors results/ was scored with
            if kept.exists() and kept.read_text() != files[variant].read_text():
                (results_dir / f"eval_{target}.json").unlink(missing_ok=True)  # the search changed: score it again
            jobs.write_atomic(kept, files[variant].read_text())
        cache = results_dir / f"eval_{target}.json"
        if not cache.exists():
            base = ev.evaluate([_WORKDIR.value], [256, target], ["none", "linear", "ntk", "dynamic_ntk", "yarn"],
                               num_bytes=_NUM_BYTES.value, progress=True)
            out_rows = [r for r in base["rows"] if r["protocol"] == "nonoverlap"]
            for variant, path in files.items():
                lr = ev.evaluate([_WORKDIR.value], [256, target], ["longrope"], num_bytes=_NUM_BYTES.value,
                                 longrope_file=str(path), progress=True)
                for r in lr["rows"]:
                    if r["protocol"] == "nonoverlap":
                        r["scaling"] = f"longrope_{variant}"
                        out_rows.append(r)
            for split in ("validation",):  # the search's own split, to see whether the gain survives on test
                for variant, path in files.items():
                    lr = ev.evaluate([_WORKDIR.value], [target], ["longrope"], num_bytes=4 * target, split=split,
                                     longrope_file=str(path), progress=False)
                    for r in lr["rows"]:
                        if r["protocol"] == "nonoverlap":
                            r["scaling"] = f"longrope_{variant}"
                            out_rows.append(r)
            jobs.write_atomic(cache, json.dumps(out_rows))
        budget = tuning.longrope_evaluations(files["per_layer"])  # every evaluation the per-layer result cost
        for rule in RULES:
            out = results_dir / f"tuned_{rule}_{target}.json"
            kept = json.loads(out.read_text()) if out.exists() else None
            if kept is None or kept["budget"] != budget or "test_window_bpb" not in kept["best"]:
                # (the searches changed, or the result predates per-window test scores: the rerun resumes from
                # the point records and scores again only the test points without them)
                t0 = time.time()
                root = pathlib.Path(_ROOT.value) / "tuned" / f"budget{budget}"  # tune refuses another budget's root
                tuning.tune(_WORKDIR.value, rule, target, budget, str(root),
                            num_bytes=4 * target, test_lengths=[256], test_num_bytes=_NUM_BYTES.value,
                            budget_source=f"the per-layer LongRoPE search at {target}")
                if kept is None or kept["budget"] != budget:  # a whole tuning: its wall time
                    timing[f"tune/{rule}_{target}"] = time.time() - t0
                    timing.setdefault("machines", {})[f"tune/{rule}_{target}"] = machine_record()
                    jobs.write_atomic(timing_path, json.dumps(timing, indent=1))
                jobs.write_atomic(out, (root / f"{rule}_{target}.json").read_text())
    print(write_report())


def set_aside_stale(out: pathlib.Path) -> pathlib.Path | None:
    """Moves the search folder `out` to `<out>.search_v<its versions>` (`.1`, `.2`, … after an earlier one) when a
    stage state or result in it was saved by another search version than posenc.longrope.SEARCH_VERSION
    (`saved_versions`; an unreadable one counts too), so that the search starts again instead of search_run
    refusing it; returns where it went, or None when `out` is current (or absent) and stays."""
    stale = {name: v for name, v in saved_versions(out).items() if v != SEARCH_VERSION} if out.is_dir() else {}
    if not stale:
        return None
    tag = "-".join(sorted({str(v) for v in stale.values()}))  # "None" for an unreadable file
    dest = out.with_name(f"{out.name}.search_v{tag}")
    n = 0
    while dest.exists():
        n += 1
        dest = out.with_name(f"{out.name}.search_v{tag}.{n}")
    out.rename(dest)
    print(f"{out}: " + ", ".join(f"{name} (search version {v})" for name, v in stale.items())
          + f" saved by another search version than posenc.longrope.SEARCH_VERSION = {SEARCH_VERSION}; moved to "
          f"{dest}, searching again")
    return dest


def row_label(scaling: str, row: dict) -> str:
    """A row's scaling as the table names it: `dynamic_ntk` with the slope its row recorded where that is not 1
    (these rows were scored when the named scaling meant Hugging Face's slope L / 256, NTK at s² − s + 1)."""
    if scaling == "dynamic_ntk" and row.get("factor") not in (None, 1.0):
        return f"dynamic_ntk (Hugging Face's slope {row['factor']:g})"
    return scaling


def search_settings(results_dir: pathlib.Path) -> dict:
    """The searches' population and generations (stage 1 and stage 2) as their results recorded them (the sizes of
    their histories), the same for every kept result, or a ValueError naming the files that differ."""
    seen = {}
    for path in sorted(results_dir.glob("longrope_*.json")):
        result = json.loads(path.read_text())
        stage1, stage2 = result["stage1_shared"]["history"], result["stage2_short"]["history"]
        seen[path.name] = (stage1[0]["evaluated"], len(stage1) - 1, len(stage2) - 1)
    if len(set(seen.values())) != 1:
        raise ValueError(f"{results_dir}: the searches ran with other populations or generations "
                         f"(population, generations, stage-2 generations): {seen}; rerun run.py")
    population, generations, short_generations = next(iter(seen.values()))
    return {"population": population, "generations": generations, "short_generations": short_generations}


def write_report(results_dir: pathlib.Path = HERE / "results", out: pathlib.Path = HERE) -> str:
    """Writes `out`/README.md, rendered (`render`) from `results_dir`; returns its text."""
    text = render(results_dir)
    (out / "README.md").write_text(text)
    return text


def render(results_dir: pathlib.Path = HERE / "results") -> str:
    """The README from `results_dir` alone: the evaluations (eval_<target>.json), the kept searches
    (longrope_*.json), the tuned rules (tuned_*.json) and the wall times with the machines they ran on
    (timing.json)."""
    timing = json.loads((results_dir / "timing.json").read_text()) if (results_dir / "timing.json").exists() else {}
    settings = search_settings(results_dir)
    targets = sorted(int(p.stem.split("_")[1]) for p in results_dir.glob("eval_*.json"))
    num_bytes = {r["num_bytes"] for t in targets for r in json.loads((results_dir / f"eval_{t}.json").read_text())
                 if r["split"] == "test"}
    if len(num_bytes) != 1:
        raise ValueError(f"{results_dir}: the test rows were scored on different numbers of bytes {sorted(num_bytes)}")
    lines = []
    for target in targets:
        evals = json.loads((results_dir / f"eval_{target}.json").read_text())
        test = {(r["scaling"], r["length"]): r for r in evals if r["split"] == "test"}
        val = {r["scaling"]: r for r in evals if r["split"] == "validation"}
        lines += [f"### Target {target} ({target // 256}×)", "",
                  "| scaling | test bpb at 256 | test bpb at " + str(target) + " | validation (search split) bpb at " + str(target) + " |",
                  "|---|---|---|---|"]
        for s in ("none", "linear", "ntk", "dynamic_ntk", "yarn", "longrope_shared", "longrope_per_layer"):
            v = val.get(s)
            lines.append(f"| {row_label(s, test[(s, target)])} | {test[(s, 256)]['bpb']:.3f} | {test[(s, target)]['bpb']:.3f} | "
                         f"{'' if v is None else format(v['bpb'], '.3f')} |")
        tuned = {rule: json.loads(path.read_text()) for rule in RULES
                 if (path := results_dir / f"tuned_{rule}_{target}.json").exists()}
        num = lambda v: "failed" if v is None else f"{v:.3f}"  # noqa: E731
        for rule, t in tuned.items():
            b = t["best"]
            lines.append(f"| {rule}, tuned for {target} ({t['evaluations']} validation evaluations: {b['point']}; "
                         f"the same scaling at 256) | {num(b['test_bpb']['256'])} | {num(b['test_bpb'][str(target)])} | "
                         f"{num(b['val_bpb'])} |")
        lines.append("")
        if tuned:  # both chosen on validation, compared on test
            rule, t = min(tuned.items(), key=lambda kv: kv[1]["best"]["val_bpb"])
            variant = min(("longrope_shared", "longrope_per_layer"), key=lambda v: val[v]["bpb"])
            ours, theirs = t["best"]["test_bpb"][str(target)], test[(variant, target)]["bpb"]
            gap = "–" if ours is None else f"{theirs - ours:+.4f}"
            ci = tuning.paired_gap(t, test[(variant, target)])
            gap += "" if ci is None else f" (paired 95% interval over the {ci[2]} test windows [{ci[0]:+.4f}, {ci[1]:+.4f}])"
            lines += [f"Best tuned rule on validation ({rule}: test {num(ours)}) vs the LongRoPE variant best on "
                      f"validation ({variant}: test {theirs:.3f}): {gap} bpb on test (negative: LongRoPE better). Each "
                      "rule had as many validation evaluations as the per-layer search (a seeded random search, the "
                      "rule's default first; `posenc/tuning.py`); its validation column is on the search's 4 "
                      "windows, its test columns on the same test bytes as the rest.", ""]
        t_shared, t_layer = test[("longrope_shared", target)]["bpb"], test[("longrope_per_layer", target)]["bpb"]
        v_shared, v_layer = val["longrope_shared"]["bpb"], val["longrope_per_layer"]["bpb"]
        best_hand = min((test[(s, target)]["bpb"], s) for s in ("linear", "ntk", "dynamic_ntk", "yarn"))
        layer_search = json.loads((results_dir / f"longrope_per_layer_{target}.json").read_text())
        at_target = {k: sum(h["evaluated"] for h in layer_search[k]["history"])
                     for k in ("stage1_shared", "stage1_per_layer")}
        lines.append(f"Per-layer vs shared: {v_layer - v_shared:+.4f} bpb on the search (validation) split, "
                     f"{t_layer - t_shared:+.4f} on test. The per-layer search starts from the shared search's best "
                     f"and keeps its best (elitist), with {at_target['stage1_per_layer']} evaluations at the target "
                     f"on top of the shared search's {at_target['stage1_shared']}: it cannot be worse on the search "
                     "split, and the gap is not a same-budget test of per-layer against shared factors (seed 004's "
                     "claim that layers need different factors). Best LongRoPE vs best untuned hand-set rule "
                     f"({row_label(best_hand[1], test[(best_hand[1], target)])}, "
                     f"{best_hand[0]:.3f}): {min(t_shared, t_layer) - best_hand[0]:+.4f} bpb on test (each side's best "
                     "picked on test: optimistic for both).")
        lines.append("")
    searches = [k for k in timing if k.startswith("search/")]
    total = sum(timing[k] for k in searches)
    timed_on = machines_text([timing.get("machines", {}).get(k) for k in searches])
    n_hats = ", ".join(map(str, SearchConfig().n_hat_choices))
    text = f"""# LongRoPE search against hand-set RoPE scalings

Regenerate (resumable):

```bash
python experiments/longrope/run.py     # after experiments/extrapolation/run.py has trained rope-s0
```

**Setup.** The extrapolation study's seed-0 RoPE run (d_model 128, 4 layers, head_dim 32, train_len 256,
400 steps). LongRoPE search (`posenc/longrope.py`): population {settings['population']}, {settings['generations']} generations,
{SEARCH['mutations']} mutations + {SEARCH['crossovers']} crossovers per generation, {SEARCH['parents']} parents,
mutation probability {SEARCH['mutation_prob']}, seed {SEARCH['seed']} — smaller than the paper's 64 / 40 / 16 /
16 / 32 to fit a small CPU budget; λ within [1, 1.25·s], non-decreasing, continuous (the paper: a 0.01 grid); a mutation
draws λ_i inside [λ_(i−1), λ_(i+1)], a crossover child that is not non-decreasing is drawn again (search
version {SEARCH_VERSION}); n̂ ∈ {{{n_hats}}}, applied with the long factors only and without the attention
factor, as microsoft/LongRoPE. Fitness:
perplexity at the target length on 4 windows of the validation split. Per-layer search seeded from the best
shared vector. Stage 2 searches short factors at 256 ({settings['short_generations']} generations) from all ones. On a flat
stretch of λ every inner pair's interval [λ_(i−1), λ_(i+1)] is a point, so a mutation can move only its ends
and each generation frees at most about one more pair: with this budget the short factors stay ones but for
the last pairs, and the long factors keep stretches of the seeds' flat values (the reference's search has the
same structure, with 40 generations of 64). Evaluation: the first
{num_bytes.pop()} test bytes, non-overlapping windows, no fine-tuning. Search wall time: {total / 60:.1f} min in
all ({', '.join(f'{k.split("/")[1]}: {timing[k]:.0f} s' for k in searches)}), on {timed_on} (each the
sitting that ran its search to the end: the sittings of an interrupted search before it are not counted; the
machine may have been shared, so it varies with the load).

{chr(10).join(lines)}
The 256 column: LongRoPE at the original length uses its stage-2 short factors (and no n̂, as stage 2 searched
them) together with its attention factor sqrt(1 + ln s / ln 256), which (as in Hugging Face and Phi-3) multiplies
cos and sin, so the logits by its square, at every length —
hence slightly above `none` there. Factors and search histories: `results/longrope_*.json`.
"""
    return text


if __name__ == "__main__":
    app.run(main)
