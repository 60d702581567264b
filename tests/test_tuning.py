"""The fair tuning budget: seeded points in each rule's space, selection on validation only, test scores of the
default and the winner, and the budget taken from a LongRoPE search."""

import json
import math

import numpy as np
import pytest

from posenc import evaluate as ev
from posenc import sweep, tuning
from posenc.evaluate import Evaluator


@pytest.mark.parametrize("rule", tuning.RULES)
def test_points_are_seeded_inside_the_space_with_the_default_first(rule):
    s = 4.0
    points = tuning.sample_points(rule, s, 50, seed=3)
    space = tuning.space(rule, s)
    assert points[0] == tuning.default_point(rule, s)
    assert len(points) == (50 if space else 1)
    assert points == tuning.sample_points(rule, s, 50, seed=3)
    if space:
        assert points != tuning.sample_points(rule, s, 50, seed=4)
    for p in points[1:]:
        assert set(p) - {"dynamic"} - ({"factor"} if rule == "yarn" else set()) == set(space)
        for field, (lo, hi, _) in space.items():
            assert lo <= p[field] <= hi
    for p in points:  # every point is a valid scaling of the rule's kind
        assert sweep.eval_scaling(_FakeRun(), p, tuning.kind_of(rule), 1024).kind == tuning.kind_of(rule)


def test_log_uniform_draws_cover_the_range_evenly_in_log():
    factors = np.array([p["factor"] for p in tuning.sample_points("ntk", 4.0, 2001)[1:]])
    u = np.log(factors) / np.log(16.0)  # uniform on [0, 1] if the draw is log-uniform on [1, 16]
    assert abs(u.mean() - 0.5) < 0.03 and abs(u.var() - 1 / 12) < 0.01


@pytest.mark.parametrize("rule", tuning.RULES)
def test_the_default_point_is_the_rule_the_evaluation_names(rule):
    """At the target length the first point is exactly `posenc.evaluate.scaling_for`'s scaling of that name."""
    from posenc import evaluate as ev  # noqa: PLC0415

    fake = _FakeRun()
    ours = sweep.eval_scaling(fake, tuning.default_point(rule, 4.0), tuning.kind_of(rule), 1024)
    assert ours == ev.scaling_for(fake, rule, 1024)


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="rule must be one of"):
        tuning.sample_points("pi", 4.0, 8)
    with pytest.raises(ValueError, match="budget must be an integer >= 1"):
        tuning.sample_points("yarn", 4.0, 0)
    with pytest.raises(ValueError, match="s = target_len / the run's original length must be > 1"):
        tuning.sample_points("yarn", 1.0, 8)
    with pytest.raises(ValueError, match="seed must be an integer >= 0"):
        tuning.sample_points("yarn", 4.0, 8, seed=-1)


class _FakeRun:
    base_len = 256
    name = "fake"

    class cfg:  # noqa: N801
        class encoding:  # noqa: N801
            takes_rope_scaling = True


def test_tune_selects_on_validation_and_scores_test(trained_run, tmp_path, monkeypatch):
    splits = []
    real = sweep.run_eval_sweep
    monkeypatch.setattr(sweep, "run_eval_sweep", lambda *a, **k: splits.append(k["split"]) or real(*a, **k))
    result = tuning.tune(str(trained_run), "yarn", 64, 4, str(tmp_path), num_bytes=128, progress=False)
    assert splits == ["validation", "test"]  # every validation evaluation before the test split is scored
    val = [t["val_bpb"] for t in result["trials"]]
    assert len(val) == result["evaluations"] == 4 and all(math.isfinite(v) for v in val)
    assert result["best"]["val_bpb"] == min(val) and result["default"]["val_bpb"] == val[0]
    assert result["best"]["point"] == result["trials"][int(np.argmin(val))]["point"]
    assert result["selection"]["split"] == "validation"
    # the test numbers are the eval sweep's on the test split for the same points
    again = sweep.run_eval_sweep(str(trained_run), str(tmp_path / "check"), [("x", result["best"]["point"])],
                                 lengths=[64], scaling="yarn", num_bytes=128, split="test", progress=False)[0]
    assert result["best"]["test_bpb"]["64"] == again["bpb_L64"]
    # with their uncertainty and baseline: the bootstrap interval over the test windows and the n-gram floor on them
    assert list(result["best"]["test_ci"]["64"]) == pytest.approx(list(again["ci_L64"]), rel=1e-12)
    lo, hi = result["best"]["test_ci"]["64"]
    assert lo <= result["best"]["test_bpb"]["64"] <= hi and result["best"]["test_floor"]["64"] == again["floor_L64"]
    # and each test window's score, whose mean is the test number (equal windows), for paired comparisons
    windows = result["best"]["test_window_bpb"]["64"]
    assert windows == again["window_bpb_L64"] and len(windows) == 128 // 64
    assert np.mean(windows) == pytest.approx(result["best"]["test_bpb"]["64"], rel=1e-12)
    assert json.loads((tmp_path / "yarn_64.json").read_text())["best"] == result["best"]
    monkeypatch.setattr(Evaluator, "nll", lambda *a, **k: pytest.fail("a rerun recomputed a finished point"))
    rerun = tuning.tune(str(trained_run), "yarn", 64, 4, str(tmp_path), num_bytes=128, progress=False)
    assert rerun["trials"] == result["trials"]  # resumed from the point records
    monkeypatch.undo()
    # a test record kept before per-window scores were recorded is scored again, the validation ones are not
    test_record = tmp_path / "yarn_64" / "test" / "points" / f"{result['best']['name']}.json"
    old = json.loads(test_record.read_text())
    test_record.write_text(json.dumps({k: v for k, v in old.items() if not k.startswith("window_bpb_L")}))
    calls = []
    real_nll = Evaluator.nll
    monkeypatch.setattr(Evaluator, "nll", lambda *a, **k: calls.append(1) or real_nll(*a, **k))
    again = tuning.tune(str(trained_run), "yarn", 64, 4, str(tmp_path), num_bytes=128, progress=False)
    assert len(calls) == 1 and again["best"]["test_window_bpb"] == result["best"]["test_window_bpb"]
    monkeypatch.undo()
    kept = (tmp_path / "yarn_64.json").read_text()
    for kwargs, field in (({"seed": 1}, "seed: 0 in"), ({"budget": 5}, "budget: 4 in")):
        with pytest.raises(ValueError, match=f"with other settings \\({field}"):
            tuning.tune(str(trained_run), "yarn", 64, kwargs.get("budget", 4), str(tmp_path), num_bytes=128,
                        seed=kwargs.get("seed", 0), progress=False)
        assert (tmp_path / "yarn_64.json").read_text() == kept


def test_selection_skips_failed_points_keeps_the_earlier_of_ties_and_fails_when_all_fail(monkeypatch, tmp_path):
    from posenc import evaluate as ev  # noqa: PLC0415

    monkeypatch.setattr(ev, "load_run", lambda w: type("R", (_FakeRun,), {"step": 7})())
    monkeypatch.setattr(ev, "run_stream", lambda run, split: (np.zeros(100_000, np.uint8), None, "x"))
    val = {"ntk-0000": 2.0, "ntk-0001": None, "ntk-0002": 1.5, "ntk-0003": 1.5, "ntk-0004": float("nan")}
    calls = []

    def fake_sweep(workdir, root, points, *, lengths, scaling, num_bytes, split, progress, windows=False):
        calls.append((split, [n for n, _ in points]))
        out = []
        for name, point in points:
            bpb = val[name] if split == "validation" else 3.0
            failed = bpb is None
            out.append({"name": name, "point": point, "status": "failed" if failed else "done", "num_bytes": 4096,
                        **({"error": "boom"} if failed else {f"bpb_L{n}": bpb for n in lengths})})
        return out

    monkeypatch.setattr(sweep, "run_eval_sweep", fake_sweep)
    result = tuning.tune("w", "ntk", 1024, 5, str(tmp_path), num_bytes=4096, progress=False)
    assert result["best"]["name"] == "ntk-0002" and result["default"]["name"] == "ntk-0000"
    assert calls == [("validation", list(val)), ("test", ["ntk-0000", "ntk-0002"])]
    assert [t["status"] for t in result["trials"]].count("failed") == 1
    val.update({k: None for k in val})
    with pytest.raises(RuntimeError, match="every ntk point failed on validation"):
        tuning.tune("w", "ntk", 1024, 5, str(tmp_path), num_bytes=4096, progress=False)
    with pytest.raises(ValueError, match="num_bytes"):  # before any evaluation
        tuning.tune("w", "ntk", 1024, 5, str(tmp_path), num_bytes=1000, progress=False)


def test_a_root_under_the_home_directory_is_written_there(monkeypatch, tmp_path):
    """--out=~/… reaches tune() as written (the shell expands no `~` after `--out=`): the result and the point
    records go under $HOME, not into a directory named `~` in the working directory."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir(), cwd.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(cwd)
    monkeypatch.setattr(ev, "load_run", lambda w: type("R", (_FakeRun,), {"step": 7})())
    monkeypatch.setattr(ev, "run_stream", lambda run, split: (np.zeros(100_000, np.uint8), None, "x"))
    roots = []

    def fake_sweep(workdir, root, points, *, lengths, scaling, num_bytes, split, progress, windows=False):
        roots.append(root)
        return [{"name": name, "point": point, "status": "done", "num_bytes": num_bytes,
                 **{f"bpb_L{n}": 2.0 for n in lengths}} for name, point in points]

    monkeypatch.setattr(sweep, "run_eval_sweep", fake_sweep)
    tuning.tune("w", "ntk", 1024, 2, "~/tuned", num_bytes=4096, progress=False)
    assert (home / "tuned" / "ntk_1024.json").exists() and not (cwd / "~").exists()
    assert roots and all(r.startswith(str(home / "tuned" / "ntk_1024")) for r in roots)


@pytest.mark.parametrize("rule", ["linear", "ntk", "yarn"])
def test_a_static_rule_s_points_keep_their_factor_at_every_length(rule):
    """A tuned static point is one scaling at every test length: the target's s = 4, not L / L0."""
    for p in tuning.sample_points(rule, 4.0, 20, seed=1):
        factors = {sweep.eval_scaling(_FakeRun(), p, tuning.kind_of(rule), n).factor for n in (512, 1024, 4096)}
        assert factors == {p["factor"]} and (rule != "yarn" or p["factor"] == 4.0)


def test_budget_from_a_longrope_result(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"evaluations": 180, "bytes_per_evaluation": {"1024": 4096}}))
    assert tuning.longrope_evaluations(tmp_path / "a.json") == 180
    assert tuning.longrope_bytes(tmp_path / "a.json", 1024) == 4096
    with pytest.raises(ValueError, match="no bytes per evaluation at 2048.*give --num_bytes"):
        tuning.longrope_bytes(tmp_path / "a.json", 2048)
    (tmp_path / "b.json").write_text(json.dumps({"factor": 4.0}))
    with pytest.raises(ValueError, match="no 'evaluations' count"):
        tuning.longrope_evaluations(tmp_path / "b.json")


def test_script_takes_budget_and_bytes_per_evaluation_from_the_search(trained_run, tmp_path):
    """scripts/tune_scaling.py with --longrope: the search's evaluation count is the budget and its bytes per
    evaluation at the target are each evaluation's (--test_num_bytes the test's); a file without them at the target
    is a usage error."""
    import pathlib  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    root = pathlib.Path(__file__).resolve().parent.parent
    search = tmp_path / "longrope.json"
    search.write_text(json.dumps({"target_len": 64, "evaluations": 2, "bytes_per_evaluation": {"64": 192, "32": 96}}))

    def script(*flags):
        return subprocess.run([sys.executable, "scripts/tune_scaling.py", f"--workdir={trained_run}", "--target_len=64",
                               "--rules=linear", f"--longrope={search}", f"--out={tmp_path / 'out'}", *flags], cwd=root,
                              capture_output=True, text=True, timeout=600)

    done = script("--test_num_bytes=128")  # the test split's bytes apart from a validation evaluation's
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "linear_64.json").read_text())
    assert result["evaluations"] == 2 and result["selection"]["num_bytes"] == 192 and result["test_num_bytes"] == 128
    search.write_text(json.dumps({"target_len": 128, "evaluations": 2}))
    bad = script()
    assert bad.returncode != 0 and "no bytes per evaluation at 64" in bad.stderr and "--num_bytes" in bad.stderr


def test_paired_gap_pairs_the_tuned_winner_with_another_scaling_on_the_same_windows():
    rng = np.random.default_rng(0)
    hard = rng.normal(3.0, 0.3, size=16)
    tuned = {"rule": "yarn", "run": "runs/extrapolation/rope-s0", "target_len": 1024, "test_num_bytes": 16 * 1024,
             "step": 400, "best": {"test_window_bpb": {"256": [0.0] * 64, "1024": (hard + 0.01).tolist()}}}
    row = {"run": "rope-s0", "num_bytes": 16 * 1024, "length": 1024, "split": "test", "step": 400,
           "window_bpb": (hard + rng.normal(0, 0.001, 16)).tolist()}
    lo, hi, n = tuning.paired_gap(tuned, row)
    assert n == 16 and (lo, hi) == ev.paired_interval(row["window_bpb"], tuned["best"]["test_window_bpb"]["1024"])
    assert lo < -0.005 and hi < 0  # the other scaling better, though each side's own spread (0.3) is far wider
    assert tuning.paired_gap({**tuned, "best": {}}, row) is None  # a result kept before per-window scores
    one = {"rule": "yarn", "run": "runs/extrapolation/rope-s0", "target_len": 1024, "test_num_bytes": 1024, "step": 400,
           "best": {"test_window_bpb": {"1024": [3.0]}}}
    assert tuning.paired_gap(one, {**row, "num_bytes": 1024, "window_bpb": [2.9]}) is None  # one window: no interval
    for other in ({**row, "num_bytes": 8 * 1024}, {**row, "length": 2048}, {**row, "window_bpb": row["window_bpb"][:8]}):
        with pytest.raises(ValueError, match="not the same windows"):
            tuning.paired_gap(tuned, other)


def test_paired_gap_refuses_a_row_of_another_split_or_checkpoint():
    """The tuned winner's windows are its run's test windows at its step: a validation row of the same bytes and
    length, or a row of another checkpoint, has as many windows but not the same ones (or not the same model), and
    pairing them would give an interval of nothing."""
    tuned = {"rule": "yarn", "run": "runs/r", "target_len": 64, "test_num_bytes": 128, "step": 8,
             "best": {"test_window_bpb": {"64": [2.0, 2.1]}}}
    row = {"run": "r", "num_bytes": 128, "length": 64, "split": "test", "step": 8, "window_bpb": [1.9, 2.1]}
    assert tuning.paired_gap(tuned, row)[2] == 2
    for other, match in (({**row, "split": "validation"}, "split 'validation'"), ({**row, "step": 4}, "step 4")):
        with pytest.raises(ValueError, match=f"not the same windows.*{match}|{match}.*not the same windows"):
            tuning.paired_gap(tuned, other)


def test_paired_gap_refuses_a_row_of_another_run():
    """The tuned winner's windows are its own run's: a row of another run (the same split, step, bytes and length:
    another seed, another encoding) has as many windows but not the same model, and the paired interval would mix
    two models' noise. The row names its run as the evaluation does (the workdir's last folder, or the whole
    workdir), the tuned result by the workdir it was given."""
    tuned = {"rule": "yarn", "run": "runs/extrapolation/rope-s0", "target_len": 64, "test_num_bytes": 128, "step": 8,
             "best": {"test_window_bpb": {"64": [2.0, 2.1]}}}
    row = {"run": "rope-s0", "num_bytes": 128, "length": 64, "split": "test", "step": 8, "window_bpb": [1.9, 2.1]}
    for name in ("rope-s0", "runs/extrapolation/rope-s0", "./runs/extrapolation/rope-s0/"):
        assert tuning.paired_gap(tuned, {**row, "run": name})[2] == 2
    assert tuning.paired_gap({**tuned, "run": "runs/extrapolation/rope-s0/"}, row)[2] == 2
    for name in ("rope-s1", "alibi-s0", "runs/lm_study/rope-s0"):
        with pytest.raises(ValueError, match=f"run 'runs/extrapolation/rope-s0', the other row of run '{name}': not "
                                             "the same model"):
            tuning.paired_gap(tuned, {**row, "run": name})
