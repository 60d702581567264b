"""Task accuracy past the training length: exact match by greedy decoding, per length × depth cell.

Each cell (run, scaling, training-free method, length L, depth) scores `n` examples of the run's task
(`posenc.tasks.eval_examples`: keys of the test split, L input tokens, the needle at `depth` for passkey; with
`split="validation"`, the validation split's keys and filler, on which settings are chosen, as the pilots do):

  * `accuracy` — exact match of greedy decoding with the KV cache (`posenc.decode.greedy_answers`): every
    answer token is the model's argmax, fed back as generation would, and the row's count `correct` of `n`
    carries a Wilson 95% interval (`ci_low`, `ci_high`);
  * `tf_accuracy` — the same exact match with the true answer tokens fed (teacher forcing, from the same
    prefill): equal to `accuracy` by construction up to float ties (greedy reproduces an all-correct argmax
    chain, and stops being right at the first wrong token either way), a check of the decoding;
  * `answer_logprob` — the teacher-forced log-probability of the whole answer (nats, mean over examples).

Scalings and methods are those of `posenc.evaluate` (the same names, L0 and defaults per run and length);
a learned table past its length (or xPos past its float range: `Encoding.max_positions`), and a
randomized-positions run past `positions.max_position`, are reported `undefined`. A randomized-positions run is tested at positions drawn as in training (Ruoss et al. 2023),
without scalings or methods (they index positions as if they were 0 … L−1). A Hugging Face checkpoint
(`hf_models`) is scored on passkey in its own tokens: lengths count tokens and the answer " NNNNN" is its
tokenization. Exact match decodes exactly the answer's tokens: YaRN's passkey.py reads the first number in 10
generated tokens, so a checkpoint that writes the key and more digits is wrong there and right here.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import pathlib
from typing import Any, Sequence

import numpy as np
from tqdm.auto import tqdm

from posenc import data, decode, tasks
from posenc.evaluate import (ATTN_CHUNK, Z95, Evaluator, Run, applies, check_scaling_names, check_scalings_apply,
                             check_split, checked_lengths, hf_run, load_run, method_applies, parse_methods,
                             _pyplot, prepare_out_dir, scaling_for, series_axes, series_style, skipped)
from posenc.training_free import Method


def wilson_interval(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k / n (Wilson 1927): the p with |k − np| ≤ z√(np(1−p)).
    `k` and `n` are counts (integers): an accuracy passed as `k` is refused, not read as a fraction of one."""
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) for v in (k, n)):
        raise ValueError(f"k (correct) and n (examples) must be integer counts, got k={k!r}, n={n!r}")
    if n <= 0 or not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n and n > 0, got k={k}, n={n}")
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (0.0 if k == 0 else centre - half), (1.0 if k == n else centre + half)


@dataclasses.dataclass
class TaskRun:
    """A run and what it is tested on."""

    run: Run
    task: str
    filler: str
    randomize: bool
    max_position: int | None
    encode: Any = tasks.byte_encode

    @classmethod
    def of(cls, run: Run, task: str | None = None, filler: str | None = None) -> "TaskRun":
        cfg_task = run.config.get("task")
        pos = run.config.get("positions")
        own = cfg_task.name if cfg_task is not None else None
        name = task or own or ("passkey" if run.tokenizer is not None else None)
        if name is None or name == "lm":
            raise ValueError(f"run {run.name!r} was not trained on a task (config.task); pass --task=passkey to "
                             "test it on one")
        tasks.check_task(name)
        if task and own and own != "lm" and task != own:
            raise ValueError(f"run {run.name!r} was trained on task {own!r}, not {task!r}")
        encode = tasks.byte_encode if run.tokenizer is None else _token_encoder(run.tokenizer, name)
        if own == name:
            tasks.check_version(name, cfg_task.get("version"), f"run {run.name!r}")
        randomize = bool(pos is not None and pos.get("randomize"))
        return cls(run, name, filler or (cfg_task.get("filler", "repeat") if cfg_task is not None else "repeat"),
                   randomize, int(pos.max_position) if randomize else None, encode)


def _token_encoder(tokenizer, task: str) -> "TokenEncoder":
    """A Hugging Face checkpoint's encoder of task text (passkey only: the other tasks are byte-level)."""
    if task != "passkey":
        raise ValueError(f"a Hugging Face checkpoint is tested on passkey only (in its own tokens), not {task!r}")
    return TokenEncoder(tokenizer)


DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)  # passkey needle depths when none are given


class TokenEncoder:
    """A checkpoint's tokens of passkey text. A piece (the needle, the question, the answer: `__call__`; each
    starts with a space or a newline) is tokenized as it reads inside the prompt, after other text: the tokens
    of a context + piece without those of the context, the first of `CONTEXTS` whose tokens the piece leaves
    intact. Tokenized alone, a SentencePiece tokenizer (Llama 2, Mistral) would start each piece with its
    word-start marker "▁" — a space the prompt does not have, and answer tokens ("▁▁12345") the model never
    writes after "is". A filler stream (`text`) is tokenized whole, as one text."""

    # a letter first: byte-level BPE (GPT-NeoX, Qwen, Llama 3) splits it from a following space or newline,
    # where "." + newline is one token there (".\n")
    CONTEXTS = ("a", ".", "\n\n")

    def __init__(self, tokenizer):
        from posenc import hf  # noqa: PLC0415

        self.tokenizer, self._tokenize = tokenizer, hf.tokenize
        self._heads = [(c, self.text(c)) for c in self.CONTEXTS]

    def text(self, text: str | bytes) -> np.ndarray:
        """The tokens of `text` tokenized on its own (a filler stream)."""
        text = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        return np.asarray(self._tokenize(self.tokenizer, text)[0], np.int32)

    def __call__(self, piece: str | bytes) -> np.ndarray:
        piece = piece.decode("utf-8", "replace") if isinstance(piece, bytes) else piece
        for context, head in self._heads:
            ids = self.text(context + piece)
            if np.array_equal(ids[:len(head)], head):
                return ids[len(head):]
        raise ValueError(f"the checkpoint's tokenizer merges each of {self.CONTEXTS} with the text after it "
                         f"({piece[:20]!r}): a passkey piece cannot be tokenized as it reads in the prompt")


class TaskEvaluator:
    """Scores cells of one run; one compiled forward per length (scalings and methods traced)."""

    def __init__(self, trun: TaskRun, attn_chunk: int = ATTN_CHUNK, tokens_per_batch: int = 16384, seed: int = 0,
                 split: str = "test"):
        check_split(split)
        self.trun = trun
        self.split = split
        self.ev = Evaluator(trun.run, attn_chunk=attn_chunk, tokens_per_batch=tokens_per_batch)
        self.tokens_per_batch = tokens_per_batch
        self.seed = seed
        self._streams: dict[int, np.ndarray] = {}
        self._corpus = None

    def corpus(self):
        if self._corpus is None:
            c = self.trun.run.config.data
            self._corpus = data.load_corpus(c.path, c.get("cache_dir"))
        return self._corpus

    def examples(self, length: int, n: int, depth: float | None) -> list[tasks.Example]:
        t = self.trun
        if t.task != "passkey":
            return tasks.eval_examples(t.task, length=length, n=n, seed=self.seed, depth=None, split=self.split)
        if length not in self._streams:
            corpus = self.corpus() if t.filler == "shakespeare" else None
            self._streams[length] = tasks.filler_stream(t.filler, corpus=corpus, split=self.split, min_tokens=length,
                                                         encode=t.encode)
        return tasks.eval_examples("passkey", length=length, n=n, seed=self.seed, depth=depth, filler=t.filler,
                                   split=self.split,
                                   stream=self._streams[length], encode=t.encode)

    def undefined_reason(self, length: int, scaling: str, method: Method | None) -> str | None:
        t = self.trun
        if t.randomize:
            if length + 1 > t.max_position:  # a length-L example is L + 1 tokens, each with its own position
                return (f"run {t.run.name!r} was trained with randomized positions in [0, {t.max_position}): "
                        f"length {length} needs {length + 1} distinct positions")
            if scaling != "none" or (method is not None and method != Method()):
                return "randomized-position runs are tested without scalings and training-free methods"
        return self.ev.undefined_reason(length, self.ev.resolve(method, length))

    def score(self, length: int, n: int, depth: float | None, scaling: str, method: Method | None) -> dict[str, Any]:
        """One cell's numbers (see the module docstring)."""
        run = self.trun.run
        resolved = self.ev.resolve(method, length)
        plain = resolved is None or resolved == Method()
        sc = scaling_for(run, scaling, length if resolved is None else resolved.scaling_length(length))
        exs = self.examples(length, n, depth)
        tokens = np.stack([e.tokens for e in exs])
        answer = np.stack([e.answer for e in exs])
        positions = None
        if self.trun.randomize:
            # the test split's draws are those of the committed results; another split draws its own
            salt = [] if self.split == "test" else [tasks.SPLITS.index(self.split)]
            rng = np.random.default_rng([self.seed, length, 4, *salt])
            positions = np.stack([tasks.random_positions(rng, length + 1, self.trun.max_position) for _ in exs])
        batch = max(1, self.tokens_per_batch // (length + 1))
        greedy, tf_right, logprob = [], [], []
        for i in range(0, n, batch):
            tk, an = tokens[i:i + batch], answer[i:i + batch]
            pos = None if positions is None else positions[i:i + batch]
            out, forced, logp = decode.greedy_answers(self._graphdef(length), run.params, tk, an, positions=pos,
                                                      scaling=sc, method=None if plain else resolved,
                                                      teacher_forced=True)
            greedy.append(((out == tk) | ~an).all(axis=1))
            tf_right.append(((forced == tk) | ~an).all(axis=1))
            logprob.append(logp.sum(axis=1))
        greedy, tf_right, logprob = np.concatenate(greedy), np.concatenate(tf_right), np.concatenate(logprob)
        if not np.isfinite(logprob).all():
            raise FloatingPointError(f"run {run.name!r} gives non-finite answer log-probabilities at length {length} "
                                     f"under scaling {scaling!r}; no numbers are reported for it")
        k = int(greedy.sum())
        lo_ci, hi_ci = wilson_interval(k, n)
        return {"accuracy": k / n, "correct": k, "n": n, "ci_low": lo_ci, "ci_high": hi_ci,
                "tf_accuracy": float(tf_right.mean()), "answer_logprob": float(logprob.mean()),
                "method_params": json.dumps(resolved.set_fields()) if resolved is not None else "{}",
                "factor": sc.factor if sc.kind != "none" else 1.0}

    def _cfg(self, length: int):
        return dataclasses.replace(self.trun.run.cfg, attn_chunk=self.ev.attn_chunk if length > self.ev.attn_chunk else 0)

    def _graphdef(self, length: int):
        from posenc import checkpoint  # noqa: PLC0415

        cfg = self._cfg(length)
        return self.trun.run.graphdef if cfg == self.trun.run.cfg else checkpoint.abstract_model(cfg)[0]


def evaluate_tasks(workdirs: Sequence[str], lengths: Sequence[int], *, depths: Sequence[float] | None = None,
                   scalings: Sequence[str] | None = None, methods: Sequence[str | Method] | None = None,
                   examples: int = 50, seed: int = 0, task: str | None = None, filler: str | None = None,
                   hf_models: Sequence[str] = (), hf_dtype: str | None = None, attn_chunk: int = ATTN_CHUNK,
                   split: str = "test", progress: bool = True) -> dict[str, Any]:
    """Every (run, scaling, method, length, depth) cell; returns {'rows': [...], 'lengths', 'depths', ...}.

    Args:
      workdirs: runs trained on a task (configs/tasks.py), or on text with `task` given.
      lengths: input lengths L (tokens; each example has L + 1, the last only a target).
      depths: passkey needle depths in [0, 1] (other tasks have none; default 0, 0.25, …, 1).
      scalings: names of `posenc.evaluate.SCALINGS` (default `none`; `run` added for a run fine-tuned with a
        scaling); those that do not apply to a run's encoding are skipped for it.
      methods: training-free method specs (default `none`), each with every scaling, where defined.
      examples: examples per cell; seed: their seed (the same examples for every run and scaling).
      split: `test`, or `validation` to choose settings on (keys and filler of that split).
      task, filler: override the runs' task (a text-trained run, a Hugging Face checkpoint: passkey) and filler.

    Raises:
      ValueError: lengths a run's task cannot make (in a checkpoint's tokens: checked on every example drawn),
        depths outside [0, 1] or repeated, bad examples or seed, an empty or unknown scaling or one that applies
        to no run, depths or a filler where no run is tested on passkey, or a run that has no task.
    """
    lengths = checked_lengths(lengths)
    check_scaling_names(scalings)
    if isinstance(examples, bool) or not isinstance(examples, int) or examples <= 0:
        raise ValueError(f"examples must be a positive integer, got {examples!r}")
    check_split(split)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    if depths is not None:
        depths = [float(d) for d in depths]
        if not depths or any(not 0.0 <= d <= 1.0 for d in depths):
            raise ValueError(f"depths must be a non-empty list of values in [0, 1], got {depths}")
        salts = [tasks.depth_salt(d) for d in depths]  # the examples of a depth are drawn from its salt
        if len(set(salts)) != len(salts):
            raise ValueError(f"depths must be distinct to 1e-4 (each draws its own examples, and a depth given twice "
                             f"would be counted twice), got {depths}")
    runs = [load_run(w) for w in workdirs] + [hf_run(p, dtype=hf_dtype) for p in hf_models]
    if not runs:
        raise ValueError("evaluate_tasks: give at least one run (workdirs) or Hugging Face checkpoint (hf_models)")
    places = [str(pathlib.Path(r.workdir).resolve()) for r in runs]
    twice = sorted({w for w in places if places.count(w) > 1})
    if twice:
        raise ValueError(f"evaluate_tasks: {', '.join(twice)} given more than once (its examples would be counted "
                         "twice)")
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        runs = [dataclasses.replace(r, name=str(r.workdir)) for r in runs]
    truns = [TaskRun.of(r, task, filler) for r in runs]
    check_scalings_apply(runs, scalings)
    for t in truns:
        if t.encode is tasks.byte_encode:  # a Hugging Face checkpoint's passkey needs its own tokens' count
            tasks.check_input_lengths(t.task, lengths, exact=True)
    for name, value in (("depths", depths), ("filler", filler)):
        if value is not None and not any(t.task == "passkey" for t in truns):
            raise ValueError(f"{name}: for the passkey task only, and the runs are tested on "
                             f"{sorted({t.task for t in truns})}")
    methods = parse_methods(methods) or [Method()]
    for m in methods:
        if not any(method_applies(r, m) for r in runs):
            m.check(runs[0].cfg.encoding, runs[0].cfg)  # raises, naming the method and the encoding
    evaluators = {t.run.workdir: TaskEvaluator(t, attn_chunk=attn_chunk, seed=seed, split=split) for t in truns}
    for t in truns:
        if t.encode is not tasks.byte_encode:  # prompts in a checkpoint's tokens (their length depends on the
            for length in lengths:  # key's tokens): every example a cell scores is drawn up front
                for d in depths if depths is not None else DEFAULT_DEPTHS:
                    evaluators[t.run.workdir].examples(length, examples, d)
    jobs, skips = [], []
    for t in truns:
        skips += skipped(t.run, scalings or (), methods)
        wanted = list(scalings) if scalings else ["none"] + (["run"] if t.run.cfg.rope_scaling.kind != "none" else [])
        for m in dict.fromkeys(m for m in methods if method_applies(t.run, m)):
            for s in dict.fromkeys(s for s in wanted if applies(t.run, s)):
                cell_depths = [None] if t.task != "passkey" else list(depths if depths is not None else DEFAULT_DEPTHS)
                for d in cell_depths:
                    jobs += [(t, s, m, length, d) for length in lengths]
    rows = []
    for t, s, m, length, d in tqdm(jobs, desc="eval_tasks", disable=not progress or None, dynamic_ncols=True):
        ev = evaluators[t.run.workdir]
        row = {**t.run.summary(), "task": t.task, "task_version": tasks.VERSIONS[t.task],
               "filler": t.filler if t.task == "passkey" else None, "randomized_positions": t.randomize,
               "positions_version": tasks.POSITIONS_VERSION if t.randomize else None, "scaling": s, "method": m.label,
               "length": length, "depth": d, "split": split, "seed": seed}
        reason = ev.undefined_reason(length, s, m)
        if reason:
            row.update(status="undefined", reason=reason, accuracy=None, n=0, correct=None, ci_low=None,
                       ci_high=None, tf_accuracy=None, answer_logprob=None, factor=None)
        else:
            row.update(status="ok", reason="", **ev.score(length, examples, d, s, m))
        rows.append(row)
    return {"rows": rows, "skipped": skips, "lengths": lengths,
            "depths": sorted({r["depth"] for r in rows if r["depth"] is not None}),
            "examples": examples, "seed": seed, "split": split}


# --------------------------------------------------------------------------------------------------------
# Outputs

COLUMNS = ("run", "posenc", "task", "task_version", "filler", "randomized_positions", "positions_version", "scaling",
           "method", "length", "unit", "depth", "status", "accuracy", "correct", "n", "ci_low", "ci_high",
           "tf_accuracy", "answer_logprob", "train_len", "step", "factor", "method_params", "split", "seed", "reason")


def _series(r: dict[str, Any]) -> str:
    label = f"{r['run']} · {r['scaling']}"
    return label if r["method"] == "none" else f"{label} · {r['method']}"


def mean_over_depths(rows: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[int, int] | None]:
    """{(series, length): (correct, n) summed over depths}, None where a cell is undefined."""
    out: dict[tuple[str, int], tuple[int, int] | None] = {}
    for r in rows:
        key = (_series(r), r["length"])
        if r["status"] != "ok":
            out[key] = None
        elif out.get(key, (0, 0)) is not None:
            c, n = out.get(key, (0, 0))
            out[key] = (c + r["correct"], n + r["n"])
    return out


def markdown_table(result: dict[str, Any]) -> str:
    """Accuracy (%) by length, rows = run · scaling · method (passkey: summed over depths), with the Wilson
    95% interval of each cell."""
    cells = mean_over_depths(result["rows"])
    lengths = result["lengths"]
    series = list(dict.fromkeys(k[0] for k in cells))
    lines = [f"exact-match accuracy, % (Wilson 95% interval), greedy decoding; {result['examples']} "
             f"{result.get('split', 'test')} examples "
             "per cell" + (f" and depth ({', '.join(f'{d:g}' for d in result['depths'])})" if result["depths"] else ""),
             "", "| run · scaling · method | " + " | ".join(f"L={n}" for n in lengths) + " |",
             "|---|" + "---|" * len(lengths)]
    for s in series:
        parts = []
        for n in lengths:
            c = cells.get((s, n))
            if (s, n) not in cells:
                parts.append("")
            elif c is None:
                parts.append("undefined")
            else:
                lo, hi = wilson_interval(*c)
                parts.append(f"{100 * c[0] / c[1]:.0f} ({100 * lo:.0f}–{100 * hi:.0f})")
        lines.append(f"| {s} | " + " | ".join(parts) + " |")
    return "\n".join(lines)


def plot_accuracy(series: dict[str, list[tuple[int, tuple[int, int] | None]]], train_lens, path, *,
                  unit: str = "tokens") -> None:
    """Accuracy against length with Wilson 95% bands: {label: [(length, (correct, n) or None), ...]}. A series of
    one defined point (a band of no width) has its interval as an error bar instead.

    Series i is drawn in colour C(i mod 10) with line style (i // 10) mod 4 (solid, dashed, dotted, dash-dot), so
    that no two of up to 40 series look alike (past 40 the pairs repeat); past ten series the legend stands right
    of the axes, in columns of at most 20, and the figure widens and grows to hold it."""
    plt = _pyplot()
    drawn = {label: [(n, c) for n, c in pts if c is not None] for label, pts in series.items()}
    drawn = {label: pts for label, pts in drawn.items() if pts}
    fig, ax, place_legend = series_axes(plt, len(drawn))
    for i, (label, pts) in enumerate(drawn.items()):
        style = series_style(i)
        ci = np.array([wilson_interval(*c) for _, c in pts])
        xs = [n for n, _ in pts]
        ax.plot(xs, [c[0] / c[1] for _, c in pts], marker="o", label=label, **style)
        ax.fill_between(xs, ci[:, 0], ci[:, 1], alpha=0.15, color=style["color"])
        if len(xs) == 1:
            ax.errorbar(xs, [ci[0].mean()], yerr=[(ci[0, 1] - ci[0, 0]) / 2], fmt="none", ecolor=style["color"],
                        elinewidth=1, capsize=3)
    for t in sorted(set(train_lens)):
        ax.axvline(t, color="gray", linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(f"length ({unit})")
    ax.set_ylabel("exact-match accuracy")
    ax.set_title("bands: Wilson 95% intervals of each point's exact match", fontsize=9)
    place_legend(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_heatmap(rows: list[dict[str, Any]], title: str, path, *, unit: str = "tokens") -> None:
    """Accuracy (%) over needle depth × length from one series' rows, each cell with its Wilson 95% interval
    (`wilson_interval` of its `correct` of `n`) below it; an undefined cell says so, and a depth × length with no
    row is left blank. The title gives the examples per cell, the colour bar its quantity.

    Raises:
      ValueError: two rows of one depth and length (one would hide the other).
    """
    plt = _pyplot()
    depths = sorted({r["depth"] for r in rows})
    lengths = sorted({r["length"] for r in rows})
    grid = np.full((len(depths), len(lengths)), np.nan)
    text = [["" for _ in lengths] for _ in depths]  # no row: blank
    for r in rows:
        i, j = depths.index(r["depth"]), lengths.index(r["length"])
        if text[i][j]:
            raise ValueError(f"plot_heatmap({title!r}): two rows at depth {r['depth']} and length {r['length']}")
        if r["status"] != "ok":
            text[i][j] = "undef."
            continue
        grid[i, j] = r["correct"] / r["n"]
        lo, hi = wilson_interval(r["correct"], r["n"])
        text[i][j] = f"{100 * grid[i, j]:.0f}\n{100 * lo:.0f}–{100 * hi:.0f}"
    counts = sorted({r["n"] for r in rows if r["status"] == "ok"})
    per_cell = "" if not counts else f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    fig, ax = plt.subplots(figsize=(1.4 + 0.9 * len(lengths), 1.3 + 0.5 * len(depths)))
    im = ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
    for i in range(len(depths)):
        for j in range(len(lengths)):
            ax.text(j, i, text[i][j], ha="center", va="center", fontsize=6, linespacing=1.1)
    ax.set_xticks(range(len(lengths)), [str(n) for n in lengths])
    ax.set_yticks(range(len(depths)), [f"{100 * d:g}%" for d in depths])
    ax.set_xlabel(f"length ({unit})")
    ax.set_ylabel("needle depth")
    ax.set_title(title + (f"\n% exact match, Wilson 95% interval below; {per_cell} examples per cell" if per_cell else ""),
                 fontsize=8)
    fig.colorbar(im, ax=ax, fraction=0.046).set_label("exact-match accuracy", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(result: dict[str, Any], out: str) -> dict[str, pathlib.Path]:
    """results.json, results.csv, results.md, accuracy_vs_length.png and heatmap_<run>__<scaling>[__<method>].png
    (depth × length, passkey) in `out`."""
    out_dir = prepare_out_dir(out)
    paths = {name: out_dir / name for name in ("results.json", "results.csv", "results.md", "accuracy_vs_length.png")}
    paths["results.json"].write_text(json.dumps(result, indent=1))
    with open(paths["results.csv"], "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(result["rows"])
    paths["results.md"].write_text(markdown_table(result) + "\n")
    cells = mean_over_depths(result["rows"])
    series = {s: [(n, cells.get((s, n))) for n in result["lengths"]] for s in dict.fromkeys(k[0] for k in cells)}
    units = {r.get("unit", "byte") for r in result["rows"]}
    unit = f"{units.pop()}s" if len(units) == 1 else "bytes or tokens: each row's unit"
    plot_accuracy(series, [r["train_len"] for r in result["rows"]], paths["accuracy_vs_length.png"], unit=unit)
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in result["rows"]:
        if r["depth"] is not None:
            groups.setdefault(_series(r), []).append(r)
    names = {s: "heatmap_" + "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in s.replace(" · ", "__"))
             + ".png" for s in groups}
    clash = sorted(s for s in groups if list(names.values()).count(names[s]) > 1)
    if clash:
        raise ValueError(f"the series {clash} map to the same heatmap file name; rename their runs")
    for stale in out_dir.glob("heatmap_*.png"):  # an earlier evaluation's heatmaps are not this result's
        if stale.name not in names.values():
            stale.unlink()
    for s, rows in groups.items():
        paths[names[s]] = out_dir / names[s]
        plot_heatmap(rows, s, paths[names[s]], unit=f"{rows[0].get('unit', 'byte')}s")
    return paths
