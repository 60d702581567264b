"""Resumable experiment plans: jobs run in plan order, each once, shared by worker processes through claims.

An experiment (experiments/*/run.py) is a list of jobs, each with a `name` and optionally the name of a job
it needs first (`needs(job)`, e.g. the base run a fine-tune starts from). A job is done when its result
file `results/<name>.json` exists; results are written atomically (`write_atomic`), so a result is whole or
absent and an interrupted job simply runs again (its training resumes from its checkpoints).

Workers share one plan through claims: before running a job a worker creates `results/<name>.claim`
exclusively (O_CREAT | O_EXCL) and writes its pid into it; the claim is removed when the job ends, also when
the worker is terminated (SIGTERM raises SystemExit, and `finally` runs). A claim whose process no longer
runs (`claim_is_live`) is dropped and its job run again. So several workers — the processes `spawn_workers`
starts, or separate commands — can run one plan, and a rerun of the same command goes on where it stopped.

A job that raises stops its worker with the exception (and its claim removed): a broken job is an error to
look at, not a result to skip.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import time
from typing import Callable, Sequence, TypeVar

J = TypeVar("J")
ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
POLL_SECONDS = 20.0  # how often a worker waiting for another worker's job looks again


def write_atomic(path: pathlib.Path, text: str) -> None:
    """Writes `text` to `path` through a temporary file and a rename: readers see the old file or the new one."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def claim_is_live(path: pathlib.Path) -> bool:
    """Whether the process that wrote a claim (its pid is the claim's content) still runs. A claim without a
    readable pid is live for a minute (its writer may be between creating it and writing the pid)."""
    try:
        pid = int(path.read_text())
    except FileNotFoundError:
        return False
    except (OSError, ValueError):
        try:
            return time.time() - path.stat().st_mtime < 60
        except FileNotFoundError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def work(jobs: Sequence[J], run_job: Callable[[J], None], results: pathlib.Path, *,
         needs: Callable[[J], str | None] = lambda job: None, deadline: float | None = None,
         poll_seconds: float | None = None) -> list[str]:
    """Runs the jobs of `jobs` without a result (`results/<name>.json`) in plan order, each claimed first.

    Args:
      jobs: objects with a `name`; their order is the priority.
      run_job: runs one job and writes its result file.
      needs: the name of the job whose result must exist before this one starts, or None.
      deadline: a `time.time()` after which no new job starts (None: no limit).
      poll_seconds: the wait between looks while another worker holds a job that the next one needs
        (default POLL_SECONDS).

    Returns:
      the names of the jobs this worker ran.

    Raises:
      RuntimeError: a job returned without writing its result (it would otherwise run again and again).
    """
    def done(name: str) -> bool:
        return (results / f"{name}.json").exists()

    ran = []
    while True:
        pending = [j for j in jobs if not done(j.name)]
        if not pending:
            return ran
        if deadline is not None and time.time() > deadline:
            print(f"time budget spent: stopping before {pending[0].name} (rerun to go on)")
            return ran
        claimed = set()
        for j in pending:
            path = results / f"{j.name}.claim"
            if claim_is_live(path):
                claimed.add(j.name)
            elif path.exists():  # left by a killed worker
                path.unlink(missing_ok=True)
        ready = [j for j in pending if j.name not in claimed and (not needs(j) or done(needs(j)))]
        if not ready:
            if any(needs(j) in claimed for j in pending if needs(j)):
                time.sleep(POLL_SECONDS if poll_seconds is None else poll_seconds)
                continue  # another worker runs a job that this one's next job needs
            return ran
        job = ready[0]
        try:
            claim = os.open(results / f"{job.name}.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            continue
        os.write(claim, str(os.getpid()).encode())
        os.close(claim)
        try:
            if not done(job.name):  # another worker may have finished it since `pending` was listed
                run_job(job)
                if not done(job.name):
                    raise RuntimeError(f"job {job.name!r} returned without writing {results / job.name}.json")
                ran.append(job.name)
        finally:
            (results / f"{job.name}.claim").unlink(missing_ok=True)


def spawn_workers(count: int, argv: Sequence[str]) -> None:
    """Runs `count` copies of this program (`argv` plus `--worker=i`), each pinned to its own core with a
    one-threaded XLA (ONE_THREAD), and waits for them. Small models gain little from a second thread, so
    one-core workers finish more jobs per hour than one process on every core.

    Raises:
      ValueError: `count` exceeds the cores this process may use.
      SystemExit: a worker failed (its exit codes), or this process was terminated (the workers are too).
    """
    cores = sorted(os.sched_getaffinity(0))
    if not 1 <= count <= len(cores):
        raise ValueError(f"--workers={count}: must be 1 … {len(cores)}, the cores this process may use")
    procs = []
    for i in range(count):
        env = {**os.environ, "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") + " " + ONE_THREAD).strip()}
        procs.append(subprocess.Popen([sys.executable, *argv, f"--worker={i}"], env=env,
                                      preexec_fn=lambda c=cores[i]: os.sched_setaffinity(0, {c})))
    try:
        codes = [p.wait() for p in procs]
    except SystemExit:
        for p in procs:
            p.terminate()
        raise
    if any(codes):
        raise SystemExit(f"workers exited with {codes}")


def threads() -> int:
    """The threads this process's XLA uses: 1 under ONE_THREAD, else the cores it may run on."""
    return 1 if ONE_THREAD in os.environ.get("XLA_FLAGS", "") else len(os.sched_getaffinity(0))
