r"""What posenc/malloc.py's settings are worth: the reference model's training step under three allocators.

    python scripts/benchmark_malloc.py [--rounds=3] [--steps=10] [--batch_size=16] [--train_len=256] [--out=FILE]

Arms, each a fresh process (glibc reads its environment when a process starts), alternating within each round
so that all see the same machine load:
  - `system`: glibc's defaults (POSENC_MALLOC=system);
  - `mallopt`: what `import posenc` does (posenc.malloc.keep_buffers);
  - `env`: the same settings as environment variables before Python starts (posenc.malloc.ENV), as the
    experiments' workers run.
Each child trains scripts/benchmark_train.py's reference model (its flags: --batch_size, --train_len, --steps),
first `steps` untimed steps (compilation, and the heap reaching its size), then `steps` timed ones, and reports
tokens/s, minor page faults per step, the seconds in the kernel and in user space, and a hash of the parameters
after training: the allocator must not change a number, so the hashes of every arm must agree. The ratio
printed is each arm's median tokens/s over `system`'s. The last line is JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys

import numpy as np
from absl import app, flags

import benchmark_train as bt  # scripts/: defines --steps, --rounds, --batch_size, --train_len
from posenc import malloc
from posenc.timing import code_version, cpu_model, emit

_CHILD = flags.DEFINE_string("child", None, "Internal: run one arm in this process and print its JSON.")
_OUT = flags.DEFINE_string("out", None, "Also write the JSON result here.")
ARMS = {"system": {"POSENC_MALLOC": "system"}, "mallopt": {"POSENC_MALLOC": "keep"},
        "env": {"POSENC_MALLOC": "keep", **malloc.ENV}}


def child() -> dict:
    """One arm, in this process: tokens/s, faults per step, kernel / user seconds, the parameters' hash."""
    import jax  # noqa: PLC0415

    run, _, state, _ = bt.jax_runner(bt.reference_config())
    run(bt._STEPS.value)  # untimed: the heap reaches its size
    before = resource.getrusage(resource.RUSAGE_SELF)
    tokens_per_s = run(bt._STEPS.value)
    after = resource.getrusage(resource.RUSAGE_SELF)
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(state["params"]):
        digest.update(np.asarray(leaf).tobytes())
    return {"tokens_per_s": tokens_per_s, "faults_per_step": (after.ru_minflt - before.ru_minflt) / bt._STEPS.value,
            "sys_s": after.ru_stime - before.ru_stime, "user_s": after.ru_utime - before.ru_utime,
            "params_sha256": digest.hexdigest()[:16]}


def main(argv):
    del argv
    if _CHILD.value:
        print(json.dumps(child()))
        return
    args = [f"--steps={bt._STEPS.value}", f"--batch_size={bt._BATCH.value}", f"--train_len={bt._LEN.value}"]
    rounds = {arm: [] for arm in ARMS}
    for r in range(bt._ROUNDS.value):
        for arm, env in ARMS.items():
            env = {**{k: v for k, v in os.environ.items() if k not in malloc.ENV}, **env}
            out = subprocess.run([sys.executable, __file__, f"--child={arm}", *args], env=env, check=True,
                                 capture_output=True, text=True).stdout
            rounds[arm].append(json.loads(out.strip().splitlines()[-1]))
            print(f"round {r + 1} {arm}: {rounds[arm][-1]}", flush=True)
    hashes = {row["params_sha256"] for rows in rounds.values() for row in rows}
    if len(hashes) != 1:
        raise SystemExit(f"the arms trained to different parameters ({sorted(hashes)}): an allocator changed a number")
    base = np.median([row["tokens_per_s"] for row in rounds["system"]])
    summary = {arm: {"tokens_per_s": float(np.median([x["tokens_per_s"] for x in rows])),
                     "faults_per_step": float(np.median([x["faults_per_step"] for x in rows])),
                     "sys_fraction": float(np.median([x["sys_s"] / (x["sys_s"] + x["user_s"]) for x in rows])),
                     "ratio_to_system": float(np.median([x["tokens_per_s"] for x in rows]) / base)}
               for arm, rows in rounds.items()}
    for arm, s in summary.items():
        print(f"{arm}: {s['tokens_per_s']:.0f} tokens/s ({s['ratio_to_system']:.2f}× system), "
              f"{s['faults_per_step']:.0f} page faults a step, {s['sys_fraction']:.1%} of CPU time in the kernel")
    emit({"arms": summary, "rounds": rounds, "same_parameters": True, "steps": bt._STEPS.value,
          "batch_size": bt._BATCH.value, "train_len": bt._LEN.value, "cpu": cpu_model(), "commit": code_version(),
          "affinity": sorted(os.sched_getaffinity(0))}, _OUT.value)


if __name__ == "__main__":
    app.run(main)
