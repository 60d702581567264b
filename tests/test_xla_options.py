"""posenc/xla_options.py: which library multiplies on which CPU, and that the choice reaches the compiled step."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posenc import checkpoint, train
from posenc.config import validate
from posenc.xla_options import CHOICES, ONEDNN_DOTS, compiler_options, cpu_dots

def test_cpu_dots_keeps_xla_defaults_unless_onednn_is_asked_for(monkeypatch):
    monkeypatch.delenv("POSENC_CPU_DOTS", raising=False)
    assert (cpu_dots(), cpu_dots("auto"), cpu_dots("xla"), cpu_dots("onednn")) == ("xla", "xla", "xla", "onednn")
    monkeypatch.setenv("POSENC_CPU_DOTS", "onednn")
    assert cpu_dots() == "onednn"
    monkeypatch.setenv("POSENC_CPU_DOTS", "mkl")
    with pytest.raises(ValueError, match=r"POSENC_CPU_DOTS must be one of \('auto', 'onednn', 'xla'\)"):
        cpu_dots()
    assert CHOICES == ("auto", "onednn", "xla")


def test_onednn_dots_multiply_in_float32():
    """The options send a float32 dot to oneDNN (its fusion in the compiled module), and the product agrees
    with float64 to float32 rounding: oneDNN does not round the operands to bf16."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((96, 256)), rng.standard_normal((256, 80))
    f = jax.jit(lambda x, y: x @ y, compiler_options=ONEDNN_DOTS)
    x, y = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
    assert "__onednn_fusion" in f.lower(x, y).compile().as_text()
    err = np.abs(np.asarray(f(x, y), np.float64) - a @ b).max() / np.abs(a @ b).max()
    assert err < 1e-5


@pytest.mark.parametrize("setting", ["auto", "onednn"])
def test_train_step_is_compiled_with_the_chosen_options(tiny_config, monkeypatch, setting):
    """make_train_step's program holds oneDNN fusions exactly when POSENC_CPU_DOTS asks for them."""
    monkeypatch.setenv("POSENC_CPU_DOTS", setting)
    compiler_options.cache_clear()
    try:
        config = tiny_config("tiny")
        cfg = validate(config)
        tx, _ = train.make_optimizer(config)
        graphdef, _ = checkpoint.abstract_model(cfg)
        params = checkpoint.init_params(cfg, 0)
        x = jnp.zeros((2, config.train_len), jnp.int32)
        step = train._make_train_step(graphdef, tx, None, None)  # not the per-process cached one
        hlo = step.lower(params, tx.init(params), x, x).compile().as_text()
        assert ("__onednn_fusion" in hlo) == (setting == "onednn")
        assert compiler_options() == (ONEDNN_DOTS if setting == "onednn" else None)
    finally:
        compiler_options.cache_clear()


def test_a_run_records_the_compiler_options_it_trained_with(trained_run):
    """run.json lists the XLA options of the run's sittings ({}: XLA's defaults)."""
    expected = ONEDNN_DOTS if jax.default_backend() == "cpu" and cpu_dots() == "onednn" else {}
    assert json.loads((trained_run / "run.json").read_text())["compiler_options"] == [expected]
