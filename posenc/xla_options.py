"""XLA compiler options per machine, chosen in one place: the training step and the evaluation forwards
(`Evaluator.nll`, the streaming protocol) pass `compiler_options()` to `jax.jit`. Decoding (posenc/decode.py,
and the prefix-dependent scoring that runs through it) keeps XLA's defaults; no committed benchmark compares
the two libraries there.

`POSENC_CPU_DOTS` chooses: `auto` (the default: oneDNN on an Intel CPU, XLA's defaults elsewhere; measured on
one Intel CPU kind only, family 6 model 207, applied to every CPU whose lscpu model name says Intel), `onednn`,
or `xla` (XLA's defaults). The choice is read once per process (`compiler_options` is cached), and each process
of a multi-host run makes its own from its own CPU; run.json records process 0's. `onednn` sends each of XLA:CPU's
dots to oneDNN on its own (`ONEDNN_DOTS`: `xla_cpu_use_onednn` with
`xla_cpu_experimental_onednn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT`). On a GPU there are no options.

On an Intel Xeon of CPU family 6, model 207 (Emerald Rapids: AVX-512 + AMX), in
experiments/benchmarks/cpu/intel-xeon-processor-family-6-model-207/xla_options/ (`scripts/benchmark_xla_options.py`,
rounds alternating in one process; experiments/benchmarks/README.md renders them): with XLA:CPU's default library
for dots, YNNPACK, the reference model trained in float32 at 0.84–0.90 of PyTorch eager's speed (the `default`
rows' `over_torch` in train_float32_{1,2,3}.json; a PyTorch peer that predates `torch_peer`, with torch's
AdamW defaults and exact GELU); with oneDNN dots 1.10–1.12× as fast as that on 2 cores (fused
and individual dots alike: the other rows' `over_first` there) and, with fused dots, 1.04× on one core with one
XLA thread (train_float32_one_core.json; individual dots unmeasured there). The evaluation forward at 4096 rose
from 0.72–0.76 of PyTorch SDPA (eval_xla_{1,2}.json) to 0.83–0.88 with the fused type (eval_onednn_{1,2}.json),
between processes; with individual dots one sitting of run_cpu_kind.sh showed no gain there (the per-CPU table).
bf16 products stay with YNNPACK either way (AMX). On an AMD EPYC of CPU family 26, YNNPACK multiplied the
reference model's float32 products at 1.14–2.27× PyTorch's (experiments/benchmarks/cpu/amd-epyc-family-26-model-2/
matmul.json), and oneDNN is unmeasured there, so other CPUs keep XLA's defaults. Both libraries multiply in
float32; only the order of the sums differs.

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
