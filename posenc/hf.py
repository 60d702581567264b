"""Hugging Face model configs: a model's rotary embedding from its whole `config.json`.

`rope_from_hf_config(config)` gives exactly the inverse frequencies and cos/sin scale of the model's rotary
embedding in transformers 5.x (`tests/test_hf.py` checks them against values transformers 5.23 computed
with each family's own `<Family>RotaryEmbedding`, `scripts/make_hf_config_reference.py`). It reads, as
transformers does:

  * the RoPE parameters: v5 `rope_parameters`, legacy `rope_scaling`, or per-layer-type dicts
    (`{"full_attention": {...}, "sliding_attention": {...}}`, chosen by `layer_type`);
  * the base: `rope_theta` (in the parameters or at the top level), GPT-NeoX's `rotary_emb_base`, and
    Gemma 3's `rope_local_base_freq` for its sliding layers (its legacy `rope_scaling` applies to the full
    layers only);
  * the rotary dimension: `head_dim` (else hidden_size / num_attention_heads), DeepSeek's
    `qk_rope_head_dim`, times `partial_rotary_factor` or GPT-NeoX's `rotary_pct`;
  * the original length: `original_max_position_embeddings` at the top level first (Phi-3), then in the
    parameters, then `max_position_embeddings`; LongRoPE without `factor` uses max / original;
  * the `proportional` type (p-RoPE, posenc/p_rope.py).

Keys transformers accepts and does not use are named here and ignored as it ignores them: LongRoPE's
`short_mscale` / `long_mscale` (transformers 5 derives the attention factor from `factor`). Any other
unknown key or type is an error naming it, and a missing base is an error: nothing is defaulted silently.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from posenc.p_rope import p_rope_mask
from posenc.rope_scaling import RopeScaling, default_inv_freq, rope_frequencies

LAYER_TYPES = ("full_attention", "sliding_attention")
IGNORED_BY_TRANSFORMERS = {"longrope": ("short_mscale", "long_mscale")}


def _rope_parameters(config: Mapping[str, Any], layer_type: str | None) -> dict[str, Any]:
    """The RoPE parameter dict of (a layer type of) the model, with Gemma 3's legacy fields folded in."""
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    params = dict(params)
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
    rope_type = params.pop("rope_type", params.pop("type", "default"))
    base = params.pop("rope_theta", None)
    if base is None:
        base = config.get("rope_theta", config.get("rotary_emb_base"))
    if base is None:
        raise ValueError("rope_from_hf_config: the config gives no RoPE base (rope_theta in rope_parameters or "
                         "at the top level, or rotary_emb_base)")
    partial = params.pop("partial_rotary_factor", None)
    if partial is None:
        partial = config.get("partial_rotary_factor", config.get("rotary_pct", 1.0))
    head_dim = config.get("qk_rope_head_dim") or config.get("head_dim") or \
        config["hidden_size"] // config["num_attention_heads"]
    for key in IGNORED_BY_TRANSFORMERS.get("longrope" if rope_type in ("longrope", "su") else rope_type, ()):
        params.pop(key, None)

    if rope_type == "proportional":
        factor = float(params.pop("factor", 1.0))
        if params:
            raise ValueError(f"rope_from_hf_config: unknown keys {sorted(params)} for rope_type 'proportional'")
        inv = default_inv_freq(head_dim, float(base)) * np.asarray(p_rope_mask(head_dim // 2, head_dim, partial))
        return inv / factor, 1.0

    rotary_dim = int(head_dim * partial)
    max_len = config.get("max_position_embeddings")
    if rope_type in ("llama3", "yarn", "longrope", "su") and "original_max_position_embeddings" in config:
        params["original_max_position_embeddings"] = config["original_max_position_embeddings"]  # Phi-3 first
    if rope_type in ("longrope", "su") and params.get("factor") is None:  # Phi-3: the ratio of the lengths
        params["factor"] = max_len / params.get("original_max_position_embeddings", max_len)
    if rope_type != "default":
        params["rope_type"] = rope_type
    scaling = RopeScaling.from_hf(params, max_position_embeddings=max_len)
    if seq_len is None and scaling.kind in ("longrope", "dynamic_ntk"):  # as at initialisation
        seq_len = scaling.original_max_len
    inv_freq, attention_factor = rope_frequencies(rotary_dim, base=float(base), scaling=scaling, seq_len=seq_len)
    return inv_freq, float(attention_factor)
