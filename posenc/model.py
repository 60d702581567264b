"""A decoder-only Transformer LM (Flax NNX) whose `posenc` decides how positions enter.

The byte LM (the defaults): pre-norm blocks (RMSNorm → causal self-attention without biases → residual;
RMSNorm → GELU MLP of `mlp_dim` → residual), a final RMSNorm and an untied output head, over bytes (vocab
256). The same module also holds the Hugging Face families `posenc.hf.load_pretrained` reads, through config
options: grouped-query attention (`num_kv_heads`), a head width of its own (`head_size`), SwiGLU
(`mlp_act`), q/k/v, output and MLP biases, per-head q/k RMSNorm (Qwen3), LayerNorm (`norm`) with the
model's epsilon, a parallel residual (GPT-NeoX), tied embeddings, a sliding window on every layer
(Mistral, Phi-3), and parameters stored in bf16 (`param_dtype`).

`ModelConfig.posenc` names an encoding of the registry (`posenc/encodings.py`; the interface is
`posenc/encoding.py`). The Transformer builds it once (`Transformer.encoding`) and asks it, on every
forward pass, for its per-pass context, its absolute embedding, its transform of q and k, and its logit
bias; nothing here depends on which encoding it is.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from posenc import training_free
from posenc.attention import (IMPLEMENTATIONS, Far, attention, block_causal_attention, fused_attention, implementation,
                              swap_last_copy)
from posenc.encodings import get_encoding
from posenc.learned import LEARNED_BEYOND
from posenc.rope_scaling import RopeScaling

DTYPES = ("float32", "bfloat16")


def activation_dtype(cfg: "ModelConfig", backend: str | None = None):
    """The dtype of the activations between products (`cfg.act_dtype`): `auto` is `cfg.dtype` on a GPU (bf16
    elementwise arithmetic is native there, and halves the memory traffic of the non-product kernels) and
    float32 elsewhere (XLA:CPU emulates bf16 elementwise arithmetic, rounding after every operation)."""
    if cfg.act_dtype != "auto":
        return jnp.dtype(cfg.act_dtype)
    on_gpu = (backend or jax.default_backend()) == "gpu"
    return jnp.dtype(cfg.dtype) if on_gpu else jnp.promote_types(cfg.dtype, jnp.float32)


MLP_ACTS = ("gelu_tanh", "gelu", "swiglu")  # GELU (tanh approximation), exact GELU, silu(gate) · up
NORMS = ("rms", "layer")


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
    attn_key_block: int = 512  # with attn_chunk: keys in tiles of this size, online softmax, invisible tiles skipped; 0 = all at once
    attn_impl: str = "auto"  # posenc.attention.IMPLEMENTATIONS: auto = the fused cuDNN kernel on a GPU where it applies
    # Products' operands; parameters are `param_dtype`. bfloat16 is mixed precision: every product takes bf16
    # operands and accumulates in float32; softmax, norms' statistics, RoPE's rotation and the loss run in float32.
    dtype: str = "float32"
    # The activations between products (residual stream, MLP activation, projections' outputs): `activation_dtype`.
    # auto = `dtype` on a GPU, float32 elsewhere (XLA:CPU emulates bf16 elementwise arithmetic: see `dense`).
    act_dtype: str = "auto"
    encoding_options: tuple = ()  # sorted (option, value) pairs of `model.<posenc>` (see Encoding.options)
    # Architecture options of the Hugging Face families (posenc/hf.py); the byte LM keeps the defaults.
    num_kv_heads: int = 0  # grouped-query attention: key/value heads, dividing num_heads (0 = num_heads)
    head_size: int = 0  # width of each head (0 = d_model / num_heads)
    mlp_act: str = "gelu_tanh"  # one of MLP_ACTS
    norm: str = "rms"  # one of NORMS: RMSNorm, or LayerNorm with a bias
    norm_eps: float = 1e-6
    qkv_bias: bool = False  # biases on q, k and v (Qwen2, GPT-NeoX)
    out_bias: bool = False  # a bias on the attention output (GPT-NeoX)
    mlp_bias: bool = False  # biases on the MLP (GPT-NeoX)
    qk_norm: bool = False  # RMSNorm over each head of q and k, before the rotation (Qwen3)
    parallel_residual: bool = False  # x + attn(norm1(x)) + mlp(norm2(x)) (GPT-NeoX)
    tie_embeddings: bool = False  # logits = x · embeddingᵀ (no output head)
    attn_window: int = 0  # sliding-window attention on every layer: keys at distance < attn_window (0 = none)
    param_dtype: str = "float32"  # one of DTYPES

    def __post_init__(self):
        def positive(name):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
                raise ValueError(f"model.{name} must be a positive integer, got {value!r}")

        for name in ("vocab_size", "d_model", "num_layers", "num_heads", "mlp_dim", "max_len"):
            positive(name)
        if self.learned_beyond not in LEARNED_BEYOND:
            raise ValueError(f"model.learned_beyond must be one of {LEARNED_BEYOND}, got {self.learned_beyond!r}")
        if not self.head_size and self.d_model % self.num_heads:
            raise ValueError(f"model.d_model={self.d_model} must be divisible by model.num_heads={self.num_heads}")
        for name in ("num_kv_heads", "head_size", "attn_window"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"model.{name} must be an integer >= 0 (0 = the default), got {value!r}")
        if self.num_heads % self.kv_heads:
            raise ValueError(f"model.num_kv_heads={self.num_kv_heads} must divide model.num_heads={self.num_heads}")
        if self.mlp_act not in MLP_ACTS:
            raise ValueError(f"model.mlp_act must be one of {MLP_ACTS}, got {self.mlp_act!r}")
        if self.norm not in NORMS:
            raise ValueError(f"model.norm must be one of {NORMS}, got {self.norm!r}")
        eps = self.norm_eps
        if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)) or not 0 < eps < np.inf:
            raise ValueError(f"model.norm_eps must be a finite number > 0, got {eps!r}")
        for name in ("qkv_bias", "out_bias", "mlp_bias", "qk_norm", "parallel_residual", "tie_embeddings"):
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"model.{name} must be True or False, got {getattr(self, name)!r}")
        for name in ("dtype", "param_dtype"):
            if getattr(self, name) not in DTYPES:
                raise ValueError(f"model.{name} must be one of {DTYPES}, got {getattr(self, name)!r}")
        if self.act_dtype not in ("auto", "float32", self.dtype):
            raise ValueError(f"model.act_dtype must be one of {sorted({'auto', 'float32', self.dtype})} with "
                             f"model.dtype={self.dtype!r} (activations no narrower than the products' operands), "
                             f"got {self.act_dtype!r}")
        for name, zero in (("attn_chunk", "no chunking"), ("attn_block", "off"), ("attn_key_block", "all keys at once")):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
                raise ValueError(f"model.{name} must be an integer >= 0 (0 = {zero}), got {value!r}")
        if self.attn_impl not in IMPLEMENTATIONS:
            raise ValueError(f"model.attn_impl must be one of {IMPLEMENTATIONS}, got {self.attn_impl!r}")
        enc = get_encoding(self.posenc)
        if not enc.takes_rope_scaling and self.rope_scaling.kind != "none":
            raise ValueError(f"model.rope_scaling (kind {self.rope_scaling.kind!r}) does not apply to "
                             f"posenc={self.posenc!r}, which takes no RoPE scaling: leave it RopeScaling()")
        enc.option_values(self)
        enc.check(self)

    @property
    def encoding(self):
        """The encoding class of `posenc` (its facts: `takes_rope_scaling`, `length_dependent`, …)."""
        return get_encoding(self.posenc)

    @property
    def head_dim(self) -> int:
        return self.head_size or self.d_model // self.num_heads

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    def layer_window(self, layer: int) -> int | None:
        """The sliding window of `layer`: the encoding's (local layers) and `attn_window`, the smaller one."""
        windows = [w for w in (self.encoding.window(self, layer), self.attn_window) if w]
        return min(windows) if windows else None

    @property
    def rotary_dim(self) -> int:
        rd = self.head_dim * self.rope_fraction  # a fraction like 14 / 100 comes back as 14.000000000000002
        return round(rd) if abs(rd - round(rd)) < 1e-9 * max(1.0, rd) else -1


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
    Mixed precision: bfloat16 operands give a float32 result (the product accumulates in float32 and is not
    rounded), and the gradient arriving in float32 is rounded to bfloat16 for the two backward products. XLA:CPU
    runs a bfloat16 product natively (AMX where the CPU has it) only with a float32 result; asked for a bfloat16
    result it upcasts both operands and multiplies in float32. Its elementwise bfloat16 arithmetic is emulated
    in float32 with a rounding after every operation, so on a CPU the activations between products stay float32
    (`activation_dtype`; on a GPU `auto` keeps them in bf16).
    For float32 and float64 operands the values are those of `jnp.dot`'s rule (tested against a float64
    oracle); the kernel's gradient is returned in the kernel's dtype (bf16 for bf16 operands, as custom_vjp needs).
    """
    return _dot(x, kernel, (((x.ndim - 1,), (0,)), ((), ())))


def _dot(a, b, dimension_numbers):
    """`lax.dot_general` of operands of one dtype, accumulated and returned in float32 (float64 for float64)."""
    return jax.lax.dot_general(a, b, dimension_numbers, preferred_element_type=jnp.promote_types(a.dtype, jnp.float32))


def _dense_fwd(x, kernel):
    return dense.fun(x, kernel), (x, kernel)


def _dense_bwd(residuals, dy):
    x, kernel = residuals
    dy = dy.astype(x.dtype)
    dy_tokens = jax.lax.optimization_barrier(dy.reshape(-1, dy.shape[-1]))
    dkernel = _dot(swap_last_copy(x.reshape(-1, x.shape[-1])), dy_tokens, (((1,), (0,)), ((), ())))
    dx = _dot(dy, kernel, (((dy.ndim - 1,), (1,)), ((), ())))
    return dx.astype(x.dtype), dkernel.astype(kernel.dtype)


dense.defvjp(_dense_fwd, _dense_bwd)


def dense_dot_general(x, kernel, dimension_numbers, precision=None, preferred_element_type=None, out_sharding=None):
    """`nnx.Linear(dot_general=...)` hook routing the layer's product through `dense`."""
    standard = (((x.ndim - 1,), (0,)), ((), ()))
    if (dimension_numbers != standard or kernel.ndim != 2 or precision is not None
            or preferred_element_type is not None or out_sharding is not None):
        raise NotImplementedError("dense_dot_general supports only nnx.Linear's plain `x @ kernel`")
    return dense(x, kernel)


def linear(d_in: int, d_out: int, std: float, rngs: nnx.Rngs, *, bias: bool = False,
           param_dtype: str = "float32", dtype: str = "float32") -> nnx.Linear:
    """An `nnx.Linear` with N(0, std²) weights (and a zero bias if `bias`) whose product is `dense`, computed
    in `dtype` (mixed precision: float32 parameters cast to bf16 for the product; their gradients are
    float32 again through the cast)."""
    return nnx.Linear(d_in, d_out, use_bias=bias, kernel_init=nnx.initializers.normal(std),
                      dot_general=dense_dot_general, param_dtype=jnp.dtype(param_dtype), dtype=jnp.dtype(dtype),
                      rngs=rngs)


def norm(cfg: ModelConfig, dim: int, rngs: nnx.Rngs) -> nnx.Module:
    """RMSNorm, or LayerNorm with a bias (`cfg.norm`), with the model's epsilon."""
    cls = nnx.RMSNorm if cfg.norm == "rms" else nnx.LayerNorm
    return cls(dim, epsilon=cfg.norm_eps, param_dtype=jnp.dtype(cfg.param_dtype), rngs=rngs)


class Attention(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        d, h = cfg.d_model, cfg.head_dim
        pd = cfg.param_dtype
        self.qkv = linear(d, (cfg.num_heads + 2 * cfg.kv_heads) * h, 0.02, rngs, bias=cfg.qkv_bias, param_dtype=pd,
                          dtype=cfg.dtype)
        self.out = linear(cfg.num_heads * h, d, 0.02 / (2 * cfg.num_layers) ** 0.5, rngs, bias=cfg.out_bias,
                          param_dtype=pd, dtype=cfg.dtype)
        if cfg.qk_norm:
            self.q_norm = norm(cfg, h, rngs)
            self.k_norm = norm(cfg, h, rngs)

    def __call__(self, x, positions, enc, ctx, layer: int, cache=None, aligned=False, method=None):
        """Self-attention of `x [B, T, d]` at `positions [B|1, T]`, positions entering through the encoding
        `enc` (its `rotate` of q and k, its `bias`, its `window` for this layer) with the pass's `ctx`, and
        through a training-free method (`method`, a `training_free.MethodArgs`, or None).

        With `cache = (k [B, N, S, H], v [B, N, S, H], k_pos [B, S], rotate_at_use)` (decoding; empty slots
        have position −1), the queries attend to the cached keys and the new ones, the new keys and values
        are written into the cache, and `(y, (k, v, k_pos))` is returned. A layer without a window keeps
        every position (slot = the number of earlier tokens: the position itself for positions 0, 1, …, and any
        increasing positions, such as randomized ones, fit a cache of their count; more tokens than its S slots
        is a ValueError where the count is known — more new tokens than slots, or a cache outside `jax.jit` —
        and, with a traced cache, a NaN output from the step that overflows it on (its write clamps onto the
        last slots, so no later step is exact either)); a windowed layer keeps a ring of `window` slots (slot =
        position mod window), and under `lm_infinite` / `sinks` the first `fixed` positions keep slots of their own
        and the others share a ring of S − fixed: the new queries attend to the cache as it was plus the new
        keys, then the fixed and the newest ring-many of those enter it, so memory stays bounded and the
        result exact. `rotate_at_use` (static): the cache holds *unrotated* keys, rotated with the current
        context at every step — the current frequencies for encodings whose frequencies change with the
        sequence length (dynamic NTK, dynamic YaRN, LongRoPE's switch; the cached keys and values themselves
        come from each token's own step, so past the first such layer this is not the recompute over the
        prefix: `posenc.decode`), and what the two-branch methods need (a key is
        rotated at its near and at its far position; `sinks` re-indexes the near positions inside the
        cache, so that they stay below S + R + T however long generation runs); otherwise keys are rotated
        once, before caching.
        """
        cfg = self.cfg
        b, t, _ = x.shape
        n, nkv = cfg.num_heads, cfg.kv_heads
        qkv = self.qkv(x).astype(x.dtype)  # the activations' dtype (`activation_dtype`)
        q, k, v = jnp.split(qkv.reshape(b, t, n + 2 * nkv, cfg.head_dim), (n, n + nkv), axis=2)
        if cfg.qk_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        mode = "plain" if method is None else method.mode
        if method is not None and method.use_logn:
            q = q * training_free.logn_scale(positions, method.logn)[..., None, None].astype(q.dtype)
        bias_fn = functools.partial(enc.bias, ctx=ctx, layer=layer) if enc.has_bias else None
        window = cfg.layer_window(layer)
        near_fn = None if mode == "plain" else functools.partial(
            training_free.near if mode == "branches" else training_free.visible, method)
        rotate = functools.partial(enc.rotate, ctx=ctx, layer=layer)
        key_block = 0 if enc.bias_needs_all_keys else cfg.attn_key_block
        dtype = jnp.dtype(cfg.dtype)  # products' operands: q, k, v are rotated in float32, then rounded

        def rotate_keys(keys, k_pos):  # keys [B, T, N, H] at positions [B|1, T]
            return rotate(keys, k_pos, role="k")

        def far_branch(keys, q_pos, k_pos, rotate_keys=rotate_keys):
            if mode != "branches":
                return None
            fq, fk = training_free.far_positions(method, q_pos, k_pos)
            return Far(rotate(q, fq, role="q").astype(dtype), rotate_keys(keys, fk).astype(dtype), fq, fk,
                       functools.partial(training_free.far_visible, method))

        if cache is None:
            k_rot = rotate_keys(k, positions).astype(dtype)
            q_rot = rotate(q, positions, role="q").astype(dtype)
            v = v.astype(dtype)
            impl = implementation(cfg.attn_impl, aligned=aligned, has_bias=enc.has_bias, plain=mode == "plain",
                                  dtype=q_rot.dtype, head_dim=cfg.head_dim)
            if impl != "posenc":
                y = fused_attention(q_rot, k_rot, v, impl=impl, window=window)
            elif aligned and cfg.attn_block and mode == "plain" and not (cfg.attn_chunk and cfg.attn_chunk < t):
                y = block_causal_attention(q_rot, k_rot, v, positions, positions, bias_fn=bias_fn,
                                           block=cfg.attn_block, window=window)
            else:
                y = attention(q_rot, k_rot, v, positions, positions, bias_fn=bias_fn, chunk_size=cfg.attn_chunk,
                              window=window, near_fn=near_fn, far=far_branch(k, positions, positions), key_block=key_block)
            return self.out(y.reshape(b, t, n * cfg.head_dim))
        k_cache, v_cache, pos_cache, rotate_at_use = cache
        # a KV cache is attended by posenc's attention only: an explicit fused kernel ('xla', 'cudnn') is refused
        # here (a ValueError naming model.attn_impl), not replaced
        implementation(cfg.attn_impl, aligned=False, has_bias=enc.has_bias, plain=mode == "plain", dtype=dtype,
                       head_dim=cfg.head_dim)
        if mode == "branches" and enc.position_kind == "rotary" and not rotate_at_use:
            raise ValueError(f"method {method.method!r} needs a KV cache of unrotated keys (rotate_at_use=True): each "
                             "key is rotated at its near and at its far position")
        k_new = (k if rotate_at_use else rotate(k, positions, role="k")).astype(k_cache.dtype).swapaxes(1, 2)
        v_new, pos_new = v.astype(v_cache.dtype).swapaxes(1, 2), jnp.broadcast_to(positions, (pos_cache.shape[0], t))
        bounded = method is not None and method.method in training_free.BOUNDED
        overflow = None
        if window is None and not bounded:
            size = k_cache.shape[2]
            if t > size:
                raise ValueError(f"KV cache: {t} new tokens do not fit its {size} slots per layer (init_cache's "
                                 f"max_len must cover every position decoded)")
            offset = jnp.sum(pos_cache[0] >= 0)  # the next free slot: slots fill in order (slot = position for 0, 1, …)
            if not isinstance(offset, jax.core.Tracer) and int(offset) + t > size:
                raise ValueError(f"KV cache: {int(offset)} cached + {t} new tokens do not fit its {size} slots per "
                                 f"layer (init_cache's max_len must cover every position decoded)")
            # traced (under jit): dynamic_update_slice clamps an overflowing write onto the last slots, so the
            # output of a step that overflows the cache is NaN (and so is every later step's: the cache is full)
            overflow = offset + t > size
            k_cache = jax.lax.dynamic_update_slice(k_cache, k_new, (0, 0, offset, 0))
            v_cache = jax.lax.dynamic_update_slice(v_cache, v_new, (0, 0, offset, 0))
            pos_cache = jax.lax.dynamic_update_slice(pos_cache, pos_new, (0, offset))
            keys, values, k_pos = k_cache, v_cache, pos_cache
        else:
            keys = jnp.concatenate([k_cache, k_new], axis=2)
            values = jnp.concatenate([v_cache, v_new], axis=2)
            k_pos = jnp.concatenate([pos_cache, pos_new], axis=1)
            size = k_cache.shape[2]
            fixed = method.fixed if bounded else 0
            p = pos_new  # [B, t]: each row's ring slots from its own positions (randomized positions differ by row)
            slots = jnp.where(p < fixed, p, fixed + (p - fixed) % (size - fixed))
            slots = jnp.where((p < fixed) | (p > p[:, -1:] - (size - fixed)), slots, size)  # size: dropped
            put = jax.vmap(lambda c, new, s: c.at[..., s, :].set(new, mode="drop"))  # one row: [N, S, H] ← [N, t, H]
            k_cache, v_cache = put(k_cache, k_new, slots), put(v_cache, v_new, slots)
            pos_cache = jax.vmap(lambda c, new, s: c.at[s].set(new, mode="drop"))(pos_cache, pos_new, slots)
            if enc.bias_needs_all_keys:  # CoPE sums its gates along the key axis: the ring's keys in position order
                order = jnp.argsort(k_pos, axis=-1)  # [B, S + t]; empty slots (−1) first
                keys, values = (jnp.take_along_axis(a, order[:, None, :, None], axis=2) for a in (keys, values))
                k_pos = jnp.take_along_axis(k_pos, order, axis=1)

        def rotate_cached(keys, k_pos):  # head-major keys [B, N, S, H] as [B, N, S, 1, H], positions [B, 1, S]
            return rotate(keys[:, :, :, None], jnp.broadcast_to(k_pos, pos_cache.shape[:1] + k_pos.shape[1:])[:, None],
                          role="k")[:, :, :, 0]

        q_pos, shift = positions, 0
        if rotate_at_use:
            if method is not None and method.reindex:  # sinks, re-indexed inside the cache: bounded positions
                shift = jnp.maximum(0, jnp.max(positions) - (method.fixed + method.window))
            far = far_branch(keys, positions, jnp.maximum(k_pos, 0), rotate_cached)
            keys = rotate_cached(keys, jnp.maximum(k_pos, 0) - shift).astype(dtype)
            q_rot = rotate(q, positions - shift, role="q").astype(dtype)
        else:
            far = far_branch(keys, positions, k_pos, rotate_cached)
            q_rot = rotate(q, positions, role="q").astype(dtype)
        y = attention(q_rot, keys, values, q_pos, k_pos, bias_fn=bias_fn, chunk_size=cfg.attn_chunk, window=window,
                      near_fn=near_fn, far=far, key_block=key_block, kv_head_major=True)
        if overflow is not None:
            y = jnp.where(overflow, jnp.asarray(jnp.nan, y.dtype), y)
        return self.out(y.reshape(b, t, n * cfg.head_dim)), (k_cache, v_cache, pos_cache)


class Block(nnx.Module):
    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        pd, bias = cfg.param_dtype, cfg.mlp_bias
        self.norm1 = norm(cfg, cfg.d_model, rngs)
        self.attn = Attention(cfg, rngs=rngs)
        self.norm2 = norm(cfg, cfg.d_model, rngs)
        self.fc = linear(cfg.d_model, cfg.mlp_dim, 0.02, rngs, bias=bias, param_dtype=pd, dtype=cfg.dtype)  # SwiGLU: up
        if cfg.mlp_act == "swiglu":
            self.gate = linear(cfg.d_model, cfg.mlp_dim, 0.02, rngs, bias=bias, param_dtype=pd, dtype=cfg.dtype)
        self.proj = linear(cfg.mlp_dim, cfg.d_model, 0.02 / (2 * cfg.num_layers) ** 0.5, rngs, bias=bias,
                           param_dtype=pd, dtype=cfg.dtype)

    def mlp(self, x):
        """The MLP of `x [B, T, d]`, its activation and output in x's dtype (`activation_dtype`)."""
        act, dt = self.cfg.mlp_act, x.dtype
        if act == "swiglu":
            return self.proj(jax.nn.silu(self.gate(x).astype(dt)) * self.fc(x).astype(dt)).astype(dt)
        return self.proj(jax.nn.gelu(self.fc(x).astype(dt), approximate=act == "gelu_tanh")).astype(dt)

    def __call__(self, x, positions, enc, ctx, layer: int, cache=None, aligned=False, method=None):
        # norms compute their statistics in float32 and return the activations' dtype (x's: `activation_dtype`)
        h = self.norm1(x).astype(x.dtype)
        if cache is None:
            y, new_cache = self.attn(h, positions, enc, ctx, layer, aligned=aligned, method=method), None
        else:
            y, new_cache = self.attn(h, positions, enc, ctx, layer, cache, method=method)
        y = y.astype(x.dtype)
        if self.cfg.parallel_residual:
            return x + y + self.mlp(self.norm2(x).astype(x.dtype)), new_cache
        x = x + y
        return x + self.mlp(self.norm2(x).astype(x.dtype)), new_cache


class Transformer(nnx.Module):
    """Decoder-only byte LM. `model(tokens)` → logits `[B, T, vocab]` (float32)."""

    def __init__(self, cfg: ModelConfig, *, rngs: nnx.Rngs):
        self.cfg = cfg
        self.embed = nnx.Embed(cfg.vocab_size, cfg.d_model, embedding_init=nnx.initializers.normal(1.0),
                               param_dtype=jnp.dtype(cfg.param_dtype), dtype=jnp.dtype(cfg.dtype), rngs=rngs)
        self.encoding = get_encoding(cfg.posenc)(cfg, rngs=rngs)
        self.blocks = nnx.List([Block(cfg, rngs=rngs) for _ in range(cfg.num_layers)])
        self.final_norm = norm(cfg, cfg.d_model, rngs)
        if not cfg.tie_embeddings:
            self.head = linear(cfg.d_model, cfg.vocab_size, 0.02, rngs, param_dtype=cfg.param_dtype, dtype=cfg.dtype)

    def __call__(self, tokens, positions=None, *, seq_len: int | None = None, rope=None, cache: "KVCache | None" = None,
                 method: "training_free.MethodArgs | None" = None):
        """Logits of the next byte.

        Args:
          tokens: `[B, T]` int.
          positions: `[B|1, T]` (default 0 … T−1).
          seq_len: the static length of the context (largest position + 1 the caller may use): it selects
            dynamic RoPE scalings and LongRoPE's factors, and bounds a learned table. Defaults to T, or to
            max(positions) + 1 for concrete positions. Required with traced positions.
          rope: optional traced `(inv_freq, attention_factor)` or `(inv_freq, attention_factor, n̂)`
            overriding the configured RoPE frequencies of an encoding that takes a RoPE scaling (sweeps and
            searches over scalings without recompiling; `posenc.rope_scaling.rope_inputs` computes them).
          cache: a `KVCache` (see `init_cache`): decode `tokens` at `positions` after the cached ones, and
            return `(logits, new_cache)`. A layer without a window (and no bounded method) needs a slot for
            every token decoded: past its `max_len` slots a ValueError where the count is known (the new
            tokens' shape, a cache outside `jax.jit`), NaN logits under jit (see `Attention`).
          method: a training-free method (`training_free.Method(...).resolve(...).args(encoding)`), or None.

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
        if positions.ndim != 2 or positions.shape[1] != t or positions.shape[0] not in (1, tokens.shape[0]):
            raise ValueError(f"Transformer: positions must be [B|1, T] for tokens of shape {tuple(tokens.shape)} "
                             f"([B, T]), got shape {tuple(positions.shape)}")
        enc = self.encoding
        if method is not None and method.max_position is not None:  # sinks: embedded positions stay ≤ S + R
            seq_len = min(seq_len, method.max_position + 1)
        ctx = enc.context(positions, seq_len, rope)
        bounded = method is not None and method.method in training_free.BOUNDED
        if cache is not None and cache.rotate_at_use and not bounded:
            # every layer rotates its cache at positions 0 … seq_len−1: one table per step, no larger than a
            # cache that holds every position. A bounded cache (lm_infinite, sinks: S + R slots, whatever the
            # length) is rotated without a table: each layer computes the rotations of the positions it holds
            # (its own S + R slots, the new tokens and the far branch's), so a step's cost and memory stay
            # bounded by the cache, not by the length decoded so far.
            ctx = enc.tabulate(ctx, 0, seq_len)
        act = activation_dtype(cfg)
        x = self.embed(tokens).astype(act)
        absolute = enc.absolute(training_free.embed_positions(method, positions), ctx)
        if absolute is not None:
            x = x + absolute.astype(act)
        new_k, new_v, new_pos = [], [], []
        for i, block in enumerate(self.blocks):
            layer_cache = None if cache is None else (cache.k[i], cache.v[i], cache.pos[i], cache.rotate_at_use)
            x, updated = block(x, positions, enc, ctx, i, layer_cache, aligned=aligned and cache is None, method=method)
            if updated is not None:
                new_k.append(updated[0])
                new_v.append(updated[1])
                new_pos.append(updated[2])
        x = self.final_norm(x).astype(dtype)  # norms compute in float32 (float32 scale); products in dtype
        if cfg.tie_embeddings:  # x · embeddingᵀ through `dense`: a float32 result also for bf16 operands
            logits = dense(x, self.embed.embedding[...].astype(dtype).T)
        else:
            logits = self.head(x)
        logits = logits.astype(jnp.float32)
        if cache is None:
            return logits
        return logits, KVCache(tuple(new_k), tuple(new_v), tuple(new_pos), cache.rotate_at_use)

    def init_cache(self, batch_size: int, max_len: int, rotate_at_use: bool = False) -> "KVCache":
        """An empty cache: `max_len` slots per layer (slot = position), or the layer's window (a ring) for a
        windowed layer; empty slots have position −1."""
        cfg, dtype = self.cfg, jnp.dtype(self.cfg.dtype)
        sizes = [cfg.layer_window(i) or max_len for i in range(cfg.num_layers)]
        shape = lambda s: (batch_size, cfg.kv_heads, s, cfg.head_dim)  # noqa: E731  (head-major: attention's layout)
        return KVCache(tuple(jnp.zeros(shape(s), dtype) for s in sizes), tuple(jnp.zeros(shape(s), dtype) for s in sizes),
                       tuple(jnp.full((batch_size, s), -1, jnp.int32) for s in sizes), rotate_at_use)


@jax.tree_util.register_pytree_node_class
class KVCache(NamedTuple):
    """Per-layer keys and values `[B, N_kv, S_l, H]` (head-major, the layout attention multiplies in, so that
    a decoding step does not transpose the whole cache) and their positions `[B, S_l]` (−1 = empty; S_l the
    layer's window for a windowed layer), and whether keys are stored unrotated and rotated at use (static:
    part of the tree structure, not a leaf)."""

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
