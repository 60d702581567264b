"""Hugging Face models: a model's rotary embedding from its whole `config.json`, and its checkpoint.

`load_pretrained(path)` builds a posenc `Transformer` from a local checkpoint directory (Llama, Mistral,
Qwen2, Qwen3, Phi-3, GPT-NeoX) whose logits are transformers' (tests/test_hf_models.py, fixtures made by
scripts/make_hf_model_reference.py).

`rope_from_hf_config(config)` gives exactly the inverse frequencies and cos/sin scale of the model's rotary
embedding in transformers 5.x (`tests/test_hf.py` checks them against values transformers 5.23 computed
with each family's own `<Family>RotaryEmbedding`, `scripts/make_hf_config_reference.py`). It reads, as
transformers does:

  * the RoPE parameters: v5 `rope_parameters`, legacy `rope_scaling`, or per-layer-type dicts
    (`{"full_attention": {...}, "sliding_attention": {...}}`, chosen by `layer_type`);
  * the base: `rope_theta` (in the parameters or at the top level), and Gemma 3's `rope_local_base_freq` for
    its sliding layers (its legacy `rope_scaling` applies to the full layers only). GPT-NeoX (GPTNeoXConfig)
    reads `rope_theta` in the parameters, else `rotary_emb_base`, and no top-level `rope_theta`;
  * the rotary dimension: `head_dim` (else hidden_size / num_attention_heads), DeepSeek's
    `qk_rope_head_dim`, times `partial_rotary_factor` (in the parameters, else at the top level, else 1).
    GPT-NeoX reads it in the parameters, else `rotary_pct`, else transformers' default 0.25, and no top-level
    `partial_rotary_factor`. Llama, Mistral, Qwen2 and Qwen3 rotate every dimension of a head: for them a factor
    other than 1 is an error (their transformers models ignore it under the default type and fail on it under
    the others);
  * the original length: `original_max_position_embeddings` at the top level first (Phi-3), then in the
    parameters, then `max_position_embeddings`; LongRoPE (and yarn) without `factor` uses max / original;
  * Phi-3's legacy types "su" and "yarn" as "longrope" (Phi3Config; for model_type "phi3" only);
  * the `proportional` type (p-RoPE, posenc/p_rope.py).

Each type takes the keys transformers' validation accepts for it (`posenc.rope_scaling.HF_KEYS`); transformers
warns about any other key and ignores it, posenc refuses it, naming it, as it refuses dynamic NTK's
`original_max_position_embeddings` where it differs from the `max_position_embeddings` transformers scales from. The one key ignored is LongRoPE's
`short_mscale` / `long_mscale` for Phi-3 (model_type "phi3", whose rotary embedding does not read them); for any
other model_type (Phi-3.5-MoE's "phimoe" scales cos/sin by them) they are an error. Unknown types ("ntk", and "su"
outside Phi-3, included), a missing base, a missing key transformers requires (`factor`; llama3's
`low_freq_factor` / `high_freq_factor`), a top-level GPT-NeoX `rope_theta` / `partial_rotary_factor` that
contradicts the value transformers uses, and a missing norm epsilon are errors: no other value is defaulted. A
config with both `rope_scaling` and `rope_parameters` is read from `rope_scaling`, as transformers 5.23 reads it.
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Mapping

import numpy as np

from posenc.model import ModelConfig
from posenc.p_rope import p_rope_mask
from posenc.rope_scaling import PHI3_ALIASES, RopeScaling, default_inv_freq, rope_frequencies

LAYER_TYPES = ("full_attention", "sliding_attention")
# Families whose transformers attention rotates every dimension of a head (apply_rotary_pos_emb without a
# pass-through part): a partial_rotary_factor other than 1 is an error for them.
_FULL_ROTARY = ("llama", "mistral", "qwen2", "qwen3")



def _rope_parameters(config: Mapping[str, Any], layer_type: str | None) -> dict[str, Any]:
    """The RoPE parameter dict of (a layer type of) the model, with Gemma 3's legacy fields folded in."""
    params = dict(config.get("rope_scaling") or config.get("rope_parameters") or {})  # 5.23: rope_scaling first
    nested = [k for k in params if k in LAYER_TYPES]
    gemma3_legacy = str(config.get("model_type", "")).startswith("gemma3") and not nested
    if gemma3_legacy:  # transformers' Gemma3TextConfig: rope_scaling -> full layers, local base -> sliding ones
        params = {"full_attention": {"rope_type": "default", **params},
                  "sliding_attention": {"rope_type": "default"}}
        if "rope_local_base_freq" not in config:
            raise ValueError("rope_from_hf_config: a Gemma 3 config needs rope_local_base_freq (the base of its "
                             "sliding layers)")
        params["sliding_attention"]["rope_theta"] = config["rope_local_base_freq"]
        nested = list(LAYER_TYPES)
    if nested:
        if layer_type not in nested:
            raise ValueError(f"rope_from_hf_config: this config has RoPE parameters per layer type {nested}: pass "
                             f"layer_type= one of them, got {layer_type!r}")
        return dict(params[layer_type] or {})
    if layer_type is not None:
        raise ValueError(f"rope_from_hf_config: layer_type={layer_type!r}, but the config has one set of RoPE "
                         "parameters for every layer (leave layer_type None)")
    return params


def rope_setup(config: Mapping[str, Any], *, layer_type: str | None = None) -> tuple[float, int, int, RopeScaling]:
    """(base, rotary_dim, head_dim, `RopeScaling`) of a Hugging Face model's rotary embedding, read as
    transformers reads it (see the module docstring; not for the `proportional` type, see
    `rope_from_hf_config`)."""
    params = _rope_parameters(config, layer_type)
    model_type = config.get("model_type")
    rope_type = params.pop("rope_type", params.pop("type", "default"))
    if model_type == "phi3" and rope_type in PHI3_ALIASES:  # Phi3Config: legacy "su" / "yarn" are LongRoPE
        rope_type = "longrope"
    # GPTNeoXConfig: rope_parameters' own values, else rotary_emb_base and rotary_pct (default 0.25), and no
    # top-level rope_theta or partial_rotary_factor; the other families: the top-level rope_theta and
    # partial_rotary_factor (default 1)
    neox = model_type == "gpt_neox"
    base_key, partial_key, partial_default = (("rotary_emb_base", "rotary_pct", 0.25) if neox else
                                              ("rope_theta", "partial_rotary_factor", 1.0))
    base = params.pop("rope_theta", None)
    if base is None:
        base = config.get(base_key)
    partial = params.pop("partial_rotary_factor", None)
    if partial is None:
        partial = config.get(partial_key, partial_default)
    if base is None:
        raise ValueError("rope_from_hf_config: the gpt_neox config gives no RoPE base (rope_theta in rope_parameters, "
                         "or rotary_emb_base; transformers' GPTNeoXConfig does not read a top-level rope_theta)" if neox
                         else "rope_from_hf_config: the config gives no RoPE base (rope_theta in rope_parameters or "
                         "at the top level; rotary_emb_base is GPT-NeoX's only)")
    for key, used in (("rope_theta", base), ("partial_rotary_factor", partial)) if neox else ():
        if config.get(key) is not None and config[key] != used:
            raise ValueError(f"rope_from_hf_config: the gpt_neox config has a top-level {key}={config[key]!r}, "
                             f"which transformers' GPTNeoXConfig does not read: it uses {used!r} (rope_parameters, "
                             "else rotary_emb_base / rotary_pct). Remove one of the two")
    if isinstance(partial, bool) or not isinstance(partial, (int, float)) or not 0 < partial <= 1:
        raise ValueError(f"rope_from_hf_config: partial_rotary_factor (GPT-NeoX: rotary_pct) must be a number in "
                         f"(0, 1], got {partial!r}")
    head_dim = config.get("qk_rope_head_dim") or config.get("head_dim") or \
        config["hidden_size"] // config["num_attention_heads"]
    if rope_type == "proportional":
        raise ValueError("rope_setup: the 'proportional' type is p-RoPE (posenc/p_rope.py), not a RopeScaling")
    if model_type in _FULL_ROTARY and partial != 1:
        raise ValueError(f"rope_from_hf_config: the {model_type} config has partial_rotary_factor={partial!r}, which "
                         f"transformers' {model_type} model cannot apply: its default RoPE ignores it (every dimension "
                         "rotates) and its scaled types rotate fewer dimensions than its apply_rotary_pos_emb "
                         "multiplies (a shape error). Remove it, or set it to 1")
    rotary_dim = int(head_dim * partial)
    max_len = config.get("max_position_embeddings")
    if rope_type in ("llama3", "yarn", "longrope") and "original_max_position_embeddings" in config:
        params["original_max_position_embeddings"] = config["original_max_position_embeddings"]  # Phi-3 first
    if rope_type != "default":
        params["rope_type"] = rope_type
    scaling = RopeScaling.from_hf(params, max_position_embeddings=max_len, model_type=model_type)
    return float(base), rotary_dim, int(head_dim), scaling


def rope_from_hf_config(config: Mapping[str, Any], *, layer_type: str | None = None,
                        seq_len: int | None = None) -> tuple[np.ndarray, float]:
    """(inv_freq float64 `[rotary_dim / 2]`, attention factor) of a Hugging Face model's rotary embedding.

    Args:
      config: the model's whole `config.json` as a dict.
      layer_type: for configs with RoPE per layer type (Gemma 3): `full_attention` or `sliding_attention`.
      seq_len: the current sequence length, for the length-dependent types (dynamic NTK, LongRoPE's
        switch from short to long factors); None means within the original length, as at initialisation.

    Raises:
      ValueError: an unknown key or rope type, a missing base, or a missing / superfluous layer_type.
    """
    params = _rope_parameters(config, layer_type)
    if params.get("rope_type", params.get("type")) == "proportional":
        params.pop("rope_type", None)
        params.pop("type", None)
        base = params.pop("rope_theta", config.get("rope_theta"))
        partial = params.pop("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
        head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
        factor = float(params.pop("factor", 1.0))
        if params:
            raise ValueError(f"rope_from_hf_config: unknown keys {sorted(params)} for rope_type 'proportional'")
        if base is None:
            raise ValueError("rope_from_hf_config: the config gives no RoPE base (rope_theta)")
        inv = default_inv_freq(head_dim, float(base)) * np.asarray(p_rope_mask(head_dim // 2, head_dim, partial))
        return inv / factor, 1.0
    base, rotary_dim, _, scaling = rope_setup(config, layer_type=layer_type)
    if seq_len is None and scaling.kind in ("longrope", "dynamic_ntk"):  # as at initialisation
        seq_len = scaling.original_max_len
    inv_freq, attention_factor = rope_frequencies(rotary_dim, base=base, scaling=scaling, seq_len=seq_len)
    return inv_freq, float(attention_factor)


# ---------------------------------------------------------------------------------------------------------
# Checkpoints

FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gpt_neox")
_GATED = ("llama", "mistral", "qwen2", "qwen3", "phi3")  # SwiGLU MLP, RMSNorm, sequential residual
_NEOX_ACTS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh"}
# Checkpoint tensors that are buffers, not weights (older GPT-NeoX exports).
_BUFFERS = ("rotary_emb.inv_freq", "attention.bias", "attention.masked_bias")


def read_config(path) -> dict[str, Any]:
    path = pathlib.Path(path).expanduser()
    try:
        return json.loads((path / "config.json").read_text())
    except FileNotFoundError:
        raise ValueError(f"{str(path)!r} is not a Hugging Face checkpoint directory: it has no config.json") from None


def _attention_window(config: Mapping[str, Any], family: str) -> int:
    """The sliding window every layer attends within (0: full attention), where transformers applies one.

    * llama, gpt_neox: none. Their transformers configs have no sliding window, so a `sliding_window` key in
      config.json is not read (ignored here as there).
    * mistral: `sliding_window` on every layer, null meaning full attention. MistralConfig defaults a missing key
      to 4096, so a config without it is an error here rather than a guess.
    * phi3: `sliding_window` on every layer, missing or null meaning full attention (Phi3Config's default None).
    * qwen2, qwen3: `sliding_window` only when `use_sliding_window` is true, on the layers `layer_types` marks
      "sliding_attention" (when absent: layers i >= `max_window_layers`, as Qwen2Config / Qwen3Config derive
      them). posenc has one window for every layer: windows on some layers only are an error.
    """
    if family in ("llama", "gpt_neox"):
        return 0
    if family == "mistral" and "sliding_window" not in config:
        raise ValueError("load_pretrained: the mistral config has no sliding_window (transformers' MistralConfig "
                         "defaults it to 4096; null means full attention)")
    window = config.get("sliding_window")
    if family in ("qwen2", "qwen3"):
        n = config["num_hidden_layers"]
        if not config.get("use_sliding_window", False):
            window = None  # Qwen2Config / Qwen3Config: sliding_window if use_sliding_window else None
        elif "sliding_window" not in config:
            raise ValueError(f"load_pretrained: the {family} config has use_sliding_window=true and no sliding_window "
                             "(transformers defaults it to 4096)")
        types = config.get("layer_types")
        if types is None:
            if window is not None and "max_window_layers" not in config:
                raise ValueError(f"load_pretrained: the {family} config has use_sliding_window=true and neither "
                                 "layer_types nor max_window_layers (the layers i >= max_window_layers slide; "
                                 "transformers defaults it to 28)")
            types = ["sliding_attention" if window is not None and i >= config["max_window_layers"] else
                     "full_attention" for i in range(n)]
        if len(types) != n or not set(types) <= {"full_attention", "sliding_attention"}:
            raise ValueError(f"load_pretrained: {family} layer_types must be {n} (num_hidden_layers) of "
                             f"'full_attention' / 'sliding_attention', got {types!r}")
        if "sliding_attention" in types and window is None:
            raise ValueError(f"load_pretrained: the {family} config's layer_types has sliding_attention layers but its "
                             "sliding window is null (use_sliding_window false or sliding_window null)")
        if len(set(types)) > 1:
            raise ValueError(f"load_pretrained: {family} with sliding windows on some layers only (layer_types "
                             f"{types}) is not supported: posenc has one attention window for every layer")
        if types and types[0] == "full_attention":
            window = None
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window <= 0):
        raise ValueError(f"load_pretrained: sliding_window must be a positive integer or null, got {window!r}")
    return int(window or 0)


def model_config_from_hf(config: Mapping[str, Any], *, dtype: str | None = None) -> ModelConfig:
    """The posenc `ModelConfig` of a Hugging Face config of one of `FAMILIES`.

    The attention window is `sliding_window` where transformers applies it (`_attention_window`: Mistral, Phi-3,
    Qwen2 / Qwen3 with `use_sliding_window`), and full attention for Llama and GPT-NeoX, whose transformers
    models ignore a `sliding_window` key.

    Raises:
      ValueError: another family, an activation or attention layout the family does not have in posenc
        (named), sliding windows on some layers only.
    """
    family = config.get("model_type")
    if family not in FAMILIES:
        raise ValueError(f"load_pretrained: model_type={family!r} is not supported; supported: {FAMILIES}")
    act = config.get("hidden_act", "gelu" if family == "gpt_neox" else "silu")  # the transformers configs' defaults
    if family in _GATED:
        if act != "silu":
            raise ValueError(f"load_pretrained: {family} with hidden_act={act!r} is not supported (posenc's gated MLP "
                             "is SwiGLU: silu)")
        mlp_act = "swiglu"
    else:
        if act not in _NEOX_ACTS:
            raise ValueError(f"load_pretrained: gpt_neox with hidden_act={act!r} is not supported; "
                             f"supported: {sorted(_NEOX_ACTS)}")
        mlp_act = _NEOX_ACTS[act]
    window = _attention_window(config, family)
    base, rotary_dim, head_dim, scaling = rope_setup(config)
    eps_key = "layer_norm_eps" if family == "gpt_neox" else "rms_norm_eps"
    if eps_key not in config:
        raise ValueError(f"load_pretrained: config.json has no {eps_key} (the {family} norms' epsilon; transformers "
                         "saves it with every checkpoint)")
    heads = config["num_attention_heads"]
    bias = bool(config.get("attention_bias", family == "gpt_neox"))
    return ModelConfig(
        vocab_size=config["vocab_size"], d_model=config["hidden_size"], num_layers=config["num_hidden_layers"],
        num_heads=heads, num_kv_heads=config.get("num_key_value_heads") or heads, head_size=head_dim,
        mlp_dim=config["intermediate_size"], posenc="rope", max_len=config["max_position_embeddings"],
        rope_base=base, rope_layout="half", rope_fraction=rotary_dim / head_dim, rope_scaling=scaling,
        mlp_act=mlp_act, norm="layer" if family == "gpt_neox" else "rms",
        norm_eps=float(config[eps_key]),
        qkv_bias=family == "qwen2" or bias, out_bias=bias, mlp_bias=bool(config.get("mlp_bias", family == "gpt_neox")),
        qk_norm=family == "qwen3", parallel_residual=family == "gpt_neox" and config.get("use_parallel_residual", True),
        tie_embeddings=bool(config.get("tie_word_embeddings", False)), attn_window=int(window or 0),
        dtype=dtype or "float32", param_dtype=dtype or "float32",
    )


def _read_tensors(path: pathlib.Path) -> dict[str, Any]:
    """Every tensor of the checkpoint's safetensors (one file, or the shards of its index) as JAX arrays."""
    from safetensors import safe_open  # noqa: PLC0415 — the `hf` extra

    index = path / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (path / "model.safetensors").exists():
        files = ["model.safetensors"]
    else:
        raise ValueError(f"{str(path)!r} has no model.safetensors or model.safetensors.index.json")
    tensors = {}
    for name in files:
        with safe_open(str(path / name), framework="flax") as f:
            for key in f.keys():
                tensors[key] = f.get_tensor(key)
    return tensors


def _hf_weights(cfg: ModelConfig, family: str, tensors: dict[str, Any]) -> dict[tuple, Any]:
    """posenc parameter path → array (kernels transposed to `[in, out]`, fused projections laid out as
    posenc's `qkv` = [q heads; k heads; v heads]), popping what it uses from `tensors`."""
    import jax.numpy as jnp  # noqa: PLC0415

    def take(key):
        if key not in tensors:
            raise ValueError(f"load_pretrained: the checkpoint has no tensor {key!r}")
        return tensors.pop(key)

    def kernel(key):
        return jnp.asarray(take(key)).T

    n, h = cfg.num_heads, cfg.head_dim
    out: dict[tuple, Any] = {}
    if family == "gpt_neox":
        pre, layers = "gpt_neox.", "gpt_neox.layers"
        out[("embed", "embedding")] = take(pre + "embed_in.weight")
        out[("final_norm", "scale")] = take(pre + "final_layer_norm.weight")
        out[("final_norm", "bias")] = take(pre + "final_layer_norm.bias")
        head = "embed_out.weight"
    else:
        pre, layers = "model.", "model.layers"
        out[("embed", "embedding")] = take(pre + "embed_tokens.weight")
        out[("final_norm", "scale")] = take(pre + "norm.weight")
        head = "lm_head.weight"
    if not cfg.tie_embeddings:
        out[("head", "kernel")] = kernel(head)
    tensors.pop(head, None)  # a tied checkpoint may store the head as well
    for i in range(cfg.num_layers):
        p, blk = f"{layers}.{i}.", ("blocks", i)
        if family == "gpt_neox":
            w = jnp.asarray(take(p + "attention.query_key_value.weight")).reshape(n, 3, h, cfg.d_model)
            out[blk + ("attn", "qkv", "kernel")] = jnp.concatenate([w[:, j].reshape(n * h, -1) for j in range(3)]).T
            if cfg.qkv_bias:
                b = jnp.asarray(take(p + "attention.query_key_value.bias")).reshape(n, 3, h)
                out[blk + ("attn", "qkv", "bias")] = jnp.concatenate([b[:, j].reshape(-1) for j in range(3)])
            out[blk + ("attn", "out", "kernel")] = kernel(p + "attention.dense.weight")
            if cfg.out_bias:
                out[blk + ("attn", "out", "bias")] = take(p + "attention.dense.bias")
            for ours, theirs in (("norm1", "input_layernorm"), ("norm2", "post_attention_layernorm")):
                out[blk + (ours, "scale")] = take(p + theirs + ".weight")
                out[blk + (ours, "bias")] = take(p + theirs + ".bias")
            out[blk + ("fc", "kernel")] = kernel(p + "mlp.dense_h_to_4h.weight")
            out[blk + ("proj", "kernel")] = kernel(p + "mlp.dense_4h_to_h.weight")
            if cfg.mlp_bias:
                out[blk + ("fc", "bias")] = take(p + "mlp.dense_h_to_4h.bias")
                out[blk + ("proj", "bias")] = take(p + "mlp.dense_4h_to_h.bias")
            continue
        a = p + "self_attn."
        if family == "phi3":
            out[blk + ("attn", "qkv", "kernel")] = kernel(a + "qkv_proj.weight")
            gate, up = jnp.split(jnp.asarray(take(p + "mlp.gate_up_proj.weight")), 2, axis=0)
            out[blk + ("gate", "kernel")], out[blk + ("fc", "kernel")] = gate.T, up.T
        else:
            out[blk + ("attn", "qkv", "kernel")] = jnp.concatenate(
                [jnp.asarray(take(a + f"{x}_proj.weight")) for x in "qkv"]).T
            if cfg.qkv_bias:
                out[blk + ("attn", "qkv", "bias")] = jnp.concatenate([jnp.asarray(take(a + f"{x}_proj.bias")) for x in "qkv"])
            out[blk + ("gate", "kernel")] = kernel(p + "mlp.gate_proj.weight")
            out[blk + ("fc", "kernel")] = kernel(p + "mlp.up_proj.weight")
        out[blk + ("attn", "out", "kernel")] = kernel(a + "o_proj.weight")
        if cfg.out_bias:
            out[blk + ("attn", "out", "bias")] = take(a + "o_proj.bias")
        if cfg.qk_norm:
            out[blk + ("attn", "q_norm", "scale")] = take(a + "q_norm.weight")
            out[blk + ("attn", "k_norm", "scale")] = take(a + "k_norm.weight")
        out[blk + ("proj", "kernel")] = kernel(p + "mlp.down_proj.weight")
        if cfg.mlp_bias:
            for ours, theirs in (("gate", "gate_proj"), ("fc", "up_proj"), ("proj", "down_proj")):
                out[blk + (ours, "bias")] = take(p + f"mlp.{theirs}.bias")
        out[blk + ("norm1", "scale")] = take(p + "input_layernorm.weight")
        out[blk + ("norm2", "scale")] = take(p + "post_attention_layernorm.weight")
    return out


def load_pretrained(path, *, dtype: str | None = None):
    """A posenc `Transformer` holding a local Hugging Face checkpoint: `config.json` plus safetensors (one
    file, or shards listed in `model.safetensors.index.json`), of the families in `FAMILIES`.

    The model's RoPE is the checkpoint's own (base, partial rotary, scaling: `rope_setup`); `model(tokens)`
    gives transformers' logits to float32 precision (tests/test_hf_models.py). `dtype`: None keeps float32
    parameters and activations; 'bfloat16' loads the weights as bf16 and multiplies in bf16, the activations
    between products in bf16 on a GPU and float32 on a CPU (`model.activation_dtype`); softmax, norms'
    statistics and the logits in float32.

    Raises:
      ValueError: not a checkpoint directory, an unsupported family or feature (named), a missing tensor,
        or checkpoint tensors the model has no place for (listed).
    """
    import jax  # noqa: PLC0415
    import jax.numpy as jnp  # noqa: PLC0415
    from flax import nnx  # noqa: PLC0415

    from posenc.model import Transformer  # noqa: PLC0415

    path = pathlib.Path(path).expanduser()
    config = read_config(path)
    if dtype not in (None, "float32", "bfloat16"):
        raise ValueError(f"load_pretrained: dtype must be None, 'float32' or 'bfloat16', got {dtype!r}")
    cfg = model_config_from_hf(config, dtype=dtype)
    tensors = _read_tensors(path)
    weights = _hf_weights(cfg, config["model_type"], tensors)
    leftover = sorted(k for k in tensors if not k.endswith(_BUFFERS))
    if leftover:
        raise ValueError(f"load_pretrained: checkpoint tensors posenc has no place for: {leftover[:8]}"
                         f"{' …' if len(leftover) > 8 else ''}")
    graphdef, abstract = nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
    flat = nnx.to_flat_state(abstract)
    pdtype = jnp.dtype(cfg.param_dtype)
    values = []
    for key, var in flat:
        if key not in weights:
            raise ValueError(f"load_pretrained: no checkpoint tensor for posenc parameter {'.'.join(map(str, key))}")
        value = jnp.asarray(weights.pop(key), pdtype)
        if value.shape != var.shape:
            raise ValueError(f"load_pretrained: {'.'.join(map(str, key))} has shape {value.shape} in the checkpoint, "
                             f"posenc expects {var.shape}")
        values.append((key, var.replace(value) if hasattr(var, "replace") else value))
    state = nnx.from_flat_state(values)
    return nnx.merge(graphdef, jax.tree.map(lambda x: x, state))


# ---------------------------------------------------------------------------------------------------------
# Text


def load_tokenizer(path):
    """The checkpoint's `tokenizer.json`, read with the `tokenizers` package, adding the special tokens
    transformers adds: where the checkpoint's `tokenizer_config.json` sets `add_bos_token` or `add_eos_token`,
    transformers rebuilds the post-processor from the two flags (a missing one takes its tokenizer class's
    default: BOS True for the Llama and CodeLlama classes, else False), whatever
    tokenizer.json's own post-processor adds (5.x: `TokenizersBackend.update_post_processor`; 4.x did so in
    its Llama and GPT-NeoX tokenizers). A tokenizer.json whose post-processor already adds what the flags ask
    is kept as it is.

    Raises:
      ValueError: no tokenizer.json; a flag asks for a BOS / EOS token that neither tokenizer_config.json nor
        special_tokens_map.json names, or that tokenizer.json lacks.
    """
    from tokenizers import Tokenizer  # noqa: PLC0415 — the `hf` extra
    from tokenizers.processors import TemplateProcessing  # noqa: PLC0415

    path = pathlib.Path(path).expanduser()
    file = path / "tokenizer.json"
    if not file.exists():
        raise ValueError(f"{str(path)!r} has no tokenizer.json (the checkpoint's tokenizer, read with the "
                         "`tokenizers` package)")
    tokenizer = Tokenizer.from_file(str(file))
    config_file, map_file = path / "tokenizer_config.json", path / "special_tokens_map.json"
    config = json.loads(config_file.read_text()) if config_file.exists() else {}
    if "add_bos_token" not in config and "add_eos_token" not in config:
        return tokenizer
    named = json.loads(map_file.read_text()) if map_file.exists() else {}
    # a flag left out takes its tokenizer class's default: True for BOS in transformers' Llama and CodeLlama
    # tokenizers (`add_bos_token=True` in their __init__), False otherwise
    llama = str(config.get("tokenizer_class", "")).startswith(("LlamaTokenizer", "CodeLlamaTokenizer"))
    defaults = {"bos": llama, "eos": False}
    specials = {}  # "bos" / "eos" -> (token, id), for the flags that are set
    for which in ("bos", "eos"):
        if not config.get(f"add_{which}_token", defaults[which]):
            continue
        token = config.get(f"{which}_token", named.get(f"{which}_token"))
        if isinstance(token, dict):  # a serialized AddedToken
            token = token.get("content")
        token_id = tokenizer.token_to_id(token) if isinstance(token, str) else None
        if token_id is None:
            raise ValueError(f"{str(config_file)!r}: add_{which}_token is true but {which}_token={token!r} is not a "
                             "token of tokenizer.json")
        specials[which] = (token, token_id)
    probe = tokenizer.encode("a", add_special_tokens=True)  # what tokenizer.json adds: [lead…] text [trail…]
    text = [i for i, m in enumerate(probe.special_tokens_mask) if not m]
    lead, trail = probe.ids[:text[0]], probe.ids[text[-1] + 1:]
    if (lead, trail) == ([specials["bos"][1]] if "bos" in specials else [],
                         [specials["eos"][1]] if "eos" in specials else []):
        return tokenizer
    bos = f"{specials['bos'][0]}:0 " if "bos" in specials else ""
    eos = f" {specials['eos'][0]}:0" if "eos" in specials else ""
    tokenizer.post_processor = TemplateProcessing(single=f"{bos}$A:0{eos}",
                                                  special_tokens=list(dict.fromkeys(specials.values())))
    return tokenizer


def prompt_ids(tokenizer, text: str) -> tuple[np.ndarray, int]:
    """(token ids `[n]` int32 of a generation prompt, the number of special tokens ahead of the text): the ids
    are those of transformers' `tokenizer(text)`, with the special tokens the post-processor (`load_tokenizer`'s) adds
    (Llama's and Mistral's BOS; none for Qwen and GPT-NeoX), so that decoding starts from the context the model
    was trained with; the count lets a caller print the text without them."""
    enc = tokenizer.encode(text, add_special_tokens=True)
    lead = next((i for i, m in enumerate(enc.special_tokens_mask) if not m), len(enc.ids))
    return np.asarray(enc.ids, np.int32), lead


def tokenize(tokenizer, text: str) -> tuple[np.ndarray, np.ndarray]:
    """(token ids `[n]` int32, UTF-8 bytes of the text each token covers `[n]`), without special tokens: the
    bytes sum to those of the text the tokens cover, so that Σ NLL / Σ bytes is bits per byte. Evaluation
    windows and passkey prompts are cut from these ids, so none starts with a BOS token (jquesnelle/yarn's
    eval/perplexity.py prepends the tokenizer's BOS to each document, as `tokenizer(text)` per window would for
    Llama and Mistral)."""
    enc = tokenizer.encode(text, add_special_tokens=False)
    ids = np.asarray(enc.ids, np.int32)
    starts = [a for a, _ in enc.offsets] + [len(text)]
    # a token's bytes: from its start to the next token's start (whitespace a pre-tokenizer drops is counted)
    nbytes = np.asarray([len(text[starts[i]:starts[i + 1]].encode("utf-8")) for i in range(len(ids))], np.int64)
    return ids, nbytes
