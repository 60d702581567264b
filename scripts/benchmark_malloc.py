r"""What posenc/malloc.py's settings are worth: the reference model's training step with and without them.

    python scripts/benchmark_malloc.py [--rounds=3] [--warmup=30] [--steps=20] [--batch_size=16] [--train_len=256] [--out=FILE]

Two arms, each a fresh process (a thread's malloc arena is made once), their order alternating from round to
round so that both see the same machine load:
  - `system`: glibc's defaults (POSENC_MALLOC=system);
  - `keep`: the settings, applied first in main() as the training scripts do (posenc.malloc.keep_buffers).
Each child trains scripts/benchmark_train.py's reference model (its flags: --batch_size, --train_len, --steps;
note their defaults there are 8 × 512): `warmup` untimed steps (compilation, and the heap reaching its size),
then `steps` timed ones. It reports tokens/s, minor page faults per timed step, the seconds in the kernel and in
user space, the peak resident memory (`ru_maxrss`, `max_rss_mib`), whether keep_buffers applied its settings,
and a hash of the trained parameters: the allocator must not change a number, so every arm's hash must agree
(the result, written either way, says whether they do). The ratio printed is the median of `keep`'s tokens/s
over `system`'s. The children get the parent's environment less the user's own malloc settings (glibc's
MALLOC_* variables and GLIBC_TUNABLES, as posenc/malloc.py leaves those alone and the `keep` arm would then be
glibc's defaults too); a `keep` round whose settings did not apply fails the run. Pin it to the cores to
measure (`taskset`), with the XLA_FLAGS to measure under (recorded). The last line is JSON.
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
from posenc.timing import code_version, cpu_record, emit

_CHILD = flags.DEFINE_bool("child", False, "Internal: run one arm in this process and print its JSON.")
_WARMUP = flags.DEFINE_integer("warmup", 30, "Untimed steps before the timed ones.")
_OUT = flags.DEFINE_string("out", None, "Also write the JSON result here.")
ARMS = ("system", "keep")


def child() -> dict:
    """One arm, in this process (POSENC_MALLOC picks it): tokens/s, faults per timed step, kernel and user
    seconds, peak resident MiB (ru_maxrss), whether keep_buffers applied, the parameters' hash."""
    applied = malloc.keep_buffers()
    import jax  # noqa: PLC0415

    run, _, state, _ = bt.jax_runner(bt.reference_config())
    run(_WARMUP.value)
    before = resource.getrusage(resource.RUSAGE_SELF)
    tokens_per_s = run(bt._STEPS.value)
    after = resource.getrusage(resource.RUSAGE_SELF)
    digest = hashlib.sha256()
    for leaf in jax.tree.leaves(state["params"]):
        digest.update(np.asarray(leaf).tobytes())
    return {"tokens_per_s": tokens_per_s, "faults_per_step": (after.ru_minflt - before.ru_minflt) / bt._STEPS.value,
            "sys_s": after.ru_stime - before.ru_stime, "user_s": after.ru_utime - before.ru_utime,
            "max_rss_mib": after.ru_maxrss / 1024, "applied": applied, "params_sha256": digest.hexdigest()[:16]}


def child_env(environ: dict, arm: str) -> dict:
    """A child's environment: `environ` without the user's malloc settings (posenc.malloc.USER_VARIABLES and
    GLIBC_TUNABLES, which keep_buffers would defer to), with POSENC_MALLOC set to the arm."""
    strip = {*malloc.USER_VARIABLES, "GLIBC_TUNABLES"}
    return {**{k: v for k, v in environ.items() if k not in strip}, "POSENC_MALLOC": arm}


def check_keep_applied(rounds: dict) -> None:
    """Exits with an error naming the rounds where the `keep` arm's settings did not apply (its numbers would be
    glibc's defaults, not the settings')."""
    unapplied = [i + 1 for i, row in enumerate(rounds["keep"]) if not row["applied"]]
    if unapplied:
        raise SystemExit(f"the keep arm's settings did not apply in round(s) {unapplied} (keep_buffers() returned "
                         "False: not glibc on Linux, or the child still saw a malloc setting of the user's): its "
                         "numbers would be glibc's defaults, so no comparison was made")


def main(argv):
    del argv
    if _CHILD.value:
        print(json.dumps(child()))
        return
    args = [f"--warmup={_WARMUP.value}", f"--steps={bt._STEPS.value}", f"--batch_size={bt._BATCH.value}",
            f"--train_len={bt._LEN.value}"]
    rounds = {arm: [] for arm in ARMS}
    for r in range(bt._ROUNDS.value):
        for arm in ARMS if r % 2 == 0 else ARMS[::-1]:
            proc = subprocess.run([sys.executable, __file__, "--child", *args], env=child_env(dict(os.environ), arm),
                                  capture_output=True, text=True)
            if proc.returncode:
                raise SystemExit(f"the {arm} arm failed:\n{proc.stderr[-4000:]}")
            rounds[arm].append(json.loads(proc.stdout.strip().splitlines()[-1]))
            print(f"round {r + 1} {arm}: {rounds[arm][-1]}", flush=True)
            check_keep_applied(rounds)
    same = len({row["params_sha256"] for rows in rounds.values() for row in rows}) == 1
    base = np.median([row["tokens_per_s"] for row in rounds["system"]])
    summary = {arm: {"tokens_per_s": float(np.median([x["tokens_per_s"] for x in rows])),
                     "faults_per_step": float(np.median([x["faults_per_step"] for x in rows])),
                     "sys_fraction": float(np.median([x["sys_s"] / (x["sys_s"] + x["user_s"]) for x in rows])),
                     "max_rss_mib": float(np.median([x["max_rss_mib"] for x in rows])),
                     "ratio_to_system": float(np.median([x["tokens_per_s"] for x in rows]) / base)}
               for arm, rows in rounds.items()}
    for arm, s in summary.items():
        print(f"{arm}: {s['tokens_per_s']:.0f} tokens/s ({s['ratio_to_system']:.2f}× system), "
              f"{s['faults_per_step']:.0f} page faults a step, {s['sys_fraction']:.1%} of CPU time in the kernel, "
              f"{s['max_rss_mib']:.0f} MiB peak resident")
    emit({"arms": summary, "rounds": rounds, "same_parameters": same, "warmup": _WARMUP.value,
          "steps": bt._STEPS.value, "batch_size": bt._BATCH.value, "train_len": bt._LEN.value, **cpu_record(),
          "commit": code_version(), "affinity": sorted(os.sched_getaffinity(0))}, _OUT.value)
    if not same:
        raise SystemExit("the arms trained to different parameters: an allocator changed a number")


if __name__ == "__main__":
    app.run(main)
