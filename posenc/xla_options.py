"""XLA compiler options, chosen in one place: the training step and the evaluation forwards pass
`compiler_options()` to `jax.jit`.

`POSENC_CPU_DOTS` chooses: `auto` (the default) and `xla` keep XLA's defaults; `onednn` sends XLA:CPU's dots to
oneDNN (`ONEDNN_DOTS`: `xla_cpu_use_onednn` with `xla_cpu_experimental_onednn_fusion_type=LIBRARY_FUSION_TYPE_DOT`).
On a GPU there are no options.

On an Intel Xeon (Sapphire Rapids, AVX-512 + AMX), XLA:CPU's default library for dots, YNNPACK, multiplies the
reference model's float32 products at 0.70–0.97 of PyTorch's (oneDNN); with oneDNN dots the reference model
trained 1.10× as fast on 2 cores and 1.04× on one core with one XLA thread (`scripts/benchmark_xla_options.py`,
rounds alternating in one process; experiments/benchmarks/cpu/intel-xeon-processor/xla_options/). bf16 products
stay with YNNPACK either way (AMX). On an AMD EPYC YNNPACK's float32 products run at about 2× PyTorch's, and
oneDNN is unmeasured there. oneDNN is not the default even on Intel: with jax 0.10.2, XLA:CPU's oneDNN fusion
kills the process ("partition compile failed", then SIGILL) at the first run of a dot with two batch axes whose
operand is an elementwise product, as attention's probabilities times a mask or scale are: with `ONEDNN_DOTS`,
`jax.jit(lambda a, b, v: jnp.einsum("bnqk,bnkh->bnqh", a * b, v))` dies at any size (a [2, 2, 16, 32] `a`
already), where the same dot without the product, or with one batch axis, runs. The length-generalization
study's passkey evaluation step hit it, and a crash takes a run down with it. Both libraries multiply in
float32; only the order of the sums differs.
"""

from __future__ import annotations

import functools
import os

ONEDNN_DOTS = {"xla_cpu_use_onednn": True, "xla_cpu_experimental_onednn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"}
CHOICES = ("auto", "onednn", "xla")


def cpu_dots(setting: str | None = None) -> str:
    """Which library multiplies XLA:CPU's dots: 'onednn' or 'xla' (its defaults), from `setting`
    (POSENC_CPU_DOTS when None; `auto` is 'xla')."""
    setting = os.environ.get("POSENC_CPU_DOTS", "auto") if setting is None else setting
    if setting not in CHOICES:
        raise ValueError(f"POSENC_CPU_DOTS must be one of {CHOICES}, got {setting!r}")
    return "xla" if setting == "auto" else setting


@functools.lru_cache(maxsize=1)
def compiler_options() -> dict | None:
    """The options for `jax.jit(..., compiler_options=...)` in this process (None: XLA's defaults)."""
    import jax  # noqa: PLC0415

    if jax.default_backend() != "cpu":
        return None
    return dict(ONEDNN_DOTS) if cpu_dots() == "onednn" else None
