"""Length extrapolation: perplexity of trained runs past their training length, with inference-time RoPE
scaling, under three protocols.

Protocols (each row of the results names its protocol):
  * `nonoverlap` — consecutive non-overlapping windows of length L covering the *same* first `num_bytes`
    test bytes at every L, so lengths are compared on the same text: mean NLL, bits per byte, perplexity,
    and each window's bits per byte (`window_bpb`, for intervals and paired comparisons across rows).
    Every position of a window is scored, so the mean mixes short and long contexts.
  * `per_position` — the mean loss at each position inside the window at the longest length (from the
    same forward passes): where extrapolation breaks; `per_position_se`, its standard error over the windows,
    and `per_position_bin_se`, that of its means over bins of `position_bin(L)` positions (the plot's points).
  * `sliding` — windows of the training length moved by `stride`, each scoring only its last `stride`
    tokens (the first window scores all): the model never sees a position past train_len. The baseline
    of the ALiBi paper's "early token curse" discussion (Press et al. 2022, §B). Each window's targets are
    its own, so its 95% interval (`bpb_lo`, `bpb_hi`) resamples the windows as `nonoverlap`'s does.

Scalings (RoPE runs only; applied at inference time, without retraining; factor s = L / L0 by default,
with L0 = the run's `original_max_len` if it was trained with a scaling, else its `train_len`):
  `none` (plain RoPE), `run` (the run's own configured scaling: the default for a run fine-tuned with one),
  `linear` (PI), `ntk`, `dynamic_ntk`, `yarn`, `dynamic_linear`, `dynamic_yarn`, `llama3`, and `longrope`
  (the run's LongRoPE factors, from its config). A fixed `factor` replaces L / L0. The dynamic scalings track
  the length by definition (s = max(1, T / L0) at sequence length T; YaRN paper §3.3): `dynamic_linear` and
  `dynamic_yarn` take no factor, and `dynamic_ntk` gets factor 1 in Hugging Face's formula, whose `factor` is
  a slope (b' = b · (factor·T/L0 − (factor − 1))^(d/(d−2))). So under the non-overlapping protocol (every
  window has length L) each equals its static kind at s = L / L0, and only per-prefix scoring (decoding)
  tells them apart. A fixed `factor` for `dynamic_ntk` is that slope: at factor s its base grows by
  (s² − s + 1)^(d/(d−2)) at T = s·L0, more than NTK's s^(d/(d−2)).

Training-free methods (`posenc.training_free`: `self_extend`, `rerope`, `leaky_rerope`, `lm_infinite`,
`sinks`, and `logn` with any of them) are rows too, next to the scalings: every (scaling, method) pair that
applies to a run's encoding, each method's unset parameters resolved per run and length
(`Method.resolve`; the row records them in `method_params`). Methods are scored under `nonoverlap` and
`per_position` (sliding rows are the plain model's baseline), and the bounded-cache methods (`sinks`,
`lm_infinite`) also under

  * `streaming` — the first `num_bytes` bytes as one stream, fed in chunks through a KV cache of exactly
    S + R slots (the `eval_long_ppl` protocol of StreamingLLM): every byte is scored once, with memory
    bounded by the cache whatever the length; `length` is the stream's.

Under a bounded method a scaling is resolved (its default factor, a dynamic scaling's length) at the longest
distance the method lets attention see, `Method.scaling_length`: min(L, S + R + 1) for sinks, min(L, window)
for lm_infinite — in every protocol, as in decoding (`posenc.decode.rope_schedule`), not at the window's or
the stream's length.

What is scored (`Scored`): by default the first `num_bytes` bytes of the split as one stream, so a window
may cross from one document into the next. With `documents=True`, the whole split by document: each
document of at least max(lengths) + 1 bytes contributes its first multiple of max(lengths) targets
(`data.document_segments`), every window, sliding window and stream stays inside one document, and every
length still scores the same bytes; shorter documents are left out, and the table says how many.

RoPE frequencies and the methods' parameters enter the compiled forward pass as traced inputs, so each
(run, length) compiles once per method whatever the number of scalings and parameter values.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
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

from posenc import checkpoint, data, ngram
from posenc.encodings import get_encoding
from posenc.model import ModelConfig
from posenc.rope_scaling import RopeScaling, is_length_dependent, rope_inputs
from posenc.training_free import Method
from posenc.xla_options import compiler_options

SCALINGS = ("none", "run", "linear", "ntk", "dynamic_ntk", "yarn", "dynamic_linear", "dynamic_yarn", "llama3",
            "longrope")
FACTOR_SCALINGS = ("linear", "ntk", "dynamic_ntk", "yarn", "llama3")  # the scalings a fixed --factor applies to
PROTOCOLS = ("nonoverlap", "per_position", "sliding", "streaming")
LN2 = math.log(2.0)
Z95 = 1.959963984540054  # the standard normal's 97.5% quantile: the half-width of a 95% normal interval in SEs
# A mean NLL (nats) above this has no finite perplexity (exp overflows float64): a model there has diverged
# even if its loss is still a finite number.
MAX_NLL = math.log(np.finfo(np.float64).max)


@dataclasses.dataclass
class Run:
    """A trained run loaded for evaluation (or a Hugging Face checkpoint: `tokenizer` set, `hf_run`)."""

    workdir: str
    name: str
    config: Any  # ConfigDict
    cfg: ModelConfig
    graphdef: Any
    params: Any
    step: int
    tokenizer: Any = None  # a `tokenizers.Tokenizer` for a Hugging Face checkpoint; None: bytes

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
                "unit": "byte" if self.tokenizer is None else "token",
                "rope_base": self.cfg.rope_base if rotary else None,
                "run_scaling": s.kind if rotary else None, "d_model": self.cfg.d_model,
                "num_layers": self.cfg.num_layers}


def load_run(workdir: str, name: str | None = None) -> Run:
    config, cfg, graphdef, params, step = checkpoint.restore_params(workdir)
    return Run(str(workdir), name or pathlib.Path(workdir).name, config, cfg, graphdef, params, step)


def hf_run(path: str, text: str | None = None, *, dtype: str | None = None, name: str | None = None) -> Run:
    """A Hugging Face checkpoint directory as a `Run` (`posenc.hf.load_pretrained`): its training length L0
    is the original length of its RoPE scaling (else `max_position_embeddings`), its default scaling its own
    (`run`), and it scores the splits of `text` (a corpus path as `data.path`: a text file or a directory,
    split 90/5/5%; default the bundled corpus) in its own tokens."""
    import ml_collections  # noqa: PLC0415

    from posenc import hf  # noqa: PLC0415

    model = hf.load_pretrained(path, dtype=dtype)
    tokenizer = hf.load_tokenizer(path)
    cfg = model.cfg
    graphdef, params = nnx.split(model)
    config = ml_collections.ConfigDict({
        "train_len": int(cfg.rope_scaling.original_max_len or cfg.max_len),
        "data": {"path": text or data.DEFAULT_CORPUS, "cache_dir": None},
        "model": {"posenc": cfg.posenc, "rope": {"scaling": {"kind": cfg.rope_scaling.kind}}},
        "eval": {"scalings": "run", "methods": "none"}})
    return Run(str(path), name or pathlib.Path(path).expanduser().resolve().name, config, cfg, graphdef, params, 0,
               tokenizer)


def run_stream(run: Run, split: str) -> tuple[np.ndarray, np.ndarray, str]:
    """(token stream, UTF-8 bytes per token, corpus fingerprint) of the `split` of the corpus `run` is scored
    on (`data.path`: the bundled corpus, a text file or a directory; see posenc/data.py): its bytes (one per
    token), or a Hugging Face run's tokens of the same text."""
    corpus = data.load_corpus(run.config.data.path, run.config.data.cache_dir)
    stream = corpus.split(split)
    if run.tokenizer is None:
        return stream, np.ones(len(stream), np.int64), corpus.sha256
    from posenc import hf  # noqa: PLC0415

    ids, nbytes = hf.tokenize(run.tokenizer, bytes(stream).decode("utf-8", errors="replace"))
    return ids, nbytes, corpus.sha256


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
        from posenc.longrope import scaling_for_run  # noqa: PLC0415

        return scaling_for_run(longrope_file, rotary_dim=run.cfg.rotary_dim, num_layers=run.cfg.num_layers,
                               base_len=base, run=run.name)
    if name == "longrope":
        own = run.cfg.rope_scaling
        if own.kind != "longrope":
            raise ValueError(f"scaling 'longrope' needs LongRoPE factors: --longrope=FILE or run {run.name!r}'s "
                             "model.rope.scaling.factors_file (from scripts/search_longrope.py)")
        return own
    if name == "dynamic_ntk":  # the length-tracking variant unless a slope is given (the module docstring)
        return RopeScaling(name, float(factor) if factor is not None else 1.0, original_max_len=base)
    if name.startswith("dynamic_"):
        return RopeScaling(name.removeprefix("dynamic_"), 1.0, original_max_len=base, dynamic=True)
    return RopeScaling(name, s, original_max_len=base)


def applies(run: Run, scaling: str) -> bool:
    """Whether inference-time scaling `scaling` applies to `run` (`none` and `run` apply to every run)."""
    return scaling in ("none", "run") or run.cfg.encoding.takes_rope_scaling


def check_split(split: str) -> None:
    """Runs are scored on the test split, or on validation to choose settings; never on train (the n-gram floor
    is fitted there)."""
    if split not in ("validation", "test"):
        raise ValueError(f"split must be 'validation' or 'test', got {split!r}")


def checked_lengths(lengths: Sequence[int]) -> list[int]:
    """The distinct `lengths`, ascending; refuses an empty list and anything but positive integers (a length of
    128.9 is not read as 128)."""
    lengths = list(lengths)
    if not lengths or any(isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0 for n in lengths):
        raise ValueError(f"lengths must be positive integers, got {lengths}")
    return sorted(set(int(n) for n in lengths))


def check_scaling_names(scalings: Sequence[str] | None) -> None:
    """Refuses, before any run is loaded, an empty list (None means each run's defaults) or a name not in
    SCALINGS."""
    if scalings is not None and not list(scalings):
        raise ValueError("scalings: give at least one name, or none at all for each run's defaults")
    for name in scalings or ():
        if name not in SCALINGS:
            raise ValueError(f"scaling must be one of {SCALINGS}, got {name!r}")


def check_scalings_apply(runs: Sequence[Run], scalings: Sequence[str] | None, longrope_file: str | None = None) -> None:
    """Refuses, before any cell is scored, a scaling that applies to none of `runs` and `longrope` for a run it
    applies to that has no LongRoPE factors (its own, or `longrope_file`)."""
    for name in scalings or ():
        if not any(applies(r, name) for r in runs):
            raise ValueError(f"scaling {name!r} does not apply to any of the runs (posenc: "
                             f"{sorted({r.cfg.posenc for r in runs})}); only encodings that take a RoPE scaling "
                             "can be rescaled")
        if name == "longrope":
            for r in runs:
                if applies(r, name):
                    scaling_for(r, name, r.base_len, longrope_file=longrope_file)  # raises, naming the run


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


def method_applies(run: Run, method: Method) -> bool:
    """Whether training-free `method` is defined for `run`'s encoding."""
    try:
        method.check(run.cfg.encoding, run.cfg)
    except ValueError:
        return False
    return True


def skipped(run: Run, scalings: Sequence[str], methods: Sequence[Method]) -> list[dict[str, str]]:
    """The scalings and methods asked for that do not apply to `run`, each with its reason: the result's
    `skipped` list and a line on stdout, so that a missing row is never silent."""
    out = [{"run": run.name, "scaling": s, "reason": f"posenc={run.cfg.posenc!r} takes no RoPE scaling"}
           for s in dict.fromkeys(scalings) if not applies(run, s)]
    for m in dict.fromkeys(methods):
        try:
            m.check(run.cfg.encoding, run.cfg)
        except ValueError as e:
            out.append({"run": run.name, "method": m.label, "reason": str(e)})
    for item in out:
        tqdm.write(f"skipped for {item['run']}: {item.get('scaling') or item.get('method')} ({item['reason']})")
    return out


def parse_methods(specs: Sequence[str | Method] | None) -> list[Method] | None:
    """['none', 'self_extend,group=4', …] → Methods (a ValueError names a bad spec)."""
    if specs is None:
        return None
    return [m if isinstance(m, Method) else Method.parse(m) for m in specs]


def default_methods(config) -> list[Method]:
    """A run's `config.eval.methods` (';'-separated specs; `none` when the field is absent)."""
    text = config.eval.get("methods", "none") if "eval" in config else "none"
    return [Method.parse(t) for t in text.split(";") if t.strip()] or [Method()]


@functools.lru_cache(maxsize=16)
def _nll_fn(graphdef, cfg: ModelConfig):
    """Jitted per-position NLL `[B, L]` with RoPE frequencies and a method's parameters as traced inputs. One
    function per (graphdef, cfg), both hashable and compared by value: evaluations of equal models in one
    process (every part of a study's job, every run of one config) share its traces and compilations."""

    def fn(params, x, y, inv_freq, attention_factor, n_hat, inv_freq_lo, method):
        rope = (inv_freq, attention_factor, n_hat, inv_freq_lo) if cfg.encoding.takes_rope_scaling else None
        logits = nnx.merge(graphdef, params)(x, rope=rope, method=method)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y)

    return jax.jit(fn, compiler_options=compiler_options())


def _rope_args(cfg: ModelConfig, scaling: RopeScaling, length: int):
    if cfg.encoding.takes_rope_scaling:
        inv, af, n_hat, lo = rope_inputs(cfg.rotary_dim, cfg.rope_base, scaling, length)
    else:
        inv, af, n_hat, lo = np.zeros((1,)), 1.0, 0, np.zeros((1,))
    return (jnp.asarray(inv, jnp.float32), jnp.asarray(af, jnp.float32), jnp.asarray(n_hat, jnp.int32),
            jnp.asarray(lo, jnp.float32))


# Query chunk of the evaluation's attention at long lengths: at most [B, N, ATTN_CHUNK, model.attn_key_block]
# scores exist at once. 512 (with key tiles of 512) was the fastest of 128 … 1024 at 4096 on the 2-core machine
# of experiments/benchmarks (scripts/benchmark_eval.py --attn_chunk).
ATTN_CHUNK = 512


def _batches(x: np.ndarray, y: np.ndarray, batch: int):
    """(x, y, n) slices of `batch` rows; a shorter last one is padded to the next power of two (at most `batch`)
    with copies of its last row, of which the first n are real: a handful of compiled shapes per length
    whatever the number of windows."""
    for i in range(0, len(x), batch):
        xb, yb = x[i:i + batch], y[i:i + batch]
        n = len(xb)
        pad = min(batch, 1 << (n - 1).bit_length()) - n
        if pad:
            xb, yb = (np.concatenate([a, np.repeat(a[-1:], pad, axis=0)]) for a in (xb, yb))
        yield xb, yb, n


class Evaluator:
    """One compiled forward per (model config, length), shared by the runs of that config in the process;
    scores windows under any scaling."""

    def __init__(self, run: Run, attn_chunk: int = ATTN_CHUNK, tokens_per_batch: int = 16384,
                 learned_beyond: str | None = None):
        self.run = run
        self.attn_chunk = attn_chunk
        self.tokens_per_batch = tokens_per_batch
        self.learned_beyond = learned_beyond or run.cfg.learned_beyond
        self._fns: dict[int, Any] = {}

    def _graphdef(self, cfg):
        """The run's parameters viewed through a model of static config `cfg` (chunking, learned_beyond)."""
        return self.run.graphdef if cfg == self.run.cfg else checkpoint.abstract_model(cfg)[0]

    def _fn(self, length: int):
        if length not in self._fns:
            cfg = dataclasses.replace(self.run.cfg, attn_chunk=self.attn_chunk if length > self.attn_chunk else 0,
                                      learned_beyond=self.learned_beyond)
            # the same parameters viewed through a model with another static config (chunking, learned_beyond)
            graphdef = self._graphdef(cfg)
            self._fns[length] = _nll_fn(graphdef, cfg)
        return self._fns[length]

    def undefined_reason(self, length: int, method: Method | None = None) -> str | None:
        cfg = dataclasses.replace(self.run.cfg, learned_beyond=self.learned_beyond)
        limit = cfg.encoding.max_positions(cfg)
        if method is not None:
            length = method.positions_embedded(cfg.encoding, length)
        if limit is not None and length > limit:
            return f"posenc={cfg.posenc!r} is undefined past {limit} positions ({cfg.encoding.undefined_past(cfg)})"
        return None

    def resolve(self, method: Method | None, length: int) -> Method | None:
        """`method` with its defaults for this run at `length` (None and `none` stay as they are)."""
        if method is None:
            return None
        method.check(self.run.cfg.encoding, self.run.cfg)
        return method.resolve(self.run.base_len, length)

    def nll(self, x: np.ndarray, y: np.ndarray, scaling: RopeScaling, method: Method | None = None) -> np.ndarray:
        """Per-position NLL `[n, L]` (nats) of windows `x`, `y` `[n, L]` under `scaling` and a training-free
        `method` (resolved at L for this run if it is not already)."""
        length = x.shape[1]
        cfg = self.run.cfg
        method = self.resolve(method, length)
        inv, af, n_hat, lo = _rope_args(cfg, scaling, length if method is None else method.scaling_length(length))
        args = None if method is None or method == Method() else method.args(cfg.encoding)
        fn = self._fn(length)
        batch = max(1, self.tokens_per_batch // length)
        out = [np.asarray(fn(self.run.params, xb, yb, inv, af, n_hat, lo, args))[:n]
               for xb, yb, n in _batches(x, y, batch)]
        nll = np.concatenate(out).astype(np.float64)
        return self._checked(nll, length, scaling)

    def compiled_text(self, x: np.ndarray, y: np.ndarray, scaling: RopeScaling) -> str:
        """The optimized HLO of the computation `nll(x, y, scaling)` runs (no method) for windows `x`, `y`
        `[n, L]`, one batch of them: what a profile of it names its ops by (`posenc.timing.profile_calls`)."""
        inv, af, n_hat, lo = _rope_args(self.run.cfg, scaling, x.shape[1])
        xb, yb, _ = next(iter(_batches(x, y, max(1, self.tokens_per_batch // x.shape[1]))))
        return self._fn(x.shape[1]).lower(self.run.params, xb, yb, inv, af, n_hat, lo, None).compile().as_text()

    def prefix_nll(self, x: np.ndarray, y: np.ndarray, scaling: RopeScaling) -> np.ndarray:
        """Per-position NLL `[n, L]` with each position scored by the frequencies of its own prefix (seq_len
        t + 1 for target t): what cached decoding computes with unrotated keys (`decode.teacher_forced_logits`),
        not one set of frequencies for the whole window. Equal to recomputing the forward pass over every
        prefix (`decode.recompute_logits`) in the first layer only: a deeper layer's cached keys and values
        come from the hidden states of each token's own step (see `posenc.decode`). The leading positions
        whose frequencies equal those at seq_len 1 are prefilled at once, the rest fed one at a time through
        the cache."""
        from posenc import decode  # noqa: PLC0415

        length = x.shape[1]
        same = np.ones(length, bool)
        for field in decode.rope_schedule(self.run.cfg, scaling, length):  # frequencies, attention factor, residual
            a = np.asarray(field)
            same &= np.all(a == a[:1], axis=tuple(range(1, a.ndim)))
        prefill = int(np.argmin(same)) if not same.all() else length
        batch = max(1, self.tokens_per_batch // length)
        out = []
        for i in range(0, len(x), batch):
            logits = decode.teacher_forced_logits(self.run.graphdef, self.run.params, jnp.asarray(x[i:i + batch]),
                                                  prefill_len=prefill, scaling=scaling)
            out.append(np.asarray(optax.softmax_cross_entropy_with_integer_labels(
                logits.astype(jnp.float32), jnp.asarray(y[i:i + batch]))))
        return self._checked(np.concatenate(out).astype(np.float64), length, scaling)

    def streaming_nll(self, stream: np.ndarray, num_bytes: int, scaling: RopeScaling, method: Method,
                      chunk: int = 128) -> np.ndarray:
        """NLL `[num_bytes]` of the first `num_bytes` targets of `stream`, fed as one sequence in chunks of
        `chunk` tokens through a KV cache of exactly S + R slots (`method`: `sinks` or `lm_infinite`,
        resolved at the stream's length): the memory of the attention is O(chunk · (S + R + chunk)). The model
        is the run's with this evaluator's `learned_beyond`, as in `nll` and `undefined_reason`."""
        from posenc.decode import _rotate_at_use  # noqa: PLC0415

        cfg = dataclasses.replace(self.run.cfg, learned_beyond=self.learned_beyond)
        method = self.resolve(method, num_bytes)
        layout = method.cache_layout()
        if layout is None:
            raise ValueError(f"the streaming protocol needs a bounded-cache method (lm_infinite, sinks), got {method.label}")
        n = -(-num_bytes // chunk) * chunk
        x = np.zeros(n, np.int32)
        y = np.zeros(n, np.int32)
        x[:num_bytes], y[:num_bytes] = stream[:num_bytes], stream[1:num_bytes + 1]
        size = sum(layout)
        rotate = _rotate_at_use(cfg, scaling, method)
        key = ("streaming", chunk, n, size, rotate, method.method, method.logn is not None)
        if key not in self._fns:
            graphdef = self._graphdef(cfg)

            def fn(params, xs, ys, rope, args):
                model = nnx.merge(graphdef, params)

                def body(cache, inp):
                    tok, tgt, start = inp
                    pos = (start + jnp.arange(chunk))[None]
                    logits, cache = model(tok[None], pos, seq_len=n, rope=rope, cache=cache, method=args)
                    return cache, optax.softmax_cross_entropy_with_integer_labels(logits[0], tgt)

                cache = model.init_cache(1, size, rotate)
                starts = jnp.arange(0, n, chunk)
                _, nll = jax.lax.scan(body, cache, (xs.reshape(-1, chunk), ys.reshape(-1, chunk), starts))
                return nll.reshape(-1)

            self._fns[key] = jax.jit(fn, compiler_options=compiler_options())
        inv, af, n_hat, lo = _rope_args(cfg, scaling, method.scaling_length(num_bytes))
        rope = (inv, af, n_hat, lo) if cfg.encoding.takes_rope_scaling else None
        args = method.args(cfg.encoding)
        if method.method == "sinks" and not int(n_hat):  # n̂ as applied at this length (`rope_inputs`)
            args = dataclasses.replace(args, reindex=True)
        nll = np.asarray(self._fns[key](self.run.params, jnp.asarray(x), jnp.asarray(y), rope, args),
                         np.float64)[:num_bytes]
        return self._checked(nll[None], num_bytes, scaling)[0]

    def _checked(self, nll: np.ndarray, length: int, scaling: RopeScaling) -> np.ndarray:
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
    check_lengths_tile(lengths, nb, note="" if num_bytes is not None else " (the default)",
                       limit=f" (at most {available})")
    return nb


def check_lengths_tile(lengths: Sequence[int], num_bytes: int, *, field: str = "lengths",
                       nb_field: str = "num_bytes", note: str = "", limit: str = "") -> None:
    """Refuses lengths that do not all divide `num_bytes`: every length tiles the same bytes with non-overlapping
    windows. The error names `field` and `nb_field` (`note` follows the value, `limit` the suggested multiple)."""
    uneven = [n for n in lengths if num_bytes % n]
    if uneven:
        raise ValueError(f"{field}: {uneven} do not divide {nb_field}={num_bytes}{note}: every length tiles the same "
                         f"bytes; give {nb_field} a multiple of {math.lcm(*lengths)}{limit}, or lengths that divide "
                         f"{num_bytes}")


@dataclasses.dataclass(frozen=True)
class Scored:
    """The tokens a table scores, as segments each scored on its own (no window, sliding window or stream
    crosses from one segment into the next), with the UTF-8 bytes of each token (1 for byte runs).

    The default is one segment, the first `num_bytes` targets of the split. `documents=True` in `evaluate`
    gives one segment per document (`data.document_segments`): the whole split, each document's first
    multiple of the longest length.
    """

    segments: tuple[np.ndarray, ...]  # tokens, each k · longest + 1 long
    counts: tuple[np.ndarray, ...]  # UTF-8 bytes per token, aligned with segments

    @classmethod
    def stream(cls, stream: np.ndarray, counts: np.ndarray, num_bytes: int) -> "Scored":
        return cls((stream[:num_bytes + 1],), (counts[:num_bytes + 1],))

    @classmethod
    def by_document(cls, documents: Sequence[np.ndarray], longest: int) -> "Scored":
        """One segment per document of at least `longest` + 1 bytes (`data.document_segments`), byte tokens."""
        segs = data.document_segments(documents, longest)
        return cls(tuple(segs), tuple(np.ones(len(s), np.int64) for s in segs))

    @property
    def num_targets(self) -> int:
        return sum(len(s) - 1 for s in self.segments)

    @property
    def target_bytes(self) -> int:
        return int(sum(c[1:].sum() for c in self.counts))

    def windows(self, length: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Non-overlapping windows of `length` tiling every segment: (x, y, bytes of each window's targets)."""
        xs, ys, bs = [], [], []
        for seg, cnt in zip(self.segments, self.counts):
            x, y = data.eval_windows(seg, length=length, num_bytes=len(seg) - 1)
            xs.append(x)
            ys.append(y)
            bs.append(data.eval_windows(cnt, length=length, num_bytes=len(seg) - 1)[1].sum(axis=1))
        return np.concatenate(xs), np.concatenate(ys), np.concatenate(bs)

    def sliding(self, window: int, stride: int) -> tuple[np.ndarray, ...]:
        """`sliding_windows` of each segment, concatenated: (x, y, weights, bytes of each target)."""
        parts = [sliding_windows(seg, len(seg) - 1, window, stride) + (sliding_windows(cnt, len(seg) - 1, window, stride)[1],)
                 for seg, cnt in zip(self.segments, self.counts)]
        return tuple(np.concatenate(a) for a in zip(*parts))


def sliding_windows(stream: np.ndarray, num_bytes: int, window: int, stride: int):
    """Windows of `window` tokens every `stride` scoring the first `num_bytes` targets exactly once.

    Returns (x, y, weights) `[n, window]`: weight 1 on the scored positions (the first window scores all
    of its positions, later ones their last `stride`). Fewer than `window` targets make one window whose
    positions past them are padding, weight 0 (a causal model's scores of the targets do not depend on it).
    """
    if not 0 < stride <= window:
        raise ValueError(f"stride must be in [1, window={window}], got {stride}")
    if num_bytes < window:  # a segment shorter than the window: one window over all of it, the rest padding
        x, y, w = (np.zeros((1, window), dt) for dt in (np.int32, np.int32, np.float64))
        x[0, :num_bytes], y[0, :num_bytes], w[0, :num_bytes] = stream[:num_bytes], stream[1:num_bytes + 1], 1.0
        return x, y, w
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


def _scores(nll: np.ndarray, bits_per_byte: float, scaling: RopeScaling) -> dict[str, Any]:
    """A row's numbers from its per-token NLLs (nats) and its bits per byte."""
    mean = float(nll.mean())
    return {"nll": mean, "bpb": float(bits_per_byte), "ppl": math.exp(mean),
            "factor": scaling.factor if scaling.kind != "none" else 1.0}


BOOTSTRAP_RESAMPLES = 2000


def bootstrap_interval(window_bits: np.ndarray, window_bytes: np.ndarray, level: float = 0.95,
                       resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of bits per byte over windows (Efron & Tibshirani 1993, §13.3): the
    windows are resampled with replacement and each resample's Σ bits / Σ bytes taken (bytes differ per window
    for a tokenised run); a pure function of the inputs (`seed` fixed). None for fewer than 2 windows."""
    bits, nbytes = np.asarray(window_bits, np.float64), np.asarray(window_bytes, np.float64)
    if bits.size < 2:
        return None
    rng = np.random.default_rng(seed)
    block = max(1, 2 ** 22 // bits.size)  # resamples drawn a block at a time: memory O(2^22), not O(resamples · n)
    stats = []
    for i in range(0, resamples, block):
        idx = rng.integers(0, bits.size, size=(min(block, resamples - i), bits.size))
        stats.append(bits[idx].sum(axis=1) / nbytes[idx].sum(axis=1))
    stats = np.concatenate(stats)
    lo, hi = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return float(lo), float(hi)


def paired_interval(window_bpb_a, window_bpb_b, level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES,
                    seed: int = 0) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the difference a − b of two evaluations' bits per byte over the same
    equal-byte windows (`window_bpb_a`, `window_bpb_b`: [n], each window's bits per byte, e.g. two scalings of
    one run on one split): the windows are resampled in pairs, so that what both evaluations share (a hard
    window is hard for both) cancels, and the interval is that of the mean per-window difference. None for
    fewer than 2 windows."""
    a, b = np.asarray(window_bpb_a, np.float64), np.asarray(window_bpb_b, np.float64)
    if a.ndim != 1 or a.shape != b.shape:
        raise ValueError(f"paired windows must be two lists of the same windows' scores, got shapes {a.shape} and "
                         f"{b.shape}")
    return bootstrap_interval(a - b, np.ones_like(a), level, resamples, seed)


def prefix_gap(workdir: str, scaling: str, length: int, *, positions: int = 32, split: str = "test") -> dict[str, Any]:
    """How far cached decoding under a length-dependent scaling (`Evaluator.prefix_nll`, the `prefix` protocol
    of `--prefix_dynamic` and lm_study's "as decoding" rows) is from the per-prefix recompute
    (`decode.recompute_logits`, every layer at the frequencies of seq_len p + 1), on the first window of
    `length` bytes of `split`: the two agree in the first layer and differ past it (`posenc.decode`), by an
    amount only a trained model shows. The recompute costs one forward pass per position, so it is taken at
    `positions` evenly spaced positions past the training length (p = L0 … L − 1; the last one included).

    Returns {run, step, scaling, length, train_len, positions: [...], cached_bpb and recompute_bpb (mean over
    those positions, bits), gap_bpb (cached − recompute), max_abs_gap_bits, window_bpb (the cached protocol over
    the whole window) and window_level_bpb (the whole window at s(L), the `nonoverlap` protocol)}."""
    from posenc import decode  # noqa: PLC0415

    check_split(split)
    if isinstance(positions, bool) or not isinstance(positions, int) or positions < 1:
        raise ValueError(f"positions (how many positions the recompute scores) must be a positive integer, got "
                         f"{positions!r}")
    run = load_run(workdir)
    sc = scaling_for(run, scaling, length)
    if not is_length_dependent(sc):
        raise ValueError(f"scaling {scaling!r} does not depend on the length: cached decoding equals the recompute "
                         "(tests/test_decode.py); give a length-dependent one (dynamic_ntk, dynamic_linear, "
                         "dynamic_yarn, longrope)")
    base = run.base_len
    if not base < length:
        raise ValueError(f"length must exceed the run's original length {base} (where the scaling starts to act), "
                         f"got {length}")
    x, y = data.eval_windows(run_stream(run, split)[0], length=length, num_bytes=length)
    evaluator = Evaluator(run)
    cached = evaluator.prefix_nll(x, y, sc)[0]
    at = np.unique(np.linspace(base, length - 1, min(positions, length - base)).round().astype(int))
    logits = decode.recompute_logits(run.graphdef, run.params, jnp.asarray(x), scaling=sc, positions=at)
    recompute = np.asarray(optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32), jnp.asarray(y[:, at])), np.float64)[0]
    window = evaluator.nll(x, y, sc)[0]
    bits = lambda nll: float(np.mean(nll)) / LN2  # noqa: E731
    return {"run": run.name, "step": run.step, "scaling": scaling, "length": length, "train_len": base,
            "split": split, "positions": at.tolist(), "cached_bpb": bits(cached[at]),
            "recompute_bpb": bits(recompute), "gap_bpb": bits(cached[at] - recompute),
            "max_abs_gap_bits": float(np.abs(cached[at] - recompute).max()) / LN2, "window_bpb": bits(cached),
            "window_level_bpb": bits(window)}


def _window_fields(nll: np.ndarray, window_bytes: np.ndarray) -> dict[str, Any]:
    """Per-window bits per byte (`window_bpb`), their 95% bootstrap interval (`bpb_lo`, `bpb_hi`) and
    `windows`, from the NLLs `[n, L]` (nats) of windows of `window_bytes` bytes each."""
    bits = nll.sum(axis=1) / LN2
    ci = bootstrap_interval(bits, window_bytes)
    return {"window_bpb": (bits / window_bytes).tolist(), "bpb_lo": None if ci is None else ci[0],
            "bpb_hi": None if ci is None else ci[1], "windows": len(nll)}


def _undefined(reason: str) -> dict[str, Any]:
    return {"status": "undefined", "reason": reason, "nll": None, "bpb": None, "ppl": None, "factor": None}


@functools.lru_cache(maxsize=4)
def ngram_baseline(path: str, cache_dir: str | None = None) -> tuple[ngram.NGram, int, dict[int, float]]:
    """The interpolated Witten–Bell byte n-gram (`posenc.ngram`) of the corpus at `path`: fit on its train
    split, its context length (0 … 6 bytes) chosen on its validation split; (model, context, validation bits
    per byte of every context)."""
    corpus = data.load_corpus(path, cache_dir)
    cached = None
    if cache_dir:  # the counts, next to the corpus's cached splits, keyed by the corpus and the code that counts
        cached = (pathlib.Path(cache_dir).expanduser()
                  / f"ngram-wb{ngram.MAX_CONTEXT}-{corpus.sha256[:16]}-{ngram.fit_version()}.npz")
    if cached is not None and cached.exists():
        model = ngram.load(cached)
    else:
        model = ngram.NGram.fit(corpus.train, ngram.MAX_CONTEXT)
        if cached is not None:
            cached.parent.mkdir(parents=True, exist_ok=True)
            ngram.save(model, cached)
    # validation windows of 1024 bytes, or one window of the whole split where it is shorter (small corpora)
    context, scores = ngram.select_context(model, corpus.validation, min(1024, len(corpus.validation) - 1))
    return model, context, scores


def ngram_rows(path: str, cache_dir: str | None, scored: Scored, lengths: Sequence[int], split: str,
               name: str = "n-gram") -> list[dict[str, Any]]:
    """The n-gram floor on exactly the windows the runs score (`scored.windows` at each length), as result rows
    (run `name`, scaling naming the model and its context)."""
    model, context, _ = ngram_baseline(path, cache_dir)
    num_bytes = scored.num_targets
    rows = []
    for length in lengths:
        x, y, _ = scored.windows(length)
        bits = model.bits(x, y, context)
        nll = float(bits.mean()) * LN2
        rows.append({"run": name, "posenc": "n-gram", "train_len": None, "step": None, "unit": "byte",
                     "scaling": f"witten-bell, {context} B context", "method": "none", "split": split,
                     "corpus": path, "num_bytes": num_bytes, "protocol": "nonoverlap", "length": length,
                     "status": "ok", "reason": "", "nll": nll, "bpb": float(bits.mean()), "ppl": math.exp(nll),
                     "factor": 1.0, "ngram_context": context,
                     **_window_fields(bits * LN2, np.full(len(bits), length))})
    return rows


def ngram_curve(path: str, cache_dir: str | None, scored: Scored, length: int) -> np.ndarray:
    """The n-gram floor's mean bits at each position of `scored`'s non-overlapping windows of `length`: `[length]`.

    Past its context (a few bytes) the n-gram is blind to the position, so its curve is the difficulty of the
    text found at each position of these windows. A model's curve on the same windows minus this one is its loss
    relative to the n-gram at each position, that difficulty taken out: how much context the model uses.
    """
    model, context, _ = ngram_baseline(path, cache_dir)
    x, y, _ = scored.windows(length)
    return model.bits(x, y, context).mean(axis=0)


def position_bin(length: int) -> int:
    """The positions averaged into one point of a per-position curve of `length` positions: max(1, length // 64)
    (the last length mod bin positions are left out)."""
    return max(1, length // 64)


def binned_se(nll: np.ndarray) -> np.ndarray:
    """The standard error over the windows of each bin's mean loss: `nll [n, L]` (n ≥ 2 windows) → `[L // b]`,
    b = `position_bin(L)`. Computed from each window's own bin means, so the correlation of a window's positions
    (a hard window is hard at every position) is in it, as it is not in the per-position standard errors."""
    n, length = nll.shape
    b = position_bin(length)
    means = nll[:, :length // b * b].reshape(n, -1, b).mean(axis=2)
    return means.std(axis=0, ddof=1) / math.sqrt(n)


def evaluate(workdirs: Sequence[str], lengths: Sequence[int], scalings: Sequence[str] | None = None, *,
             num_bytes: int | None = None, factor: float | None = None, stride: int | None = None,
             split: str = "test", learned_beyond: str | None = None, attn_chunk: int = ATTN_CHUNK, progress: bool = True,
             longrope_file: str | None = None, methods: Sequence[str | Method] | None = None,
             hf_models: Sequence[str] = (), text: str | None = None, hf_dtype: str | None = None,
             ngram_floor: bool = True, prefix_dynamic: bool = False, sliding_long: bool = False,
             documents: bool = False) -> dict[str, Any]:
    """Evaluates runs at lengths under scalings; returns {'rows': [...], 'per_position': {...}, ...}.

    Each run is scored on the `split` of its own corpus (`data.path`); rows and the table name it. A Hugging
    Face checkpoint (`hf_models`) is scored in its own tokens: lengths and `num_bytes` count tokens, `nll`
    and `ppl` are per token and `bpb` is per UTF-8 byte of the text scored (comparable with the byte models).

    Args:
      workdirs: trained runs.
      hf_models: Hugging Face checkpoint directories (`hf_run`), evaluated next to the runs.
      text: the corpus the Hugging Face checkpoints score (a text file or a directory, as `data.path`: its
        `split`, the last 5% for `test`; default the bundled corpus).
      hf_dtype: None (float32) or 'bfloat16' for the checkpoints' weights.
      lengths: evaluation lengths L (tokens).
      scalings: names from `SCALINGS`; the ones that do not apply to a run's encoding are skipped for that
        run (a ValueError if one applies to none of the runs). None: each run's own `default_scalings`.
      num_bytes: test bytes scored at every length (default: the largest multiple of max(lengths) the split
        holds, capped at 16 windows of the longest length).
      factor: a fixed scale instead of L / L0 (> 0); for `dynamic_ntk`, Hugging Face's slope instead of 1.
      stride: sliding-window stride (default train_len / 2).
      split: 'test' (default) or 'validation'.
      learned_beyond: override the learned table's behaviour past max_len ('error' reports it undefined).
      longrope_file: the JSON of scripts/search_longrope.py, used by the scaling 'longrope'.
      methods: training-free methods (`Method`s or their specs, such as 'self_extend,window=64'), each
        evaluated with every scaling; the ones not defined for a run's encoding are skipped for that run (a
        ValueError if one applies to none of the runs). None: each run's `config.eval.methods` (`none`).
      prefix_dynamic: for the scalings whose frequencies change with the length (dynamic NTK, dynamic
        linear / YaRN, LongRoPE), also score each position with its own prefix's frequencies (protocol
        `prefix`, `Evaluator.prefix_nll`: the teacher-forced equivalent of decoding), next to the window-level
        rows that give every position the frequencies of L. Costs one cached decoding step per position.
      sliding_long: also score sliding windows of each length L past the training length at stride L / 2
        (protocol `sliding`, length L), next to the default sliding windows of train_len.
      documents: score the whole split by document instead of its first `num_bytes`: every document of at
        least max(lengths) + 1 bytes, its first ⌊(n − 1) / max(lengths)⌋ · max(lengths) targets
        (`data.document_segments`; shorter documents are left out, and the tables say how many). No window,
        sliding window or stream crosses from one document into the next, and every length scores the same
        bytes. Byte runs only (not with `num_bytes`).
      ngram_floor: also score each byte corpus's n-gram (`ngram_rows`: Witten–Bell, fit on its train split,
        context chosen on validation) on the same windows — the floor the models must clear — as
        `result['baselines']` (rows of the same schema, run `n-gram`; tables, CSV and plot include them).

    Raises:
      ValueError: a run without checkpoint, a run trained with `positions.randomize`, a length the split cannot supply, lengths that do not all divide
        num_bytes (with documents: the longest length), split 'train', an unknown scaling, one that applies to
        no run, or 'longrope' for a run without factors, a non-positive factor, stride or num_bytes, a factor or
        longrope_file that none of the scalings used reads.
      FloatingPointError: a run gives non-finite losses (no table of NaN is ever returned).
    """
    lengths = checked_lengths(lengths)
    check_split(split)
    if documents and (num_bytes is not None or hf_models):
        raise ValueError("documents=True scores the whole split of byte runs: give no num_bytes and no hf_models")
    if documents and any(lengths[-1] % n for n in lengths):  # each document is tiled by the longest length
        raise ValueError(f"lengths: with documents=True every length must divide the longest ({lengths[-1]}), whose "
                         f"multiples each document is cut to, got {[n for n in lengths if lengths[-1] % n]}")
    if factor is not None and not factor > 0:
        raise ValueError(f"factor must be > 0 (or unset for L / L0), got {factor!r}")
    if stride is not None and (isinstance(stride, bool) or not isinstance(stride, int) or stride <= 0):
        raise ValueError(f"stride must be a positive integer (or unset for train_len / 2), got {stride!r}")
    check_scaling_names(scalings)
    runs = [load_run(w) for w in workdirs] + [hf_run(p, text, dtype=hf_dtype) for p in hf_models]
    if not runs:
        raise ValueError("evaluate: give at least one run (workdirs) or Hugging Face checkpoint (hf_models)")
    for r in runs:
        if r.config.get("positions") is not None and r.config.positions.get("randomize"):
            raise ValueError(f"run {r.name!r} was trained with positions.randomize (positions drawn from "
                             f"[0, {r.config.positions.get('max_position')})): evaluate scores positions 0..L-1, "
                             "which it did not train on, and does not draw them as in training; a task run's "
                             "accuracy is scored at drawn positions by scripts/eval_tasks.py")
    names = [r.name for r in runs]
    if len(set(names)) != len(names):  # same basename: use the whole path
        runs = [dataclasses.replace(r, name=str(r.workdir)) for r in runs]
    if stride is not None and stride > min(r.train_len for r in runs):  # the sliding windows are train_len long
        raise ValueError(f"stride={stride} is longer than the sliding window (train_len "
                         f"{min(r.train_len for r in runs)} of {min(runs, key=lambda r: r.train_len).name}): it would "
                         "skip targets; give at most that")
    check_scalings_apply(runs, scalings, longrope_file)
    # the scalings the runs are scored with (`scalings`, else each run's own defaults): a factor or factors file
    # none of them reads would label the results with a setting that changed nothing
    used = set(scalings) if scalings is not None else {s for r in runs for s in default_scalings(r.config)
                                                       if applies(r, s)}
    if factor is not None and not used & set(FACTOR_SCALINGS):
        raise ValueError(f"factor={factor} is read only by the scalings {FACTOR_SCALINGS}; the runs are scored with "
                         f"{sorted(used)} (their config.eval.scalings unless scalings are given)")
    if longrope_file and "longrope" not in used:
        raise ValueError(f"longrope_file={longrope_file!r} is read only by the scaling 'longrope'; the runs are scored "
                         f"with {sorted(used)} (their config.eval.scalings unless scalings are given)")
    methods = parse_methods(methods)
    for m in methods or ():
        if not any(method_applies(r, m) for r in runs):
            m.check(runs[0].cfg.encoding, runs[0].cfg)  # raises, naming the method and the encoding
    scored, corpora, corpus_of = {}, {}, {}
    longest = lengths[-1]
    for run in runs:
        path = run.config.data.path
        key = path if run.tokenizer is None else f"{path} ({run.name} tokens)"
        corpus_of[run.workdir] = key
        if key not in corpora:
            stream, counts, digest = run_stream(run, split)
            what = f"the {split} split of data.path={path!r}" + ("" if run.tokenizer is None else f" in {run.name}'s tokens")
            if documents:
                docs = data.load_corpus(path, run.config.data.cache_dir).documents(split)
                scored[key] = Scored.by_document(docs, longest)
                if not scored[key].segments:
                    raise ValueError(f"{what}: no document has {longest} + 1 bytes, the longest length asked for")
                corpora[key] = {"sha256": digest, "num_bytes": scored[key].num_targets,
                                "documents": {"scored": len(scored[key].segments), "total": len(docs)}}
            else:
                nb = check_num_bytes(stream, lengths, num_bytes, default_windows=16, what=what)
                scored[key] = Scored.stream(stream, counts, nb)
                corpora[key] = {"sha256": digest, "num_bytes": nb}
            if run.tokenizer is not None:
                corpora[key]["text_bytes"] = scored[key].target_bytes

    jobs, skips = [], []
    for run in runs:
        skips += skipped(run, scalings or (), methods if methods is not None else default_methods(run.config))
        wanted = scalings if scalings is not None else default_scalings(run.config)
        run_scalings = [s for s in wanted if applies(run, s)] or ["none"]
        run_methods = [m for m in (methods if methods is not None else default_methods(run.config))
                       if method_applies(run, m)] or [Method()]
        for m in dict.fromkeys(run_methods):
            for s in dict.fromkeys(run_scalings):
                jobs.append((run, s, m))
    rows, per_position, per_position_se, per_position_bin_se = [], {}, {}, {}
    total = sum(len(lengths) + 1 + (sum(n > r.train_len for n in lengths) if sliding_long and m == Method() else 0)
                for r, _, m in jobs)
    bar = tqdm(total=total, desc="evaluate", disable=not progress or None, dynamic_ncols=True)
    evaluators = {r.workdir: Evaluator(r, attn_chunk=attn_chunk, learned_beyond=learned_beyond) for r in runs}
    for run, sname, method in jobs:
        ev = evaluators[run.workdir]
        corpus_path = corpus_of[run.workdir]
        sc_in, nb = scored[corpus_path], corpora[corpus_path]["num_bytes"]
        tokens = run.tokenizer is not None

        def bpb(nll):
            """Bits per byte of all the scored targets (nats / bytes / ln 2)."""
            if not tokens:  # one byte per token
                return float(nll.mean()) / LN2
            return float(nll.sum() / sc_in.target_bytes) / LN2

        plain = method == Method()
        base_row = {**run.summary(), "scaling": sname, "method": method.label, "split": split, "corpus": corpus_path,
                    "num_bytes": nb, **_setting_fields(run, ev, sname, longrope_file)}
        for length in lengths:
            bar.set_postfix_str(f"{run.name} {sname} {method.label} L={length}")
            resolved = ev.resolve(method, length)
            row = {**base_row, "protocol": "nonoverlap", "length": length, "status": "ok", "reason": "",
                   "method_params": json.dumps(resolved.set_fields())}
            reason = ev.undefined_reason(length, resolved)
            if reason:
                row.update(_undefined(reason))
            else:
                sc = scaling_for(run, sname, resolved.scaling_length(length), factor, longrope_file)
                x, y, window_bytes = sc_in.windows(length)
                nll = ev.nll(x, y, sc, resolved)
                row.update(_scores(nll, bpb(nll), sc), **_window_fields(nll, window_bytes))
                if length == longest:
                    label = f"{run.name}|{sname}" + ("" if plain else f"|{method.label}")
                    per_position[label] = nll.mean(axis=0).tolist()
                    if len(nll) > 1:  # its uncertainty: the standard error over the windows
                        per_position_se[label] = (nll.std(axis=0, ddof=1) / math.sqrt(len(nll))).tolist()
                        per_position_bin_se[label] = binned_se(nll).tolist()
            rows.append(row)
            if prefix_dynamic and plain and not reason and is_length_dependent(sc):
                nll = ev.prefix_nll(x, y, sc)
                rows.append({**row, "protocol": "prefix", **_scores(nll, bpb(nll), sc), **_window_fields(nll, window_bytes)})
            bar.update()
        if not plain:
            if method.cache_layout() is not None:  # (d) one stream through the bounded cache (one a document)
                stream_len = max(len(seg) - 1 for seg in sc_in.segments)  # nb, but for documents the longest
                resolved = ev.resolve(method, stream_len)
                sc = scaling_for(run, sname, resolved.scaling_length(stream_len), factor, longrope_file)
                row = {**base_row, "protocol": "streaming", "length": stream_len, "status": "ok", "reason": "",
                       "method_params": json.dumps(resolved.set_fields())}
                reason = ev.undefined_reason(stream_len, resolved)
                if reason:
                    row.update(_undefined(reason))
                else:
                    nll = np.concatenate([ev.streaming_nll(seg, len(seg) - 1, sc, resolved) for seg in sc_in.segments])
                    row.update(_scores(nll, bpb(nll), sc))
                rows.append(row)
            bar.update()
            continue
        # (c) sliding windows of train_len (never past the training length); with sliding_long, also of each
        # longer L at stride L / 2 (every target after the first window has at least L / 2 of context)
        slides = [(run.train_len, stride if stride is not None else max(1, run.train_len // 2))]
        slides += [(n, n // 2) for n in lengths if sliding_long and n > run.train_len]
        for window, st in slides:
            row = {**base_row, "protocol": "sliding", "length": window, "stride": st, "status": "ok", "reason": ""}
            reason = ev.undefined_reason(window)
            if reason:
                rows.append({**row, **_undefined(reason)})
                bar.update()
                continue
            sc = scaling_for(run, sname, window, factor, longrope_file)
            x, y, w, c = sc_in.sliding(window, st)
            nll = ev.nll(x, y, sc)
            mean = float((nll * w).sum() / w.sum())
            per_byte = mean / LN2
            if tokens:  # the bytes of each window's targets, laid out as the windows are
                per_byte = float((nll * w).sum() / (c * w).sum()) / LN2
            # each window scores its own targets (none twice): the interval resamples windows, as for non-overlapping
            # ones, over the windows that score any
            scored_bytes = ((c * w) if tokens else w).sum(axis=1)
            keep = scored_bytes > 0
            ci = bootstrap_interval((nll * w).sum(axis=1)[keep] / LN2, scored_bytes[keep])
            rows.append({**row, "nll": mean, "bpb": per_byte, "ppl": math.exp(mean),
                         "factor": sc.factor if sc.kind != "none" else 1.0, "bpb_lo": None if ci is None else ci[0],
                         "bpb_hi": None if ci is None else ci[1], "windows": int(keep.sum())})
            bar.update()
    bar.close()
    baselines = []
    if ngram_floor:
        byte_corpora = {corpus_of[r.workdir]: r for r in runs if r.tokenizer is None}
        for key, run in byte_corpora.items():
            name = "n-gram" if len(byte_corpora) == 1 else f"n-gram {key}"
            baselines += ngram_rows(key, run.config.data.cache_dir, scored[key], lengths, split, name)
    sizes = {c["num_bytes"] for c in corpora.values()}
    return {"rows": rows, "baselines": baselines, "per_position": per_position, "per_position_se": per_position_se,
            "per_position_bin_se": per_position_bin_se,
            "lengths": lengths, "split": split, "corpora": corpora,
            "num_bytes": sizes.pop() if len(sizes) == 1 else None, "skipped": skips}


# --------------------------------------------------------------------------------------------------------
# Outputs


COLUMNS = ("run", "posenc", "scaling", "method", "protocol", "length", "factor", "status", "nll", "bpb", "bpb_lo",
           "bpb_hi", "windows", "ppl",
           "train_len", "step", "rope_base", "run_scaling", "d_model", "num_layers", "split", "corpus", "num_bytes",
           "stride", "method_params", "learned_beyond", "longrope_file", "weights_dtype", "reason")


def _setting_fields(run: Run, ev: "Evaluator", scaling: str, longrope_file: str | None) -> dict[str, Any]:
    """The evaluation settings that change a row's numbers beyond its scaling and method: a learned table's
    behaviour past its length (`--learned_beyond`), the LongRoPE factors file, the weights' dtype."""
    table = "learned_beyond" in run.cfg.encoding.model_fields
    return {"learned_beyond": ev.learned_beyond if table else None,  # an encoding with a table of positions
            "longrope_file": str(longrope_file) if scaling == "longrope" and longrope_file else None,
            "weights_dtype": str(run.cfg.param_dtype)}


def _column(r: dict[str, Any]) -> str:
    if r["protocol"] in ("nonoverlap", "prefix"):
        return f"L={r['length']}"
    if r["protocol"] == "streaming":
        return f"streaming {r['length']}"
    return f"sliding {r['length']}/{r.get('stride')}"


def window_level_note(result: dict[str, Any]) -> str | None:
    """A note for a table whose length-tracking rows (`dynamic_linear`, `dynamic_yarn`, `dynamic_ntk` at its
    slope 1) were scored on whole windows only: there each equals its static kind at s = L / L0 (the module
    docstring), and only per-prefix scoring (`prefix_dynamic`) tells them apart. None when there is no such row
    or every one also has its `prefix` rows."""
    tracking = {r["scaling"] for r in result["rows"] if r["scaling"] in ("dynamic_linear", "dynamic_yarn")
                or (r["scaling"] == "dynamic_ntk" and r.get("factor") == 1.0)}
    scored = {r["scaling"] for r in result["rows"] if r["protocol"] == "prefix"}
    alone = sorted(tracking - scored)
    if not alone:
        return None
    static = {"dynamic_linear": "linear", "dynamic_yarn": "yarn", "dynamic_ntk": "ntk"}
    return (f"note: on windows of length L, {', '.join(alone)} equal{'s' if len(alone) == 1 else ''} "
            + ", ".join(static[s] for s in alone) + " at s = L / L0 (the same frequencies for the whole window); "
            "--prefix_dynamic also scores each position with its own prefix's frequencies, as decoding does")


def markdown_table(result: dict[str, Any], metric: str = "bpb") -> str:
    """Rows = run × scaling (× training-free method, when there are any), columns = lengths
    (non-overlapping), the sliding baseline and the streaming protocol."""
    lengths = result["lengths"]
    label = {"bpb_ci": "bpb, 95% percentile-bootstrap interval over the windows (adjacent windows are correlated and "
                       "few at the longest lengths: read it as a lower bound on the uncertainty; sliding windows are "
                       "resampled by the targets each scores; — : none, for one window or a stream, one sample)"}.get(metric, metric)
    with_methods = any(r.get("method", "none") != "none" for r in result["rows"])
    table: dict[tuple[str, ...], dict[str, str]] = {}
    for r in result["rows"] + result.get("baselines", []):
        key = (r["run"], r["scaling"] + (" · per-prefix" if r["protocol"] == "prefix" else "")) + ((r.get("method", "none"),) if with_methods else ())
        if r["status"] != "ok":
            cell = "undefined"
        elif metric == "bpb_ci":  # the bootstrap interval, for the rows that have one
            cell = f"[{r['bpb_lo']:.3f}, {r['bpb_hi']:.3f}]" if r.get("bpb_lo") is not None else "—"
        else:
            cell = f"{r[metric]:.3f}"
        table.setdefault(key, {})[_column(r)] = cell
    extra = {c for v in table.values() for c in v if not c.startswith("L=")}
    cols = [f"L={n}" for n in lengths] + sorted(c for c in extra if c.startswith("sliding")) + sorted(
        c for c in extra if c.startswith("streaming"))
    head = ["run", "scaling"] + (["method"] if with_methods else [])
    corpora = result.get("corpora") or {}
    if len(corpora) <= 1:
        where = "".join(f" of data.path={p!r}" for p in corpora)
        docs = next((c["documents"] for c in corpora.values() if "documents" in c), None)
        if docs:
            where += (f", by document ({docs['scored']} of {docs['total']} documents long enough; windows never cross "
                      "from one into the next)")
        lines = [f"{label} on {_scored_text(result)}{where} (lower is better)", "",
                 "| " + " | ".join(head + cols) + " |", "|" + "---|" * (len(head) + len(cols))]
        for key, cells in table.items():
            lines.append("| " + " | ".join(list(key) + [cells.get(c, "") for c in cols]) + " |")
        return "\n".join(lines)
    corpus_of = {r["run"]: r["corpus"] for r in result["rows"] + result.get("baselines", [])}
    head = ["run", "corpus", "bytes"] + head[1:]
    lines = [f"{label} on the {result['split']} split of each run's own corpus: rows on different corpora are "
             "not comparable (lower is better)", "",
             "| " + " | ".join(head + cols) + " |", "|" + "---|" * (len(head) + len(cols))]
    for key, cells in table.items():
        c = corpus_of[key[0]]
        scored = corpora[c]["num_bytes"]
        scored = f"{scored} tokens, {corpora[c]['text_bytes']} bytes" if "text_bytes" in corpora[c] else str(scored)
        lines.append("| " + " | ".join([key[0], c, scored] + list(key[1:])
                                       + [cells.get(col, "") for col in cols]) + " |")
    return "\n".join(lines)


def _scored_text(result: dict[str, Any]) -> str:
    """What one corpus's table scored: "N test bytes", or in a checkpoint's tokens "N test tokens (M bytes)"."""
    corpora = list((result.get("corpora") or {}).values())
    if len(corpora) == 1 and "text_bytes" in corpora[0]:
        corpus = corpora[0]
        return f"{result['num_bytes']} {result['split']} tokens ({corpus['text_bytes']} bytes)"
    return f"{result['num_bytes'] or 'each run’s'} {result['split']} bytes"


def _pyplot():
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def _train_lens(result: dict[str, Any]) -> list[int]:
    """The training lengths of the runs in `result` (the n-gram floor has none)."""
    return sorted({r["train_len"] for r in result["rows"] if r.get("train_len") is not None})


LINESTYLES = ("-", "--", ":", "-.")


def series_style(i: int) -> dict[str, str]:
    """Series i's colour C(i mod 10) and line style (i // 10) mod 4 (solid, dashed, dotted, dash-dot): no two of up
    to 40 series look alike (past 40 the pairs repeat)."""
    return {"color": f"C{i % 10}", "linestyle": LINESTYLES[i // 10 % 4]}


def series_axes(plt, count: int):
    """(figure, axes, place_legend) for a plot of `count` legend entries: up to ten, 7 × 4.5 inches with the legend
    inside the axes; past ten, the legend stands right of the axes in columns of at most 20, and the figure widens
    and grows to hold it. `place_legend(ax)` draws the legend."""
    outside = count > 10
    ncol = -(-count // 20)
    fig, ax = plt.subplots(figsize=(7 + 2.6 * ncol, max(4.5, 0.75 + 0.19 * -(-count // ncol))) if outside else (7, 4.5))

    def place_legend(ax):
        if outside:
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=ncol, borderaxespad=0)
        else:
            ax.legend(fontsize=7)

    return fig, ax, place_legend


def plot_bpb_vs_length(result: dict[str, Any], path) -> None:
    """Bits per byte of the non-overlapping windows against the length, one line per run · scaling (· method),
    and the n-gram floor dotted black; each point with its row's 95% percentile-bootstrap interval over the windows
    (`bpb_lo`, `bpb_hi`) as an error bar in its line's colour. A row without an interval (one window, or a
    result written before rows kept one) has a point without a bar, and the title says why. Each series has its
    own colour and line style (`series_style`), and past ten the legend stands beside the axes (`series_axes`)."""
    plt = _pyplot()
    series: dict[str, list[tuple[int, float, float | None, float | None]]] = {}
    missing: set[str] = set()  # why some points have no bar
    floors = set()  # the n-gram floor's series (its rows' posenc), whatever a run is named
    for r in result["rows"] + result.get("baselines", []):
        if r["protocol"] == "nonoverlap" and r["status"] == "ok":
            method = "" if r.get("method", "none") == "none" else f" · {r['method']}"
            label = f"{r['run']} · {r['scaling']}{method}"
            series.setdefault(label, []).append((r["length"], r["bpb"], r.get("bpb_lo"), r.get("bpb_hi")))
            if r.get("posenc") == "n-gram":
                floors.add(label)
            if r.get("bpb_lo") is None or r.get("bpb_hi") is None:
                missing.add("one window" if "bpb_lo" in r else "not kept in this result")
    fig, ax, place_legend = series_axes(plt, len(series))
    models = [label for label in series if label not in floors]
    for label, pts in series.items():
        pts.sort()
        floor = label not in models
        style = {"color": "black", "linestyle": ":"} if floor else series_style(models.index(label))
        (line,) = ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="" if floor else "o", label=label, **style)
        bars = [p for p in pts if p[2] is not None and p[3] is not None]
        if bars:  # each bar from lo to hi, drawn about its own centre (a percentile interval need not hold the point)
            ax.errorbar([p[0] for p in bars], [(p[2] + p[3]) / 2 for p in bars], yerr=[(p[3] - p[2]) / 2 for p in bars],
                        fmt="none", ecolor=line.get_color(), elinewidth=1, capsize=3)
    for t in _train_lens(result):
        ax.axvline(t, color="gray", linestyle="--", linewidth=1)
        ax.text(t, ax.get_ylim()[1], f" train_len {t}", va="top", fontsize=8, color="gray")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("evaluation length (tokens)")
    ax.set_ylabel("bits per byte (non-overlapping windows)")
    ax.set_title(f"Extrapolation on {_scored_text(result)}\nbars: 95% percentile-bootstrap interval over the windows"
                 + (f"\n(a point without a bar has none: {', '.join(sorted(missing))})" if missing else ""),
                 fontsize=9)
    place_legend(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_per_position(result: dict[str, Any], path) -> None:
    """The mean loss at each position of the longest windows (`per_position`), averaged over bins of
    `position_bin(L)` positions, with a band of ±1.96 standard errors over the windows of each bin's mean
    (`per_position_bin_se`). A curve without them (one window, or a result written before they were kept) has no
    band, and the title says why. Each curve has its own colour and line style (`series_style`)."""
    plt = _pyplot()
    fig, ax, place_legend = series_axes(plt, len(result["per_position"]))
    why = "one window" if "per_position_bin_se" in result else "not kept in this result"
    ses = result.get("per_position_bin_se") or {}
    missing = False
    for i, (label, curve) in enumerate(result["per_position"].items()):
        curve = np.asarray(curve)
        bins = position_bin(len(curve))  # average over bins of positions to tame the noise
        binned = curve[: len(curve) // bins * bins].reshape(-1, bins).mean(axis=1) / LN2
        xs = np.arange(len(binned)) * bins + bins / 2
        se = ses.get(label)
        missing |= se is None
        (line,) = ax.plot(xs, binned, label=label.replace("|", " · "), **series_style(i))
        if se is not None:
            half = Z95 * np.asarray(se) / LN2
            ax.fill_between(xs, binned - half, binned + half, alpha=0.2, color=line.get_color(), linewidth=0)
    for t in _train_lens(result):
        ax.axvline(t, color="gray", linestyle="--", linewidth=1)
    ax.set_xlabel(f"position in the window (length {result['lengths'][-1]})")
    tokens = any("text_bytes" in c for c in (result.get("corpora") or {}).values())  # a checkpoint's curve: per token
    ax.set_ylabel("bits per token (checkpoints) or byte (byte runs)" if tokens else "bits per byte")
    ax.set_title("Loss by position: where extrapolation breaks\nbands: ±1.96 standard errors over the windows of "
                 "each bin's mean" + (f"\n(a curve without a band has none: {why})" if missing else ""), fontsize=9)
    place_legend(ax)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(result: dict[str, Any], out: str) -> dict[str, pathlib.Path]:
    """results.csv, results.json, results.md, ppl_vs_length.png (`plot_bpb_vs_length`) and per_position.png
    (`plot_per_position`) in `out`."""
    out_dir = pathlib.Path(out).expanduser()
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {name: out_dir / name for name in ("results.csv", "results.json", "results.md", "ppl_vs_length.png",
                                               "per_position.png")}
    with open(paths["results.csv"], "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(result["rows"] + result.get("baselines", []))
    paths["results.json"].write_text(json.dumps(result, indent=1))
    paths["results.md"].write_text(markdown_table(result) + "\n\n" + markdown_table(result, "bpb_ci") + "\n\n"
                                   + markdown_table(result, "ppl") + "\n")

    plot_bpb_vs_length(result, paths["ppl_vs_length.png"])
    plot_per_position(result, paths["per_position.png"])
    return paths
