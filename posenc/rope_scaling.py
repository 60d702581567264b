"""RoPE frequencies and the context-extension family that rescales them.

Every method here is a function of the rotary dimension d, the base b and a `RopeScaling`, returning the
per-pair inverse frequencies θ_i (`inv_freq`, shape `[d/2]`, or `[num_layers, d/2]` for per-layer LongRoPE
factors) and an `attention_factor` that multiplies cos and sin (so the attention logits by its square).
The unscaled frequencies are θ_i = b^(-2i/d), i = 0 … d/2 − 1 (Su et al. 2021, arXiv 2104.09864).

| kind          | formula (s = factor, L = original_max_len)                          | reference                      |
|---------------|----------------------------------------------------------------------|--------------------------------|
| `none`        | θ_i                                                                  | RoFormer, arXiv 2104.09864     |
| `linear`      | θ_i / s  (Position Interpolation: position m ↦ m / s)                | Chen et al., arXiv 2306.15595  |
| `ntk`         | b' = b · s^(d/(d−2))                                                 | bloc97 (2023); YaRN §3.1       |
| `dynamic_ntk` | b' = b · (s·T/L − (s−1))^(d/(d−2)), T = max(seq_len, L)              | HF `_compute_dynamic_ntk_…`    |
|               | (s is a slope here: even s = 1 rescales past L, as in HF)             |                                |
| `yarn`        | NTK-by-parts ramp between the dims of β_fast and β_slow;             | Peng et al., arXiv 2309.00071  |
|               | attention factor 0.1·ln s + 1                                        |                                |
|               | (the ramp is linear in the pair index i, as in the reference code    |                                |
|               | and HF; the paper's γ is linear in r = L/λ_i, which interpolates the |                                |
|               | pairs inside the ramp more)                                          |                                |
| `longrope`    | θ_i / λ_i with λ = short_factor (T ≤ L) or long_factor (T > L);      | Ding et al., arXiv 2402.13753  |
|               | attention factor sqrt(1 + ln s / ln L); with T > L, positions < n̂    |                                |
|               | keep θ_i and no attention factor (`unscaled_positions`)              |                                |
| `llama3`      | θ_i for λ_i < L/high_freq_factor, θ_i/s for λ_i > L/low_freq_factor, | Llama 3.1 (Meta, 2024)         |
|               | smooth interpolation between                                         |                                |

`dynamic=True` (for `linear`, `ntk`, `yarn`) replaces s by max(1, seq_len / L) — YaRN §3.3 "Dynamic Scaling".

The frequencies are computed in float64 NumPy from static Python values: they are exact references and
constants under `jax.jit`. To sweep a scaling without recompiling, compute `inv_freq` here outside the
jitted function and pass it in as an array (see `posenc.rope.apply_rope`).

Reference implementation matched: Hugging Face transformers `modeling_rope_utils.py` (the
`_compute_*_parameters` functions), and the YaRN / LongRoPE reference code it was taken from.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Mapping

import numpy as np

KINDS = ("none", "linear", "ntk", "dynamic_ntk", "yarn", "longrope", "llama3")
DYNAMIC_KINDS = ("linear", "ntk", "yarn")  # kinds that accept `dynamic=True`
_NEEDS_ORIGINAL_LEN = ("dynamic_ntk", "yarn", "longrope", "llama3")

# Hugging Face `rope_type` names -> posenc kinds: the types of transformers' `ROPE_INIT_FUNCTIONS` ("default" is the
# unscaled RoPE). transformers has no "ntk" type: posenc's `kind="ntk"` has no Hugging Face form.
_HF_TYPES = {
    "default": "none",
    "linear": "linear",
    "dynamic": "dynamic_ntk",
    "yarn": "yarn",
    "longrope": "longrope",
    "llama3": "llama3",
}
# Phi3Config (model_type "phi3" only) renames the legacy types "su" and "yarn" of early Phi-3 configs to "longrope",
# and accepts no other scaled type
PHI3_ALIASES = ("su", "yarn")
# The keys each type accepts besides `rope_type` / `type`, `rope_theta` and `partial_rotary_factor`: the required
# and optional keys of transformers' `_validate_<type>_rope_parameters`, less those its rotary embedding then
# ignores (dynamic's `original_max_position_embeddings`: taken only where it equals max_position_embeddings, in
# `from_hf`; linear's and llama3's `attention_factor`). transformers only warns about any other key and ignores
# it; `from_hf` refuses it, naming it.
HF_KEYS = {
    "default": (),
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor", "original_max_position_embeddings", "attention_factor", "beta_fast", "beta_slow", "mscale",
             "mscale_all_dim", "truncate"),
    "longrope": ("short_factor", "long_factor", "original_max_position_embeddings", "attention_factor", "factor"),
    "llama3": ("factor", "original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
}
_HF_COMMON_KEYS = ("rope_type", "type", "rope_theta", "partial_rotary_factor")
# LongRoPE's cos/sin scales of Phi-3.5-MoE: its `PhimoeRotaryEmbedding` multiplies cos and sin by `long_mscale` past
# original_max_position_embeddings, else by `short_mscale`; Phi-3's LongRoPE (model_type "phi3") ignores them
LONGROPE_MSCALES = ("short_mscale", "long_mscale")
# the keys transformers requires of each type (a KeyError there): missing ones are an error, never defaulted
_HF_REQUIRED = {
    "linear": ("factor",), "dynamic": ("factor",), "yarn": ("factor",),
    "longrope": ("short_factor", "long_factor"),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}


def _as_tuple(value: Any, name: str) -> Any:
    """Lists / arrays of factors -> (nested) tuples of floats, so the dataclass stays hashable. `name` is the
    field's, for the error on anything but a `[r]` vector or a `[num_layers, r]` matrix of numbers."""
    if value is None:
        return None
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.ndim not in (1, 2):
        got = f"the scalar {value!r}" if arr is not None and arr.ndim == 0 else (
            f"shape {arr.shape}" if arr is not None else f"{type(value).__name__} {value!r:.80}")
        raise ValueError(f"RopeScaling.{name} must be a vector [rotary_dim // 2] or a matrix [num_layers, "
                         f"rotary_dim // 2] of numbers, got {got}")
    return tuple(map(float, arr)) if arr.ndim == 1 else tuple(tuple(map(float, row)) for row in arr)


def _is_number(value: Any) -> bool:
    """A real number (Python or NumPy), not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


@dataclasses.dataclass(frozen=True)
class RopeScaling:
    """How RoPE frequencies are rescaled for contexts longer than the training length.

    Frozen and hashable: safe as a static argument of `jax.jit`.

    Attributes:
      kind: one of `KINDS`.
      factor: the scale s ≥ 1 (target length / original length).
      original_max_len: L, the context length the model was trained at. Required for `dynamic_ntk`,
        `yarn`, `longrope`, `llama3` and any `dynamic=True` scaling.
      dynamic: for `linear`, `ntk`, `yarn`: use s = max(1, seq_len / L) instead of `factor`.
      beta_fast, beta_slow: YaRN's rotation counts bounding the ramp (defaults 32 and 1).
      truncate: YaRN: floor/ceil the correction range to whole dimensions (as the reference code does).
      attention_factor: overrides the kind's default attention factor (YaRN's sqrt(1/t), LongRoPE's).
      mscale, mscale_all_dim: DeepSeek-style YaRN attention factor
        (0.1·mscale·ln s + 1) / (0.1·mscale_all_dim·ln s + 1), as in Hugging Face: only when both are set and
        non-zero; one alone is not read (the factor is then 0.1·ln s + 1). Finite and >= 0.
      short_factor, long_factor: LongRoPE rescale factors λ_i, `[d/2]` or per layer `[num_layers, d/2]`.
      low_freq_factor, high_freq_factor: Llama 3.1 band edges (defaults 1 and 4).
      unscaled_positions: LongRoPE's n̂: positions below it keep the unscaled θ_i (the initial tokens
        are not interpolated, LongRoPE §3.2), with the long factors only: `rope_inputs` gives n̂ at
        seq_len > original_max_len and 0 at seq_len <= original_max_len, where the short factors apply, as in
        microsoft/LongRoPE, where only the long-context search has a start-token count
        (evolution/dim_mono_n/dim_mono_n.py, `start_token = new_alpha[0]`) and the short factors are searched
        and used without one. Applied by `apply_rope(..., original_inv_freq=…)`: those positions take the
        original cos/sin, without the attention factor, as microsoft/LongRoPE's start-token search path does
        (rope/LlamaSPIScaledStartTokenRotaryEmbedding.py copies `cos_sin_origin`, the unscaled
        LlamaRotaryEmbedding's, over the first `start_token` positions of its cos/sin times mscale). Hugging
        Face's Phi-3 LongRoPE has no n̂.
    """

    kind: str = "none"
    factor: float = 1.0
    original_max_len: int | None = None
    dynamic: bool = False
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    truncate: bool = True
    attention_factor: float | None = None
    mscale: float | None = None
    mscale_all_dim: float | None = None
    short_factor: tuple | None = None
    long_factor: tuple | None = None
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    unscaled_positions: int = 0

    def __post_init__(self):
        for name in ("short_factor", "long_factor"):
            object.__setattr__(self, name, _as_tuple(getattr(self, name), name))
        if self.kind not in KINDS:
            raise ValueError(f"RopeScaling.kind must be one of {KINDS}, got {self.kind!r}")
        if not (_is_number(self.factor) and math.isfinite(self.factor) and self.factor >= 1):
            raise ValueError(f"RopeScaling.factor must be a finite number >= 1, got {self.factor!r}")
        for name in ("dynamic", "truncate"):  # a bool: any non-empty string, 'no' included, is truthy
            if not isinstance(getattr(self, name), (bool, np.bool_)):
                raise ValueError(f"RopeScaling.{name} must be True or False, got {getattr(self, name)!r}")
        for name in ("beta_fast", "beta_slow", "low_freq_factor", "high_freq_factor"):
            if not (_is_number(getattr(self, name)) and math.isfinite(getattr(self, name))):
                raise ValueError(f"RopeScaling.{name} must be a finite number, got {getattr(self, name)!r}")
        if self.dynamic and self.kind not in DYNAMIC_KINDS:
            raise ValueError(
                f"RopeScaling.dynamic=True is valid only for kind in {DYNAMIC_KINDS}, got kind={self.kind!r} "
                "(dynamic_ntk is dynamic by definition)"
            )
        if self.original_max_len is not None:
            if isinstance(self.original_max_len, bool) or not isinstance(self.original_max_len, (int, np.integer)) or self.original_max_len <= 0:
                raise ValueError(
                    f"RopeScaling.original_max_len must be a positive integer, got {self.original_max_len!r}"
                )
        elif self.kind in _NEEDS_ORIGINAL_LEN or self.dynamic:
            raise ValueError(
                f"RopeScaling.original_max_len is required for kind={self.kind!r}"
                f"{' with dynamic=True' if self.dynamic else ''} (the training context length)"
            )
        if not (0 < self.beta_slow < self.beta_fast):
            raise ValueError(
                f"RopeScaling.beta_fast and beta_slow must satisfy 0 < beta_slow < beta_fast, "
                f"got beta_fast={self.beta_fast!r}, beta_slow={self.beta_slow!r}"
            )
        if self.attention_factor is not None and not (_is_number(self.attention_factor)
                                                      and math.isfinite(self.attention_factor)
                                                      and self.attention_factor > 0):
            raise ValueError(f"RopeScaling.attention_factor must be a finite number > 0 when given, got "
                             f"{self.attention_factor!r}")
        for name in ("mscale", "mscale_all_dim"):  # 0.1·m·ln s + 1 stays >= 1: no zero or negative attention factor
            value = getattr(self, name)
            if value is not None and not (_is_number(value) and math.isfinite(value) and value >= 0):
                raise ValueError(f"RopeScaling.{name} must be a finite number >= 0 when given, got {value!r}")
        if not (0 < self.low_freq_factor < self.high_freq_factor):
            raise ValueError(
                "RopeScaling.low_freq_factor and high_freq_factor must satisfy 0 < low < high, "
                f"got low_freq_factor={self.low_freq_factor!r}, high_freq_factor={self.high_freq_factor!r}"
            )
        if isinstance(self.unscaled_positions, bool) or not isinstance(self.unscaled_positions, (int, np.integer)) \
                or self.unscaled_positions < 0:
            raise ValueError(f"RopeScaling.unscaled_positions must be an integer >= 0, got {self.unscaled_positions!r}")
        if self.unscaled_positions and self.kind != "longrope":
            raise ValueError(f"RopeScaling.unscaled_positions (LongRoPE's n̂) is valid only for kind='longrope', "
                             f"got kind={self.kind!r}")
        if self.kind == "longrope":
            for name in ("short_factor", "long_factor"):
                value = getattr(self, name)
                if value is None:
                    raise ValueError(f"RopeScaling.{name} is required for kind='longrope'")
                if not np.all((np.asarray(value) > 0) & np.isfinite(value)):
                    raise ValueError(f"RopeScaling.{name} must be all finite and > 0, got {value!r}")
            if np.shape(self.short_factor) != np.shape(self.long_factor):
                raise ValueError(
                    "RopeScaling.short_factor and long_factor must have the same shape, got "
                    f"{np.shape(self.short_factor)} and {np.shape(self.long_factor)}"
                )
            if self.attention_factor is None and self.factor > 1 and self.original_max_len < 2:
                raise ValueError(f"RopeScaling.original_max_len must be >= 2 for kind='longrope' at factor > 1 without "
                                 f"an attention_factor: its default sqrt(1 + ln s / ln L) divides by ln L, got "
                                 f"original_max_len={self.original_max_len!r}")

    @classmethod
    def from_hf(cls, d: Mapping[str, Any], *, max_position_embeddings: int | None = None,
                model_type: str | None = None) -> "RopeScaling":
        """Builds a `RopeScaling` from a Hugging Face `rope_scaling` / `rope_parameters` dict.

        Accepts `rope_type` (or the older `type`) and, per type, the keys transformers' validation accepts for
        it (`HF_KEYS`): `factor`, `original_max_position_embeddings`, `attention_factor`, `beta_fast`,
        `beta_slow`, `truncate`, `mscale`, `mscale_all_dim` (yarn), `short_factor`, `long_factor` (longrope),
        `low_freq_factor`, `high_freq_factor` (llama3). `rope_theta` (a `rope_parameters` key) is the base, not
        a scaling: it is accepted and not read (pass it to `rope_frequencies` as `base`). `partial_rotary_factor`
        sets the rotary dimension, which a `RopeScaling` does not hold: 1 is accepted, any other value is an
        error (read the whole config with `posenc.hf.rope_setup`).

        HF falls back to the model's `max_position_embeddings` when `original_max_position_embeddings` is absent;
        pass it as `max_position_embeddings` to reproduce that. yarn and longrope without `factor` take the
        ratio max_position_embeddings / original_max_position_embeddings (DeepSeek-V3, Phi-3), which needs
        `max_position_embeddings`.

        `model_type` (the config's) matters for Phi-3 only: with `model_type="phi3"` the legacy types "su" and
        "yarn" are "longrope", other scaled types are refused (as Phi3Config does), and LongRoPE's
        `short_mscale` / `long_mscale` are ignored, as Phi-3's rotary embedding ignores them. Any other
        model_type (Phi-3.5-MoE's "phimoe" scales cos/sin by them) or none gets an error for them.

        Raises:
          ValueError: a type transformers does not have ("ntk", and "su" outside Phi-3, included), a key the
            type does not accept (named, with the accepted ones), a missing required key, or a factor that is
            None with no lengths to derive it from.
        """
        hf_type = d.get("rope_type", d.get("type", "default"))
        if model_type == "phi3" and hf_type in PHI3_ALIASES:
            hf_type = "longrope"
        if hf_type not in _HF_TYPES:
            hint = ""
            if hf_type == "su":
                hint = (" ('su' is early Phi-3's name of 'longrope', which transformers accepts for model_type='phi3' "
                        "only: pass model_type='phi3' if this dict is a Phi-3 config's)")
            elif hf_type == "ntk":
                hint = (" (transformers has no 'ntk' type; its NTK scaling is 'dynamic'. posenc's own "
                        "RopeScaling(kind='ntk') has no Hugging Face form)")
            raise ValueError(f"RopeScaling.from_hf: rope_type must be one of {sorted(_HF_TYPES)}, got {hf_type!r}{hint}")
        if model_type == "phi3" and hf_type not in ("default", "longrope"):
            raise ValueError(f"RopeScaling.from_hf: a Phi-3 config (model_type='phi3') takes rope_type 'default' or "
                             f"'longrope' ('su' and 'yarn' being read as 'longrope'), as transformers' Phi3Config "
                             f"does; got {hf_type!r}")
        mscales = [k for k in LONGROPE_MSCALES if k in d]
        if mscales and hf_type == "longrope":
            if model_type != "phi3":
                raise ValueError(
                    f"RopeScaling.from_hf: LongRoPE's {mscales} are not supported for model_type={model_type!r}: "
                    "transformers' Phi-3.5-MoE (model_type 'phimoe') multiplies cos and sin by long_mscale past "
                    "original_max_position_embeddings and by short_mscale within it, which a RopeScaling does not "
                    "reproduce; only Phi-3 (model_type='phi3') ignores them")
            d = {k: v for k, v in d.items() if k not in LONGROPE_MSCALES}
        if hf_type == "dynamic" and "original_max_position_embeddings" in d:
            # transformers' validation takes the key, and its dynamic NTK scales from max_position_embeddings
            if d["original_max_position_embeddings"] != max_position_embeddings:
                raise ValueError(
                    f"RopeScaling.from_hf: rope_type 'dynamic' with original_max_position_embeddings="
                    f"{d['original_max_position_embeddings']!r}: transformers scales dynamic NTK from "
                    f"max_position_embeddings ({max_position_embeddings!r}) and does not read it, so the config "
                    "means another length than it says; make the two agree or drop the key")
            d = {k: v for k, v in d.items() if k != "original_max_position_embeddings"}
        allowed = HF_KEYS[hf_type]
        unknown = sorted(set(d) - set(allowed) - set(_HF_COMMON_KEYS))
        if unknown:
            raise ValueError(f"RopeScaling.from_hf: unknown keys {unknown} for rope_type {hf_type!r}; valid keys for it "
                             f"are {sorted(allowed + _HF_COMMON_KEYS)}")
        partial = d.get("partial_rotary_factor")
        if partial is not None and partial != 1:
            raise ValueError(f"RopeScaling.from_hf: partial_rotary_factor={partial!r} sets the rotary dimension, which "
                             "a RopeScaling does not hold: pass rotary_dim = int(head_dim * partial_rotary_factor) to "
                             "rope_frequencies, or read the whole config with posenc.hf.rope_setup / "
                             "rope_from_hf_config")
        kind = _HF_TYPES[hf_type]
        missing = [k for k in _HF_REQUIRED.get(hf_type, ()) if k not in d]
        if missing:
            raise ValueError(f"RopeScaling.from_hf: rope_type {hf_type!r} requires {missing} (as transformers does); "
                             f"got keys {sorted(d)}")
        original = d.get("original_max_position_embeddings", max_position_embeddings)
        if original is not None and kind != "none" and not (_is_number(original) and float(original).is_integer()):
            raise ValueError(f"RopeScaling.from_hf: original_max_position_embeddings (or max_position_embeddings) "
                             f"must be a whole number of positions, got {original!r}")  # int() would truncate it
        kwargs: dict[str, Any] = {"kind": kind}
        if kind != "none":
            factor = d.get("factor")
            if factor is None:
                if kind not in ("yarn", "longrope") or original is None or max_position_embeddings is None:
                    raise ValueError(
                        f"RopeScaling.from_hf: factor is None for rope_type {hf_type!r}, and there is no "
                        "max_position_embeddings / original_max_position_embeddings to take it from (yarn and "
                        "longrope only; pass max_position_embeddings=)")
                factor = max_position_embeddings / original  # DeepSeek-V3, Phi-3: the ratio of the lengths
            kwargs["factor"] = _hf_float("factor", factor)
        if original is not None and kind != "none":
            kwargs["original_max_len"] = int(original)
        for key in ("beta_fast", "beta_slow", "attention_factor", "mscale", "mscale_all_dim",
                    "low_freq_factor", "high_freq_factor"):
            if d.get(key) is not None:
                kwargs[key] = _hf_float(key, d[key])
        for key in ("truncate",):
            if d.get(key) is not None:
                if not isinstance(d[key], (bool, np.bool_)):  # a JSON bool: bool("false") is True
                    raise ValueError(f"RopeScaling.from_hf: {key} must be true or false, got {d[key]!r}")
                kwargs[key] = bool(d[key])
        for key in ("short_factor", "long_factor"):
            if d.get(key) is not None:
                kwargs[key] = d[key]
        return cls(**kwargs)

    def to_hf(self) -> dict[str, Any]:
        """The inverse of `from_hf`: a dict with `rope_type` and the keys transformers reads for the kind.

        Dynamic NTK's original length is the model's `max_position_embeddings`, outside this dict, and a static
        linear scaling's `original_max_len` (which it does not use) is not written.

        Raises:
          ValueError: a field that changes the frequencies and has no Hugging Face form (named): kind 'ntk',
            `dynamic=True`, `unscaled_positions` (LongRoPE's n̂), per-layer LongRoPE factors, and an
            `attention_factor` for a kind whose transformers type has none (none, linear, dynamic_ntk, llama3).
        """
        if self.kind == "ntk":
            raise ValueError("RopeScaling.to_hf: kind='ntk' has no Hugging Face form (transformers has no 'ntk' "
                             "rope type; its 'dynamic' type is posenc's kind='dynamic_ntk')")
        if self.dynamic:
            raise ValueError(f"RopeScaling.to_hf: dynamic=True (kind={self.kind!r}) has no Hugging Face form (its "
                             "length-dependent types are 'dynamic', posenc's kind='dynamic_ntk', and LongRoPE's "
                             "switch of factors)")
        if self.unscaled_positions:
            raise ValueError(f"RopeScaling.to_hf: unscaled_positions={self.unscaled_positions} (LongRoPE's n̂) has no "
                             "Hugging Face form (transformers' LongRoPE scales every position)")
        if self.kind == "longrope" and np.ndim(self.short_factor) != 1:
            raise ValueError(f"RopeScaling.to_hf: per-layer short_factor / long_factor (shape "
                             f"{np.shape(self.short_factor)}) have no Hugging Face form (one vector for every layer)")
        hf_type = {v: k for k, v in _HF_TYPES.items()}[self.kind]
        out: dict[str, Any] = {"rope_type": hf_type}
        if self.attention_factor is not None and "attention_factor" not in HF_KEYS[hf_type]:
            raise ValueError(f"RopeScaling.to_hf: transformers reads no attention_factor for rope_type "
                             f"{hf_type!r}, so attention_factor={self.attention_factor} has no Hugging Face form")
        if self.kind == "none":
            return out
        out["factor"] = self.factor
        if self.original_max_len is not None and "original_max_position_embeddings" in HF_KEYS[hf_type]:
            out["original_max_position_embeddings"] = self.original_max_len
        if self.attention_factor is not None:
            out["attention_factor"] = self.attention_factor
        if self.kind == "yarn":
            out.update(beta_fast=self.beta_fast, beta_slow=self.beta_slow, truncate=self.truncate)
            if self.mscale is not None:
                out["mscale"] = self.mscale
            if self.mscale_all_dim is not None:
                out["mscale_all_dim"] = self.mscale_all_dim
        if self.kind == "longrope":
            out.update(short_factor=np.asarray(self.short_factor).tolist(),
                       long_factor=np.asarray(self.long_factor).tolist())
        if self.kind == "llama3":
            out.update(low_freq_factor=self.low_freq_factor, high_freq_factor=self.high_freq_factor)
        return out


def _hf_float(key: str, value: Any) -> float:
    """A number of a Hugging Face rope dict as a float; anything else (a string, a list) is an error naming `key`."""
    if not _is_number(value):
        raise ValueError(f"RopeScaling.from_hf: {key} must be a number, got {value!r}")
    return float(value)


def default_inv_freq(rotary_dim: int, base: float = 10000.0) -> np.ndarray:
    """θ_i = base^(-2i/d), i = 0 … d/2 − 1, float64 `[d/2]` (RoFormer eq. 15).

    The slowest pair is θ_{d/2−1} = base^(−(d−2)/d), wavelength 2π·base^((d−2)/d) (47,117 positions at d = 64,
    base 1e4), not the base⁻¹ and 2π·base ≈ 63,000 that seed 004 gives: those are only the limit d → ∞."""
    return 1.0 / (float(base) ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim))


def yarn_correction_range(rotary_dim: int, base: float, original_max_len: int, beta_fast: float,
                          beta_slow: float, truncate: bool = True) -> tuple[float, float]:
    """YaRN's dimension range (low, high) between which the NTK-by-parts ramp runs.

    The pair index whose wavelength fits `r` rotations in the original context:
    dim(r) = d · ln(L / (2π r)) / (2 ln b). low = dim(β_fast), high = dim(β_slow), floored / ceiled
    when `truncate`, clipped to [0, d − 1] (YaRN reference code, `find_correction_range`). As there, when
    low > d − 1 (every pair completes more than β_fast turns in L: L ≳ 2π·β_fast·b²) the clipped range is
    inverted and the ramp interpolates every pair, where the paper's rule would keep them all.
    """

    def dim(rotations: float) -> float:
        return rotary_dim * math.log(original_max_len / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim(beta_fast), dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, rotary_dim - 1)


def yarn_get_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's sqrt(1/t) = 0.1 · mscale · ln s + 1 for s > 1, else 1 (YaRN eq. 22)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _effective_factor(scaling: RopeScaling, seq_len: int | None) -> float:
    if not scaling.dynamic:
        return float(scaling.factor)
    if seq_len is None:
        raise ValueError(f"rope_frequencies: seq_len is required for a dynamic scaling (kind={scaling.kind!r})")
    return max(1.0, seq_len / scaling.original_max_len)


def factors_fit(factors, rotary_dim: int, num_layers: int) -> bool:
    """Whether LongRoPE factors fit a model: `[rotary_dim / 2]` (one per frequency pair, shared by the layers)
    or `[num_layers, rotary_dim / 2]` (one vector per layer)."""
    shape = np.shape(factors)
    return len(shape) in (1, 2) and shape[-1] == rotary_dim // 2 and (len(shape) == 1 or shape[0] == num_layers)


def rope_frequencies(rotary_dim: int, *, base: float = 10000.0, scaling: RopeScaling | None = None,
                     seq_len: int | None = None) -> tuple[np.ndarray, float]:
    """Inverse frequencies and attention factor of (scaled) RoPE.

    Args:
      rotary_dim: d, the number of features that rotate (even); the result has d/2 pairs.
      base: b > 0, the RoPE base (`rope_theta`).
      scaling: a `RopeScaling`; None means `RopeScaling()` (no scaling).
      seq_len: the current sequence length T (the largest position + 1). Needed by `dynamic_ntk`,
        `longrope` and `dynamic=True` scalings; ignored by static ones.

    Returns:
      `(inv_freq, attention_factor)`: float64 NumPy `[d/2]` (or `[num_layers, d/2]` for per-layer
      LongRoPE factors), and a Python float that multiplies cos and sin.
    """
    if isinstance(rotary_dim, bool) or not isinstance(rotary_dim, (int, np.integer)) or rotary_dim <= 0 or rotary_dim % 2:
        raise ValueError(f"rope_frequencies: rotary_dim must be a positive even integer, got {rotary_dim!r}")
    if not (isinstance(base, (int, float)) and math.isfinite(base) and base > 0):
        raise ValueError(f"rope_frequencies: base must be a finite number > 0, got {base!r}")
    if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, (int, np.integer)) or seq_len <= 0):
        raise ValueError(f"rope_frequencies: seq_len must be a positive integer, got {seq_len!r}")
    scaling = RopeScaling() if scaling is None else scaling
    if not isinstance(scaling, RopeScaling):
        raise ValueError(f"rope_frequencies: scaling must be a RopeScaling or None, got {type(scaling).__name__}")
    d, kind = rotary_dim, scaling.kind
    if kind in ("ntk", "dynamic_ntk") and d <= 2:
        raise ValueError(f"rope_frequencies: kind={kind!r} needs rotary_dim > 2 (base · s^(d/(d−2))), got {d}")
    inv_freq = default_inv_freq(d, base)
    attention_factor = 1.0

    if kind == "linear":
        inv_freq = inv_freq / _effective_factor(scaling, seq_len)
    elif kind == "ntk":
        s = _effective_factor(scaling, seq_len)
        inv_freq = default_inv_freq(d, base * s ** (d / (d - 2)))
    elif kind == "dynamic_ntk":
        if seq_len is None:
            raise ValueError("rope_frequencies: seq_len is required for kind='dynamic_ntk'")
        big_l, s = scaling.original_max_len, float(scaling.factor)
        t = max(seq_len, big_l)
        inv_freq = default_inv_freq(d, base * (s * t / big_l - (s - 1)) ** (d / (d - 2)))
    elif kind == "yarn":
        s = _effective_factor(scaling, seq_len)
        low, high = yarn_correction_range(d, base, scaling.original_max_len, scaling.beta_fast,
                                          scaling.beta_slow, scaling.truncate)
        if low == high:
            high += 0.001  # the reference code's guard against a zero-width ramp
        ramp = np.clip((np.arange(d // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
        keep = 1.0 - ramp  # 1: extrapolate (keep θ_i), 0: interpolate (θ_i / s)
        if s != 1.0:  # at s = 1 both branches are θ_i: skip the blend so the result is bit-identical
            inv_freq = inv_freq / s * (1.0 - keep) + inv_freq * keep
        if scaling.mscale and scaling.mscale_all_dim:  # as transformers tests them (0 or None: the default)
            attention_factor = yarn_get_mscale(s, scaling.mscale) / yarn_get_mscale(s, scaling.mscale_all_dim)
        else:
            attention_factor = yarn_get_mscale(s)
    elif kind == "longrope":
        if seq_len is None:
            raise ValueError("rope_frequencies: seq_len is required for kind='longrope' "
                             "(it selects short_factor or long_factor)")
        name = "long_factor" if seq_len > scaling.original_max_len else "short_factor"
        ext = np.asarray(getattr(scaling, name), dtype=np.float64)
        if ext.shape[-1] != d // 2:
            raise ValueError(
                f"RopeScaling.{name} must have rotary_dim // 2 = {d // 2} entries per row, got shape {ext.shape}"
            )
        inv_freq = inv_freq / ext
        s = float(scaling.factor)
        attention_factor = 1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(scaling.original_max_len))
    elif kind == "llama3":
        s, big_l = float(scaling.factor), scaling.original_max_len
        low_wavelen = big_l / scaling.low_freq_factor
        high_wavelen = big_l / scaling.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        smooth = (big_l / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
        medium = (1 - smooth) * inv_freq / s + smooth * inv_freq
        if s != 1.0:  # at s = 1 every band is θ_i: skip the blend so the result is bit-identical
            inv_freq = np.where(wavelen > low_wavelen, inv_freq / s, np.where(wavelen < high_wavelen, inv_freq, medium))

    if scaling.attention_factor is not None:
        attention_factor = float(scaling.attention_factor)
    return inv_freq, float(attention_factor)


def is_length_dependent(scaling: RopeScaling) -> bool:
    """Whether a scaling's frequencies change with the sequence length (dynamic NTK, `dynamic=True`,
    LongRoPE's switch from short to long factors)."""
    return scaling.kind in ("dynamic_ntk", "longrope") or scaling.dynamic


def inv_freq_residual(inv_freq) -> np.ndarray:
    """θ − float32(θ) as float32, for float64 θ: the part of each frequency a float32 θ drops (at position
    10⁶ it is worth up to 0.03 rad). `posenc.apply_rope(..., inv_freq_lo=)` adds it back."""
    theta = np.asarray(inv_freq, np.float64)
    return (theta - theta.astype(np.float32).astype(np.float64)).astype(np.float32)


def rope_inputs(rotary_dim: int, base: float, scaling: RopeScaling | None, seq_len: int):
    """What a forward pass at `seq_len` rotates with: `(inv_freq, attention_factor, n̂, inv_freq_lo)`.

    `inv_freq` is float32 `[r]` (or `[num_layers, r]`), `attention_factor` a float, n̂ LongRoPE's
    number of initial positions left unscaled — `scaling.unscaled_positions` with the long factors
    (seq_len > original_max_len), else 0, and 0 for every other kind (`RopeScaling.unscaled_positions`) —
    and `inv_freq_lo` the float64 digits float32 `inv_freq` drops (`inv_freq_residual`: angles exact to
    ~5e-4 rad at position 10⁶). The one place a `RopeScaling` becomes the values the model, evaluation and
    decoding use.
    """
    scaling = RopeScaling() if scaling is None else scaling
    inv, af = rope_frequencies(rotary_dim, base=base, scaling=scaling, seq_len=seq_len)
    long = scaling.kind == "longrope" and seq_len > scaling.original_max_len  # as rope_frequencies picks long_factor
    return inv.astype(np.float32), af, scaling.unscaled_positions if long else 0, inv_freq_residual(inv)
