"""posenc/xla_options.py: which library multiplies on which CPU, and that the choice reaches the compiled step."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posenc import checkpoint, train
from posenc.config import validate
from posenc.timing import cpu_model
from posenc.xla_options import CHOICES, ONEDNN_DOTS, compiler_options, cpu_dots

INTEL, AMD = "Intel(R) Xeon(R) Processor", "AMD EPYC 9R14 96-Core Processor"


def test_cpu_dots_chooses_onednn_on_intel_only_unless_overridden(monkeypatch):
    monkeypatch.delenv("POSENC_CPU_DOTS", raising=False)
    assert (cpu_dots(INTEL), cpu_dots(AMD)) == ("onednn", "xla")
    assert (cpu_dots(INTEL, "xla"), cpu_dots(AMD, "onednn")) == ("xla", "onednn")
    monkeypatch.setenv("POSENC_CPU_DOTS", "xla")
    assert cpu_dots(INTEL) == "xla"
    monkeypatch.setenv("POSENC_CPU_DOTS", "mkl")
    with pytest.raises(ValueError, match=r"POSENC_CPU_DOTS must be one of \('auto', 'onednn', 'xla'\)"):
        cpu_dots(INTEL)
    assert CHOICES == ("auto", "onednn", "xla")


def test_an_accelerator_gets_xla_s_defaults_even_on_an_intel_host(monkeypatch):
    """The oneDNN options are XLA:CPU's: on a GPU backend `compiler_options` is None whatever the host CPU."""
    monkeypatch.setenv("POSENC_CPU_DOTS", "onednn")
    compiler_options.cache_clear()
    try:
        assert compiler_options() == dict(ONEDNN_DOTS)  # this CPU backend, told to use oneDNN
        compiler_options.cache_clear()
        monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
        assert compiler_options() is None
    finally:
        compiler_options.cache_clear()


def test_onednn_runs_the_batched_dot_of_a_product_that_its_fused_dots_crash_on():
    """attention's p·v with p an elementwise product, two batch axes: oneDNN's DOT fusion killed the process on
    it (`posenc/xla_options.py`); the individual dots of ONEDNN_DOTS run it, in oneDNN, and agree with float64."""
    rng = np.random.default_rng(1)
    a, b, v = rng.random((2, 2, 16, 32)), rng.random((2, 2, 16, 32)), rng.standard_normal((2, 2, 32, 8))
    f = jax.jit(lambda a, b, v: jnp.einsum("bnqk,bnkh->bnqh", a * b, v), compiler_options=ONEDNN_DOTS)
    args = [jnp.asarray(x, jnp.float32) for x in (a, b, v)]
    assert "__onednn_fusion" in f.lower(*args).compile().as_text()
    want = np.einsum("bnqk,bnkh->bnqh", a * b, v)
    assert np.abs(np.asarray(f(*args), np.float64) - want).max() / np.abs(want).max() < 1e-5


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


@pytest.mark.parametrize("setting", ["auto", "onednn", "xla"])
def test_train_step_is_compiled_with_the_chosen_options(tiny_config, monkeypatch, setting):
    """make_train_step's program holds oneDNN fusions exactly when this CPU and POSENC_CPU_DOTS choose them."""
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
        expect = jax.default_backend() == "cpu" and cpu_dots(cpu_model(), setting) == "onednn"
        assert ("__onednn_fusion" in hlo) == expect
        assert compiler_options() == (ONEDNN_DOTS if expect else None)
    finally:
        compiler_options.cache_clear()


def test_a_run_records_the_compiler_options_it_trained_with(trained_run):
    """run.json lists each sitting's XLA options ({}: XLA's defaults), with the step it started from and the
    XLA_FLAGS it ran under."""
    expected = ONEDNN_DOTS if jax.default_backend() == "cpu" and cpu_dots(cpu_model()) == "onednn" else {}
    sittings = json.loads((trained_run / "run.json").read_text())["compiler_options"]
    assert sittings[0] == {"from_step": 0, "options": expected, "xla_flags": os.environ.get("XLA_FLAGS", "")}
    assert all(s["options"] == expected for s in sittings)


def test_the_docstring_s_measured_ratios_are_those_of_the_files_it_names():
    """Every speed ratio the module docstring quotes is recomputed from the committed result it names (a figure
    with no committed result behind it fails here), rounded as quoted; the CPU kinds it names are the folders'."""
    import pathlib  # noqa: PLC0415
    import re  # noqa: PLC0415

    from posenc import xla_options  # noqa: PLC0415

    doc = " ".join(xla_options.__doc__.split())
    root = pathlib.Path(__file__).resolve().parents[1] / "experiments/benchmarks/cpu"
    intel = root / "intel-xeon-processor-family-6-model-207" / "xla_options"
    load = lambda name: json.loads((intel / name).read_text())  # noqa: E731
    span = lambda v: f"{min(v):.2f}–{max(v):.2f}"  # noqa: E731
    trains = [load(f"train_float32_{i}.json")["rows"] for i in (1, 2, 3)]
    default = [r["over_torch"] for rows in trains for r in rows if r["variant"] == "default"]
    onednn = [r["over_first"] for rows in trains for r in rows if r["variant"].startswith("onednn")]
    one_core = next(r["over_first"] for r in load("train_float32_one_core.json")["rows"] if r["variant"] == "onednn")

    def at_4096(arm):
        return [next(r["ratio"] for r in load(f"eval_{arm}_{i}.json")["rows"] if r["length"] == 4096) for i in (1, 2)]

    amd = json.loads((root / "amd-epyc-family-26-model-2" / "matmul.json").read_text())
    amd_f32 = [r["ratio"] for r in amd["rows"] if r["dtype"] == "float32"]
    assert "compiler_options" not in amd and amd["cpu"] == "AMD EPYC"  # XLA's defaults (auto on AMD)
    quoted = {f"at {span(default)} of PyTorch eager's speed", f"oneDNN dots {span(onednn)}× as fast",
              f"{one_core:.2f}× on one core", f"from {span(at_4096('xla'))} of PyTorch SDPA",
              f"to {span(at_4096('onednn'))} with the fused type", f"at {span(amd_f32)}× PyTorch's"}
    for text in quoted:
        assert text in doc, text
    ratios = re.findall(r"(?<![\d.])\d\.\d\d(?:–\d\.\d\d)?×?(?!\.\d)", doc)  # each ratio quoted (not jax 0.10.2)
    assert len(ratios) == len(quoted), ratios


@pytest.mark.parametrize("setting", ["onednn", "xla"])
def test_the_evaluation_forwards_are_compiled_with_the_chosen_options(trained_run, monkeypatch, setting):
    """`Evaluator.nll`'s program and the training's evaluation step hold oneDNN fusions exactly when
    POSENC_CPU_DOTS chooses them on a CPU, as the training step does (their per-process caches cleared, so that
    each is compiled under this setting)."""
    from posenc import evaluate  # noqa: PLC0415

    monkeypatch.setenv("POSENC_CPU_DOTS", setting)
    caches = (compiler_options, evaluate._nll_fn, train.make_eval_step)
    for cache in caches:
        cache.cache_clear()
    try:
        run = evaluate.load_run(str(trained_run))
        x = np.random.default_rng(0).integers(0, 256, size=(2, 32)).astype(np.int32)
        nll = evaluate.Evaluator(run).compiled_text(x, x, evaluate.RopeScaling())
        step = train.make_eval_step(run.graphdef).lower(run.params, {"inputs": x, "targets": x}).compile().as_text()
        expect = jax.default_backend() == "cpu" and setting == "onednn"
        assert ("__onednn_fusion" in nll, "__onednn_fusion" in step) == (expect, expect)
    finally:
        for cache in caches:
            cache.cache_clear()
