"""The length-generalization experiment's driver (experiments/length_generalization/run.py): the plan's
tiers (its workers and claims are posenc/jobs.py's, tested in tests/test_jobs.py)."""

import pathlib
import sys

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
