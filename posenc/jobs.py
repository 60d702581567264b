"""Resumable experiment plans: jobs run in plan order, each once, shared by worker processes through claims.

An experiment (experiments/*/run.py) is a list of jobs, each with a `name` and optionally the names of the jobs
it needs first (`needs(job)`, e.g. the base run a fine-tune starts from). A job is done when its result
file `results/<name>.json` exists; results are written atomically (`write_atomic`), so a result is whole or
absent and an interrupted job simply runs again (its training resumes from its checkpoints).

Workers share one plan through claims: before running a job a worker creates `results/<name>.claim`
exclusively (O_CREAT | O_EXCL) and writes its pid, start time and host into it; the claim is removed when the
job ends, also when the worker is terminated (after `exit_on_sigterm()`, SIGTERM raises SystemExit and `finally`
runs). A claim of this host whose process no longer runs (`claim_is_live`: its pid is gone, or now names a
process started at another time) is dropped (`drop_stale_claim`, under a lock) and its job run again; a claim of
another host (results/ shared between machines) is left to that host, and named when a worker stops with it
pending. So several workers — the processes `spawn_workers` starts, or separate commands — can run one plan,
and a rerun of the same command goes on where it stopped.

A job that raises stops its worker with the exception (and its claim removed): a broken job is an error to
look at, not a result to skip.
"""

from __future__ import annotations

import base64
import fcntl
import gc
import gzip
import hashlib
import json
import logging
import os
import pathlib
import re
import select as select_fds  # (`select` here names the plan filter below)
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable, Sequence, TypeVar

J = TypeVar("J")
# XLA:CPU without its Eigen thread pool. (The often-quoted "intra_op_parallelism_threads=1" after it is no XLA
# flag: without "--" XLA's parser skips it, with "--" it aborts as unknown; pinning a worker to a core does the rest.)
ONE_THREAD = "--xla_cpu_multi_thread_eigen=false"
POLL_SECONDS = 20.0  # how often a worker waiting for another worker's job looks again


def write_atomic(path: pathlib.Path, text: str) -> None:
    """Writes `text` to `path` through a temporary file and a rename: readers see the old file or the new one."""
    write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path: pathlib.Path, data: bytes | memoryview) -> None:
    """write_atomic for bytes, through a temporary file in the same folder whose name no other writer has
    (`tempfile.mkstemp`: processes on hosts sharing the folder may share a PID) and whose mode is a plain
    open's (the umask's, not mkstemp's 0600). The data reach the disk before the rename (after a crash, the new
    name never holds an empty file), and the rename before this returns (the folder is synced: a crash after it
    never brings the old file back, whatever is written next). A write that fails (a full disk, SIGTERM's
    SystemExit) leaves the old file and no temporary one; a folder that cannot be synced after the rename is
    logged, not raised (the new file is in place)."""
    path = pathlib.Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_UMASK)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise
    try:  # the rename is done: a folder that cannot be opened or synced (some FUSE and network mounts) is logged
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    except OSError as e:
        logging.getLogger(__name__).warning("write_bytes_atomic: %s is written, but its folder was not synced (%s)",
                                            path, e)


def _read_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _read_umask()  # read once, at import: setting the umask to read it is process-wide


def pack_rows(rows: Sequence[dict]) -> str:
    """Rows (a run's metrics.jsonl: its training curve) as base64 of their gzipped JSON lines, for a result file:
    a fraction of their size as JSON, and `unpack_rows` gives them back exactly."""
    data = "\n".join(json.dumps(r) for r in rows).encode()
    return base64.b64encode(gzip.compress(data, mtime=0)).decode("ascii")


def unpack_rows(text: str) -> list[dict]:
    """The rows `pack_rows` packed."""
    return [json.loads(line) for line in gzip.decompress(base64.b64decode(text)).decode().splitlines() if line]


def result_curve(result: dict) -> list[dict]:
    """A result's training curve: its `curve_gz` (`pack_rows`), or the `curve` rows of a result written as JSON."""
    return unpack_rows(result["curve_gz"]) if "curve_gz" in result else result.get("curve") or []


SECONDS_KEY = "_seconds"  # in a parts file (`run_parts`): each part's own seconds


def select(jobs: Sequence[J], only: str | None) -> list[J]:
    """The jobs whose `name` matches `only` from its start (`re.match`): a plain prefix ("copy", "iambic-rope-s0-ft")
    or a regular expression ("copy-(rope|none)-s[12]$", "reverse-.*-s1"); every job when `only` is empty. An
    invalid expression, or one that matches no job, is an error that names it (never a run of nothing)."""
    if not only:
        return list(jobs)
    try:
        pattern = re.compile(only)
    except re.error as e:
        raise ValueError(f"--only={only!r} is not a regular expression: {e}") from None
    chosen = [j for j in jobs if pattern.match(j.name)]
    if not chosen:
        names = [j.name for j in jobs]
        raise ValueError(f"--only={only!r} matches none of the {len(names)} planned jobs (e.g. {', '.join(names[:4])})")
    return chosen


def run_parts(path: pathlib.Path, parts: dict[str, Callable[[], dict]], stamp: tuple[str, str] | None = None
              ) -> tuple[dict[str, dict], dict[str, float | None]]:
    """Runs each of `parts` ({key: thunk returning a JSON-able result}) once, in order, keeping each finished
    part in `path` (written atomically after every part), so that an interrupted job resumes with the parts it
    has not finished. `stamp`: (field, value) the file records; a file recording another value or none (its
    parts were computed from something else, e.g. parameters trained again or other settings) is started over
    (`stamp` makes one from the parameters and the settings).

    Returns ({key: result} in the order of `parts`, {key: seconds}): each part's own computing time, from
    whichever sitting ran it, so that their sum is the job's whole cost; None for a part kept in a file written
    before parts were timed.
    """
    done = json.loads(path.read_text()) if path.exists() else {}
    if stamp is not None and done.pop(stamp[0], None) != stamp[1]:  # another value, or none recorded
        done = {}
    seconds = done.pop(SECONDS_KEY, {})
    for key, thunk in parts.items():
        if key not in done:
            t0 = time.time()
            done[key] = thunk()
            seconds[key] = round(time.time() - t0, 1)
            write_atomic(path, json.dumps({**done, SECONDS_KEY: seconds, **dict([stamp] if stamp else [])}))
    return {key: done[key] for key in parts}, {key: seconds.get(key) for key in parts}


def stamp(params_sha256: str, settings: dict) -> tuple[str, str]:
    """`run_parts`' stamp for parts computed from parameters `params_sha256` under `settings` (JSON-able: what
    the parts' results depend on besides the parameters): ("stamp", "<params_sha256>|<16 hex digits of the
    settings' SHA-256>")."""
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return "stamp", f"{params_sha256}|{digest}"


def parts_timing(seconds: dict[str, float | None]) -> dict:
    """`{"eval_s": the parts' summed seconds}`, plus `eval_untimed_parts` (their keys) when some part's time
    was not recorded (`run_parts`): then eval_s is a lower bound."""
    untimed = [k for k, v in seconds.items() if v is None]
    out = {"eval_s": round(sum(v for v in seconds.values() if v is not None), 1)}
    return {**out, "eval_untimed_parts": untimed} if untimed else out


def _proc_stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat's fields from field 3 (the state) on (they follow the ')' of the name), or None where
    /proc does not tell (no such process, or not Linux)."""
    try:
        stat = pathlib.Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def process_start(pid: int) -> str | None:
    """When process `pid` started (clock ticks since boot, /proc/<pid>/stat's field 22), or None where /proc
    does not tell (no such process, or not Linux). With the pid it names one process: a pid is reused, the
    pair is not."""
    fields = _proc_stat(pid)
    return fields[19] if fields else None


def process_exited(pid: int) -> bool:
    """Whether /proc shows process `pid` as exited but not yet reaped by its parent (state Z, a zombie, or X):
    `os.kill(pid, 0)` still succeeds on it."""
    fields = _proc_stat(pid)
    return bool(fields) and fields[0] in ("Z", "X")


def claim_text() -> str:
    """What this process writes into a claim: "<pid> <start> <host>", its pid, its start time ('-' where /proc
    does not tell) and `socket.gethostname()`."""
    return f"{os.getpid()} {process_start(os.getpid()) or '-'} {socket.gethostname()}"


def claim_holder(path: pathlib.Path) -> tuple[int, str | None, str | None] | None:
    """(pid, start time or None, host or None) of the claim at `path` (`claim_text`; a claim written before hosts
    were recorded holds "<pid>" or "<pid> <start>": host None), or None where it has no readable pid.

    Raises:
      FileNotFoundError: there is no claim at `path`.
    """
    try:
        fields = path.read_text().split()
        pid = int(fields[0])
    except FileNotFoundError:
        raise
    except (OSError, ValueError, IndexError):
        return None
    start = fields[1] if len(fields) > 1 and fields[1] != "-" else None
    return pid, start, fields[2] if len(fields) > 2 else None


def _claim_state(path: pathlib.Path) -> str:
    """'absent', 'live' or 'stale' (a claim of this host whose process has exited, reaped or not, or whose pid
    now names another process, or a claim that stayed without a pid for a minute). A claim of another host is
    live: this host cannot see its process."""
    try:
        holder = claim_holder(path)
    except FileNotFoundError:
        return "absent"
    if holder is None:
        try:
            return "live" if time.time() - path.stat().st_mtime < 60 else "stale"
        except FileNotFoundError:
            return "absent"
    pid, start, host = holder
    if host not in (None, socket.gethostname()):
        return "live"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "stale"
    except PermissionError:
        pass
    if start is not None and process_start(pid) not in (None, start):
        return "stale"  # the pid was reused by a process that started later
    if process_exited(pid):
        return "stale"  # killed, and not reaped yet by its parent
    return "live"


def claim_is_live(path: pathlib.Path) -> bool:
    """Whether the process that wrote a claim (its content: `claim_text()`) still runs. A claim without a
    readable pid is live for a minute (its writer may be between creating it and writing the pid). A claim
    whose pid now names a process started at another time is stale; one written without a start time (where
    /proc does not tell) trusts the pid alone. A claim written on another host is live (its pid names no
    process here; remove the claim by hand if its worker is gone); one without a host is judged as this host's."""
    return _claim_state(path) == "live"


def drop_stale_claim(path: pathlib.Path) -> bool:
    """Removes the claim at `path` if it is stale, reading it again under an exclusive lock on its folder's
    `.claims.lock` (every taker-over holds it), so that a claim that another worker took over and renewed since
    this one read it stale is never removed. Returns whether it removed one."""
    with open(path.parent / ".claims.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _claim_state(path) != "stale":
            return False
        path.unlink(missing_ok=True)
        return True


SIGTERM_GRACE_SECONDS = 2.0


def _exceptions_ignored_here(frame) -> bool:
    """Whether `frame` runs inside a garbage-collector callback or a `__del__`, where Python prints an exception
    and drops it instead of raising it."""
    callbacks = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in callbacks or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


SIGTERM_RETRY_SECONDS = 0.01
SIGKILL_AFTER_SECONDS = 1.0


class _SigtermWatch:
    """What `exit_on_sigterm`'s handler shares with its watchdog, a daemon thread started with it.

    The handler (main thread) only reads and sets the flags `raised` and `late` and writes one byte to the
    non-blocking pipe ("t": a SIGTERM was handled; "r": one landed where its exit would be ignored, send it
    again). It starts no thread and takes no lock, wherever in the main thread the signal lands: a thread it
    started could fail to start (RuntimeError "can't start new thread" where `pthread_create` fails, raised in
    place of the SystemExit: an `except Exception` would catch it, and no grace period would start). The
    watchdog, started with SIGTERM blocked (it inherits the mask) so that the signal goes to the main thread,
    starts the grace period at the first byte, sends SIGTERM again SIGTERM_RETRY_SECONDS after an "r", and
    `grace` seconds after the first sets `late` and sends SIGTERM (the handler then restores its default and
    sends it again), then SIGKILL SIGKILL_AFTER_SECONDS later. Its SIGTERMs go to the main thread
    (`pthread_kill`): one that another thread (OpenBLAS's, XLA's) took would wait for the main thread's sleep or
    lock wait to end before its handler ran."""

    def __init__(self, grace: float):
        self.grace, self.pid, self.main = grace, os.getpid(), threading.main_thread().ident
        self.raised = self.late = False
        self._wake, self._waker = os.pipe()
        os.set_blocking(self._waker, False)
        # started with SIGTERM blocked, which it inherits: no SIGTERM can land in it before its first instruction
        unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        try:
            threading.Thread(target=self._watch, name="exit_on_sigterm", daemon=True).start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)  # the main thread's mask as it was

    def note(self, what: bytes) -> None:
        """Wakes the watchdog (from the handler): one write to a non-blocking pipe."""
        try:
            os.write(self._waker, what)
        except BlockingIOError:  # the pipe is full of notes the watchdog has not read yet: one more adds nothing
            pass

    def _watch(self) -> None:
        first = retry = None  # time.monotonic() of the first note, and of the SIGTERM to send again
        while True:
            due = [t for t in (None if first is None else first + self.grace, retry) if t is not None]
            timeout = max(0.0, min(due) - time.monotonic()) if due else None
            if select_fds.select([self._wake], [], [], timeout)[0]:
                notes, now = os.read(self._wake, 4096), time.monotonic()
                first = now if first is None else first
                if b"r" in notes and retry is None:
                    retry = now + SIGTERM_RETRY_SECONDS
            now = time.monotonic()
            if first is not None and now >= first + self.grace:
                self.late = True
                signal.pthread_kill(self.main, signal.SIGTERM)
                time.sleep(SIGKILL_AFTER_SECONDS)
                os.kill(self.pid, signal.SIGKILL)
                return
            if retry is not None and now >= retry:
                retry = None
                signal.pthread_kill(self.main, signal.SIGTERM)


_sigterm_watch: _SigtermWatch | None = None


def _on_sigterm(signum, frame):
    """`exit_on_sigterm`'s handler: sets flags, writes to a pipe, raises SystemExit once (`_SigtermWatch`)."""
    watch = _sigterm_watch
    if watch is None or watch.pid != os.getpid() or watch.late:
        # `grace` seconds after the first SIGTERM (or in a process forked from the one that installed the
        # handler, whose watchdog thread it lacks): SIGTERM's default ends the process now
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    if watch.raised:
        return
    if _exceptions_ignored_here(frame):
        watch.note(b"r")
        return
    watch.raised = True
    watch.note(b"t")
    raise SystemExit(128 + signum)


def exit_on_sigterm(grace: float = SIGTERM_GRACE_SECONDS) -> None:
    """Makes SIGTERM raise SystemExit, so that a terminated worker runs its `finally`s and removes its claim.

    Python runs the handler between two bytecodes of whatever runs then. Where that is a garbage-collector
    callback (JAX's `_xla_gc_callback` runs at every collection) or a `__del__`, an exception is ignored, so the
    handler raises nothing there and SIGTERM is sent again SIGTERM_RETRY_SECONDS later, to be handled outside it.
    It raises once: a later SIGTERM is ignored while the `finally`s run (a worker of `spawn_workers` under
    `timeout` gets two, its process group's and its parent's `terminate`). Other callbacks that ignore
    exceptions are not recognized and a `finally` may hang, so `grace` seconds after the first SIGTERM the
    handler restores SIGTERM's default and SIGTERM is sent again: a worker still alive then ends without its
    `finally`s (its claim, naming a dead process, is stale: `drop_stale_claim`). Where no handler runs then
    (the main thread inside C code, which runs none until it returns), SIGKILL follows SIGKILL_AFTER_SECONDS
    later. The sending is done by a watchdog thread started here, never by the handler, which starts no thread
    and takes no lock (`_SigtermWatch`). Calling it again in the same process keeps its handler and watchdog and
    takes the new `grace`. A process forked from this one (without exec; the project forks none) has the handler
    but not the watchdog: there SIGTERM's default ends it, until it calls `exit_on_sigterm` itself."""
    global _sigterm_watch
    signal.signal(signal.SIGTERM, _on_sigterm)  # (raises ValueError outside the main thread)
    if _sigterm_watch is None or _sigterm_watch.pid != os.getpid():
        _sigterm_watch = _SigtermWatch(grace)
    else:
        _sigterm_watch.grace = grace


def work(jobs: Sequence[J], run_job: Callable[[J], None], results: pathlib.Path, *,
         needs: Callable[[J], str | Sequence[str] | None] = lambda job: None, deadline: float | None = None,
         poll_seconds: float | None = None) -> list[str]:
    """Runs the jobs of `jobs` without a result (`results/<name>.json`) in plan order, each claimed first.

    Args:
      jobs: objects with a `name`; their order is the priority.
      run_job: runs one job and writes its result file.
      needs: the name (or names) of the jobs whose results must exist before this one starts, or None.
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

    def needed(job) -> list[str]:
        names = needs(job)
        return [] if not names else [names] if isinstance(names, str) else list(names)

    ran = []
    while True:
        pending = [j for j in jobs if not done(j.name)]
        if not pending:
            return ran
        if deadline is not None and time.time() > deadline:
            print(f"time budget spent: stopping before {pending[0].name} (rerun to go on)")
            return ran
        claimed = set()
        # the pending jobs' claims, and those of jobs they need that are not in `jobs` (a worker of another
        # selection of the same plan may be running one: then this one waits for it)
        outside = {n for j in pending for n in needed(j) if not done(n)} - {j.name for j in pending}
        for name in [j.name for j in pending] + sorted(outside):
            path = results / f"{name}.claim"
            state = _claim_state(path)
            if state == "live":
                claimed.add(name)
            elif state == "stale":  # left by a killed worker (only a claim read as stale: never one just created)
                drop_stale_claim(path)
        ready = [j for j in pending if j.name not in claimed and all(done(n) for n in needed(j))]
        if not ready:
            if any(n in claimed for j in pending for n in needed(j)):
                time.sleep(POLL_SECONDS if poll_seconds is None else poll_seconds)
                continue  # another worker runs a job that this one's next job needs
            blocked = [j.name for j in pending if j.name not in claimed]
            if blocked:
                print(f"not started: {', '.join(blocked)} (each needs a job without a result that nobody runs)")
            _report_other_hosts([j.name for j in pending if j.name in claimed], results)
            return ran
        job = ready[0]
        try:
            claim = os.open(results / f"{job.name}.claim", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            continue
        os.write(claim, claim_text().encode())
        os.close(claim)
        try:
            if not done(job.name):  # another worker may have finished it since `pending` was listed
                run_job(job)
                if not done(job.name):
                    raise RuntimeError(f"job {job.name!r} returned without writing {results / job.name}.json")
                ran.append(job.name)
        finally:
            (results / f"{job.name}.claim").unlink(missing_ok=True)


def _report_other_hosts(names: Sequence[str], results: pathlib.Path) -> None:
    """Prints the jobs of `names` whose claims were written on another host: this host leaves them to it."""
    here, held = socket.gethostname(), []
    for name in names:
        try:
            holder = claim_holder(results / f"{name}.claim")
        except FileNotFoundError:
            continue
        if holder is not None and holder[2] not in (None, here):
            held.append(f"{name}: claimed by pid {holder[0]} on host {holder[2]}")
    if held:
        print(f"left to other hosts ({'; '.join(held)}); if a worker there is gone, remove its claim in {results}")


def spawn_workers(count: int, argv: Sequence[str]) -> None:
    """Runs `count` copies of this program (`argv` plus `--worker=i`), each pinned to its own core with a
    one-threaded XLA (ONE_THREAD), and waits for them. Small models gain little from a second thread, so
    one-core workers finish more jobs per hour than one process on every core.

    Raises:
      ValueError: `count` exceeds the cores this process may use.
      SystemExit: a worker failed (its exit codes), or this process was terminated (the workers are too,
        as on any other exception or interrupt).
    """
    cores = sorted(os.sched_getaffinity(0))
    if not 1 <= count <= len(cores):
        raise ValueError(f"--workers={count}: must be 1 … {len(cores)}, the cores this process may use")
    procs = []
    try:
        for i in range(count):
            env = {**os.environ, "XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") + " " + ONE_THREAD).strip()}
            procs.append(subprocess.Popen([sys.executable, *argv, f"--worker={i}"], env=env,
                                          preexec_fn=lambda c=cores[i]: os.sched_setaffinity(0, {c})))
        while None in [p.poll() for p in procs]:  # each polled (reaped as it exits): no claim held by a zombie
            time.sleep(0.2)
        codes = [p.returncode for p in procs]
    except BaseException:  # terminated or interrupted: the workers stop too (and remove their claims)
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
        raise
    if any(codes):
        raise SystemExit(f"workers exited with {codes}")


def threads() -> int:
    """The threads this process's XLA uses: 1 under ONE_THREAD, else the cores it may run on."""
    return 1 if ONE_THREAD in os.environ.get("XLA_FLAGS", "") else len(os.sched_getaffinity(0))
