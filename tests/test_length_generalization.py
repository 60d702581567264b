"""The length-generalization experiment's driver (experiments/length_generalization/run.py): the plan's
tiers and workers sharing a plan through claims."""

import os
import pathlib
import subprocess
import sys
import threading
import time

from absl import flags

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "experiments" / "length_generalization"))
import run  # noqa: E402

if not flags.FLAGS.is_parsed():
    flags.FLAGS(["test"])


def test_first_tier_holds_one_seed_of_every_verdict():
    """Tier 1: RoPE and ALiBi passkey, the fine-tunes after their base, and every algorithmic task of every
    core encoding with and without randomized positions (none for NoPE), all seed 0; nothing else."""
    jobs = run.plan([0, 1, 2])
    names = [j.name for j in jobs]
    first = {j.name for j in jobs if j.tier == 1}
    algo = {f"{t}-{p}{rp}-s0" for t in run.ALGORITHMIC for p in run.CORE for rp in ("", "-rp")
            if not (rp and p in run.NO_RANDOMIZE)}
    fine = {f"passkey-rope-s0-ft{k}4x" for k in ("noscale", "pi", "yarn")}
    assert first == {"passkey-rope-s0", "passkey-alibi-s0"} | algo | fine
    assert all(j.name.endswith("-s0") or "-ft" in j.name for j in jobs if j.tier == 1)
    assert max(names.index(n) for n in first) < min(names.index(j.name) for j in jobs if j.tier == 2)
    assert all(names.index(j.init_from) < names.index(j.name) for j in jobs if j.init_from)
    assert len(names) == len(set(names))


def test_workers_share_a_plan_through_claims(tmp_path, monkeypatch):
    """Two workers run every job exactly once; a fine-tune starts only after its base run's result exists; a
    claim left by a dead process is dropped and its job run; a live claim is left alone."""
    jobs = [j for j in run.plan([0]) if j.name in ("passkey-rope-s0", "copy-rope-s0", "copy-alibi-s0",
                                                   "copy-none-s0", "passkey-rope-s0-ftpi4x")]
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / "copy-none-s0.claim").write_text(str(dead.pid))  # its writer has exited
    log, lock = [], threading.Lock()

    def fake_job(job, runs, results):
        with lock:
            log.append((job.name, "start", time.monotonic()))
        time.sleep(0.6 if job.name == "passkey-rope-s0" else 0.1)
        run._write(results / f"{job.name}.json", "{}")
        with lock:
            log.append((job.name, "end", time.monotonic()))

    monkeypatch.setattr(run, "run_job", fake_job)
    monkeypatch.setattr(run, "POLL_SECONDS", 0.05)
    workers = [threading.Thread(target=run.work, args=(jobs, tmp_path, tmp_path, time.time())) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=30)
    assert not any(w.is_alive() for w in workers)
    starts = [n for n, what, _ in log if what == "start"]
    assert sorted(starts) == sorted(j.name for j in jobs)  # each exactly once, the stale claim's job included
    when = {(n, what): t for n, what, t in log}
    assert when["passkey-rope-s0-ftpi4x", "start"] >= when["passkey-rope-s0", "end"]
    assert not list(tmp_path.glob("*.claim"))

    live = tmp_path / "live"
    live.mkdir()
    (live / "copy-rope-s0.claim").write_text(str(os.getpid()))  # held by a running process: this one
    log.clear()
    run.work(jobs[:2], live, live, time.time())
    assert [n for n, what, _ in log if what == "start"] == [j.name for j in jobs[:2] if j.name != "copy-rope-s0"]


def test_claim_liveness(tmp_path):
    claim = tmp_path / "x.claim"
    assert not run.claim_is_live(claim)  # no claim
    claim.write_text("")  # created, its pid not written yet: live for a minute
    assert run.claim_is_live(claim)
    os.utime(claim, (time.time() - 120, time.time() - 120))
    assert not run.claim_is_live(claim)
    claim.write_text(str(os.getpid()))
    assert run.claim_is_live(claim)
