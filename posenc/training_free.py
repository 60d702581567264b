"""Training-free context extension at inference: which distances attention sees, and which keys it keeps.

The rescaling methods (`posenc.rope_scaling`) change RoPE's frequencies. These change the attention pattern
instead, for a model used as trained, and combine with any scaling. Query i (position) and key j ≤ i:

  * `self_extend` (Jin et al. 2024, "LLM Maybe LongLM: Self-Extend LLM Context Window Without Tuning",
    arXiv 2401.01325; datamllab/LongLM): keys with i − j < W (`window`) use their normal positions; farther
    keys use grouped positions, the query at ⌊i/G⌋ + W − W/G and the key at ⌊j/G⌋ (G = `group`), so that
    the grouped distance at i − j = W is ≈ W and the two regions join. Scores are merged as in the
    reference (`torch.where(neighbor_mask, neighbor_scores, group_scores)` before one softmax).
  * `rerope` (Su 2023, "ReRoPE", kexue.fm/archives/9708; bojone/rerope): the distance used in the rotation
    is min(i − j, w) (`window`): far keys see the query at position w and the key at 0. The reference's
    patches (`rerope_patch.py`, `leaky_rerope_patch.py`) always scale q by log-n as well; here log-n is its
    own option, so the reference's setting is `rerope,logn=L0` (and `leaky_rerope,logn=L0`).
  * `leaky_rerope` (same source): beyond w the distance grows with slope 1/k (`leak`): w + (i − j − w)/k,
    the query at (i + w(k − 1))/k and the key at j/k.
  * `lm_infinite` (Han et al. 2023, "LM-Infinite", arXiv 2308.16137; Glaciohound/LM-Infinite): a Λ-shaped
    mask — the first `n_global` tokens plus the keys with i − j < L (`window`, default the training length)
    — with the distance to the global tokens capped at L (query rotated at L, key unrotated, as in the
    reference's `stationary` branch).
  * `sinks` (Xiao et al. 2023, "Efficient Streaming Language Models with Attention Sinks", arXiv 2309.17453;
    mit-han-lab/streaming-llm): a KV cache of `num_sinks` S first tokens and the R = `window` most recent
    ones, positions re-indexed inside the cache (the reference's `pos_shift`): query i sees the sinks and
    the keys with i − j ≤ R; a recent key keeps its distance i − j, the query sits at min(i, S + R), so a
    sink's distance is min(i, S + R) − j; an absolute encoding embeds token i at min(i, S + R).
  * `logn` (any method, and `none`): q multiplied by max(1, log n / log L0) at the query's n = position + 1
    (Qwen's `logn_attn`, whose table starts at n = 1; Chiang & Cholak 2022, arXiv 2202.12172; the `scale_base`
    of Self-Extend's reference).

Every method is a pair of branches, the `near` pairs scored as usual and the `far` pairs scored with q and k
at the `far_positions` (masked where `far_visible` is false), merged by `where` before one softmax. How it
enters an encoding depends on the encoding's `position_kind`:

  * `rotary` (rope, xpos, p_rope, local_global) and `bias` (alibi, t5, kerple; fire takes `logn` only): both
    branches, q and k rotated (or the bias computed) at each branch's positions;
  * `absolute`, `contextual`, `none` (sinusoidal, learned, cope, none): no distances to remap, so only the
    mask of `lm_infinite` and `sinks` applies (and `sinks`' embedding at min(i, S + R)).

`self_extend`, `rerope` and `leaky_rerope` are defined for rotary encodings only; `lm_infinite` and `sinks`
for every encoding without sliding-window layers of its own whose bias, if any, is translation invariant (not
FIRE, whose bias depends on the query's own position); `logn` for all. Any other combination is a
ValueError naming the method and the encoding.

`Method` is the user's, hashable spec (names and Python numbers, defaults resolved per run and length by
`Method.resolve`); `MethodArgs` is what the forward pass takes: the method and encoding kind static, the
parameters traced, so a sweep over `window`, `group`, `leak`, `n_global`, `num_sinks` or `logn` reuses one
compiled forward per length.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

METHODS = ("none", "self_extend", "rerope", "leaky_rerope", "lm_infinite", "sinks")
# The parameters each method takes (every method also takes `logn`).
PARAMS = {
    "none": (),
    "self_extend": ("window", "group"),
    "rerope": ("window",),
    "leaky_rerope": ("window", "leak"),
    "lm_infinite": ("window", "n_global"),
    "sinks": ("window", "num_sinks"),
}
FIELDS = ("window", "group", "leak", "n_global", "num_sinks", "logn")
ROTARY_ONLY = ("self_extend", "rerope", "leaky_rerope")
BOUNDED = ("lm_infinite", "sinks")  # a KV cache of fixed + ring slots
POSITION_KINDS = ("rotary", "bias", "absolute", "contextual", "none")
_LOWEST = {"n_global": 0, "num_sinks": 0, "logn": 2}  # the smallest valid value of each integer field (else 1)


def _number(value) -> str:
    """A label's number: an integer in full, a float as `:g` writes it where that reads back as the same
    float (leak=3.0 → '3', as the labels have always read), else its shortest exact form (`repr`: leak=2.0000004
    → '2.0000004', not '2')."""
    if isinstance(value, int):
        return str(value)
    short = f"{value:g}"
    return short if float(short) == value else repr(float(value))


@dataclasses.dataclass(frozen=True)
class Method:
    """A training-free method and its parameters (None: the default of `resolve`)."""

    method: str = "none"
    window: int | None = None
    group: int | None = None
    leak: float | None = None
    n_global: int | None = None
    num_sinks: int | None = None
    logn: int | None = None

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        allowed = PARAMS[self.method] + ("logn",)
        for name, value in self.set_fields().items():
            if name not in allowed:
                raise ValueError(f"method {self.method!r} takes {list(allowed)}, got {name}={value!r}")
            if name == "leak":
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not (
                        math.isfinite(value) and value >= 1):
                    raise ValueError(f"{self.method}.leak (k: distances past the window grow by 1/k) must be a "
                                     f"number >= 1, got {value!r}")
                continue
            low = _LOWEST.get(name, 1)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{self.method}.{name} must be an integer >= {low}, got {value!r}")

    @classmethod
    def parse(cls, text: str) -> "Method":
        """'self_extend,window=64,group=4' or 'self_extend:window=64:group=4' (either separator) → Method;
        'none,logn=256' is log-n scaling alone."""
        parts = [p.strip() for p in text.replace(":", ",").split(",") if p.strip()]
        if not parts:
            raise ValueError("a method spec must name a method, such as 'self_extend,window=64,group=4'")
        kwargs: dict[str, Any] = {}
        for part in parts[1:]:
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep or key not in FIELDS:
                raise ValueError(f"method spec {text!r}: {part!r} must be field=value with field in {FIELDS}")
            if key in kwargs:
                raise ValueError(f"method spec {text!r}: {key} is given twice")
            try:
                number = float(value)
            except ValueError:
                raise ValueError(f"method spec {text!r}: {key}={value!r} is not a number") from None
            kwargs[key] = number if key == "leak" else (int(number) if number.is_integer() else number)
        return cls(parts[0], **kwargs)

    def set_fields(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in FIELDS if getattr(self, f) is not None}

    @property
    def label(self) -> str:
        """The row name: 'none', 'rerope', 'self_extend(window=64,group=4)', 'none+logn(256)', …; exact, so
        that two methods have the same label only if they are equal (`_number`)."""
        fields = {k: v for k, v in self.set_fields().items() if k != "logn"}
        text = self.method + (f"({','.join(f'{k}={_number(v)}' for k, v in fields.items())})" if fields else "")
        return text + (f"+logn({self.logn})" if self.logn else "")

    def resolve(self, base_len: int, length: int) -> "Method":
        """The method with every default filled for a run trained at L0 = `base_len`, at length L = `length`:

          window     self_extend, rerope, leaky_rerope: L0 / 4; lm_infinite: L0; sinks: L0 − num_sinks − 1
          group      self_extend: ⌈(L − W) / (L0 − W)⌉, the smallest G whose grouped positions stay below L0
          leak       leaky_rerope: max(1, (L − w) / (L0 − w)), so that the largest distance is L0
          n_global   lm_infinite: 10 (the paper's);  num_sinks  sinks: 4 (the paper's);  logn: off

        Raises:
          ValueError: a window that leaves no room for grouping or leaking (W ≥ L0), or sinks that do not fit.
        """
        m, kw = self.method, self.set_fields()
        if m in ("self_extend", "rerope", "leaky_rerope"):
            kw.setdefault("window", max(1, base_len // 4))
        if m == "self_extend" and "group" not in kw:
            if kw["window"] >= base_len:
                raise ValueError(f"self_extend.window={kw['window']} must be < L0={base_len} to default group "
                                 "(or set group= explicitly)")
            kw["group"] = max(1, math.ceil((length - kw["window"]) / (base_len - kw["window"])))
        if m == "leaky_rerope" and "leak" not in kw:
            if kw["window"] >= base_len:
                raise ValueError(f"leaky_rerope.window={kw['window']} must be < L0={base_len} to default leak "
                                 "(or set leak= explicitly)")
            kw["leak"] = max(1.0, (length - kw["window"]) / (base_len - kw["window"]))
        if m == "lm_infinite":
            kw.setdefault("window", base_len)
            kw.setdefault("n_global", 10)
        if m == "sinks":
            kw.setdefault("num_sinks", 4)
            if "window" not in kw:
                if base_len - kw["num_sinks"] - 1 < 1:
                    raise ValueError(f"sinks.num_sinks={kw['num_sinks']} leaves no recent window below L0={base_len} "
                                     "(or set window= explicitly)")
                kw["window"] = base_len - kw["num_sinks"] - 1
        return Method(m, **kw)

    def check(self, encoding_cls, cfg) -> None:
        """Raises a ValueError if the method is not defined for the encoding of `cfg`."""
        kind = encoding_cls.position_kind
        if self.method in ROTARY_ONLY and kind != "rotary":
            raise ValueError(f"method {self.method!r} is defined for rotary encodings only; posenc={cfg.posenc!r} "
                             f"is {kind!r} (use lm_infinite, sinks or logn)")
        if self.method in BOUNDED and any(cfg.layer_window(i) for i in range(cfg.num_layers)):
            raise ValueError(f"method {self.method!r} is not defined for posenc={cfg.posenc!r}: its layers have "
                             "sliding windows of their own (use self_extend, rerope, leaky_rerope or logn)")
        if self.method in BOUNDED and kind == "bias" and not encoding_cls.translation_invariant:
            raise ValueError(f"method {self.method!r} is not defined for posenc={cfg.posenc!r}: its bias depends on "
                             "the query's own position, not only on distances (use logn)")

    def args(self, encoding_cls) -> "MethodArgs":
        """The forward pass's traced form (every default must be resolved: see `resolve`)."""
        missing = [f for f in PARAMS[self.method] if getattr(self, f) is None]
        if missing:
            raise ValueError(f"method {self.method!r}: resolve() its defaults first (missing {missing})")
        kind = encoding_cls.position_kind
        mode = "plain" if self.method == "none" else ("branches" if kind in ("rotary", "bias") else "mask")
        fixed = self.n_global if self.method == "lm_infinite" else self.num_sinks
        max_pos = self.num_sinks + self.window if self.method == "sinks" and kind == "absolute" else None
        return MethodArgs(self.method, mode, self.logn is not None, max_pos,
                          window=jnp.int32(self.window or 0), group=jnp.int32(self.group or 1),
                          leak=jnp.float32(self.leak or 1.0), fixed=jnp.int32(fixed or 0),
                          logn=jnp.float32(self.logn or 2))

    def positions_embedded(self, encoding_cls, length: int) -> int:
        """How many positions a sequence of `length` tokens embeds under this method: min(length, S + R + 1) for
        `sinks` on an absolute encoding (`MethodArgs.max_position`: its positions stay ≤ S + R), else `length`.
        An encoding defined for `Encoding.max_positions` positions is defined for the sequence when this is
        within them."""
        bound = self.args(encoding_cls).max_position if self.method == "sinks" else None
        return length if bound is None else min(length, bound + 1)

    def span(self) -> int | None:
        """The length a bounded method's attention spans, at which a RoPE scaling is resolved
        (`scaling_length`), else None: `sinks` S + R + 1, positions 0 … S + R (its largest distance S + R, + 1);
        `lm_infinite` L, its largest distance itself (the far branch scores the global keys at distance L),
        as LM-Infinite's distance limit is the pretraining length: with the default L = L0 a scaling is
        resolved at L0, as sinks' default window resolves it at S + R + 1 = L0."""
        if self.method == "sinks":
            return self.num_sinks + self.window + 1
        if self.method == "lm_infinite":
            return self.window
        return None

    def scaling_length(self, length: int) -> int:
        """The length at which a RoPE scaling is resolved for sequences of `length` under this method:
        min(length, `span()`) for a bounded method, whose attention sees no farther (as StreamingLLM computes
        its rotary table at the cache's length), else `length`. Every protocol and decoding use it, so a
        window, a stream and a decoded sequence under `sinks` / `lm_infinite` get the same frequencies."""
        span = self.span()
        return length if span is None else min(length, span)

    def cache_layout(self) -> tuple[int, int] | None:
        """(fixed slots, ring slots) of the bounded KV cache of `lm_infinite` / `sinks`, else None."""
        if self.method == "lm_infinite":
            return self.n_global, self.window
        if self.method == "sinks":
            return self.num_sinks, self.window
        return None


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class MethodArgs:
    """A resolved `Method` as the forward pass takes it: `method`, `mode` ('plain' | 'branches' | 'mask'),
    `use_logn`, `max_position` (sinks on an absolute encoding: S + R, the largest embedded position; a
    static shape bound, so those runs compile once per S + R) and `reindex` (sinks in a KV cache: rotate the
    near branch at positions shifted into [0, S + R + T), set by `posenc.decode` where the frequencies do not
    depend on the absolute position) static; the parameters traced scalars (`fixed`: lm_infinite's n_global
    or sinks' num_sinks)."""

    method: str = dataclasses.field(metadata=dict(static=True))
    mode: str = dataclasses.field(metadata=dict(static=True))
    use_logn: bool = dataclasses.field(metadata=dict(static=True))
    max_position: int | None = dataclasses.field(metadata=dict(static=True))
    reindex: bool = dataclasses.field(default=False, metadata=dict(static=True))
    window: Any = 0
    group: Any = 1
    leak: Any = 1.0
    fixed: Any = 0
    logn: Any = 2.0


# ---------------------------------------------------------------------------------------------------------
# The math: pure functions of positions ([B|1, T] integers) and the traced parameters.


def logn_scale(positions, base_len):
    """max(1, log n / log L0) at n = position + 1, `[B|1, T]` float32."""
    n = jnp.asarray(positions).astype(jnp.float32) + 1.0
    return jnp.maximum(1.0, jnp.log(n) / jnp.log(jnp.asarray(base_len, jnp.float32)))


def _pair(q_pos, k_pos):
    """(i, j) broadcast to `[B|1, 1, Tq, Tk]`."""
    return q_pos[:, None, :, None], k_pos[:, None, None, :]


def near(a: MethodArgs, q_pos, k_pos):
    """The pairs scored with their normal positions, `[B|1, 1, Tq, Tk]` bool (before the causal mask)."""
    i, j = _pair(q_pos, k_pos)
    if a.method == "sinks":
        return i - j <= a.window
    return i - j < a.window


def far_visible(a: MethodArgs, q_pos, k_pos):
    """The pairs the far branch may score (the rest of the non-near pairs are masked)."""
    i, j = _pair(q_pos, k_pos)
    if a.method in BOUNDED:
        return jnp.broadcast_to(j < a.fixed, jnp.broadcast_shapes(i.shape, j.shape))
    return jnp.ones(jnp.broadcast_shapes(i.shape, j.shape), bool)


def visible(a: MethodArgs, q_pos, k_pos):
    """`mask` mode: the pairs the method keeps at all (near ∪ far-visible)."""
    return near(a, q_pos, k_pos) | far_visible(a, q_pos, k_pos)


def far_positions(a: MethodArgs, q_pos, k_pos):
    """(query positions `[B|1, Tq]`, key positions `[B|1, Tk]`) of the far branch (float for the methods
    whose positions are fractional: self_extend's shift W − W/G, leaky_rerope's 1/k)."""
    if a.method == "self_extend":
        g = a.group
        shift = a.window.astype(jnp.float32) - a.window.astype(jnp.float32) / g.astype(jnp.float32)
        return (q_pos // g).astype(jnp.float32) + shift, (k_pos // g).astype(jnp.float32)
    if a.method in ("rerope", "lm_infinite"):
        return jnp.broadcast_to(a.window, q_pos.shape).astype(q_pos.dtype), jnp.zeros_like(k_pos)
    if a.method == "leaky_rerope":
        k = a.leak
        return ((q_pos.astype(jnp.float32) + a.window * (k - 1.0)) / k, k_pos.astype(jnp.float32) / k)
    if a.method == "sinks":
        return jnp.minimum(q_pos, a.fixed + a.window).astype(q_pos.dtype), k_pos
    raise ValueError(f"method {a.method!r} has no far branch")


def embed_positions(a: MethodArgs | None, positions):
    """The positions an absolute encoding embeds: min(p, S + R) under sinks, else p."""
    if a is not None and a.method == "sinks":
        return jnp.minimum(positions, a.fixed + a.window)
    return positions
