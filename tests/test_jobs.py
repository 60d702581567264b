"""posenc/jobs.py: workers share a plan through claims, each job runs once, dependencies wait, stale claims are
dropped, a failing job stops its worker and releases its claim, and the deadline stops new jobs."""

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import threading
import time

import pytest

from posenc import jobs


@dataclasses.dataclass(frozen=True)
class Job:
    name: str
    init_from: str | None = None


PLAN = [Job("base"), Job("a"), Job("b"), Job("stale"), Job("tuned", init_from="base")]


def test_workers_share_a_plan_through_claims(tmp_path):
    """Two workers run every job exactly once; a job starts only after the job it needs has its result; a
    claim left by a dead process is dropped and its job run; a live claim is left alone."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "stale.claim").write_text(str(dead.pid))  # its writer has exited
    log, lock, where = [], threading.Lock(), [tmp_path]

    def fake_job(job):
        with lock:
            log.append((job.name, "start", time.monotonic()))
        time.sleep(0.6 if job.name == "base" else 0.1)
        with lock:  # before the result exists: a worker waiting for it may start its next job at once
            log.append((job.name, "end", time.monotonic()))
        jobs.write_atomic(where[0] / f"{job.name}.json", "{}")

    kw = dict(needs=lambda j: j.init_from, poll_seconds=0.05)
    workers = [threading.Thread(target=jobs.work, args=(PLAN, fake_job, tmp_path), kwargs=kw) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=30)
    assert not any(w.is_alive() for w in workers)
    starts = [n for n, what, _ in log if what == "start"]
    assert sorted(starts) == sorted(j.name for j in PLAN)  # each exactly once, the stale claim's job included
    when = {(n, what): t for n, what, t in log}
    assert when["tuned", "start"] >= when["base", "end"]
    assert not list(tmp_path.glob("*.claim"))

    live = tmp_path / "live"
    live.mkdir()
    (live / "a.claim").write_text(str(os.getpid()))  # held by a running process: this one
    log.clear()
    where[0] = live
    assert jobs.work(PLAN[:3], fake_job, live) == ["base", "b"]
    assert [n for n, what, _ in log if what == "start"] == ["base", "b"]


def test_a_stale_claim_renewed_by_another_worker_is_not_dropped(tmp_path):
    """Two workers read one claim as stale; the first drops it and claims the job anew; the second, taking over
    after it, reads the claim again under the lock and leaves the live one."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = tmp_path / "a.claim"
    path.write_text(str(dead.pid))
    assert jobs._claim_state(path) == "stale"  # both workers read this
    assert jobs.drop_stale_claim(path) and not path.exists()  # the first takes it over
    path.write_text(jobs.claim_text())  # and claims the job (this process: live)
    assert not jobs.drop_stale_claim(path) and path.read_text() == jobs.claim_text()  # the second leaves it


def test_a_stale_claim_is_read_again_under_the_folder_lock(tmp_path):
    """drop_stale_claim waits for the folder's `.claims.lock`: a worker that reads a claim stale while another
    holds the lock (taking the claim over and renewing it) reads it again after, and leaves the renewed claim."""
    import fcntl  # noqa: PLC0415
    import threading  # noqa: PLC0415

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path = tmp_path / "a.claim"
    path.write_text(str(dead.pid))
    result = []
    with open(tmp_path / ".claims.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker taking the claim over
        waiting = threading.Thread(target=lambda: result.append(jobs.drop_stale_claim(path)))
        waiting.start()
        waiting.join(0.5)
        assert waiting.is_alive() and path.read_text() == str(dead.pid)  # it waits, and removes nothing yet
        path.write_text(jobs.claim_text())  # the other worker's renewed claim
        fcntl.flock(lock, fcntl.LOCK_UN)
    waiting.join(10)
    assert result == [False] and path.read_text() == jobs.claim_text()


def test_a_failing_job_stops_its_worker_and_releases_its_claim(tmp_path):
    def broken(job):
        raise RuntimeError(f"{job.name} broke")

    with pytest.raises(RuntimeError, match="base broke"):
        jobs.work(PLAN, broken, tmp_path)
    assert not list(tmp_path.glob("*"))  # no result, no claim left behind


def test_deadline_stops_new_jobs(tmp_path):
    ran = []
    assert jobs.work(PLAN, ran.append, tmp_path, deadline=time.time() - 1) == []
    assert ran == []


def test_a_job_waiting_for_a_missing_dependency_is_not_started(tmp_path):
    """`tuned` needs `base`, which nobody runs or holds: the worker returns instead of waiting forever."""
    ran = []
    assert jobs.work([PLAN[-1]], ran.append, tmp_path, needs=lambda j: j.init_from) == []
    assert ran == []


def test_a_job_without_its_result_is_an_error(tmp_path):
    with pytest.raises(RuntimeError, match="'a' returned without writing"):
        jobs.work([Job("a")], lambda job: None, tmp_path)
    assert not list(tmp_path.glob("*"))


def test_claim_liveness(tmp_path):
    claim = tmp_path / "x.claim"
    assert not jobs.claim_is_live(claim)  # no claim
    claim.write_text("")  # created, its pid not written yet: live for a minute
    assert jobs.claim_is_live(claim)
    os.utime(claim, (time.time() - 120, time.time() - 120))
    assert not jobs.claim_is_live(claim)
    claim.write_text(str(os.getpid()))
    assert jobs.claim_is_live(claim)
    claim.write_text(jobs.claim_text())  # pid and start time
    assert jobs.claim_is_live(claim)


def test_a_claim_whose_pid_was_reused_is_stale(tmp_path, monkeypatch):
    """The claim's pid runs, but the process holding it started at another time: the pid was reused."""
    monkeypatch.setattr(jobs, "process_start", lambda pid: "1000")
    claim = tmp_path / "x.claim"
    claim.write_text(f"{os.getpid()} 999")
    assert not jobs.claim_is_live(claim)
    claim.write_text(f"{os.getpid()} 1000")
    assert jobs.claim_is_live(claim)
    monkeypatch.setattr(jobs, "process_start", lambda pid: None)  # no /proc: the pid alone decides
    claim.write_text(f"{os.getpid()} 999")
    assert jobs.claim_is_live(claim)


def test_a_claim_of_a_killed_process_not_yet_reaped_is_stale(tmp_path):
    """A worker killed while its parent waits on another one is a zombie until reaped: `os.kill(pid, 0)` still
    succeeds on it, and its claim must not hold back the jobs that need its job."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    claim = tmp_path / "x.claim"
    claim.write_text(f"{proc.pid} {jobs.process_start(proc.pid)}")
    assert jobs.claim_is_live(claim)
    os.kill(proc.pid, signal.SIGKILL)
    deadline = time.time() + 30
    while not jobs.process_exited(proc.pid) and time.time() < deadline:  # not reaped: a zombie
        time.sleep(0.02)
    os.kill(proc.pid, 0)  # the pid still answers
    assert not jobs.claim_is_live(claim)
    proc.wait()


def test_write_atomic_replaces_whole(tmp_path):
    path = tmp_path / "r.json"
    jobs.write_atomic(path, "old")
    jobs.write_atomic(path, "new")
    assert path.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_write_atomic_syncs_the_data_then_the_rename_and_a_failed_write_leaves_no_temporary_file(tmp_path,
                                                                                                 monkeypatch, caplog):
    """The new bytes are synced in a temporary file of the same folder, renamed over the file, and the folder
    synced after the rename (else a crash may bring the old file back after later writes reached the disk); a
    write that fails (a full disk) keeps the old file and leaves no temporary file behind."""
    import errno  # noqa: PLC0415
    import stat  # noqa: PLC0415

    path, synced, real_fsync = tmp_path / "r.json", [], os.fsync
    jobs.write_atomic(path, "old")

    def fsync(fd):  # records this test's files only (another thread of the process may sync its own)
        where = pathlib.Path(os.readlink(f"/proc/self/fd/{fd}"))
        if tmp_path in (where, where.parent):
            synced.append((stat.S_ISDIR(os.fstat(fd).st_mode), where, path.read_text()))
        real_fsync(fd)

    monkeypatch.setattr(jobs.os, "fsync", fsync)
    jobs.write_atomic(path, "new")
    (data_dir, data_file, before), (is_dir, folder, after) = synced
    assert not data_dir and data_file.parent == tmp_path and data_file != path and before == "old"
    assert is_dir and folder == tmp_path and after == "new"

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(jobs.os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        jobs.write_atomic(path, "newer")
    assert path.read_text() == "new" and [p.name for p in tmp_path.iterdir()] == ["r.json"]

    def folder_fails(fd):  # the data sync works; the folder's (a network mount's EIO) does not
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EIO, "Input/output error")
        real_fsync(fd)

    monkeypatch.setattr(jobs.os, "fsync", folder_fails)
    with caplog.at_level("WARNING", logger="posenc.jobs"):
        jobs.write_atomic(path, "newest")  # written: the rename is done, so it is not reported as a failure
    assert path.read_text() == "newest" and "its folder was not synced" in caplog.text


def test_writers_sharing_a_pid_each_finish_through_their_own_temporary_file(tmp_path, monkeypatch):
    """Two writers of one file with the same PID (processes on two hosts sharing a cache or results folder) both
    finish: each writes its own temporary file (both written before either is renamed here); the file is one
    writer's whole, no temporary file is left, and its mode is a plain open's (not mkstemp's 0600)."""
    import threading  # noqa: PLC0415

    path = tmp_path / "cache.npy"
    barrier, real_replace, errors = threading.Barrier(2, timeout=60), os.replace, []
    monkeypatch.setattr(os, "getpid", lambda: 1)  # the PID the writers share

    def replace(a, b):  # both writers' files written before either is renamed
        if str(tmp_path) in str(b):
            barrier.wait()
        return real_replace(a, b)

    monkeypatch.setattr(os, "replace", replace)

    def write(payload):
        try:
            jobs.write_bytes_atomic(path, payload)
        except Exception as e:  # noqa: BLE001  (reported below)
            errors.append(e)

    threads = [threading.Thread(target=write, args=(bytes([k]) * 100_000,)) for k in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [p.name for p in tmp_path.iterdir()] == ["cache.npy"]
    assert path.read_bytes() in (b"\x01" * 100_000, b"\x02" * 100_000)
    assert path.stat().st_mode & 0o777 == 0o666 & ~jobs._UMASK


def test_spawn_workers_rejects_more_workers_than_cores():
    with pytest.raises(ValueError, match="--workers=0"):
        jobs.spawn_workers(0, ["x"])
    with pytest.raises(ValueError, match=f"--workers={len(os.sched_getaffinity(0)) + 1}"):
        jobs.spawn_workers(len(os.sched_getaffinity(0)) + 1, ["x"])


def test_a_job_waits_while_another_worker_holds_what_it_needs(tmp_path):
    """`tuned` needs `base`, claimed by a live process (this one): the worker polls until base's result exists."""
    (tmp_path / "base.claim").write_text(str(os.getpid()))
    ran = []
    worker = threading.Thread(target=lambda: ran.append(jobs.work(
        [Job("base"), Job("tuned", init_from="base")], lambda job: jobs.write_atomic(tmp_path / f"{job.name}.json", "{}"),
        tmp_path, needs=lambda j: j.init_from, poll_seconds=0.02)))
    worker.start()
    time.sleep(0.3)
    assert worker.is_alive() and not (tmp_path / "tuned.json").exists()  # waiting, not returned
    jobs.write_atomic(tmp_path / "base.json", "{}")
    (tmp_path / "base.claim").unlink()
    worker.join(timeout=10)
    assert ran == [["tuned"]]


def test_a_job_waits_for_what_it_needs_from_a_worker_of_another_selection(tmp_path):
    """`tuned` alone (as `--only=tuned`) while another command's worker runs `base` (a live claim): it waits for
    base's result instead of returning as if nobody ran base."""
    (tmp_path / "base.claim").write_text(str(os.getpid()))
    ran = []
    worker = threading.Thread(target=lambda: ran.append(jobs.work(
        [Job("tuned", init_from="base")], lambda job: jobs.write_atomic(tmp_path / f"{job.name}.json", "{}"),
        tmp_path, needs=lambda j: j.init_from, poll_seconds=0.02)))
    worker.start()
    time.sleep(0.3)
    assert worker.is_alive() and not (tmp_path / "tuned.json").exists()
    jobs.write_atomic(tmp_path / "base.json", "{}")
    (tmp_path / "base.claim").unlink()
    worker.join(timeout=10)
    assert ran == [["tuned"]]


_WORKER_SCRIPT = """
import os, sys, pathlib
i = int(sys.argv[-1].removeprefix("--worker="))
pathlib.Path(sys.argv[1], f"w{i}").write_text(f"{sorted(os.sched_getaffinity(0))}|{os.environ['XLA_FLAGS']}")
sys.exit(int(sys.argv[2]) if i == 0 else 0)
"""


def test_one_thread_is_flags_xla_reads():
    """Each token a flag ("--…"): XLA skips a bare word silently, so it would only look like a setting."""
    assert all(token.startswith("--") for token in jobs.ONE_THREAD.split())
    env = {**os.environ, "XLA_FLAGS": jobs.ONE_THREAD, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", "import jax.numpy as jnp; print(float(jnp.ones(3).sum()))"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "3.0", proc.stderr[-1000:]  # an unknown flag aborts


def test_spawn_workers_pins_one_thread_per_core_and_reports_failures(tmp_path):
    cores = sorted(os.sched_getaffinity(0))
    jobs.spawn_workers(len(cores), ["-c", _WORKER_SCRIPT, str(tmp_path), "0"])
    for i, core in enumerate(cores):
        affinity, flags = (tmp_path / f"w{i}").read_text().split("|")
        assert affinity == f"[{core}]" and jobs.ONE_THREAD in flags
    with pytest.raises(SystemExit, match=r"workers exited with \[3"):
        jobs.spawn_workers(1, ["-c", _WORKER_SCRIPT, str(tmp_path), "3"])


_REAP_SCRIPT = """
import os, pathlib, sys, time
out, i = pathlib.Path(sys.argv[1]), int(sys.argv[-1].removeprefix("--worker="))
if i == 1:
    (out / "pid1").write_text(str(os.getpid()))
    sys.exit(0)
deadline = time.time() + 30
while not (out / "pid1").exists() and time.time() < deadline:
    time.sleep(0.02)
pid = (out / "pid1").read_text()
while os.path.exists(f"/proc/{pid}") and time.time() < deadline:  # gone only once its parent reaped it
    time.sleep(0.02)
(out / "w0").write_text("reaped" if not os.path.exists(f"/proc/{pid}") else "zombie")
"""


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two workers need two cores to pin to")
def test_spawn_workers_reaps_a_worker_that_exits_while_another_runs(tmp_path):
    """Worker 1 exits first; worker 0 runs until worker 1 is reaped. Waiting on the workers in order would keep
    worker 1 a zombie (its claims live) as long as worker 0 runs."""
    jobs.spawn_workers(2, ["-c", _REAP_SCRIPT, str(tmp_path)])
    assert (tmp_path / "w0").read_text() == "reaped"


# The SIGTERM tests wait on what the child writes (a file, its output), never on time: their timeouts only bound
# a failure. A child that must not reach its grace period gets one of 60 s or more; one that the grace period
# ends may end by its SIGTERM (-15) or, where no handler ran within SIGKILL_AFTER_SECONDS (a starved process),
# by SIGKILL (-9): neither runs the `finally`s.
_CHILD_SECONDS = 60  # a failure's bound: a child that should have ended waits this long at most


def _run_child(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True,
                          timeout=_CHILD_SECONDS)


def test_a_terminated_worker_removes_its_claim(tmp_path):
    script = f"""
import pathlib, time
from posenc import jobs
jobs.exit_on_sigterm(grace=60)
class Job:
    name, init_from = "slow", None
def run(job):
    pathlib.Path({str(tmp_path / "running")!r}).write_text("")  # the claim is written, the job runs
    for _ in range(1200):  # (short sleeps: a SIGTERM that another thread took cuts none; its handler runs after)
        time.sleep(0.1)
jobs.work([Job()], run, pathlib.Path({str(tmp_path)!r}))
"""
    proc = subprocess.Popen([sys.executable, "-c", script])
    try:
        deadline = time.monotonic() + _CHILD_SECONDS
        while not (tmp_path / "running").exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (tmp_path / "slow.claim").read_text().split()[0] == str(proc.pid)
        proc.terminate()
        assert proc.wait(timeout=_CHILD_SECONDS) == 128 + 15  # SystemExit(128 + SIGTERM)
    finally:
        proc.kill()
        proc.wait()
    assert not (tmp_path / "slow.claim").exists()


_SWALLOW = """
import gc, os, signal, sys, time, weakref
from posenc import jobs
jobs.exit_on_sigterm(grace=float(sys.argv[2]))
def term():
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(float(sys.argv[3]))  # the handler runs here, where an exception would be ignored
class Hook:
    def __del__(self):
        term()
class Obj:
    pass
def collected(*args):
    if args[0] == "start" and not getattr(collected, "done", False):
        collected.done = True
        term()
try:
    if sys.argv[1] == "del":
        Hook()
    elif sys.argv[1] == "gc":
        gc.callbacks.append(collected)
        gc.collect()
    else:  # a weakref callback: not recognized
        obj = Obj()
        ref = weakref.ref(obj, lambda r: term())
        del obj
    time.sleep(120)
finally:
    print("finally ran", flush=True)
"""


@pytest.mark.parametrize("where", ["del", "gc"])
def test_sigterm_in_a_callback_that_ignores_exceptions_raises_after_it(where):
    """SIGTERM arriving in a `__del__` or a garbage-collector callback (in the studies JAX's `_xla_gc_callback`):
    a SystemExit raised there would be ignored and the worker would go on, so the handler has SIGTERM sent again
    and raises once the callback has returned; the worker's `finally`s run."""
    proc = _run_child(_SWALLOW, where, "60", "0.2")
    assert proc.returncode == 128 + 15, proc.stderr  # SystemExit(128 + SIGTERM), not the grace period's kill
    assert proc.stdout == "finally ran\n" and "SystemExit" not in proc.stderr


def test_sigterm_whose_exit_is_swallowed_still_ends_the_worker():
    """SIGTERM in a callback the handler does not recognize (a weakref callback): its SystemExit is lost (Python
    prints it as ignored), and the grace period's SIGTERM ends the worker, without its `finally`s, instead of
    letting it sleep on (had the exit been raised, it would have ended with 128 + 15 and "finally ran")."""
    proc = _run_child(_SWALLOW, "weakref", "0.5", "0.2")
    assert "SystemExit" in proc.stderr  # the exit was swallowed
    assert proc.returncode in (-15, -9) and "finally ran" not in proc.stdout  # the grace period ended the worker


def test_sigterm_retried_past_the_grace_period_ends_the_worker():
    """A callback that outlasts the grace period (here it would sleep 120 s, past the test's timeout): SIGTERM
    is sent again until the grace period ends, and then the grace period's SIGTERM ends the worker (its
    `finally`s do not run)."""
    proc = _run_child(_SWALLOW, "del", "0.3", "120")
    assert proc.returncode in (-15, -9) and "finally ran" not in proc.stdout


def test_a_second_sigterm_while_the_finallys_run_is_ignored():
    """A worker of `spawn_workers` under `timeout` gets SIGTERM twice: its process group's, and its parent's
    `terminate` a moment later. The second must not end it with SIGTERM's default halfway through its
    `finally`s (its claim would stay); only the grace period's does."""
    script = """
import os, signal, time
from posenc import jobs
jobs.exit_on_sigterm(grace=60)
try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(120)
finally:
    os.kill(os.getpid(), signal.SIGTERM)  # the parent's terminate, while the cleanup runs
    time.sleep(0.2)
    print("finally ran", flush=True)
"""
    proc = _run_child(script)
    assert proc.returncode == 128 + 15, proc.stderr
    assert proc.stdout == "finally ran\n"


def test_sigterm_retried_while_the_main_thread_runs_no_handler_ends_the_worker_after_the_grace():
    """SIGTERM handled in a `__del__` (to be sent again after it), and then the main thread runs no Python
    signal handler, as in C code until it returns (in the studies an XLA compilation; here SIGTERM is blocked in
    it, so that no SIGTERM sent again can land before): the grace period's SIGTERM cannot end the worker, and
    SIGKILL does, SIGKILL_AFTER_SECONDS after it."""
    script = """
import os, signal, time
from posenc import jobs
jobs.exit_on_sigterm(grace=0.3)
def step():
    pass
class Hook:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)  # handled here: it is to be sent again
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        step()  # (a SIGTERM sent again before the block is handled here, still in the `__del__`)
Hook()
time.sleep(120)
"""
    assert _run_child(script).returncode == -signal.SIGKILL


def test_sigterm_raises_where_no_thread_can_start():
    """The handler starts no thread (its watchdog was started by `exit_on_sigterm`): where none can start
    (`pthread_create` failing under a process limit or for want of memory; here for a stack no address space
    holds), SIGTERM still raises SystemExit, not the RuntimeError "can't start new thread", which an
    `except Exception` would catch and go on (with no grace period to end it)."""
    script = """
import os, signal, threading, time
from posenc import jobs
jobs.exit_on_sigterm(grace=60)
threading.stack_size(1 << 47)
try:
    threading.Thread(target=print).start()
except RuntimeError as e:
    print(e, flush=True)
try:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(120)
finally:
    print("finally ran", flush=True)
"""
    proc = _run_child(script)
    assert proc.returncode == 128 + 15, proc.stderr
    assert proc.stdout == "can't start new thread\nfinally ran\n"


def test_exit_on_sigterm_twice_keeps_one_handler_and_takes_the_new_grace():
    """A second call (a worker's `main` run twice in one process) adds no second watchdog and takes its grace:
    a swallowed exit (weakref callback) ends the worker after the second call's 0.3 s, not the first's 600."""
    script = """
import os, signal, threading, time, weakref
from posenc import jobs
jobs.exit_on_sigterm(grace=600)
once = threading.active_count()
jobs.exit_on_sigterm(grace=0.3)
print(once, threading.active_count(), flush=True)
class Obj:
    pass
obj = Obj()
ref = weakref.ref(obj, lambda r: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(0.2)))
del obj
time.sleep(120)
"""
    proc = _run_child(script)
    once, twice = proc.stdout.split()
    assert once == twice and proc.returncode in (-15, -9), proc.stderr


def test_a_process_forked_after_exit_on_sigterm_ends_on_sigterm_and_leaves_its_parent_alone():
    """A process forked from one that called `exit_on_sigterm` (none of the project's is: `subprocess` execs)
    has its handler but not its watchdog thread: SIGTERM's default ends it, and its parent's watchdog never
    hears of it (it would end the parent after the grace period)."""
    script = """
import os, signal, time
from posenc import jobs
jobs.exit_on_sigterm(grace=0.1)
pid = os.fork()
if pid == 0:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(120)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status), flush=True)
time.sleep(1.5)  # past the parent's grace and SIGKILL, were its watchdog told
print("parent alive", flush=True)
"""
    proc = _run_child(script)
    assert proc.stdout.split("\n")[:2] == ["-15", "parent alive"] and proc.returncode == 0, proc.stderr


def test_the_watchdog_thread_starts_with_sigterm_blocked_and_the_main_thread_keeps_its_mask():
    """The watchdog has SIGTERM blocked from its first instruction (it inherits the mask it is started under): a
    SIGTERM arriving while it starts cannot be taken by it, where it would wait for the main thread's blocking call
    to end before its handler ran. The main thread's mask is as it was (SIGTERM reaches it)."""
    script = """
import signal, threading
from posenc import jobs
at_start = []
watch = jobs._SigtermWatch._watch
def recorded(self):
    at_start.append(signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, set()))
    watch(self)
jobs._SigtermWatch._watch = recorded
jobs.exit_on_sigterm(grace=60)
(thread,) = [t for t in threading.enumerate() if t.name == "exit_on_sigterm"]
for _ in range(6000):
    if at_start:
        break
    thread.join(0.01)
print(at_start, signal.SIGTERM in signal.pthread_sigmask(signal.SIG_BLOCK, set()), flush=True)
"""
    proc = _run_child(script)
    assert proc.returncode == 0 and proc.stdout == "[True] False\n", (proc.stdout, proc.stderr)


def test_a_job_with_several_needs_starts_after_all_of_them(tmp_path):
    """`pick` needs `a` and `b`: it runs last however the plan orders it, and not at all while one is missing."""
    order = []

    def run(job):
        order.append(job.name)
        jobs.write_atomic(tmp_path / f"{job.name}.json", "{}")

    plan = [Job("pick"), Job("a"), Job("b")]
    needs = {"pick": ("a", "b")}
    assert jobs.work(plan[:2], run, tmp_path, needs=lambda j: needs.get(j.name)) == ["a"]  # b: nobody runs it
    assert not (tmp_path / "pick.json").exists()
    assert jobs.work(plan, run, tmp_path, needs=lambda j: needs.get(j.name)) == ["b", "pick"]
    assert order == ["a", "b", "pick"]


def test_parts_resume_sum_their_own_seconds_and_restart_under_another_stamp(tmp_path, monkeypatch):
    """An interrupted job keeps its finished parts and their seconds; the next sitting runs only the rest, and
    the timing sums every part's own seconds (not the last sitting's); another stamp starts over; a part kept by
    a file without times makes eval_s a lower bound that names it."""
    path, calls = tmp_path / "job.partial", []
    clock = iter(range(0, 1000, 5))  # each time.time() call advances 5 s: each part takes 5 s
    monkeypatch.setattr(jobs.time, "time", lambda: float(next(clock)))

    def thunk(key, fail=False):
        def run():
            calls.append(key)
            if fail:
                raise RuntimeError("interrupted")
            return {"rows": [key]}
        return run

    with pytest.raises(RuntimeError, match="interrupted"):
        jobs.run_parts(path, {"a": thunk("a"), "b": thunk("b", fail=True)}, ("sha", "x"))
    done, seconds = jobs.run_parts(path, {"a": thunk("a"), "b": thunk("b")}, ("sha", "x"))
    assert calls == ["a", "b", "b"] and done == {"a": {"rows": ["a"]}, "b": {"rows": ["b"]}}
    assert seconds == {"a": 5.0, "b": 5.0} and jobs.parts_timing(seconds) == {"eval_s": 10.0}
    jobs.run_parts(path, {"a": thunk("a"), "b": thunk("b")}, ("sha", "y"))  # other parameters: both again
    assert calls[3:] == ["a", "b"]
    path.write_text('{"a": {"rows": ["old"]}, "sha": "y"}')  # a file from before parts were timed
    done, seconds = jobs.run_parts(path, {"a": thunk("a"), "b": thunk("b")}, ("sha", "y"))
    assert done["a"] == {"rows": ["old"]} and seconds == {"a": None, "b": 5.0}
    assert jobs.parts_timing(seconds) == {"eval_s": 5.0, "eval_untimed_parts": ["a"]}
    path.write_text('{"a": {"rows": ["unstamped"]}}')  # a file recording no stamp: its origin unknown, started over
    done, _ = jobs.run_parts(path, {"a": thunk("a")}, ("sha", "y"))
    assert done["a"] == {"rows": ["a"]}


def test_a_stamp_names_the_parameters_and_changes_with_any_setting():
    field, value = jobs.stamp("abc", {"examples": 20, "lengths": [256, 512]})
    assert field == "stamp" and value.startswith("abc|") and len(value) == len("abc|") + 16
    assert jobs.stamp("abc", {"lengths": [256, 512], "examples": 20}) == (field, value)  # key order is no setting
    assert jobs.stamp("abc", {"examples": 10, "lengths": [256, 512]})[1] != value
    assert jobs.stamp("abd", {"examples": 20, "lengths": [256, 512]})[1] != value


def test_select_takes_a_prefix_or_a_regular_expression_and_refuses_what_matches_nothing():
    plan = [Job(n) for n in ("copy-rope-s1", "copy-none-s1", "copy-xpos-s0", "reverse-rope-s1", "iambic-rope-s0-ft-pi4x")]
    assert jobs.select(plan, None) == plan and jobs.select(plan, "") == plan
    assert [j.name for j in jobs.select(plan, "copy")] == ["copy-rope-s1", "copy-none-s1", "copy-xpos-s0"]
    assert [j.name for j in jobs.select(plan, "copy-(rope|none)-s1$")] == ["copy-rope-s1", "copy-none-s1"]
    assert [j.name for j in jobs.select(plan, "iambic-rope-s0-ft")] == ["iambic-rope-s0-ft-pi4x"]
    with pytest.raises(ValueError, match=r"--only='rope' matches none of the 5 planned jobs \(e.g. copy-rope-s1, "):
        jobs.select(plan, "rope")  # matched from the start of the name, as a prefix is
    with pytest.raises(ValueError, match=r"--only='copy-\(rope' is not a regular expression"):
        jobs.select(plan, "copy-(rope")


def test_packed_rows_come_back_exactly_and_a_result_reads_either_form():
    rows = [{"step": 1, "train_loss": 5.506735801696777, "tokens_per_s": None},
            {"step": 20, "val_bpb": 1.0 / 3.0, "note": "é"}]
    packed = jobs.pack_rows(rows)
    assert jobs.unpack_rows(packed) == rows and packed == jobs.pack_rows(rows)  # exact, and the same bytes each time
    assert jobs.result_curve({"curve_gz": packed}) == rows == jobs.result_curve({"curve": rows})
    assert jobs.result_curve({}) == [] and jobs.unpack_rows(jobs.pack_rows([])) == []
    long = [{"step": s, "train_loss": 1.0 / s} for s in range(1, 400)]
    assert len(jobs.pack_rows(long)) < len(json.dumps(long)) / 2


def test_a_claim_records_its_host_and_only_this_hosts_claims_are_judged_by_pid(tmp_path, capsys):
    """A claim names its pid, start time and host. Results shared between machines: a claim written on another
    host is never judged by this host's processes (its pid may be gone here, or name another process here) — it
    is live, never dropped, its job not run here, and the worker says who holds it. Claims written before hosts
    were recorded (a pid, or a pid and a start time) are judged as this host's."""
    import socket  # noqa: PLC0415

    host = socket.gethostname()
    assert jobs.claim_text().split() == [str(os.getpid()), jobs.process_start(os.getpid()), host]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    claim = tmp_path / "a.claim"
    for text in (f"{dead.pid} 12345 {host}", f"{dead.pid} 12345", str(dead.pid), f"{os.getpid()} 999 {host}"):
        claim.write_text(text)
        assert not jobs.claim_is_live(claim), text
    for text in (f"{dead.pid} 12345 elsewhere", f"{os.getpid()} 999 elsewhere", f"{dead.pid} - elsewhere"):
        claim.write_text(text)
        assert jobs.claim_is_live(claim) and not jobs.drop_stale_claim(claim) and claim.read_text() == text, text
    ran = []

    def fake_job(job):
        ran.append(job.name)
        jobs.write_atomic(tmp_path / f"{job.name}.json", "{}")

    assert jobs.work([Job("a"), Job("b")], fake_job, tmp_path) == ["b"] and ran == ["b"]
    assert claim.read_text() == f"{dead.pid} - elsewhere"
    assert f"a: claimed by pid {dead.pid} on host elsewhere" in capsys.readouterr().out
