"""ConfigDict -> frozen dataclasses, and the checks that run before anything trains.

A `ml_collections.ConfigDict` is what users edit (`configs/*.py`, `--config.field=value`); nothing jitted
ever sees one. `model_config(config)` returns the hashable `ModelConfig` the model is built from, and
`validate(config)` raises a `ValueError` naming the field and its valid values.
"""

from __future__ import annotations

import json
import pathlib

import ml_collections

from posenc.model import ModelConfig
from posenc.rope_scaling import RopeScaling


def rope_scaling_from_config(s: ml_collections.ConfigDict) -> RopeScaling:
    """`config.model.rope.scaling` -> `RopeScaling` (LongRoPE factors read from `factors_file`)."""
    kwargs = dict(
        kind=s.kind, factor=float(s.factor), original_max_len=s.original_max_len, dynamic=bool(s.dynamic),
        beta_fast=float(s.beta_fast), beta_slow=float(s.beta_slow), truncate=bool(s.truncate),
        attention_factor=s.attention_factor, low_freq_factor=float(s.low_freq_factor),
        high_freq_factor=float(s.high_freq_factor),
    )
    if s.get("factors_file"):
        path = pathlib.Path(s.factors_file).expanduser()
        if not path.exists():
            raise ValueError(f"model.rope.scaling.factors_file={s.factors_file!r} does not exist")
        saved = json.loads(path.read_text())
        for key in ("short_factor", "long_factor"):
            if key not in saved:
                raise ValueError(f"model.rope.scaling.factors_file={s.factors_file!r} has no {key!r}")
            kwargs[key] = saved[key]
        for key in ("factor", "attention_factor", "original_max_len"):
            if saved.get(key) is not None and kwargs.get(key) in (None, 1.0):
                kwargs[key] = saved[key]
        kwargs["unscaled_positions"] = int(saved.get("unscaled_positions", 0))
    try:
        return RopeScaling(**kwargs)
    except ValueError as e:
        raise ValueError(f"model.rope.scaling: {e}") from None


def model_config(config: ml_collections.ConfigDict) -> ModelConfig:
    m = config.model
    return ModelConfig(
        d_model=m.d_model, num_layers=m.num_layers, num_heads=m.num_heads, mlp_dim=m.mlp_dim, posenc=m.posenc,
        max_len=config.train_len, learned_beyond=m.learned_beyond, sinusoidal_base=float(m.sinusoidal_base),
        rope_base=float(m.rope.base), rope_layout=m.rope.layout, rope_fraction=float(m.rope.fraction),
        rope_scaling=rope_scaling_from_config(m.rope.scaling) if m.posenc == "rope" else RopeScaling(),
        attn_chunk=m.attn_chunk, attn_block=m.get("attn_block", 0), dtype=m.dtype,
    )


def validate(config: ml_collections.ConfigDict) -> ModelConfig:
    """Checks every field a run depends on; returns the `ModelConfig`. Raises ValueError naming the field."""

    def positive_int(name):
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"config.{name} must be a positive integer, got {value!r}")

    for name in ("train_steps", "train_len", "batch_size", "checkpoint_every", "eval_every", "eval_windows",
                 "log_every", "keep_checkpoints"):
        positive_int(name)
    if config.warmup_steps < 0:
        raise ValueError(f"config.warmup_steps must be >= 0, got {config.warmup_steps!r}")
    if not config.learning_rate > 0:
        raise ValueError(f"config.learning_rate must be > 0, got {config.learning_rate!r}")
    if not 0 <= config.min_lr_ratio <= 1:
        raise ValueError(f"config.min_lr_ratio must be in [0, 1], got {config.min_lr_ratio!r}")
    if not config.grad_clip > 0:
        raise ValueError(f"config.grad_clip must be > 0, got {config.grad_clip!r}")
    return model_config(config)
