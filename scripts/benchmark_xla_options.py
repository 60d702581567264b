r"""XLA compiler options against each other on the reference model's training step, in one process.

    python scripts/benchmark_xla_options.py --variant=default: \
        --variant=onednn:xla_cpu_use_onednn=true,xla_cpu_experimental_onednn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT \
        [--torch] [--rounds=8] [--dtype=bfloat16] [--out=FILE.json]

Each `--variant=NAME:KEY=VALUE,...` compiles the same jitted step, from XLA's defaults (POSENC_CPU_DOTS=xla:
`posenc/xla_options.py` chooses nothing here), (`scripts/benchmark_train.py`'s reference model
and flags) with `jax.stages.Lowered.compile(compiler_options=...)`: XLA's DebugOptions, the fields XLA_FLAGS sets
for a whole process (enum fields take the enum's name, e.g. `LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT`; an empty value clears a
repeated field). The rounds alternate the variants (and PyTorch eager with --torch), each from the same
parameters, so that all see the same machine load: on these shared machines throughput drifts by ±20% within
minutes, which separate processes (`experiments/benchmarks/xla_flags_ab.sh`) cannot tell from a difference.
Prints each variant's median tokens/s, the median over rounds of its ratio to the first variant (and to PyTorch),
and how many of its dots each library took; the last line is JSON.
"""

from __future__ import annotations

import os
import re
import time

import jax
import numpy as np
from absl import app, flags

import benchmark_train as bt  # the reference model, its flags and the PyTorch peer
from posenc import data, malloc
from posenc.timing import code_version, cpu_record, emit
from posenc.xla_options import compiler_options

_VARIANTS = flags.DEFINE_multi_string("variant", ["default:"], "NAME:KEY=VALUE,... (XLA DebugOptions); the first is "
                                      "the baseline of the ratios.")
_OUT = flags.DEFINE_string("out", None, "Also write the JSON here.")


def option_value(text: str) -> bool | int | str:
    """An option's value as XLA takes it: true/false as a bool, digits as an int, anything else as the string."""
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return int(text) if text.lstrip("-").isdigit() else text


def parse_variant(text: str) -> tuple[str, dict[str, bool | int | str]]:
    """'name:key=value,key=value' → (name, {key: value}); 'name:' → (name, {})."""
    name, sep, options = text.partition(":")
    if not name or not sep:
        raise ValueError(f"--variant must be NAME:KEY=VALUE,... (NAME: for XLA's defaults), got {text!r}")
    pairs = [item.split("=", 1) for item in options.split(",") if item]
    if any(len(p) != 2 or not p[0] for p in pairs):
        raise ValueError(f"--variant {text!r}: each option must be KEY=VALUE")
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise ValueError(f"--variant {text!r}: an option given twice (the last would win)")
    return name, {key: option_value(value) for key, value in pairs}


def dot_libraries(hlo: str) -> dict[str, int]:
    """How many of a compiled module's dots each library runs: YNNPACK / oneDNN fusions holding a dot, and the
    plain `dot` instructions XLA:CPU runs itself (Eigen)."""
    fused = {"ynnpack": 0, "onednn": 0}
    for match in re.finditer(r"calls=%([\w.\-]+), [^\n]*\"kind\":\"__(ynn|onednn)_fusion\"", hlo):
        body = re.search(rf"^%{re.escape(match.group(1))} .*?^}}", hlo, re.S | re.M)
        if body and " dot(" in body.group(0):
            fused["ynnpack" if match.group(2) == "ynn" else "onednn"] += 1
    fused_bodies = sum(fused.values())
    return {**fused, "xla": hlo.count(" dot(") - fused_bodies}


def main(argv):
    del argv
    malloc.keep_buffers()
    os.environ["POSENC_CPU_DOTS"] = "xla"  # every variant from XLA's defaults, before the step is made
    compiler_options.cache_clear()  # in case anything asked before the variable was set
    if compiler_options() is not None:
        raise RuntimeError(f"the baseline step would be compiled with {compiler_options()}, not XLA's defaults")
    variants = dict(parse_variant(v) for v in _VARIANTS.value)
    config = bt.reference_config()
    _, step, state, batch = bt.jax_runner(config)
    corpus = data.load_corpus(config.data.path, config.data.cache_dir)
    batches = [data.train_batch(corpus.train, seed=0, step=i, batch_size=config.batch_size, length=config.train_len)
               for i in range(16)]
    fresh = lambda: jax.tree.map(lambda a: a.copy(), (state["params"], state["opt"]))  # the step donates its inputs
    compiled, libraries = {}, {}
    for name, options in variants.items():
        compiled[name] = step.lower(*fresh(), *batch).compile(compiler_options=options or None)
        libraries[name] = dot_libraries(compiled[name].as_text())

    def run(fn, steps: int) -> float:
        params, opt = fresh()
        params, opt, metrics = fn(params, opt, *batches[0])  # a first call outside the timing
        float(metrics["loss"])
        t0 = time.perf_counter()
        for i in range(steps):
            params, opt, metrics = fn(params, opt, *batches[i % len(batches)])
        float(metrics["loss"])
        return steps * config.batch_size * config.train_len / (time.perf_counter() - t0)

    run_torch, torch_threads, peer = bt.torch_runner(config) if bt._TORCH.value else (None, None, None)
    rounds = {name: [] for name in variants}
    torch_rounds = []
    for _ in range(bt._ROUNDS.value):
        for name, fn in compiled.items():
            rounds[name].append(run(fn, bt._STEPS.value))
        if run_torch:
            torch_rounds.append(run_torch(bt._STEPS.value))
    first = next(iter(variants))
    rows = []
    for name, options in variants.items():
        tps = np.asarray(rounds[name])
        row = {"variant": name, "options": options, "tokens_per_s": float(np.median(tps)), "rounds_tokens_per_s":
               rounds[name], "over_first": float(np.median(tps / np.asarray(rounds[first]))), "dots": libraries[name]}
        if run_torch:
            row["over_torch"] = float(np.median(tps / np.asarray(torch_rounds)))
        rows.append(row)
        print(f"{name:12s} {row['tokens_per_s']:7.0f} tokens/s  / {first}: {row['over_first']:.3f}"
              + (f"  / PyTorch: {row['over_torch']:.3f}" if run_torch else "") + f"  dots: {libraries[name]}")
    result = {"rows": rows, "rounds": bt._ROUNDS.value, "steps": bt._STEPS.value, "dtype": config.model.dtype,
              "batch_size": config.batch_size, "train_len": config.train_len, **cpu_record(),
              "commit": code_version(), "jax": jax.__version__}
    if run_torch:
        import torch  # noqa: PLC0415

        result.update(torch_tokens_per_s=float(np.median(torch_rounds)), rounds_torch_tokens_per_s=torch_rounds,
                      torch=torch.__version__, torch_threads=torch_threads, torch_peer=peer)
        print(f"PyTorch eager ({torch_threads} threads): {result['torch_tokens_per_s']:.0f} tokens/s")
    emit(result, _OUT.value)


if __name__ == "__main__":
    app.run(main)
