"""Local/global attention layers with their own RoPE bases (Gemma 2, Gemma 3).

Gemma Team 2024, "Gemma 2", arXiv 2408.00118 (local sliding-window and global layers alternating 1:1);
Gemma Team 2025, "Gemma 3 Technical Report", arXiv 2503.19786 (5 local : 1 global, local RoPE base 10⁴,
global 10⁶; `rope_local_base_freq` in Hugging Face). Layer i is local or global by `pattern[i % len]`:

  * local (`L`): sliding-window attention — query i sees keys j with i − window < j ≤ i — rotated by RoPE
    with `local_base` and no scaling; its KV cache is a ring of `window` slots (bounded memory);
  * global (`G`): full causal attention, RoPE with `model.rope.base` and `model.rope.scaling`: a context
    extension rescales the global layers only, as in Gemma 3.
"""

from __future__ import annotations

import math

from posenc.rope import Rope, RopeContext
from posenc.rope_scaling import rope_inputs


class LocalGlobalRope(Rope):
    """RoPE with a per-layer pattern of sliding-window local layers and full global layers."""

    name = "local_global"
    paper = "Gemma Team 2024, arXiv 2408.00118; Gemma Team 2025, arXiv 2503.19786"
    options = {
        "pattern": ("LG", "layer i is pattern[i % len]: L local (sliding window, local_base), G global"),
        "window": (64, "sliding window of the local layers: keys at distance < window"),
        "local_base": (10000.0, "RoPE base of the local layers (unscaled)"),
    }

    def __init__(self, cfg, *, rngs):
        super().__init__(cfg, rngs=rngs)
        opts = self.option_values(cfg)
        self.local_base = opts["local_base"]

    @classmethod
    def check(cls, cfg) -> None:
        super().check(cfg)
        opts = cls.option_values(cfg)
        if not opts["pattern"] or set(opts["pattern"]) - {"L", "G"}:
            raise ValueError(f"model.local_global.pattern must be a non-empty string of L (local) and G (global), "
                             f"got {opts['pattern']!r}")
        if opts["window"] < 1:
            raise ValueError(f"model.local_global.window must be >= 1, got {opts['window']}")
        if not (math.isfinite(opts["local_base"]) and opts["local_base"] > 0):  # as `rope_frequencies` requires
            raise ValueError(f"model.local_global.local_base must be a finite number > 0, got {opts['local_base']!r}")

    @classmethod
    def is_local(cls, cfg, layer: int) -> bool:
        pattern = cls.option_values(cfg)["pattern"]
        return pattern[layer % len(pattern)] == "L"

    @classmethod
    def window(cls, cfg, layer: int) -> int | None:
        return cls.option_values(cfg)["window"] if cls.is_local(cfg, layer) else None

    def context(self, positions, seq_len: int, rope=None) -> tuple[RopeContext, RopeContext]:
        """(global context, with any scaling or override; local context, unscaled at `local_base`)."""
        inv, af, _, lo = rope_inputs(self.cfg.rotary_dim, self.local_base, None, seq_len)
        return super().context(positions, seq_len, rope), super().context(positions, seq_len, (inv, af, 0, lo))

    def tabulate(self, ctx, low: int, high: int):
        return tuple(super(LocalGlobalRope, self).tabulate(c, low, high) for c in ctx)

    def rotate(self, x, positions, ctx, layer: int, role: str):
        global_ctx, local_ctx = ctx
        return super().rotate(x, positions, local_ctx if self.is_local(self.cfg, layer) else global_ctx, layer, role)
