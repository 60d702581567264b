"""XLA compiler options per machine, chosen in one place: the training step and the evaluation forwards
(`Evaluator.nll`, the streaming protocol) pass `compiler_options()` to `jax.jit`. Decoding (posenc/decode.py,
and the prefix-dependent scoring that runs through it) keeps XLA's defaults: in one A/B of the evaluation
forward on one Intel core, oneDNN dots and XLA's defaults were within noise of each other.

`POSENC_CPU_DOTS` chooses: `auto` (the default: oneDNN on an Intel CPU, XLA's defaults elsewhere; measured on
Sapphire Rapids only, applied to every CPU whose lscpu model name says Intel), `onednn`, or `xla` (XLA's
defaults). The choice is read once per process (`compiler_options` is cached), and each process of a
multi-host run makes its own from its own CPU; run.json records process 0's. `onednn` sends each of XLA:CPU's
dots to oneDNN on its own (`ONEDNN_DOTS`: `xla_cpu_use_onednn` with
`xla_cpu_experimental_onednn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT`). On a GPU there are no options.

On an Intel Xeon (Sapphire Rapids, AVX-512 + AMX), XLA:CPU's default library for dots, YNNPACK, multiplies the
reference model's float32 products at 0.70–0.97 of PyTorch's (oneDNN); with oneDNN dots the reference model
trained 1.10–1.12× as fast on 2 cores (fused and individual dots alike) and, with fused dots, 1.04× on one core
with one XLA thread (individual dots unmeasured there) (`scripts/benchmark_xla_options.py`,
rounds alternating in one process; experiments/benchmarks/cpu/intel-xeon-processor-family-6-model-207/xla_options/). The evaluation
forward rose from 0.72–0.76 to 0.83–0.88 of PyTorch SDPA at 4096 with the fused type, between processes; with
individual dots one sitting of run_cpu_kind.sh showed no gain there (the per-CPU table). bf16 products stay with YNNPACK
either way (AMX). On an AMD EPYC YNNPACK's float32 products run at about 2× PyTorch's, and oneDNN is unmeasured
there, so other CPUs keep XLA's defaults. Both libraries multiply in float32; only the order of the sums differs.

Why individual dots: with jax 0.10.2 the `LIBRARY_FUSION_TYPE_DOT` fusion, which also fuses elementwise operands
into a dot, kills the process ("partition compile failed", then SIGILL) at the first run of a dot with two batch
axes whose operand is an elementwise product, as attention's probabilities times a mask or scale are:
`jax.jit(lambda a, b, v: jnp.einsum("bnqk,bnkh->bnqh", a * b, v))` dies at any size (a [2, 2, 16, 32] `a`
already). Individual dots run it, and train the reference model as fast (`xla_options/train_float32_3.json`).
"""

from __future__ import annotations

import functools
import os

ONEDNN_DOTS = {"xla_cpu_use_onednn": True,
               "xla_cpu_experimental_onednn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
CHOICES = ("auto", "onednn", "xla")


def cpu_dots(cpu: str, setting: str | None = None) -> str:
    """Which library multiplies XLA:CPU's dots on this CPU (`cpu`: lscpu's model name): 'onednn' or 'xla' (its
    defaults), from `setting` (POSENC_CPU_DOTS when None)."""
    setting = os.environ.get("POSENC_CPU_DOTS", "auto") if setting is None else setting
    if setting not in CHOICES:
        raise ValueError(f"POSENC_CPU_DOTS must be one of {CHOICES}, got {setting!r}")
    if setting == "auto":
        return "onednn" if "intel" in cpu.lower() else "xla"
    return setting


@functools.lru_cache(maxsize=1)
def compiler_options() -> dict | None:
    """The options for `jax.jit(..., compiler_options=...)` on this machine (None: XLA's defaults)."""
    import jax  # noqa: PLC0415

    from posenc.timing import cpu_model  # noqa: PLC0415

    if jax.default_backend() != "cpu":
        return None
    return dict(ONEDNN_DOTS) if cpu_dots(cpu_model()) == "onednn" else None
