"""Length extrapolation: perplexity of trained runs past their training length, with inference-time RoPE
scaling, under three protocols.

Protocols (each row of the results names its protocol):
  * `nonoverlap` — consecutive non-overlapping windows of length L covering the *same* first `num_bytes`
    test bytes at every L, so lengths are compared on the same text: mean NLL, bits per byte, perplexity.
    Every position of a window is scored, so the mean mixes short and long contexts.
  * `per_position` — the mean loss at each position inside the window at the longest length (from the
    same forward passes): where extrapolation breaks.
  * `sliding` — windows of the training length moved by `stride`, each scoring only its last `stride`
    tokens (the first window scores all): the model never sees a position past train_len. The baseline
    of the ALiBi paper's "early token curse" discussion (Press et al. 2022, §B).

Scalings (RoPE runs only; applied at inference time, without retraining; factor s = L / L0 by default,
with L0 = the run's `original_max_len` if it was trained with a scaling, else its `train_len`):
  `none` (plain RoPE), `run` (the run's own configured scaling: the default for a run fine-tuned with one),
  `linear` (PI), `ntk`, `dynamic_ntk`, `yarn`, `dynamic_linear`, `dynamic_yarn`, `llama3`, and `longrope`
  (the run's LongRoPE factors, from its config). A fixed `factor` replaces L / L0. `dynamic_linear` and
  `dynamic_yarn` need no factor (s = max(1, L / L0) by definition). `dynamic_ntk` is Hugging Face's formula,
  whose `factor` is a slope: with the default factor s = L / L0 its base grows by (s² − s + 1)^(d/(d−2)) at
  length L, more than NTK's s^(d/(d−2)); `factor=1` gives the pure length-tracking variant, which equals `ntk`
  at factor L / L0 under the non-overlapping protocol (every window has length L).

RoPE frequencies enter the compiled forward pass as traced inputs, so each (run, length) compiles once
whatever the number of scalings.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
import pathlib
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from tqdm.auto import tqdm

from posenc import checkpoint, data
from posenc.encodings import get_encoding
from posenc.model import ModelConfig
from posenc.rope_scaling import RopeScaling, rope_inputs

SCALINGS = ("none", "run", "linear", "ntk", "dynamic_ntk", "yarn", "dynamic_linear", "dynamic_yarn", "llama3",
            "longrope")
PROTOCOLS = ("nonoverlap", "per_position", "sliding")
LN2 = math.log(2.0)
# A mean NLL (nats) above this has no finite perplexity (exp overflows float64): a model there has diverged
# even if its loss is still a finite number.
MAX_NLL = math.log(np.finfo(np.float64).max)


@dataclasses.dataclass
class Run:
    """A trained run loaded for evaluation."""

    workdir: str
    name: str
    config: Any  # ConfigDict
    cfg: ModelConfig
    graphdef: Any
    params: Any
    step: int

    @property
    def train_len(self) -> int:
        return int(self.config.train_len)

    @property
    def base_len(self) -> int:
        """L0: the length the RoPE frequencies were originally trained at."""
        orig = self.cfg.rope_scaling.original_max_len
        return int(orig) if orig else self.train_len

    def summary(self) -> dict[str, Any]:
        s = self.cfg.rope_scaling
        rotary = self.cfg.encoding.takes_rope_scaling
        return {"run": self.name, "posenc": self.cfg.posenc, "train_len": self.train_len, "step": self.step,
                "rope_base": self.cfg.rope_base if rotary else None,
                "run_scaling": s.kind if rotary else None, "d_model": self.cfg.d_model,
                "num_layers": self.cfg.num_layers}


def load_run(workdir: str, name: str | None = None) -> Run:
    config, cfg, graphdef, params, step = checkpoint.restore_params(workdir)
    return Run(str(workdir), name or pathlib.Path(workdir).name, config, cfg, graphdef, params, step)


def scaling_for(run: Run, name: str, length: int, factor: float | None = None,
                longrope_file: str | None = None) -> RopeScaling:
    """The `RopeScaling` that scaling `name` means for `run` evaluated at `length`.

    Raises:
      ValueError: an unknown name, or one that does not apply to the run's encoding.
    """
    if name not in SCALINGS:
        raise ValueError(f"scaling must be one of {SCALINGS}, got {name!r}")
    if not applies(run, name):
        raise ValueError(f"scaling {name!r} does not apply to run {run.name!r}: posenc={run.cfg.posenc!r} takes no "
                         "RoPE scaling")
    if name == "none":
        return RopeScaling()
    if name == "run":
        return run.cfg.rope_scaling
    base = run.base_len
    if factor is not None and not factor > 0:
        raise ValueError(f"factor must be > 0 (or unset for L / L0), got {factor!r}")
    s = float(factor) if factor is not None else max(1.0, length / base)
    if name == "longrope" and longrope_file:
        from posenc.longrope import scaling_from_json  # noqa: PLC0415

        return scaling_from_json(longrope_file)
    if name == "longrope":
        own = run.cfg.rope_scaling
        if own.kind != "longrope":
            raise ValueError(f"scaling 'longrope' needs LongRoPE factors: --longrope=FILE or run {run.name!r}'s "
                             "model.rope.scaling.factors_file (from scripts/search_longrope.py)")
        return own
    if name.startswith("dynamic_") and name != "dynamic_ntk":
        return RopeScaling(name.removeprefix("dynamic_"), 1.0, original_max_len=base, dynamic=True)
    return RopeScaling(name, s, original_max_len=base)


def applies(run: Run, scaling: str) -> bool:
    """Whether inference-time scaling `scaling` applies to `run` (`none` and `run` apply to every run)."""
    return scaling in ("none", "run") or run.cfg.encoding.takes_rope_scaling


def default_scalings(config) -> list[str]:
    """A run's own default scalings: its `config.eval.scalings` that apply to its encoding (a non-RoPE run
    gets `none`), with `run` first when it was trained with a scaling of its own (a fine-tuned PI / YaRN run
    is evaluated with the scaling it was fine-tuned with by default)."""
    out = [s.strip() for s in config.eval.scalings.split(",") if s.strip()]
    if not get_encoding(config.model.posenc).takes_rope_scaling:
        return [s for s in out if s in ("none", "run")] or ["none"]
    if config.model.rope.scaling.kind != "none" and "run" not in out:
        out.insert(0, "run")
    return out


def prepare_out_dir(out: str | pathlib.Path, what: str = "--out") -> pathlib.Path:
    """Creates `out` and checks that a file can be written there, before any work is done."""
    path = pathlib.Path(out).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".write_test.{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ValueError(f"{what}={str(out)!r} is not a writable directory ({e.strerror or e})") from None
    return path


def _nll_fn(graphdef, cfg: ModelConfig):
    """Jitted per-position NLL `[B, L]` with RoPE frequencies as traced inputs."""

    def fn(params, x, y, inv_freq, attention_factor, n_hat, inv_freq_lo):
        rope = (inv_freq, attention_factor, n_hat, inv_freq_lo) if cfg.encoding.takes_rope_scaling else None
        logits = nnx.merge(graphdef, params)(x, rope=rope)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y)

    return jax.jit(fn)


class Evaluator:
    """Caches one compiled forward per (run, length) and scores windows under any scaling."""

    def __init__(self, run: Run, attn_chunk: int = 1024, tokens_per_batch: int = 16384,
                 learned_beyond: str | None = None):
        self.run = run
        self.attn_chunk = attn_chunk
        self.tokens_per_batch = tokens_per_batch
        self.learned_beyond = learned_beyond or run.cfg.learned_beyond
        self._fns: dict[int, Any] = {}

    def _fn(self, length: int):
        if length not in self._fns:
            cfg = dataclasses.replace(self.run.cfg, attn_chunk=self.attn_chunk if length > self.attn_chunk else 0,
                                      learned_beyond=self.learned_beyond)
            # the same parameters viewed through a model with another static config (chunking, learned_beyond)
            graphdef = self.run.graphdef if cfg == self.run.cfg else checkpoint.abstract_model(cfg)[0]
            self._fns[length] = _nll_fn(graphdef, cfg)
        return self._fns[length]

    def undefined_reason(self, length: int) -> str | None:
        cfg = dataclasses.replace(self.run.cfg, learned_beyond=self.learned_beyond)
        limit = cfg.encoding.max_positions(cfg)
        if limit is not None and length > limit:
            return (f"posenc={cfg.posenc!r} is undefined past {limit} positions (a learned table of max_len="
                    f"{cfg.max_len}); pass --learned_beyond=interpolate to resample it")
        return None

    def nll(self, x: np.ndarray, y: np.ndarray, scaling: RopeScaling) -> np.ndarray:
        """Per-position NLL `[n, L]` (nats) of windows `x`, `y` `[n, L]` under `scaling`."""
        length = x.shape[1]
        cfg = self.run.cfg
        if cfg.encoding.takes_rope_scaling:
            inv, af, n_hat, lo = rope_inputs(cfg.rotary_dim, cfg.rope_base, scaling, length)
        else:
            inv, af, n_hat, lo = np.zeros((1,)), 1.0, 0, np.zeros((1,))
        inv, af, lo = jnp.asarray(inv, jnp.float32), jnp.asarray(af, jnp.float32), jnp.asarray(lo, jnp.float32)
        n_hat = jnp.asarray(n_hat, jnp.int32)
        fn = self._fn(length)
        batch = max(1, self.tokens_per_batch // length)
        out = [np.asarray(fn(self.run.params, x[i:i + batch], y[i:i + batch], inv, af, n_hat, lo))
               for i in range(0, len(x), batch)]
        nll = np.concatenate(out).astype(np.float64)
        if not np.isfinite(nll).all() or nll.mean() > MAX_NLL:
            raise FloatingPointError(
                f"run {self.run.name!r} (step {self.run.step}) gives non-finite losses or perplexity at length "
                f"{length} under scaling {scaling.kind!r} (mean NLL {nll.mean()}; {int((~np.isfinite(nll)).sum())} "
                f"of {nll.size} positions non-finite): its weights or this scaling overflow; no numbers are "
                "reported for it")
        return nll


def check_num_bytes(stream, lengths: Sequence[int], num_bytes: int | None, *, default_windows: int,
                    what: str) -> int:
    """The number of bytes scored at every length: `num_bytes`, or `default_windows` windows of the longest
    length (capped by what `stream` holds). Raises a ValueError saying how many bytes the split has."""
    longest = max(lengths)
    available = (len(stream) - 1) // longest * longest
    if available < longest:
        raise ValueError(f"{what} has {len(stream)} bytes: too few for one window of {longest} tokens (+1)")
    if num_bytes is not None and (isinstance(num_bytes, bool) or not isinstance(num_bytes, int) or num_bytes <= 0):
        raise ValueError(f"num_bytes must be a positive integer (or unset for the default), got {num_bytes!r}")
    nb = num_bytes if num_bytes is not None else min(available, default_windows * longest)
    if nb % longest or nb > available or nb < longest:
        raise ValueError(f"num_bytes={nb} must be a positive multiple of the longest length {longest} and at most "
                         f"{available} ({what} has {len(stream)} bytes)")
    return nb


def sliding_windows(stream: np.ndarray, num_bytes: int, window: int, stride: int):
    """Windows of `window` tokens every `stride` scoring the first `num_bytes` targets exactly once.

    Returns (x, y, weights) `[n, window]`: weight 1 on the scored positions (the first window scores all
    of its positions, later ones their last `stride`).
    """
    if not 0 < stride <= window:
        raise ValueError(f"stride must be in [1, window={window}], got {stride}")
    starts = list(range(0, num_bytes - window + 1, stride))
    if starts[-1] + window < num_bytes:
        starts.append(num_bytes - window)
    x = np.stack([stream[s:s + window] for s in starts]).astype(np.int32)
    y = np.stack([stream[s + 1:s + window + 1] for s in starts]).astype(np.int32)
    w = np.zeros_like(x, dtype=np.float64)
    scored_until = 0
    for i, s in enumerate(starts):
        first_new = max(scored_until, s) - s
        w[i, first_new:] = 1.0
        scored_until = s + window
    return x, y, w


def evaluate(workdirs: Sequence[str], lengths: Sequence[int], scalings: Sequence[str] | None = None, *,
             num_bytes: int | None = None, factor: float | None = None, stride: int | None = None,
             split: str = "test", learned_beyond: str | None = None, attn_chunk: int = 1024, progress: bool = True,
             longrope_file: str | None = None) -> dict[str, Any]:
    """Evaluates runs at lengths under scalings; returns {'rows': [...], 'per_position': {...}, ...}.

    Each run is scored on the `split` of its own corpus (`data.path`); rows and the table name it.

    Args:
      workdirs: trained runs.
      lengths: evaluation lengths L (tokens).
      scalings: names from `SCALINGS`; the ones that do not apply to a run's encoding are skipped for that
        run (a ValueError if one applies to none of the runs). None: each run's own `default_scalings`.
      num_bytes: test bytes scored at every length (default: the largest multiple of max(lengths) the split
        holds, capped at 16 windows of the longest length).
      factor: a fixed scale instead of L / L0 (> 0).
      stride: sliding-window stride (default train_len / 2).
      split: 'test' (default) or 'validation'.
      learned_beyond: override the learned table's behaviour past max_len ('error' reports it undefined).
      longrope_file: the JSON of scripts/search_longrope.py, used by the scaling 'longrope'.

    Raises:
      ValueError: a run without checkpoint, a length the split cannot supply, a scaling that applies to
        no run, a non-positive factor, stride or num_bytes.
      FloatingPointError: a run gives non-finite losses (no table of NaN is ever returned).
    """
    lengths = sorted(set(int(n) for n in lengths))
    if not lengths or lengths[0] <= 0:
        raise ValueError(f"lengths must be positive integers, got {lengths}")
    if factor is not None and not factor > 0:
        raise ValueError(f"factor must be > 0 (or unset for L / L0), got {factor!r}")
    if stride is not None and stride <= 0:
        raise ValueError(f"stride must be a positive integer (or unset for train_len / 2), got {stride!r}")
    for name in scalings or ():
        if name not in SCALINGS:
            raise ValueError(f"scaling must be one of {SCALINGS}, got {name!r}")
    runs = [load_run(w) for w in workdirs]
    names = [r.name for r in runs]
    if len(set(names)) != len(names):  # same basename: use the whole path
        runs = [dataclasses.replace(r, name=str(r.workdir)) for r in runs]
    for name in scalings or ():
        if not any(applies(r, name) for r in runs):
            raise ValueError(f"scaling {name!r} does not apply to any of the runs (posenc: "
                             f"{sorted({r.cfg.posenc for r in runs})}); only encodings that take a RoPE scaling "
                             "can be rescaled")
    streams, corpora = {}, {}
    for run in runs:
        path = run.config.data.path
        if path not in corpora:
            corpus = data.load_corpus(path, run.config.data.cache_dir)
            stream = corpus.split(split)
            nb = check_num_bytes(stream, lengths, num_bytes, default_windows=16,
                                 what=f"the {split} split of data.path={path!r}")
            streams[path] = stream
            corpora[path] = {"sha256": corpus.sha256, "num_bytes": nb}
    longest = lengths[-1]

    jobs = []
    for run in runs:
        wanted = scalings if scalings is not None else default_scalings(run.config)
        run_scalings = [s for s in wanted if applies(run, s)] or ["none"]
        for s in dict.fromkeys(run_scalings):
            jobs.append((run, s))
    rows, per_position = [], {}
    total = len(jobs) * (len(lengths) + 1)
    bar = tqdm(total=total, desc="evaluate", disable=not progress or None, dynamic_ncols=True)
    evaluators = {r.workdir: Evaluator(r, attn_chunk=attn_chunk, learned_beyond=learned_beyond) for r in runs}
    for run, sname in jobs:
        ev = evaluators[run.workdir]
        corpus_path = run.config.data.path
        stream, nb = streams[corpus_path], corpora[corpus_path]["num_bytes"]
        base_row = {**run.summary(), "scaling": sname, "split": split, "corpus": corpus_path, "num_bytes": nb}
        for length in lengths:
            bar.set_postfix_str(f"{run.name} {sname} L={length}")
            row = {**base_row, "protocol": "nonoverlap", "length": length, "status": "ok", "reason": ""}
            reason = ev.undefined_reason(length)
            if reason:
                row.update(status="undefined", reason=reason, nll=None, bpb=None, ppl=None, factor=None)
            else:
                sc = scaling_for(run, sname, length, factor, longrope_file)
                x, y = data.eval_windows(stream, length=length, num_bytes=nb)
                nll = ev.nll(x, y, sc)
                mean = float(nll.mean())
                row.update(nll=mean, bpb=mean / LN2, ppl=math.exp(mean), factor=sc.factor if sc.kind != "none" else 1.0)
                if length == longest:
                    per_position[f"{run.name}|{sname}"] = nll.mean(axis=0).tolist()
            rows.append(row)
            bar.update()
        # (c) sliding windows of train_len: never past the training length
        window = run.train_len
        st = stride if stride is not None else max(1, window // 2)
        x, y, w = sliding_windows(stream, nb, window, st)
        nll = ev.nll(x, y, scaling_for(run, sname, window, factor, longrope_file))
        mean = float((nll * w).sum() / w.sum())
        rows.append({**base_row, "protocol": "sliding", "length": window, "stride": st, "status": "ok", "reason": "",
                     "nll": mean, "bpb": mean / LN2, "ppl": math.exp(mean), "factor": 1.0})
        bar.update()
    bar.close()
    sizes = {c["num_bytes"] for c in corpora.values()}
    return {"rows": rows, "per_position": per_position, "lengths": lengths, "split": split, "corpora": corpora,
            "num_bytes": sizes.pop() if len(sizes) == 1 else None}


# --------------------------------------------------------------------------------------------------------
# Outputs


COLUMNS = ("run", "posenc", "scaling", "protocol", "length", "factor", "status", "nll", "bpb", "ppl", "train_len",
           "step", "rope_base", "run_scaling", "d_model", "num_layers", "split", "corpus", "num_bytes", "stride",
           "reason")


def markdown_table(result: dict[str, Any], metric: str = "bpb") -> str:
    """Rows = run × scaling, columns = lengths (non-overlapping) and the sliding baseline."""
    lengths = result["lengths"]
    table: dict[tuple[str, str], dict[str, str]] = {}
    for r in result["rows"]:
        key = (r["run"], r["scaling"])
        cell = "undefined" if r["status"] != "ok" else f"{r[metric]:.3f}"
        col = f"L={r['length']}" if r["protocol"] == "nonoverlap" else f"sliding {r['length']}/{r.get('stride')}"
        table.setdefault(key, {})[col] = cell
    cols = [f"L={n}" for n in lengths] + sorted({c for v in table.values() for c in v if c.startswith("sliding")})
    corpora = result.get("corpora") or {}
    if len(corpora) <= 1:
        where = "".join(f" of data.path={p!r}" for p in corpora)
        lines = [f"{metric} on {result['num_bytes']} {result['split']} bytes{where} (lower is better)", "",
                 "| run | scaling | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
        for (run, scaling), cells in table.items():
            lines.append(f"| {run} | {scaling} | " + " | ".join(cells.get(c, "") for c in cols) + " |")
        return "\n".join(lines)
    corpus_of = {r["run"]: r["corpus"] for r in result["rows"]}
    lines = [f"{metric} on the {result['split']} split of each run's own corpus: rows on different corpora are "
             "not comparable (lower is better)", "",
             "| run | corpus | bytes | scaling | " + " | ".join(cols) + " |", "|---|---|---|---|" + "---|" * len(cols)]
    for (run, scaling), cells in table.items():
        c = corpus_of[run]
        lines.append(f"| {run} | {c} | {corpora[c]['num_bytes']} | {scaling} | "
                     + " | ".join(cells.get(col, "") for col in cols) + " |")
    return "\n".join(lines)


def write_outputs(result: dict[str, Any], out: str) -> dict[str, pathlib.Path]:
    """results.csv, results.json, results.md, ppl_vs_length.png, per_position.png in `out`."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    out_dir = pathlib.Path(out).expanduser()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {name: out_dir / name for name in ("results.csv", "results.json", "results.md", "ppl_vs_length.png",
                                               "per_position.png")}
    with open(paths["results.csv"], "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(result["rows"])
    paths["results.json"].write_text(json.dumps(result, indent=1))
    paths["results.md"].write_text(markdown_table(result) + "\n\n" + markdown_table(result, "ppl") + "\n")

    fig, ax = plt.subplots(figsize=(7, 4.5))
    train_lens = set()
    series: dict[str, list[tuple[int, float]]] = {}
    for r in result["rows"]:
        if r["protocol"] == "nonoverlap" and r["status"] == "ok":
            series.setdefault(f"{r['run']} · {r['scaling']}", []).append((r["length"], r["bpb"]))
            train_lens.add(r["train_len"])
    for label, pts in series.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    for t in sorted(train_lens):
        ax.axvline(t, color="gray", linestyle="--", linewidth=1)
        ax.text(t, ax.get_ylim()[1], f" train_len {t}", va="top", fontsize=8, color="gray")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("bits per byte (non-overlapping windows)")
    ax.set_title(f"Extrapolation on {result['num_bytes'] or 'each run’s'} {result['split']} bytes")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(paths["ppl_vs_length.png"], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, curve in result["per_position"].items():
        curve = np.asarray(curve)
        bins = max(1, len(curve) // 64)  # average over bins of positions to tame the noise
        binned = curve[: len(curve) // bins * bins].reshape(-1, bins).mean(axis=1) / LN2
        ax.plot(np.arange(len(binned)) * bins + bins / 2, binned, label=label.replace("|", " · "))
    for t in sorted(train_lens):
        ax.axvline(t, color="gray", linestyle="--", linewidth=1)
    ax.set_xlabel(f"position in the window (length {result['lengths'][-1]})")
    ax.set_ylabel("bits per byte")
    ax.set_title("Loss by position: where extrapolation breaks")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(paths["per_position.png"], dpi=110)
    plt.close(fig)
    return paths
