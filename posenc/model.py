"""A decoder-only Transformer LM (Flax NNX) whose `posenc` decides how positions enter.

Pre-norm blocks (RMSNorm → causal self-attention without biases → residual; RMSNorm → GELU MLP of
`mlp_dim` → residual), a final RMSNorm and an untied output head, over bytes (vocab 256).

`ModelConfig.posenc` (dispatched in one place, `Transformer.position_plan`):
  * `none` — NoPE: no positional signal except the causal mask (Kazemnejad et al. 2023, arXiv 2305.19466).
  * `sinusoidal` — `posenc.sinusoidal_encoding` added to the token embeddings (Vaswani et al. 2017).
  * `learned` — a `[max_len, d_model]` table added to the embeddings (GPT-2 / BERT). Undefined past
    `max_len`: a `ValueError` unless `learned_beyond='interpolate'` (the table linearly resampled to the
    new length, the "interpolation" the seeds mention).
  * `rope` — q and k rotated by `posenc.apply_rope` with `rope_base`, `rope_layout`, `rope_fraction` of
    each head, and `rope_scaling` (a `RopeScaling`).
  * `alibi` — linear biases on the logits (Press et al. 2022).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from posenc.alibi import alibi_slopes
from posenc.attention import attention, block_causal_attention
from posenc.rope import LAYOUTS, apply_rope
from posenc.rope_scaling import RopeScaling, rope_frequencies
from posenc.sinusoidal import sinusoidal_encoding

POSENCS = ("none", "sinusoidal", "learned", "rope", "alibi")
LEARNED_BEYOND = ("error", "interpolate")
DTYPES = ("float32", "bfloat16")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture; frozen and hashable, so it can be a static argument of `jax.jit`."""

    vocab_size: int = 256
    d_model: int = 256
    num_layers: int = 4
    num_heads: int = 4
    mlp_dim: int = 1024
    posenc: str = "rope"
    max_len: int = 256  # rows of the learned table (the training length)
    learned_beyond: str = "error"
    sinusoidal_base: float = 10000.0
    rope_base: float = 10000.0
    rope_layout: str = "half"
    rope_fraction: float = 1.0
    rope_scaling: RopeScaling = RopeScaling()
    attn_chunk: int = 0  # query chunk size of attention; 0 = the whole sequence at once
    attn_block: int = 0  # block-causal attention block for default positions (skips future blocks); 0 = off
    dtype: str = "float32"  # activations; parameters are float32

    def __post_init__(self):
        def positive(name):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"model.{name} must be a positive integer, got {value!r}")

        for name in ("vocab_size", "d_model", "num_layers", "num_heads", "mlp_dim", "max_len"):
            positive(name)
        if self.posenc not in POSENCS:
            raise ValueError(f"model.posenc must be one of {POSENCS}, got {self.posenc!r}")
        if self.learned_beyond not in LEARNED_BEYOND:
            raise ValueError(f"model.learned_beyond must be one of {LEARNED_BEYOND}, got {self.learned_beyond!r}")
        if self.d_model % self.num_heads:
            raise ValueError(f"model.d_model={self.d_model} must be divisible by model.num_heads={self.num_heads}")
        if self.dtype not in DTYPES:
            raise ValueError(f"model.dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.attn_chunk < 0:
            raise ValueError(f"model.attn_chunk must be >= 0 (0 = no chunking), got {self.attn_chunk!r}")
        if self.attn_block < 0:
            raise ValueError(f"model.attn_block must be >= 0 (0 = off), got {self.attn_block!r}")
        if self.posenc == "sinusoidal" and self.d_model % 2:
            raise ValueError(f"model.d_model must be even for posenc='sinusoidal', got {self.d_model}")
        if self.posenc == "rope":
            if self.rope_layout not in LAYOUTS:
                raise ValueError(f"model.rope.layout must be one of {LAYOUTS}, got {self.rope_layout!r}")
            if not 0 < self.rope_fraction <= 1:
                raise ValueError(f"model.rope.fraction must be in (0, 1], got {self.rope_fraction!r}")
            if self.rotary_dim < 2 or self.rotary_dim % 2:
                raise ValueError(
                    f"model.rope: the rotary dimension head_dim · fraction = {self.head_dim} · {self.rope_fraction} "
                    f"= {self.head_dim * self.rope_fraction:g} must be an even integer ≥ 2 "
                    f"(head_dim = d_model / num_heads = {self.head_dim})"
                )
            if not self.rope_base > 0:
                raise ValueError(f"model.rope.base must be > 0, got {self.rope_base!r}")
            if not isinstance(self.rope_scaling, RopeScaling):
                raise ValueError(f"model.rope.scaling must be a RopeScaling, got {type(self.rope_scaling).__name__}")
            factors = self.rope_scaling.long_factor
            if factors is not None:
                shape = np.shape(factors)
                if shape[-1] != self.rotary_dim // 2 or (len(shape) == 2 and shape[0] != self.num_layers):
                    raise ValueError(
                        f"model.rope.scaling long_factor/short_factor must be [{self.rotary_dim // 2}] or "
                        f"[num_layers={self.num_layers}, {self.rotary_dim // 2}], got {shape}"
                    )

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    @property
    def rotary_dim(self) -> int:
        rd = self.head_dim * self.rope_fraction
        return int(rd) if float(rd).is_integer() else -1


class PositionPlan(NamedTuple):
    """What positions contribute to a forward pass (built by `Transformer.position_plan`)."""

    absolute: Any  # [B|1, T, d_model] added to the embeddings, or None
    inv_freq: Any  # RoPE [r] or per layer [num_layers, r], or None
    attention_factor: Any  # RoPE cos/sin multiplier (scalar)
    alibi_slopes: Any  # [N] or None
    rope_unscaled: Any = None  # LongRoPE's (original inv_freq [r], n̂) or None


def interpolate_table(table, new_len: int):
    """Linearly resamples a learned position table `[L, d]` to `[new_len, d]`.

    Row p of the result is the table at fractional position p · (L − 1) / (new_len − 1): the endpoints
    are kept and every gap is stretched by the same factor (Position Interpolation for a learned table).
    """
    old_len = table.shape[0]
    if new_len <= old_len:
        return table[:new_len]
    src = jnp.arange(new_len, dtype=jnp.float32) * ((old_len - 1) / (new_len - 1))
    lo = jnp.floor(src).astype(jnp.int32)
    hi = jnp.minimum(lo + 1, old_len - 1)
    w = (src - lo)[:, None]
    return table[lo] * (1 - w) + table[hi] * w


@jax.custom_vjp
def dense(x, kernel):
    """`x @ kernel` (`[..., d_in] @ [d_in, d_out]`) with a backward pass laid out for XLA:CPU.

    The gradients are the usual ones, dx = dy · kernelᵀ and dkernel = xᵀ · dy (summed over every leading
    axis). The only difference from `jnp.dot`'s own rule is an `optimization_barrier` on dy before the
    weight-gradient product: without it XLA:CPU fuses the elementwise backward that produces dy (GELU's
    derivative, for the MLP) with a transposed copy of it into `[d_out, tokens]`, the layout its YNNPACK
    dot wants, and that strided write was the largest single cost of a training step. With the barrier dy
    stays in its natural layout and the product contracts over the tokens directly (measured, with the
    profile that showed it: experiments/benchmarks, `scripts/benchmark_train.py --without=dense_vjp`).
    Values are those of `jnp.dot`'s rule (tested against a float64 oracle).
    """
    return jnp.dot(x, kernel)


def _dense_fwd(x, kernel):
    return jnp.dot(x, kernel), (x, kernel)


def _dense_bwd(residuals, dy):
    x, kernel = residuals
    dy_tokens = jax.lax.optimization_barrier(dy.reshape(-1, dy.shape[-1]))
    dkernel = jax.lax.dot_general(x.reshape(-1, x.shape[-1]), dy_tokens, (((0,), (0,)), ((), ())))
    return jnp.dot(dy, kernel.T).astype(x.dtype), dkernel.astype(kernel.dtype)


dense.defvjp(_dense_fwd, _dense_bwd)


def dense_dot_general(x, kernel, dimension_numbers, precision=None, preferred_element_type=None, out_sharding=None):
    """`nnx.Linear(dot_general=...)` hook routing the layer's product through `dense`."""
    standard = (((x.ndim - 1,), (0,)), ((), ()))
    if (dimension_numbers != standard or kernel.ndim != 2 or precision is not None
            or preferred_element_type is not None or out_sharding is not None):
        raise NotImplementedError("dense_dot_general supports only nnx.Linear's plain `x @ kernel`")
    return dense(x, kernel)


def linear(d_in: int, d_out: int, std: float, rngs: nnx.Rngs) -> nnx.Linear:
    """A bias-free `nnx.Linear` with N(0, std²) weights whose product is `dense`."""
    return nnx.Linear(d_in, d_out, use_bias=False, kernel_init=nnx.initializers.normal(std),
                      dot_general=dense_dot_general, rngs=rngs)


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        d = cfg.d_model
        self.qkv = linear(d, 3 * d, 0.02, rngs)
        self.out = linear(d, d, 0.02 / (2 * cfg.num_layers) ** 0.5, rngs)

    def __call__(self, x, positions, inv_freq, attention_factor, alibi_slopes, cache=None, unscaled=None,
                 aligned=False):
        """Self-attention of `x [B, T, d]` at `positions [B|1, T]`.

        With `cache = (k [B, S, N, H], v [B, S, N, H], k_pos [B|1, S], rotate_at_use)` (decoding), the new
        keys and values are written into the cache at slots `positions` (slot = position), the queries
        attend to every cached key at its position, and `(y, (k, v))` is returned. `rotate_at_use`
        (static): the cache holds *unrotated* keys that are rotated with the current frequencies at every
        step — exact for scalings whose frequencies change with the sequence length (dynamic NTK, dynamic
        YaRN, LongRoPE's switch); otherwise keys are rotated once, before caching.
        """
        cfg = self.cfg
        b, t, _ = x.shape
        q, k, v = jnp.split(self.qkv(x).reshape(b, t, 3 * cfg.num_heads, cfg.head_dim), 3, axis=2)

        def rope(a, pos):
            if inv_freq is None:
                return a
            original, n_hat = unscaled if unscaled is not None else (None, 0)
            return apply_rope(a, pos, inv_freq, layout=cfg.rope_layout, attention_factor=attention_factor,
                              original_inv_freq=original, unscaled_positions=n_hat)

        q = rope(q, positions)
        if cache is None:
            if aligned and cfg.attn_block and not (cfg.attn_chunk and cfg.attn_chunk < t):
                y = block_causal_attention(q, rope(k, positions), v, positions, positions, alibi_slopes=alibi_slopes,
                                           block=cfg.attn_block)
            else:
                y = attention(q, rope(k, positions), v, positions, positions, alibi_slopes=alibi_slopes,
                              chunk_size=cfg.attn_chunk)
            return self.out(y.reshape(b, t, cfg.d_model))
        k_cache, v_cache, k_pos, rotate_at_use = cache
        offset = positions.reshape(-1)[0]  # new tokens occupy slots offset … offset + T − 1 in every row
        k_new = k if rotate_at_use else rope(k, positions)
        k_cache = jax.lax.dynamic_update_slice(k_cache, k_new.astype(k_cache.dtype), (0, offset, 0, 0))
        v_cache = jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), (0, offset, 0, 0))
        keys = rope(k_cache, jnp.maximum(k_pos, 0)) if rotate_at_use else k_cache
        y = attention(q, keys, v_cache, positions, k_pos, alibi_slopes=alibi_slopes, chunk_size=cfg.attn_chunk)
        return self.out(y.reshape(b, t, cfg.d_model)), (k_cache, v_cache)


class Block(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.norm1 = nnx.RMSNorm(cfg.d_model, rngs=rngs)
        self.attn = Attention(cfg, rngs=rngs)
        self.norm2 = nnx.RMSNorm(cfg.d_model, rngs=rngs)
        self.fc = linear(cfg.d_model, cfg.mlp_dim, 0.02, rngs)
        self.proj = linear(cfg.mlp_dim, cfg.d_model, 0.02 / (2 * cfg.num_layers) ** 0.5, rngs)

    def __call__(self, x, positions, inv_freq, attention_factor, alibi_slopes, cache=None, unscaled=None,
                 aligned=False):
        if cache is None:
            x = x + self.attn(self.norm1(x), positions, inv_freq, attention_factor, alibi_slopes, unscaled=unscaled,
                              aligned=aligned)
            new_cache = None
        else:
            y, new_cache = self.attn(self.norm1(x), positions, inv_freq, attention_factor, alibi_slopes, cache,
                                     unscaled=unscaled)
            x = x + y
        return x + self.proj(jax.nn.gelu(self.fc(self.norm2(x)))), new_cache


class Transformer(nnx.Module):
    """Decoder-only byte LM. `model(tokens)` → logits `[B, T, vocab]` (float32)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.embed = nnx.Embed(cfg.vocab_size, cfg.d_model, embedding_init=nnx.initializers.normal(1.0), rngs=rngs)
        if cfg.posenc == "learned":
            # std 1/sqrt(2): the per-feature RMS of the sinusoidal encoding, so both APEs start at one scale
            self.pos_table = nnx.Param(nnx.initializers.normal(2**-0.5)(rngs.params(), (cfg.max_len, cfg.d_model)))
        self.blocks = nnx.List([Block(cfg, rngs=rngs) for _ in range(cfg.num_layers)])
        self.final_norm = nnx.RMSNorm(cfg.d_model, rngs=rngs)
        self.head = linear(cfg.d_model, cfg.vocab_size, 0.02, rngs)

    def position_plan(self, positions, seq_len: int, rope=None) -> PositionPlan:
        """The one dispatch point on `posenc`.

        Args:
          positions: `[B|1, T]` integer positions.
          seq_len: static length of the context (largest position + 1 the caller may use); it selects
            dynamic RoPE scalings and LongRoPE's factors, and bounds the learned table.
          rope: optional `(inv_freq, attention_factor)` or `(inv_freq, attention_factor, n̂)` overriding the
            configured RoPE frequencies (traced values: sweeps and searches over scalings without
            recompiling); n̂ is LongRoPE's number of initial positions kept unscaled.
        """
        cfg = self.cfg
        absolute = inv_freq = slopes = unscaled = None
        attention_factor = 1.0
        match cfg.posenc:
            case "none":
                pass
            case "sinusoidal":
                absolute = sinusoidal_encoding(positions, cfg.d_model, cfg.sinusoidal_base)
            case "learned":
                table = self.pos_table[...]
                if seq_len > cfg.max_len:
                    if cfg.learned_beyond == "error":
                        raise ValueError(
                            f"posenc='learned' is undefined past its table: sequence length {seq_len} > "
                            f"model.max_len={cfg.max_len}. Set model.learned_beyond='interpolate' to resample "
                            "the table to the new length."
                        )
                    table = interpolate_table(table, seq_len)
                # mode='fill': an out-of-range position gives NaN, never JAX's silent clamp to the last row
                absolute = jnp.take(table, positions, axis=0, mode="fill", fill_value=jnp.nan)
            case "rope":
                if rope is None:
                    inv, attention_factor = rope_frequencies(cfg.rotary_dim, base=cfg.rope_base,
                                                             scaling=cfg.rope_scaling, seq_len=seq_len)
                    inv_freq, n_hat = jnp.asarray(inv, jnp.float32), cfg.rope_scaling.unscaled_positions
                else:
                    inv_freq, attention_factor, n_hat = (*rope, 0) if len(rope) == 2 else rope
                if not (isinstance(n_hat, int) and n_hat == 0):
                    unscaled = (jnp.asarray(rope_frequencies(cfg.rotary_dim, base=cfg.rope_base)[0], jnp.float32), n_hat)
            case "alibi":
                slopes = jnp.asarray(alibi_slopes(cfg.num_heads), jnp.float32)
            case _:
                raise ValueError(f"model.posenc must be one of {POSENCS}, got {cfg.posenc!r}")
        return PositionPlan(absolute, inv_freq, attention_factor, slopes, unscaled)

    def __call__(self, tokens, positions=None, *, seq_len: int | None = None, rope=None, cache: "KVCache | None" = None):
        """Logits of the next byte.

        Args:
          tokens: `[B, T]` int.
          positions: `[B|1, T]` (default 0 … T−1).
          seq_len: the static context length (see `position_plan`); defaults to T, or to max(positions) + 1
            for concrete positions. Required with traced positions.
          rope: optional `(inv_freq, attention_factor)` override (see `position_plan`).
          cache: a `KVCache` (see `init_cache`): decode `tokens` at `positions` after the cached ones, and
            return `(logits, new_cache)`.

        Returns:
          `[B, T, vocab]` float32 (and the updated cache when one is given).
        """
        cfg = self.cfg
        dtype = jnp.dtype(cfg.dtype)
        t = tokens.shape[1]
        aligned = positions is None  # 0 … T−1 for queries and keys: block-causal attention may skip the future
        if positions is None:
            positions = jnp.arange(t)[None]
            seq_len = t if seq_len is None else seq_len
        elif seq_len is None:
            if isinstance(positions, jax.core.Tracer):
                raise ValueError("Transformer: pass seq_len (static) together with traced positions")
            positions = np.asarray(positions)
            seq_len = int(positions.max()) + 1
        positions = jnp.asarray(positions)
        plan = self.position_plan(positions, seq_len, rope)
        x = self.embed(tokens).astype(dtype)
        if plan.absolute is not None:
            x = x + plan.absolute.astype(dtype)
        k_pos = None
        if cache is not None:
            offset = positions.reshape(-1)[0]
            k_pos = jax.lax.dynamic_update_slice(cache.pos, jnp.broadcast_to(positions, (cache.pos.shape[0], t)),
                                                 (0, offset))
        new_k, new_v = [], []
        for i, block in enumerate(self.blocks):
            inv = plan.inv_freq
            if inv is not None and inv.ndim == 2:  # per-layer LongRoPE factors
                inv = inv[i]
            layer_cache = None if cache is None else (cache.k[i], cache.v[i], k_pos, cache.rotate_at_use)
            x, updated = block(x, positions, inv, plan.attention_factor, plan.alibi_slopes, layer_cache,
                               unscaled=plan.rope_unscaled, aligned=aligned and cache is None)
            if updated is not None:
                new_k.append(updated[0])
                new_v.append(updated[1])
        logits = self.head(self.final_norm(x)).astype(jnp.float32)
        if cache is None:
            return logits
        return logits, KVCache(tuple(new_k), tuple(new_v), k_pos, cache.rotate_at_use)

    def init_cache(self, batch_size: int, max_len: int, rotate_at_use: bool = False) -> "KVCache":
        """An empty cache of `max_len` slots (slot = position; empty slots have position −1)."""
        cfg, dtype = self.cfg, jnp.dtype(self.cfg.dtype)
        shape = (batch_size, max_len, cfg.num_heads, cfg.head_dim)
        zeros = tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_layers))
        return KVCache(zeros, tuple(jnp.zeros(shape, dtype) for _ in range(cfg.num_layers)),
                       jnp.full((batch_size, max_len), -1, jnp.int32), rotate_at_use)


@jax.tree_util.register_pytree_node_class
class KVCache(NamedTuple):
    """Per-layer keys and values `[B, S, N, H]`, their positions `[B, S]` (−1 = empty), and whether keys
    are stored unrotated and rotated at use (static: part of the tree structure, not a leaf)."""

    k: tuple
    v: tuple
    pos: Any
    rotate_at_use: bool

    def tree_flatten(self):
        return (self.k, self.v, self.pos), self.rotate_at_use

    @classmethod
    def tree_unflatten(cls, rotate_at_use, children):
        return cls(*children, rotate_at_use)


def count_params(model: nnx.Module) -> int:
    return sum(int(np.prod(p.shape)) for p in jax.tree.leaves(nnx.state(model, nnx.Param)))
