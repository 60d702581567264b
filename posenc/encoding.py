"""The interface of a positional encoding: what it adds to a forward pass, and what pipelines ask of it.

An encoding is an `nnx.Module` built from the `ModelConfig` (its parameters, if it has any, live in it) and
registered by name in `posenc.encodings.ENCODINGS`. The Transformer builds one, from `model.posenc`, and
each forward pass calls

    ctx = enc.context(positions, seq_len, rope)   values shared by every layer (RoPE frequencies, …)
    enc.absolute(positions, ctx)                  [B|1, T, d_model] added to the token embeddings, or None
    enc.rotate(x, positions, ctx, layer, role)    q or k [B, T, N, H] transformed (role 'q' or 'k'), or x
    enc.bias(q_pos, k_pos, q, k, visible, ctx, layer)
                                                  a logit bias [B|1, N|1, Tq, Tk] added to q·kᵀ/√H (only
                                                  called when `has_bias`); from positions, or from q and k
                                                  too (head-major [B, N, T, H], q scaled by 1/√H; `visible`
                                                  is the causal mask); it may hold parameters, which get
                                                  the gradients of the textbook formula

Positions are always explicit (`[B|1, T]` integers): KV-cache offsets, query chunks and evaluation at any
length are just other positions.

Pipelines (evaluation, decoding, sweeps, the LongRoPE search, config checks) never compare names: they ask
the encoding class, given a `ModelConfig`,

    takes_rope_scaling              whether inference-time RoPE scalings (`RopeScaling`) apply to it
    position_kind                   rotary / bias / absolute / contextual / none: which training-free
                                    methods (`posenc.training_free`) apply, and how
    length_dependent(cfg, scaling)  whether its frequencies change with the sequence length (then the KV
                                    cache keeps keys unrotated and rotates them at use)
    max_positions(cfg)              the number of positions it is defined for (a learned table, xPos's
                                    float range), or None; `undefined_past(cfg)` says why
    window(cfg, layer)              the layer's sliding attention window (keys at distance ≥ window are
                                    invisible, and the KV cache keeps only the last `window` keys), or None
    check(cfg)                      raises a ValueError naming the `model.*` field and its valid values
    model_fields                    the shared `ModelConfig` fields it reads (`rope_base`, …): training
                                    refuses another value than the default of one it does not read
    bias_needs_all_keys             whether a pair's bias depends on other keys too (CoPE): then chunked
                                    attention scores each chunk against whole rows of keys, not key tiles,
                                    and a ring KV cache's keys reach the bias in position order

Adding an encoding: one file with its pure math and a subclass of `Encoding`, one line in
`posenc/encodings.py`, and its tests (the README's "Adding an encoding" walks through one).
"""

from __future__ import annotations

from typing import Any, ClassVar

from flax import nnx


class Encoding(nnx.Module):
    """Base class: contributes nothing (every method is the identity or None). Subclasses override what
    their encoding contributes."""

    name: ClassVar[str] = ""
    paper: ClassVar[str] = ""  # citation, shown in the README's table of encodings
    takes_rope_scaling: ClassVar[bool] = False
    # How positions enter (posenc.training_free.POSITION_KINDS): 'rotary' (q and k rotated), 'bias' (a logit
    # bias from positions), 'absolute' (added to the embeddings), 'contextual' (from q and k), 'none'.
    position_kind: ClassVar[str] = "none"
    # Whether scores depend on positions only through i − j (False: FIRE normalises by the query's position),
    # so that training-free methods may move both ends of a distance (`posenc.training_free`).
    translation_invariant: ClassVar[bool] = True
    has_bias: ClassVar[bool] = False
    # Whether a pair's bias depends on other keys too (CoPE's gates sum over the keys between the two): then
    # chunked attention takes each chunk's keys whole instead of in tiles (`posenc.attention`, `key_block`), and
    # the keys of a ring KV cache (sliding windows, lm_infinite, sinks) are sorted by position before attention.
    bias_needs_all_keys: ClassVar[bool] = False
    # The encoding's own config fields, `model.<name>.<option>`: {option: (default, comment)}.
    options: ClassVar[dict[str, tuple[Any, str]]] = {}
    # The shared `model.*` fields it reads (ModelConfig's, such as 'rope_base' for `model.rope.base`): training
    # refuses one set to another value than its default under an encoding that does not read it.
    model_fields: ClassVar[tuple[str, ...]] = ()

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        del rngs
        self.cfg = cfg

    @classmethod
    def option_values(cls, cfg) -> dict[str, Any]:
        """The encoding's options: the defaults, overridden by `cfg.encoding_options`.

        Raises:
          ValueError: an option the encoding does not have, or one whose type differs from its default's (a
            whole-number option takes only an int: not a float, not a bool).
        """
        given = dict(cfg.encoding_options)
        unknown = sorted(set(given) - set(cls.options))
        if unknown:
            raise ValueError(f"model.{cls.name}: unknown option(s) {unknown}; valid: {sorted(cls.options)}")
        values = {k: default for k, (default, _) in cls.options.items()}
        for key, value in given.items():
            default = values[key]
            if isinstance(default, bool) != isinstance(value, bool) or (
                    isinstance(default, (int, float)) and not isinstance(value, (int, float))) or (
                    isinstance(default, str) and not isinstance(value, str)):
                raise ValueError(f"model.{cls.name}.{key} must be like {default!r}, got {value!r}")
            if isinstance(default, int) and not isinstance(default, bool) and not isinstance(value, int):
                raise ValueError(f"model.{cls.name}.{key} must be an integer, like its default {default!r}; "
                                 f"got {value!r}")
            values[key] = type(default)(value) if isinstance(default, float) else value
        return values

    # -- facts, answered from the config alone ---------------------------------------------------------
    @classmethod
    def check(cls, cfg) -> None:
        """Raises ValueError for config values this encoding cannot use."""

    @classmethod
    def length_dependent(cls, cfg, scaling=None) -> bool:
        """Whether the values it applies at a position depend on the total sequence length."""
        return False

    @classmethod
    def max_positions(cls, cfg) -> int | None:
        """Positions past this are undefined (None: defined everywhere)."""
        return None

    @classmethod
    def undefined_past(cls, cfg) -> str:
        """Why positions past `max_positions(cfg)` are undefined, and what reaches farther (for reports)."""
        return ""

    @classmethod
    def window(cls, cfg, layer: int) -> int | None:
        """The sliding attention window of `layer` (None: the layer sees every earlier key)."""
        return None

    # -- contributions to a forward pass ---------------------------------------------------------------
    def context(self, positions, seq_len: int, rope=None) -> Any:
        """Per-forward values shared by the layers. `rope`: a traced `(inv_freq, attention_factor, n̂)`
        override, for encodings that take a RoPE scaling."""
        return None

    def tabulate(self, ctx, low: int, high: int) -> Any:
        """`ctx` for a decoding step whose cached keys are rotated at use (`KVCache.rotate_at_use`): the
        place to compute once, for the integer positions low … high−1, what every layer's `rotate` of the
        cache would otherwise recompute (RoPE's sin/cos table). Default: `ctx` unchanged."""
        return ctx

    def absolute(self, positions, ctx):
        return None

    def rotate(self, x, positions, ctx, layer: int, role: str):
        return x

    def bias(self, q_pos, k_pos, q, k, visible, ctx, layer: int):
        return None
