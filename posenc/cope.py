"""CoPE: contextual position encoding — positions that count what the model attends to.

Golovneva et al. 2024, "Contextual Position Encoding: Learning to Count What's Important",
arXiv 2405.18719, §3 and the PyTorch listing of its appendix. For query i and key j ≤ i, with the
(scaled) attention logits s_it = q_i·k_t / √H,

    g_it = σ(s_it),   p_ij = Σ_{t=j}^{i} g_it   (a fractional count of the keys from j to i),
    bias_ij = (1 − w) · q_i·e[⌊p_ij⌋] + w · q_i·e[⌈p_ij⌉],   w = p_ij − ⌊p_ij⌋,

with e `[npos_max, H]` learned position embeddings (zero at init, as in the reference, shared by the heads
of a layer) and p clamped to npos_max − 1. The gates of masked keys are 0. The bias depends on q and k, so
it is computed from them inside attention; its gradient reaches q, k and e. The sum runs over the key axis,
so the keys must come in position order: they do in a forward pass and a cache of one slot per position, and
the model sorts a ring cache's (`Encoding.bias_needs_all_keys`).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx

from posenc.encoding import Encoding


def cope_positions(scores, visible, npos_max: int):
    """p_ij = Σ_{t ≥ j, visible} σ(s_it), clamped to npos_max − 1: `[..., Tq, Tk]` from scores of the same shape.

    σ is `jax.nn.sigmoid`, whose gradient stays finite at any score (1 / (1 + exp(−s)) gives 0 · inf = NaN for
    s < −88.7 in float32, and `where` passes that NaN on even for a masked key)."""
    gates = jnp.where(visible, jax.nn.sigmoid(scores), 0.0)
    pos = jnp.flip(jnp.cumsum(jnp.flip(gates, -1), axis=-1), -1)
    return jnp.minimum(pos, npos_max - 1)


def cope_bias(q, k, visible, emb):
    """CoPE's bias `[B, N, Tq, Tk]` for q `[B, N, Tq, H]` (scaled by 1/√H), k `[B, N, Tk, H]` and position
    embeddings `emb [npos_max, H]` (q·e uses the unscaled q, as in the reference). Computed in float32, or in
    float64 for float64 q and k."""
    head_dim = q.shape[-1]
    dtype = jnp.promote_types(jnp.result_type(q, k), jnp.float32)
    scores = jnp.einsum("bnqh,bnkh->bnqk", q, k, preferred_element_type=dtype)
    pos = cope_positions(scores, visible, emb.shape[0])
    logits_int = jnp.einsum("bnqh,ph->bnqp", q.astype(dtype) * head_dim**0.5, emb)  # q_i·e[p], [B,N,Tq,P]
    lo = jnp.floor(pos)
    w = pos - lo
    lo = lo.astype(jnp.int32)
    hi = jnp.minimum(lo + 1, emb.shape[0] - 1)
    at = lambda idx: jnp.take_along_axis(logits_int, idx, axis=-1)  # noqa: E731
    return (1.0 - w) * at(lo) + w * at(hi)


class CoPE(Encoding):
    """`cope_bias` on every layer, with one learned `[npos_max, head_dim]` table per layer."""

    name = "cope"
    position_kind = "contextual"
    paper = "Golovneva et al. 2024, arXiv 2405.18719"
    has_bias = True
    bias_needs_all_keys = True  # p_ij sums the gates over the keys j … i
    options = {"npos_max": (0, "contextual positions are clamped below this (0: the training length)")}

    def __init__(self, cfg, *, rngs: nnx.Rngs):
        self.cfg = cfg
        n = self.option_values(cfg)["npos_max"] or cfg.max_len
        self.emb = nnx.Param(jnp.zeros((cfg.num_layers, n, cfg.head_dim), jnp.float32))

    @classmethod
    def check(cls, cfg) -> None:
        n = cls.option_values(cfg)["npos_max"]
        if n < 0 or n == 1:
            raise ValueError(f"model.cope.npos_max must be 0 (the training length) or >= 2, got {n}")

    def bias(self, q_pos, k_pos, q, k, visible, ctx, layer: int):
        return cope_bias(q, k, visible, self.emb[...][layer])
