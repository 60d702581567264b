"""posenc: Transformer positional encodings and length extrapolation in JAX/Flax.

Where each formula lives:
  posenc/sinusoidal.py    sinusoidal absolute encoding (Vaswani et al. 2017)
  posenc/rope.py          apply_rope: half-split and interleaved RoPE (Su et al. 2021)
  posenc/rope_scaling.py  RopeScaling and rope_frequencies: PI, NTK, dynamic NTK, YaRN, LongRoPE, Llama 3
  posenc/alibi.py         ALiBi slopes and bias (Press et al. 2022)
  posenc/attention.py     causal attention masked by positions; query chunks; block-causal; FlashAttention's backward
  posenc/model.py         the NNX Transformer; Transformer.position_plan is the one dispatch on model.posenc;
                          dense (the layers' product, with a backward laid out for XLA:CPU)
  posenc/data.py          byte corpora, splits, (seed, step) -> batch
  posenc/train.py         train_and_evaluate: resumable, data-parallel training
  posenc/evaluate.py      extrapolation evaluation: protocols, inference-time scalings, tables, plots
  posenc/decode.py        KV-cache decoding equal to the full forward pass
  posenc/sweep.py         train / eval sweeps
  posenc/longrope.py      LongRoPE's evolutionary search of rescale factors
"""

from posenc.alibi import alibi_bias, alibi_slopes
from posenc import rope
from posenc.rope import LAYOUTS, apply_rope, relative_decay_bound
from posenc.rope_scaling import KINDS, RopeScaling, rope_frequencies, yarn_correction_range
from posenc.sinusoidal import sinusoidal_encoding, sinusoidal_table

__all__ = [
    "KINDS", "LAYOUTS", "RopeScaling", "alibi_bias", "alibi_slopes", "apply_rope", "rope_frequencies",
    "relative_decay_bound", "rope", "sinusoidal_encoding", "sinusoidal_table", "yarn_correction_range",
]
