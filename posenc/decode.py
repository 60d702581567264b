"""Autoregressive decoding with a KV cache.

Each new token is embedded at its absolute position (sinusoidal / learned), its q and k are rotated at its
position (RoPE), and ALiBi's bias comes from positions: the cache stores keys, values and their positions.
For every encoding and static scaling, cached decoding equals the full forward pass (`recompute_logits`).

Scalings whose frequencies depend on the sequence length — `dynamic_ntk`, `dynamic=True`, and LongRoPE's
switch from short to long factors past `original_max_len` — have the reference `recompute_logits`: the
logits at position p are those of the full forward pass over the prefix 0…p (seq_len = p + 1, the semantics
of Hugging Face's recompute), every layer's hidden states at earlier positions recomputed with the
frequencies of seq_len p + 1. A cache cannot reproduce that past the first layer whose frequencies change:
the keys and values of a later layer are projections of hidden states computed when their token was fed,
with the frequencies of that step. What the cache does make exact is the rotation: it stores *unrotated*
keys and rotates all of them with the current step's frequencies (`KVCache.rotate_at_use`), so a layer whose
inputs do not depend on the length (the first layer; a global layer after local ones only) equals the
recompute, and a one-layer model equals it throughout (tests/test_decode.py). Hugging Face instead caches
keys rotated with the frequencies of the step they were computed at, so its cached decoding drifts from the
recompute in the first layer already once the factor changes (transformers issues #25104, #27227). Deeper
layers differ from the recompute by a part of the scaling's own effect on the logits (tests/test_decode.py,
`test_a_deeper_layer_s_cache_holds_each_token_s_own_step`). The cost of rotating at use: one extra
elementwise rotation of the cached keys per layer and step, O(S·d) — the same order as attending to them.
Static scalings rotate each key once, before caching.

The frequencies of every possible length are tabulated once (`rope_schedule`, `[S, r]`, float64 NumPy →
float32 with their float64 residual; under `lm_infinite` / `sinks` only up to the method's span, past which
they no longer change) and indexed by the traced step, so the decode loop (`lax.scan`) compiles once.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from posenc.model import ModelConfig
from posenc.training_free import Method
from posenc.rope_scaling import RopeScaling, is_length_dependent, rope_inputs


class RopeSchedule(NamedTuple):
    """Row t = what the forward pass at seq_len t + 1 rotates with (`rope_inputs`): a jit argument, indexed
    by the traced step. A step at or past the last row takes the last row (`at`): a bounded method's schedule
    stops at its span, past which every row would be the same."""

    inv_freq: jax.Array  # [S, r] or [S, num_layers, r]
    attention_factor: jax.Array  # [S]
    inv_freq_lo: jax.Array  # [S, ...] like inv_freq
    n_hat: jax.Array  # [S] int32: LongRoPE's n̂ at each length (`rope_inputs`: with the long factors only), else 0

    def at(self, t):
        """The `rope` override of the model at step t (the last row for t ≥ S), n̂ included (`rope_inputs` gives
        the scaling's `unscaled_positions` past original_max_len only)."""
        t = jnp.minimum(t, self.attention_factor.shape[0] - 1)
        return self.inv_freq[t], self.attention_factor[t], self.n_hat[t], self.inv_freq_lo[t]


def rope_schedule(cfg: ModelConfig, scaling: RopeScaling, max_len: int, span: int | None = None) -> RopeSchedule:
    """The `RopeSchedule` of steps t < max_len (placeholders for an encoding that takes no RoPE scaling): the
    scaling at length t + 1, or at min(t + 1, span) under a bounded method (`Method.span()`: sinks' S + R + 1,
    LM-Infinite's L), whose attention sees no longer distance — as StreamingLLM computes its rotary table at
    the cache's length. The evaluation's forward passes (posenc.evaluate, `Method.scaling_length`) take
    min(L, span) for every token of a length-L sequence: the same once t + 1 ≥ span. With a span, the schedule
    holds min(max_len, span) rows (the later steps take the last: `RopeSchedule.at`), so its size and the
    `rope_inputs` calls are bounded by the span, not by the length decoded."""
    rows_needed = max_len if span is None else min(max_len, span)
    if not cfg.encoding.takes_rope_scaling:
        zeros = jnp.zeros((rows_needed, 1), jnp.float32)
        return RopeSchedule(zeros, jnp.ones((rows_needed,), jnp.float32), zeros, jnp.zeros((rows_needed,), jnp.int32))
    rows = [rope_inputs(cfg.rotary_dim, cfg.rope_base, scaling, t + 1)
            for t in (range(rows_needed) if is_length_dependent(scaling) else [rows_needed - 1])]
    inv, af, lo = (np.stack([r[i] for r in rows]).astype(np.float32) for i in (0, 1, 3))
    n_hat = np.array([r[2] for r in rows], np.int32)
    if len(rows) == 1:
        inv, af, lo, n_hat = (np.repeat(a, rows_needed, axis=0) for a in (inv, af, lo, n_hat))
    return RopeSchedule(jnp.asarray(inv), jnp.asarray(af), jnp.asarray(lo), jnp.asarray(n_hat))


def _span(method: Method | None) -> int | None:
    """The length a bounded method's attention spans (`Method.span`; None: unbounded)."""
    return None if method is None else method.span()


def _rotate_at_use(cfg: ModelConfig, scaling: RopeScaling, method: Method | None = None) -> bool:
    """Whether the cache keeps keys unrotated: the encoding's values at a position depend on the length, or
    a training-free method rotates each key at two positions (or re-indexes them inside the cache)."""
    two = method is not None and method.method != "none" and cfg.encoding.position_kind == "rotary"
    return cfg.encoding.length_dependent(cfg, scaling) or two


def _method_args(cfg: ModelConfig, method: Method | None, scaling: RopeScaling, length: int):
    """The traced method for a sequence of `length`, re-indexed inside the cache under `sinks` unless LongRoPE's
    n̂ makes the frequencies depend on the absolute position: n̂ as the forward pass at the method's scaling
    length takes it (`rope_inputs`: with the long factors only, so at most that length it is 0 throughout)."""
    if method is None:
        return None
    method.check(cfg.encoding, cfg)
    args = method.args(cfg.encoding)  # raises first if a default is unresolved
    at = method.scaling_length(length)
    n_hat = rope_inputs(cfg.rotary_dim, cfg.rope_base, scaling, at)[2] if cfg.encoding.takes_rope_scaling else 0
    if method.method == "sinks" and not n_hat:
        args = dataclasses.replace(args, reindex=True)
    return args


def _cache_size(method: Method | None, cache_size: int | None, total: int) -> int:
    """The cache slots: S + R for a bounded method (lm_infinite, sinks), else `cache_size` or `total`.

    Raises:
      ValueError: `cache_size` is not a positive integer, or not S + R under a bounded method."""
    if cache_size is not None and (not _is_int(cache_size) or cache_size <= 0):
        raise ValueError(f"cache_size must be a positive number of slots (or unset for the {total} tokens asked "
                         f"for), got {cache_size!r}")
    cache_size = None if cache_size is None else int(cache_size)
    layout = None if method is None else method.cache_layout()
    if layout is None:
        return cache_size or total
    bounded = sum(layout)
    if cache_size is not None and cache_size != bounded:
        raise ValueError(f"cache_size={cache_size}: method {method.label} keeps a cache of exactly "
                         f"{layout[0]} fixed + {layout[1]} recent = {bounded} slots; leave cache_size unset")
    return bounded


def _check_request(cfg: ModelConfig, prompt_len: int, total: int, cache_size: int, method: Method | None = None) -> None:
    if prompt_len < 1:
        raise ValueError("the prompt is empty: give at least one token (byte)")
    bounded = method is not None and method.cache_layout() is not None
    if total > cache_size and not bounded:
        raise ValueError(f"cache_size={cache_size} is smaller than the request: prompt ({prompt_len}) + "
                         f"max_new_tokens ({total - prompt_len}) = {total} tokens")
    limit = cfg.encoding.max_positions(cfg)
    if method is not None:
        total = method.positions_embedded(cfg.encoding, total)
    if limit is not None and total > limit:
        raise ValueError(f"prompt + continuation = {total} tokens is longer than posenc={cfg.posenc!r} is defined "
                         f"for ({limit} positions: {cfg.encoding.undefined_past(cfg)}); ask for fewer")


def _is_int(value) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_tokens(cfg: ModelConfig, tokens, name: str) -> None:
    """Raises a ValueError naming `name` unless `tokens` are integer ids in [0, vocab_size) (traced tokens:
    their dtype only)."""
    dtype = tokens.dtype if hasattr(tokens, "dtype") else np.asarray(tokens).dtype
    if not np.issubdtype(dtype, np.integer):
        raise ValueError(f"{name} must be integer token ids in [0, vocab_size={cfg.vocab_size}), got dtype {dtype}")
    if isinstance(tokens, jax.core.Tracer):
        return
    ids = np.asarray(tokens)
    if ids.size and (ids.min() < 0 or ids.max() >= cfg.vocab_size):
        bad = ids[(ids < 0) | (ids >= cfg.vocab_size)]
        raise ValueError(f"{name} must be token ids in [0, vocab_size={cfg.vocab_size}), got {bad.size} outside, "
                         f"such as {int(bad.flat[0])}")


def _scaling(cfg: ModelConfig, scaling, method=None) -> RopeScaling:
    """`scaling` (None: the run's own) checked with `method`: a `RopeScaling` that the encoding takes, a
    resolved `training_free.Method` or None; raises a ValueError naming the argument otherwise."""
    if scaling is not None and not isinstance(scaling, RopeScaling):
        raise ValueError(f"scaling must be a posenc.RopeScaling or None (the run's own), got {scaling!r}")
    if scaling is not None and scaling.kind != "none" and not cfg.encoding.takes_rope_scaling:
        raise ValueError(f"a RoPE scaling does not apply to posenc={cfg.posenc!r}, got scaling kind={scaling.kind!r}")
    if method is not None and not isinstance(method, Method):
        raise ValueError(f"method must be a posenc.training_free.Method (resolved) or None, got {method!r}")
    return cfg.rope_scaling if scaling is None else scaling


def _rope(cfg, schedule: RopeSchedule, t):
    return schedule.at(t) if cfg.encoding.takes_rope_scaling else None


@functools.partial(jax.jit, static_argnames=("graphdef", "prompt_len", "cache_size", "rotate_at_use", "seq_len"))
def _prefill(graphdef, params, tokens, schedule, method=None, *, prompt_len, cache_size, rotate_at_use,
             seq_len):
    model = nnx.merge(graphdef, params)
    cache = model.init_cache(tokens.shape[0], cache_size, rotate_at_use)
    positions = jnp.arange(prompt_len)[None]
    return model(tokens, positions, seq_len=seq_len, rope=_rope(model.cfg, schedule, prompt_len - 1),
                 cache=cache, method=method)


@functools.partial(jax.jit, static_argnames=("graphdef", "seq_len"), donate_argnames=("cache",))
def _step(graphdef, params, cache, token, position, schedule, method=None, *, seq_len):
    """One token `[B, 1]` at `position` (traced) → (logits [B, V], cache)."""
    model = nnx.merge(graphdef, params)
    logits, cache = model(token, jnp.reshape(position, (1, 1)), seq_len=seq_len,
                          rope=_rope(model.cfg, schedule, position), cache=cache, method=method)
    return logits[:, -1], cache


def teacher_forced_logits(graphdef, params, tokens, *, prefill_len: int, scaling: RopeScaling | None = None,
                          cache_size: int | None = None, method: Method | None = None) -> jax.Array:
    """Logits `[B, T, V]` of `tokens [B, T]` computed by prefilling `prefill_len` tokens and then feeding
    the rest one at a time through the cache (what generation computes, with known tokens). `method`: a
    resolved training-free method (`lm_infinite` / `sinks` keep their bounded cache of S + R slots).

    Under a length-dependent scaling the prefill is one forward pass at the frequencies of seq_len
    `prefill_len`: the logits of its positions before the last (and, past the first layer, the cached states
    of all of them) are those of that length, not of each position's own prefix (see the module docstring)."""
    cfg = _cfg(graphdef, params)
    if jnp.ndim(tokens) != 2:
        raise ValueError(f"tokens must be [batch, length] token ids, got shape {jnp.shape(tokens)}")
    _check_tokens(cfg, tokens, "tokens")
    b, t = tokens.shape
    if not _is_int(prefill_len) or not 1 <= prefill_len <= t:
        raise ValueError(f"prefill_len must be an integer in [1, T={t}] (the tokens prefilled at once), got "
                         f"{prefill_len!r}")
    scaling = _scaling(cfg, scaling, method)
    args = _method_args(cfg, method, scaling, t)
    cache_size = _cache_size(method, cache_size, t)
    _check_request(cfg, prefill_len, t, cache_size, method)
    schedule = rope_schedule(cfg, scaling, t, _span(method))
    rotate = _rotate_at_use(cfg, scaling, method)
    logits, cache = _prefill(graphdef, params, tokens[:, :prefill_len], schedule, args, prompt_len=prefill_len,
                             cache_size=cache_size, rotate_at_use=rotate, seq_len=t)
    out = [logits]
    for p in range(prefill_len, t):
        step_logits, cache = _step(graphdef, params, cache, tokens[:, p:p + 1], jnp.int32(p), schedule, args,
                                   seq_len=t)
        out.append(step_logits[:, None])
    return jnp.concatenate(out, axis=1)


def recompute_logits(graphdef, params, tokens, *, scaling: RopeScaling | None = None,
                     positions=None) -> jax.Array:
    """The reference: logits at position p from the full forward pass over the prefix 0…p (seq_len p + 1),
    every layer recomputed with the frequencies of that length: `[B, T, V]`, or `[B, len(positions), V]` at the
    given positions only (one forward pass each under a length-dependent scaling: a sample of a long window).

    For length-independent encodings this is one forward pass over all of `tokens` (causality)."""
    cfg = _cfg(graphdef, params)
    scaling = _scaling(cfg, scaling)
    model = nnx.merge(graphdef, params)
    t = tokens.shape[1]
    at = list(range(t)) if positions is None else [int(p) for p in positions]
    if any(not 0 <= p < t for p in at):
        raise ValueError(f"positions must lie in [0, {t}) (the tokens' length), got {at}")
    if not _rotate_at_use(cfg, scaling):
        rope = rope_inputs(cfg.rotary_dim, cfg.rope_base, scaling, t) if cfg.encoding.takes_rope_scaling else None
        logits = model(tokens, rope=rope)
        return logits if positions is None else logits[:, jnp.asarray(at, jnp.int32)]
    schedule = rope_schedule(cfg, scaling, t)
    # Causality: the logits at p over the whole sequence equal those over the prefix 0…p, given the same
    # frequencies — so one compiled forward over all of `tokens`, with the frequencies of seq_len p + 1.
    forward = jax.jit(lambda prm, x, rope: nnx.merge(graphdef, prm)(x, rope=rope))
    return jnp.stack([forward(params, tokens, schedule.at(p))[:, p] for p in at], axis=1)


def _cfg(graphdef, params) -> ModelConfig:
    return nnx.merge(graphdef, params).cfg


def sample(logits, key, temperature: float, top_k: int):
    """Greedy if temperature == 0 (argmax: the lowest token id among tied maxima); otherwise a draw from
    softmax(logits / temperature) restricted to the top_k (0 = all; every token tied with the k-th largest
    logit stays in, as in Hugging Face's `TopKLogitsWarper`). The logits are shifted by their maximum before
    the division, so that a small temperature cannot overflow them to inf (inf − inf would be NaN)."""
    if temperature == 0:
        return jnp.argmax(logits, axis=-1)
    if top_k:
        kth = jax.lax.top_k(logits, top_k)[0][..., -1:]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    logits = logits - jnp.max(logits, axis=-1, keepdims=True)
    return jax.random.categorical(key, logits / temperature, axis=-1)


@functools.partial(jax.jit, static_argnames=("graphdef", "max_new_tokens", "cache_size", "rotate_at_use", "temperature",
                                             "top_k"))
def _generate(graphdef, params, prompt, schedule, key, method=None, *, max_new_tokens, cache_size, rotate_at_use,
              temperature, top_k):
    prompt_len = prompt.shape[1]
    seq_len = prompt_len + max_new_tokens
    logits, cache = _prefill.__wrapped__(graphdef, params, prompt, schedule, method, prompt_len=prompt_len,
                                         cache_size=cache_size, rotate_at_use=rotate_at_use, seq_len=seq_len)
    key, sub = jax.random.split(key)
    first = sample(logits[:, -1], sub, temperature, top_k)

    def body(carry, position):
        cache, token, key = carry
        key, sub = jax.random.split(key)
        step_logits, cache = _step.__wrapped__(graphdef, params, cache, token[:, None], position, schedule,
                                               method, seq_len=seq_len)
        nxt = sample(step_logits, sub, temperature, top_k)
        return (cache, nxt, key), nxt

    positions = jnp.arange(prompt_len, prompt_len + max_new_tokens - 1)
    _, rest = jax.lax.scan(body, (cache, first, key), positions)
    return jnp.concatenate([prompt, first[:, None], rest.T], axis=1)


def generate(graphdef, params, prompt, max_new_tokens: int, *, temperature: float = 1.0, top_k: int = 0,
             seed: int = 0, scaling: RopeScaling | None = None, cache_size: int | None = None,
             method: Method | None = None) -> np.ndarray:
    """Samples `max_new_tokens` after `prompt [B, P]` with a KV cache; returns `[B, P + max_new_tokens]`.

    One compiled program (prefill + `lax.scan` over the new tokens) per (P, max_new_tokens, cache_size).
    Every row's prompt has the same P tokens (there is no padding mask). `seed` (an integer) fixes the
    draws: the same arguments give the same tokens. `scaling` overrides the run's RoPE scaling (RoPE runs
    only). `method`: a resolved training-free method; under `lm_infinite` and `sinks` the cache has exactly
    S + R slots whatever the length generated. The forward pass's `seq_len` is P + max_new_tokens: a
    learned table with `learned_beyond='interpolate'` is resampled to that length, so past `max_len` the
    continuation depends on `max_new_tokens` (as a static scaling's factor (P + max_new_tokens) / L0 does).
    """
    cfg = _cfg(graphdef, params)
    try:
        ndim = np.ndim(prompt)
    except ValueError:  # rows of different lengths
        raise ValueError("prompt must be [batch, length] token ids, every row of the same length (there is no "
                         "padding mask: decode prompts of different lengths separately)") from None
    if ndim != 2:
        raise ValueError(f"prompt must be [batch, length] token ids, got shape {np.shape(prompt)}")
    _check_tokens(cfg, prompt, "prompt")
    prompt = jnp.asarray(prompt, jnp.int32)
    if not _is_int(max_new_tokens) or max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
    if (isinstance(temperature, (bool, np.bool_)) or not isinstance(temperature, (int, float, np.integer, np.floating))
            or not (math.isfinite(temperature) and temperature >= 0)):
        raise ValueError(f"temperature must be a finite number >= 0 (0 = greedy), got {temperature!r}")
    if 0 < temperature < np.finfo(np.float32).tiny:  # a float32 subnormal: flushed to 0, logits / 0 is NaN
        raise ValueError(f"temperature must be 0 (greedy) or at least {np.finfo(np.float32).tiny:.3g} (the smallest "
                         f"normal float32), got {temperature!r}")
    if not _is_int(seed):
        raise ValueError(f"seed must be an integer, got {seed!r}")
    if not _is_int(top_k) or not 0 <= top_k <= cfg.vocab_size:
        raise ValueError(f"top_k must be an integer in [0, vocab_size={cfg.vocab_size}] (0 = all), got {top_k!r}")
    max_new_tokens = int(max_new_tokens)
    total = prompt.shape[1] + max_new_tokens
    scaling = _scaling(cfg, scaling, method)
    args = _method_args(cfg, method, scaling, total)
    cache_size = _cache_size(method, cache_size, total)
    _check_request(cfg, prompt.shape[1], total, cache_size, method)
    need = cache_bytes(cfg, prompt.shape[0], cache_size)

    def too_big(why: str) -> MemoryError:
        return MemoryError(f"cache_size={cache_size}: the KV cache needs {need / 2**30:.2f} GiB (keys and values of "
                           f"{cfg.num_layers} layers x batch {prompt.shape[0]} x {cache_size} slots (a windowed layer: "
                           f"its window) x {cfg.kv_heads} key-value heads x head_dim {cfg.head_dim} x "
                           f"{jnp.dtype(cfg.dtype).itemsize} bytes) and {why}; "
                           + (f"lower --cache_size (at least prompt + max_new_tokens = {total})"
                              if method is None or method.cache_layout() is None else
                              f"method {method.label} keeps a fixed cache: use a smaller batch or model"))

    available = device_memory_bytes()
    if need > available:
        raise too_big(f"the device has {available / 2**30:.2f} GiB")
    rotate = _rotate_at_use(cfg, scaling, method)
    try:
        schedule = rope_schedule(cfg, scaling, total, _span(method))  # positions 0 … total − 1
        out = _generate(graphdef, params, prompt, schedule, jax.random.key(int(seed)),
                        args, max_new_tokens=max_new_tokens, cache_size=cache_size, rotate_at_use=rotate,
                        temperature=float(temperature), top_k=int(top_k))
        return np.asarray(out)
    except MemoryError:
        raise too_big("the host could not allocate its tables") from None
    except jax.errors.JaxRuntimeError as e:
        if "RESOURCE_EXHAUSTED" not in str(e):
            raise
        raise too_big("the device could not allocate it") from None


def cache_bytes(cfg: ModelConfig, batch_size: int, cache_size: int) -> int:
    """Bytes of a KV cache: keys and values of every layer, `[B, N, S, H]` each (S = the layer's window for a
    windowed layer)."""
    slots = sum(cfg.layer_window(i) or cache_size for i in range(cfg.num_layers))
    return 2 * batch_size * slots * cfg.kv_heads * cfg.head_dim * jnp.dtype(cfg.dtype).itemsize


def device_memory_bytes() -> int:
    """The first local device's memory limit (accelerators), or the host's physical memory (CPU)."""
    stats = jax.local_devices()[0].memory_stats() or {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


@functools.partial(jax.jit, static_argnames=("graphdef", "first", "cache_size", "rotate_at_use", "seq_len"))
def _greedy(graphdef, params, tokens, answer, positions, schedule, method=None, *, first, cache_size,
            rotate_at_use, seq_len):
    """(greedy predictions, teacher-forced argmax, teacher-forced log-probabilities) of tokens first … T−1,
    `[B, T − first]` each, from one prefill and two passes over the rest through copies of its cache."""
    model = nnx.merge(graphdef, params)
    b, t = tokens.shape
    cache = model.init_cache(b, cache_size, rotate_at_use)
    rope = lambda i: _rope(model.cfg, schedule, i)  # noqa: E731
    logits, cache = model(tokens[:, :first], positions[:, :first], seq_len=seq_len, rope=rope(first - 1), cache=cache,
                          method=method)
    head = logits[:, -1]

    def run(forced: bool):
        def body(carry, p):
            cache, prev = carry
            token = tokens[:, p] if forced else jnp.where(answer[:, p], prev, tokens[:, p])
            pos = jax.lax.dynamic_slice_in_dim(positions, p, 1, axis=1)
            step_logits, cache = model(token[:, None], pos, seq_len=seq_len, rope=rope(p), cache=cache, method=method)
            return (cache, jnp.argmax(step_logits[:, -1], axis=-1)), step_logits[:, -1]

        _, rest = jax.lax.scan(body, (cache, jnp.argmax(head, axis=-1)), jnp.arange(first, t - 1))
        return jnp.concatenate([head[:, None], rest.swapaxes(0, 1)], axis=1)  # [B, T − first, V]

    greedy = jnp.argmax(run(False), axis=-1)
    forced = run(True)
    logp = jnp.take_along_axis(jax.nn.log_softmax(forced, axis=-1), tokens[:, first:, None], axis=-1)[..., 0]
    return greedy, jnp.argmax(forced, axis=-1), logp


def greedy_answers(graphdef, params, tokens, answer, *, positions=None, scaling: RopeScaling | None = None,
                   method: Method | None = None, teacher_forced: bool = False):
    """Greedy decoding of the answer tokens with the KV cache, the prompt tokens given.

    `tokens [B, T]` and the boolean `answer [B, T]` (no answer at index 0): the prompt up to the first answer
    token is prefilled, then every later token is fed one at a time — the given token outside the answers,
    the model's own greedy (argmax) choice inside them, so that a multi-token answer is decoded as generation
    would, and a task with several answer spans (recall) gets its prompt between them. `positions [B|1, T]`:
    increasing positions (default 0 … T−1; randomized positions per row). `method`: a resolved training-free
    method (`lm_infinite` / `sinks` keep their bounded cache).

    Returns:
      `[B, T]`: the tokens with every answer position replaced by the greedy prediction (exact match of a row:
      `(out == tokens)[answer]` all true). With `teacher_forced`, also the teacher-forced view from the same
      prefill: `(argmax [B, T], logprob [B, T])`, the argmax and the log-probability of each given token with
      the given tokens fed (at answer positions; elsewhere the tokens and 0).
    """
    cfg = _cfg(graphdef, params)
    if np.ndim(tokens) != 2:
        raise ValueError(f"tokens must be [batch, length] token ids, got shape {np.shape(tokens)}")
    _check_tokens(cfg, tokens, "tokens")
    tokens = np.asarray(tokens, np.int32)
    answer = np.asarray(answer, bool)
    b, t = tokens.shape
    if answer.shape != tokens.shape or answer[:, 0].any() or not answer.any(axis=1).all():
        raise ValueError("answer must be a [B, T] mask like tokens with an answer token in every row and none at index 0")
    first = int(np.argmax(answer, axis=1).min())
    positions = np.broadcast_to(np.arange(t) if positions is None else np.asarray(positions), (b, t)).astype(np.int32)
    if (np.diff(positions, axis=1) <= 0).any() or positions.min() < 0:
        raise ValueError("positions must be increasing and >= 0 along each row")
    scaling = _scaling(cfg, scaling, method)
    seq_len = int(positions[:, :-1].max()) + 1  # the last token is only a target: never an input
    if seq_len != t - 1 and (is_length_dependent(scaling) or (method is not None and method.method != "none")):
        raise ValueError("positions other than 0 … T−1 are decoded without a length-dependent scaling or a "
                         "training-free method (their schedules and caches are indexed by position)")
    args = _method_args(cfg, method, scaling, t)
    cache_size = _cache_size(method, None, t)
    _check_request(cfg, first, seq_len, max(cache_size, seq_len), method)
    schedule = rope_schedule(cfg, scaling, t, _span(method))
    greedy, forced, logp = _greedy(graphdef, params, jnp.asarray(tokens), jnp.asarray(answer), jnp.asarray(positions),
                                   schedule, args, first=first,
                                   cache_size=cache_size, rotate_at_use=_rotate_at_use(cfg, scaling, method),
                                   seq_len=seq_len)

    def full(x, fill):
        return np.where(answer, np.concatenate([fill[:, :first], np.asarray(x)], axis=1), fill)

    out = full(greedy, tokens)
    if not teacher_forced:
        return out
    return out, full(forced, tokens), full(logp, np.zeros(tokens.shape))
