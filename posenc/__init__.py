"""posenc: Transformer positional encodings and length extrapolation in JAX/Flax.

Where each formula lives:
  posenc/encoding.py      the interface every encoding implements (absolute / rotate / bias / facts)
  posenc/encodings.py     the registry: model.posenc -> encoding class (the one lookup)
  posenc/nope.py          NoPE (Kazemnejad et al. 2023)
  posenc/sinusoidal.py    sinusoidal absolute encoding (Vaswani et al. 2017)
  posenc/learned.py       learned absolute positions; interpolate_table
  posenc/rope.py          apply_rope: half-split and interleaved RoPE (Su et al. 2021); range-reduced angles
  posenc/xpos.py          apply_xpos: RoPE with xPos's decay (Sun et al. 2022)
  posenc/p_rope.py        p-RoPE: only the fastest frequencies rotate (Barbero et al. 2024)
  posenc/local_global.py  Gemma 2/3 local (sliding-window) and global RoPE layers
  posenc/rope_scaling.py  RopeScaling, rope_frequencies, rope_inputs: PI, NTK, dynamic NTK, YaRN, LongRoPE, Llama 3
  posenc/hf.py            rope_from_hf_config: a Hugging Face model's rotary embedding from its config.json
  posenc/alibi.py         ALiBi slopes and bias (Press et al. 2022)
  posenc/t5.py            T5's bucketed relative bias (Raffel et al. 2020)
  posenc/kerple.py        KERPLE's log / power kernels (Chi et al. 2022)
  posenc/fire.py          FIRE's MLP of a normalised distance (Li et al. 2023)
  posenc/cope.py          CoPE's contextual positions (Golovneva et al. 2024)
  posenc/attention.py     causal attention masked by positions; logit biases; windows; query chunks;
                          block-causal; FlashAttention's backward
  posenc/model.py         the NNX Transformer (calls its encoding, never dispatches on names);
                          dense (the layers' product, with a backward laid out for XLA:CPU)
  posenc/config.py        ConfigDict -> ModelConfig, validation, what defines a run
  posenc/checkpoint.py    run directories: verified checkpoints, the workdir lock
  posenc/data.py          byte corpora, splits, (seed, step) -> batch
  posenc/train.py         train_and_evaluate: resumable, data-parallel training
  posenc/evaluate.py      extrapolation evaluation: protocols, inference-time scalings, tables, plots
  posenc/decode.py        KV-cache decoding equal to the full forward pass
  posenc/sweep.py         train / eval sweeps
  posenc/longrope.py      LongRoPE's evolutionary search of rescale factors
  posenc/tuning.py        the hand-set rules tuned on validation with the LongRoPE search's budget
"""

from posenc.alibi import alibi_bias, alibi_slopes
from posenc import rope
from posenc.cope import cope_bias
from posenc.fire import fire_normalized_distance
from posenc.hf import rope_from_hf_config
from posenc.kerple import kerple_bias
from posenc.rope import LAYOUTS, apply_rope, relative_decay_bound
from posenc.rope_scaling import KINDS, RopeScaling, rope_frequencies, rope_inputs, yarn_correction_range
from posenc.sinusoidal import sinusoidal_encoding, sinusoidal_table
from posenc.t5 import t5_relative_bucket
from posenc.xpos import apply_xpos

__all__ = [
    "KINDS", "LAYOUTS", "RopeScaling", "alibi_bias", "alibi_slopes", "apply_rope", "apply_xpos", "cope_bias",
    "fire_normalized_distance", "kerple_bias", "relative_decay_bound", "rope", "rope_frequencies", "rope_from_hf_config", "rope_inputs",
    "sinusoidal_encoding", "sinusoidal_table", "t5_relative_bucket", "yarn_correction_range",
]
