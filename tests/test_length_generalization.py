"""The length-generalization experiment's driver (experiments/length_generalization/run.py): the plan's
tiers (its workers and claims are posenc/jobs.py's, tested in tests/test_jobs.py)."""

import importlib.util
import json
import math
import pathlib
import statistics
import sys

import pytest
from absl import flags

from posenc import jobs, tasks, timing

from conftest import assert_same_figure

ROOT = pathlib.Path(__file__).resolve().parent.parent
HERE = ROOT / "experiments" / "length_generalization"


def _load(name: str, path: pathlib.Path):
    """A script loaded by its path under its own module name: `import report` would find whichever
    experiment's report.py an earlier test put first on sys.path (the LM study's has a pilot_section too)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


run = _load("run", HERE / "run.py")  # as `run`: the report imports its plan from it by that name
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


def test_recall_seeds_come_after_the_other_tasks_seeds():
    """Tier 4 (seeds 1 and 2 of the algorithmic tasks): every copy and reverse job before the first recall job,
    and each task's seeds in order."""
    names = [j.name for j in run.plan([0, 1, 2]) if j.tier == 2 and j.task in run.ALGORITHMIC
             and j.name.split("-")[1] in run.CORE]
    recall = [i for i, n in enumerate(names) if n.startswith("recall-")]
    others = [i for i, n in enumerate(names) if not n.startswith("recall-")]
    assert len(recall) == 18 and len(others) == 36 and max(others) < min(recall)
    for task in run.ALGORITHMIC:
        seeds = [int(n[-1]) for n in names if n.startswith(f"{task}-")]
        assert seeds == sorted(seeds)


def test_recall_differs_from_copy_only_in_its_learning_rate():
    """config.py: the algorithmic tasks share model, steps and data; recall trains at RECALL_LR (its plateau at
    the others' 2e-3, the docstring's pilots)."""
    config = _load("lengthgen_config", HERE / "config.py")
    copy, recall = (run.load_config_file(str(HERE / "config.py"), f"task={t},posenc=rope,seed=1") for t in ("copy", "recall"))
    assert recall.learning_rate == config.RECALL_LR != copy.learning_rate
    assert recall.model.num_layers == copy.model.num_layers == config.ALGO_LAYERS
    recall.learning_rate = copy.learning_rate
    recall.task.name, recall.task.version = copy.task.name, copy.task.version
    assert recall.to_dict() == copy.to_dict()


def test_a_passkey_job_resumes_its_evaluation_by_part_and_times_every_part(tmp_path, monkeypatch):
    """run_job (training and task evaluation stubbed): the plain grid first, then each scaling and method, rows
    concatenated in that order; a sitting that stops keeps its finished parts, the next runs only the rest, and
    eval_s sums every part's own seconds."""
    job = next(j for j in run.plan([0]) if j.name == "passkey-rope-s0")
    calls = []
    CURVE = '{"step": 1, "train_loss": 1.0}\n{"step": 1, "val_loss": 0.5, "val_accuracy": 1.0}\n'

    def fake_train(config, workdir):
        pathlib.Path(workdir).mkdir(parents=True, exist_ok=True)
        (pathlib.Path(workdir) / "config.json").write_text('{"batch_size": 2, "train_len": 8}')
        (pathlib.Path(workdir) / "metrics.jsonl").write_text(CURVE)
        calls.append("train")
        return {}  # what train_and_evaluate returns for a run that finished in an earlier sitting

    def fake_eval(workdir, scalings, methods=("none",), **kw):
        key = f"{','.join(scalings)}|{','.join(methods)}"
        calls.append(key)
        if key == "yarn|none" and calls.count(key) == 1:
            raise KeyboardInterrupt  # the first sitting stops here
        return {"rows": [{"key": key}], "lengths": list(kw["lengths"]), "examples": kw["examples"]}

    monkeypatch.setattr(run, "train_and_evaluate", fake_train)
    monkeypatch.setattr(run, "evaluate_tasks", fake_eval)
    monkeypatch.setattr(run, "params_sha256", lambda workdir: f"sha of {pathlib.Path(workdir).name}")
    results = tmp_path / "results"
    results.mkdir()
    try:
        run.run_job(job, tmp_path / "runs", results)
    except KeyboardInterrupt:
        pass
    calls.remove("train")
    first = list(calls)
    assert first[0] == "none|none" and first[-1] == "yarn|none"
    run.run_job(job, tmp_path / "runs", results)
    calls.remove("train")
    assert calls[len(first):][0] == "yarn|none" and "none|none" not in calls[len(first):]  # only the rest
    out = json.loads((results / "passkey-rope-s0.json").read_text())
    scalings = [s for s in job.scalings if s != "none"]
    assert [r["key"] for r in out["rows"]] == (["none|none"] + [f"{s}|none" for s in scalings]
                                              + [f"none|{m}" for m in job.methods if m != "none"])
    assert set(out["timing"]) == {"train_s", "eval_s"} and not (results / "passkey-rope-s0.partial").exists()
    assert out["config"] == {"batch_size": 2, "train_len": 8}  # the run's own config.json, kept with its result
    assert "curve" not in out and jobs.result_curve(out) == [json.loads(x) for x in CURVE.splitlines()]  # packed
    assert out["final_metrics"] == {"step": 1, "val_loss": 0.5, "val_accuracy": 1.0}  # the curve's, not the sitting's
    assert out["params_sha256"] == "sha of passkey-rope-s0" and "init_sha256" not in out  # not a fine-tune
    assert out["cpu_id"] == timing.cpu_id()  # the CPU's family with its model name (which can name several)
    # the plain grid's examples differ from the coarse parts': kept per part, never the first part's for all
    assert out["lengths"] == list(run.PASSKEY_LENGTHS) and "examples" not in out
    assert out["parts"]["own"]["examples"] != out["parts"]["scaling:yarn"]["examples"]

    # a part kept from a sitting under other settings is not reused: another depth grid evaluates it again
    calls.clear()
    (results / "passkey-rope-s0.json").unlink()
    try:
        run.run_job(job, tmp_path / "runs", results)  # stops at yarn again (its first call in this list)
    except KeyboardInterrupt:
        pass
    monkeypatch.setattr(run, "DEPTHS", (0.0, 1.0))
    run.run_job(job, tmp_path / "runs", results)
    assert calls.count("none|none") == 2  # evaluated again under the new settings

    # a fine-tune whose base run no longer holds the parameters its result was scored with refuses before training
    ft = next(j for j in run.plan([0]) if j.name == "passkey-rope-s0-ftpi4x")
    (results / "passkey-rope-s0.json").write_text(json.dumps({**out, "params_sha256": "sha of another run"}))
    calls.clear()
    with pytest.raises(ValueError, match="its base .*passkey-rope-s0 holds parameters sha of passk…, not the sha of anoth…"):
        run.run_job(ft, tmp_path / "runs", results)
    assert calls == []


def test_a_pilot_is_recorded_beside_the_others_and_rendered_with_its_cpu(tmp_path):
    """run_pilot.py's pieces: overrides parsed as literals, an unknown field named, a rerun replaces its row,
    and the report's pilot table says which CPU and how many cores a pilot ran on."""
    report = _load("length_generalization_report", HERE / "report.py")
    run_pilot = _load("length_generalization_run_pilot", HERE / "pilot" / "run_pilot.py")

    assert run_pilot.parse_overrides(["model.num_layers=4", "positions.randomize=true", "task.filler=repeat"]) == {
        "model.num_layers": 4, "positions.randomize": True, "task.filler": "repeat"}
    with pytest.raises(ValueError, match="--set 'model.num_layer': config has no field 'num_layer'"):
        run_pilot.pilot_config("copy", "none", {"model.num_layer": 4})
    config = run_pilot.pilot_config("copy", "none", {"model.num_layers": 4})
    randomized = run_pilot.pilot_config("copy", "rope", {"positions.randomize": True})  # as the recorded rp pilots
    assert randomized.positions.version == tasks.POSITIONS_VERSION and config.positions.version is None
    assert randomized.positions.max_position == 512 and config.positions.max_position is None  # the variant's
    with pytest.raises(ValueError, match="--set 'positions.randomize' must be true or false, got 1"):
        run_pilot.pilot_config("copy", "rope", {"positions.randomize": 1})
    assert config.model.num_layers == 4 and config.model.posenc == "none" and config.task.name == "copy"
    (tmp_path / "runs.json").write_text(json.dumps({"cpu": "AMD EPYC, 2 cores", "runs": []}))
    curve = "".join(json.dumps({"step": s, "tokens_per_s": 1000.0, "val_loss": 1.0 / s, "val_accuracy": s / 400})
                    + "\n" for s in (100, 200, 300, 400))
    entry = {"name": "copy-none-4l", "task": "copy", "posenc": "none", "overrides": {"model.num_layers": 4},
             "test_accuracy_by_length": {"16": 0.5}, "threads": 1, "cpu": "Intel(R) Xeon(R) Processor"}
    run_pilot.record(tmp_path, {**entry, "test_accuracy_by_length": {"16": 0.1}}, curve)
    run_pilot.record(tmp_path, entry, curve)  # the same name again: replaced, not appended
    pilot = json.loads((tmp_path / "runs.json").read_text())
    assert pilot["runs"] == [entry]
    row = next(line for line in report.pilot_section(tmp_path, pilot) if line.startswith("| copy-none-4l"))
    assert "(1 core, Intel(R) Xeon(R) Processor)" in row and "| test 16: 50% |" in row and "400: 100%" in row
    assert "| copy · none |" in row  # no task_version: layout 1, copy's current one
    scored = {**{k: v for k, v in entry.items() if k != "test_accuracy_by_length"}, "name": "copy-val",
              "validation_accuracy_by_length": {"16": 0.25}}  # what run_pilot.py records now
    run_pilot.record(tmp_path, scored, curve)
    pilot = json.loads((tmp_path / "runs.json").read_text())
    assert "| val 16: 25% |" in next(line for line in report.pilot_section(tmp_path, pilot) if line.startswith("| copy-val"))
    old_recall = {**entry, "name": "recall-old", "task": "recall"}  # recorded before recall's layout 2
    run_pilot.record(tmp_path, old_recall, curve)
    pilot = json.loads((tmp_path / "runs.json").read_text())
    row = next(line for line in report.pilot_section(tmp_path, pilot) if line.startswith("| recall-old"))
    assert "| recall (layout v1) · none |" in row


def test_the_two_layer_results_are_their_own_section_and_stay_out_of_the_verdicts(tmp_path):
    """results/2layers/ (the first budget) is rendered with each run's layers as its rows record them and
    its in-range failures, while the verdicts read only results/*.json."""
    report = _load("length_generalization_report", HERE / "report.py")

    def result(layers, correct):  # copy accuracy (of 100) at 16, 32, 64, 96, 128
        rows = [{"length": n, "scaling": "none", "method": "none", "depth": None, "status": "ok", "correct": c,
                 "n": 100, "num_layers": layers} for n, c in zip(run.ALGO_LENGTHS, correct)]
        return {"rows": rows, "curve": [{"step": 100, "tokens_per_s": 1000.0}], "tokens_per_step": 600,
                "timing": {"train_s": 60.0, "eval_s": 30.0}}

    (tmp_path / "results" / "2layers").mkdir(parents=True)
    for name, layers, correct, folder in (("copy-none-s0", 2, (77, 4, 0, 0, 0), "2layers"),
                                          ("copy-none-s0", 4, (99, 95, 40, 10, 0), ""),
                                          ("copy-rope-s0", 4, (100, 98, 0, 0, 0), ""),
                                          ("reverse-none-s0", 4, (100, 98, 0, 0, 0), ""),
                                          ("reverse-rope-s0", 4, (100, 99, 0, 0, 0), "")):
        (tmp_path / "results" / folder / f"{name}.json").write_text(json.dumps(result(layers, correct)))
    text = report.write_report(tmp_path, jobs=run.plan([0]))
    main, first = text.split("### The first budget: 2 layers")
    assert "| copy-none-s0 | 4 | 99 [" in main and "| copy-rope-s0 | 4 |" in main
    assert "| copy-none-s0 | 2 | 77 [" in first and "1 of 1 runs stayed below 90% at 32" in first
    assert f"config.py's {report.algo_layers()} layers" in first
    config = _load("lengthgen_config", HERE / "config.py")
    assert f"peak learning rate: copy 0.002, reverse 0.002, recall {config.RECALL_LR:g}." in main  # read from config.py
    kazemnejad = next(line for line in text.splitlines() if "NoPE extrapolates" in line and " on copy" in line)
    assert "vs rope +16.7 points (z = " in kazemnejad  # the 4-layer NoPE run, not the 2-layer one below the bar
    assert "**inconclusive**" in kazemnejad  # NoPE cannot be worse than rope's 0 of 300: holds by construction
    reverse = next(line for line in text.splitlines() if "NoPE extrapolates" in line and " on reverse" in line)
    assert "**inconclusive**" in reverse and "cannot test the claim: vs rope (0 of 300)" in reverse  # zero ties zero
    assert "over 5 jobs, the archived ones included" in text  # their compute is counted


def test_a_result_of_another_task_layout_is_refused_in_the_tables_and_rendered_in_its_archive(tmp_path):
    """A recall result scored before recall's layout changed (rows without task_version: version 1) stops the
    report in results/ and is rendered, outside the verdicts, in results/recall-v1/."""
    report = _load("length_generalization_report", HERE / "report.py")
    old = _algo_result((100, 69, 0, 0, 0))
    new = _algo_result((100, 97, 20, 5, 0))
    for row in new["rows"]:
        row["task_version"] = tasks.VERSIONS["recall"]
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "recall-rope-s0.json").write_text(json.dumps(old))
    with pytest.raises(ValueError, match=r"results/recall-rope-s0.json was scored on 'recall' layout version 1; "
                                         r"posenc generates version 3 .* results/recall-v1/"):
        report.write_report(tmp_path, jobs=run.plan([0]))
    stray = tmp_path / "stray"
    (stray / "results").mkdir(parents=True)
    (stray / "results" / "notes.json").write_text("{}")  # a stray file: named, not a bare KeyError
    with pytest.raises(ValueError, match=r"results/notes.json is not a result of a task"):
        report.write_report(stray, jobs=run.plan([0]))
    (stray / "results" / "notes.json").unlink()
    (stray / "results" / "copy-rope-s0.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match=r"results/copy-rope-s0.json has no rows"):
        report.write_report(stray, jobs=run.plan([0]))
    (tmp_path / "results" / "recall-v1").mkdir()
    (tmp_path / "results" / "recall-rope-s0.json").rename(tmp_path / "results" / "recall-v1" / "recall-rope-s0.json")
    (tmp_path / "results" / "recall-rope-s0.json").write_text(json.dumps(new))
    text = report.write_report(tmp_path, jobs=run.plan([0]))
    main, archive = text.split("### Recall's first layout, task version 1")
    assert "| recall-rope-s0 | 4 | 100 [" in main and "| 97 [" in main and "| 69 [" not in main
    assert "| 69 [" in archive and "1 of 1 runs stayed below 90% at 32" in archive


def test_a_randomized_result_of_another_positions_version_is_refused(tmp_path):
    """A randomized-positions result whose rows record no positions_version (drawn per padded row: version 1)
    stops the report; one of the version drawn now is read."""
    report = _load("length_generalization_report_rp", HERE / "report.py")
    (tmp_path / "results").mkdir()
    old = _algo_result((100, 97, 20, 5, 0))
    (tmp_path / "results" / "copy-rope-rp-s0.json").write_text(json.dumps(old))
    with pytest.raises(ValueError, match=r"copy-rope-rp-s0.json was trained with randomized positions drawn by "
                                         r"version 1; .* such as results/rp-v1/"):
        report.check_versions(report.load(tmp_path / "results"))
    for row in old["rows"]:
        row["positions_version"] = tasks.POSITIONS_VERSION
    (tmp_path / "results" / "copy-rope-rp-s0.json").write_text(json.dumps(old))
    report.check_versions(report.load(tmp_path / "results"))  # no error
    config = run.load_config_file(str(HERE.parents[1] / "configs" / "tasks.py"), "task=copy,posenc=rope,randomize")
    plain = run.load_config_file(str(HERE.parents[1] / "configs" / "tasks.py"), "task=copy,posenc=rope")
    assert config.positions.version == tasks.POSITIONS_VERSION and plain.positions.version is None


def test_a_result_trained_with_other_settings_than_config_py_is_refused(tmp_path):
    """A result records its run's config; one whose learning rate (or another rendered setting) differs from
    config.py's stops the report instead of being labelled with config.py's settings. Results from before the
    field record no config and are rendered."""
    report = _load("length_generalization_report_settings", HERE / "report.py")
    config = _load("lengthgen_config_settings", HERE / "config.py")
    recall = run.load_config_file(str(HERE / "config.py"), "task=recall,posenc=rope")
    (tmp_path / "results").mkdir()
    old = _algo_result((100, 97, 20, 5, 0))
    for row in old["rows"]:
        row["task_version"] = tasks.VERSIONS["recall"]
    (tmp_path / "results" / "recall-rope-s0.json").write_text(json.dumps(old))
    text = report.write_report(tmp_path, jobs=run.plan([0]))
    assert "| recall-rope-s0 | 4 | 100 [" in text and "0 of the 1 results below record" in text
    same = {**old, "config": recall.to_dict()}
    (tmp_path / "results" / "recall-rope-s0.json").write_text(json.dumps(same))
    text = report.write_report(tmp_path, jobs=run.plan([0]))
    assert "| recall-rope-s0 | 4 | 100 [" in text and "1 of the 1 results below record" in text
    other = {**old, "config": {**recall.to_dict(), "learning_rate": 2e-3}}
    (tmp_path / "results" / "recall-rope-s0.json").write_text(json.dumps(other))
    with pytest.raises(ValueError, match=r"results/recall-rope-s0.json was trained with learning_rate 0.002 "
                                         rf"\(now: {config.RECALL_LR!r}\)"):
        report.write_report(tmp_path, jobs=run.plan([0]))


def test_passkey_stops_at_its_criterion_and_the_fine_tunes_run_their_steps():
    """configs/tasks.py's passkey budget: up to 8000 steps, stopping at 99% validation exact match; the
    fine-tunes at 4x override the stop and train all their steps."""
    plan = {j.name: j for j in run.plan([0])}
    main = run.job_config(plan["passkey-rope-s0"], pathlib.Path("runs"))
    assert (main.train_steps, main.task.stop_accuracy) == (8000, 0.99)
    for name in ("passkey-rope-s0-ftnoscale4x", "passkey-rope-s0-ftpi4x", "passkey-rope-s0-ftyarn4x"):
        ft = run.job_config(plan[name], pathlib.Path("runs"))
        assert (ft.train_steps, ft.task.stop_accuracy) == (run.FT_STEPS, None)
        assert ft.init_from == str(pathlib.Path("runs") / "passkey-rope-s0")


def test_the_plan_s_lengths_are_its_job_configs_lengths():
    """run.py's in-range lengths (which the report's rules and tables name) are the train_len its jobs train
    at, and the fine-tunes' scaling factor is their length over the base run's."""
    plan = {j.name: j for j in run.plan([0])}
    train_len = {n: run.job_config(j, pathlib.Path("runs")).train_len for n, j in plan.items()}
    assert {train_len[n] for n in plan if n.startswith("passkey-") and "-ft" not in n} == {run.PASSKEY_TRAIN_LEN}
    assert {train_len[n] for n in plan if "-ft" in n} == {run.FT_LEN}
    assert {train_len[n] for n in plan if not n.startswith("passkey-")} == {run.ALGO_TRAIN_LEN}
    assert run.PASSKEY_LENGTHS[0] == run.PASSKEY_TRAIN_LEN and run.FT_LEN in run.PASSKEY_LENGTHS
    yarn = run.job_config(plan["passkey-rope-s0-ftyarn4x"], pathlib.Path("runs")).model.rope.scaling
    assert yarn.factor * yarn.original_max_len == run.FT_LEN


def test_passkey_results_of_another_budget_are_refused_and_render_in_their_archive(tmp_path):
    """A passkey result trained for a fixed 3000 steps (no stop) stops the report in results/; in
    results/passkey-3000/ it is rendered with its fine-tunes, outside the verdicts. A fine-tune whose starting
    parameters are not its base result's is refused too: its base was trained again."""
    report = _load("length_generalization_report_passkey", HERE / "report.py")
    plan = {j.name: j for j in run.plan([0])}
    config = run.job_config(plan["passkey-alibi-s0"], pathlib.Path("runs")).to_dict()
    old = {**_passkey_result(20, 0), "config": {**config, "train_steps": 3000,
                                                  "task": {**config["task"], "stop_accuracy": None}}}
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "passkey-alibi-s0.json").write_text(json.dumps(old))
    with pytest.raises(ValueError, match=r"passkey-alibi-s0.json was trained with schedule_steps 3000 \(now: 8000\), "
                                         r"task.stop_accuracy None \(now: 0.99\), train_steps 3000 \(now: 8000\)"):
        report.write_report(tmp_path, jobs=run.plan([0]))
    (tmp_path / "results" / "passkey-alibi-s0.json").write_text(json.dumps(_passkey_result(20, 0)))
    with pytest.raises(ValueError, match="passkey-alibi-s0.json records no training config"):
        report.write_report(tmp_path, jobs=run.plan([0]))  # a passkey result from before results recorded it
    (tmp_path / "results" / "passkey-alibi-s0.json").rename(tmp_path / "results" / "passkey-alibi-s7.json")
    with pytest.raises(ValueError, match="passkey-alibi-s7.json is no job of run.py's plan"):
        report.write_report(tmp_path, jobs=run.plan([0]))
    (tmp_path / "results" / "passkey-alibi-s7.json").unlink()
    (tmp_path / "results" / "passkey-alibi-s0.json").write_text(json.dumps(old))
    archive = tmp_path / "results" / "passkey-3000"
    archive.mkdir()
    (tmp_path / "results" / "passkey-alibi-s0.json").rename(archive / "passkey-alibi-s0.json")
    ft = {"rows": [{"length": n, "depth": None, "scaling": "run", "method": "none", "n": 10, "status": "ok",
                    "correct": 9} for n in run.PASSKEY_LENGTHS]}
    (archive / "passkey-rope-s0-ftpi4x.json").write_text(json.dumps(ft))
    (tmp_path / "results" / "passkey-alibi-s0.json").write_text(json.dumps(
        {**_passkey_result(3, 0), "config": config}))  # the current budget, below the bar
    text = report.write_report(tmp_path, jobs=run.plan([0]))
    main, kept = text.split("### Passkey's first budget: a fixed 3000 steps")
    assert "`passkey-alibi-s0` (15% at 256)" in main and "(100% at 256)" not in main
    assert "0 of its 1 runs ended below 90% at 256" in kept and "| passkey-rope-s0-ftpi4x | run | 90 [" in kept
    alibi = next(line for line in text.splitlines() if "ALiBi" in line and "**" in line)
    assert "**not tested**: in-range accuracy below 90% (passkey-alibi-s0)" in alibi  # the current result only

    base = {**_passkey_result(20, 0), "config": run.job_config(plan["passkey-rope-s0"], pathlib.Path("runs")).to_dict(),
            "params_sha256": "a"}
    (tmp_path / "results" / "passkey-rope-s0.json").write_text(json.dumps(base))
    tune = {**ft, "job": {"init_from": "passkey-rope-s0"}, "init_sha256": "b",
            "config": run.job_config(plan["passkey-rope-s0-ftpi4x"], pathlib.Path("runs")).to_dict()}
    (tmp_path / "results" / "passkey-rope-s0-ftpi4x.json").write_text(json.dumps(tune))
    with pytest.raises(ValueError, match=r"passkey-rope-s0-ftpi4x.json started from parameters b, not from "
                                         r"results/passkey-rope-s0.json whose parameters differ \(params_sha256 a\)"):
        report.write_report(tmp_path, jobs=run.plan([0]))
    (tmp_path / "results" / "passkey-rope-s0-ftpi4x.json").write_text(json.dumps({k: v for k, v in tune.items()
                                                                                if k != "init_sha256"}))
    with pytest.raises(ValueError, match=r"passkey-rope-s0-ftpi4x.json records no starting parameters, and "
                                         r"results/passkey-rope-s0.json records its own \(a\)"):
        report.write_report(tmp_path, jobs=run.plan([0]))
    (tmp_path / "results" / "passkey-rope-s0.json").write_text(json.dumps({k: v for k, v in base.items()
                                                                          if k != "params_sha256"}))
    (tmp_path / "results" / "passkey-rope-s0-ftpi4x.json").write_text(json.dumps(tune))
    with pytest.raises(ValueError, match="passkey-rope-s0.json which records no parameters' hash"):
        report.write_report(tmp_path, jobs=run.plan([0]))
    (tmp_path / "results" / "passkey-rope-s0.json").write_text(json.dumps(base))
    (tmp_path / "results" / "passkey-rope-s0-ftpi4x.json").write_text(json.dumps({**tune, "init_sha256": "a"}))
    assert "| passkey-rope-s0-ftpi4x | run | 90 [" in report.write_report(tmp_path, jobs=run.plan([0])).split("### Passkey's first")[0]


def test_time_to_accuracy_and_compute_read_each_sittings_mean_rate():
    """A curve's tokens_per_s is its sitting's mean rate so far: time to 90% is the sitting's timed seconds at that
    row (4 s here; step gaps over each row's rate would give 3.1 s), and compute sums the sittings."""
    report = _load("length_generalization_report_timing", HERE / "report.py")
    curve = [{"step": 11, "tokens_per_s": 100.0, "sitting_start": 0, "timed_s": 1.0, "val_accuracy": 0.5},
             {"step": 21, "tokens_per_s": 50.0, "sitting_start": 0, "timed_s": 4.0, "val_accuracy": 0.95},
             {"step": 31, "tokens_per_s": 25.0, "sitting_start": 0, "timed_s": 12.0},
             {"step": 41, "tokens_per_s": 20.0, "sitting_start": 31, "timed_s": 4.5}]
    result = {"curve": curve, "tokens_per_step": 10}
    assert report.time_to_accuracy(result) == (21, 4.0 / 60)
    assert report.curve_minutes(result) == (12.0 + 4.5) / 60
    assert report.time_to_accuracy({**result, "curve": curve[:1]}) is None
    # reached at a sitting's first step (no rate yet: it compiles): the timed seconds of the rows before it
    resumed = curve[:3] + [{"step": 32, "tokens_per_s": None, "sitting_start": 31, "val_accuracy": 0.97}]
    assert report.time_to_accuracy({**result, "curve": [{**r, "val_accuracy": 0.5} for r in resumed[:3]]
                                    + resumed[3:]}) == (32, 12.0 / 60)
    # the missing jobs' estimate samples the CPUs' jobs only: one on an accelerator (scripts/device_jobs.sh) is not one
    cpu = {**result, "cpu": "AMD EPYC"}
    gpu = {**result, "cpu": "Intel(R) Xeon(R) Processor", "device": "NVIDIA H200"}
    timings = {"copy-a": {"eval_s": 600.0}, "copy-b": {"eval_s": 0.0}}
    text = report.remaining_estimate({"copy-a": cpu, "copy-b": gpu}, timings, ["copy-c", "copy-d"])
    assert f"about {2 * ((12.0 + 4.5) / 60 + 10) / 60:.1f} hours of job time" in text and "(2 algorithmic × 10 min)" in text


Z95 = statistics.NormalDist().inv_cdf(0.975)


def _wilson(k, n=100):
    """The 95% Wilson score interval of k / n, written out here (the oracle of report.wilson_interval)."""
    p, centre = k / n, (k / n + Z95 ** 2 / (2 * n)) / (1 + Z95 ** 2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95 ** 2 / (4 * n * n)) / (1 + Z95 ** 2 / n)
    return centre - half, centre + half


def _passkey_result(at_256, at_4096):
    """A passkey result with `at_256` of 20 correct at 256 and `at_4096` of 20 at 4096, at depths 0 and 1."""
    rows = [{"length": n, "depth": d, "scaling": "none", "method": "none", "n": 10, "status": "ok",
             "correct": k // 2 + (k % 2 if d == 0.0 else 0)} for n, k in ((256, at_256), (4096, at_4096)) for d in (0.0, 1.0)]
    return {"rows": [{**r, "accuracy": r["correct"] / r["n"]} for r in rows]}


def test_the_alibi_verdict_reads_every_seed_in_range():
    """Reproduced only when every ALiBi seed in range has its upper Wilson bound at 4096, depth 0, below 50%; a
    seed below the bar is named, not tested; firmness is over the seeds' margins."""
    report = _load("length_generalization_report_alibi", HERE / "report.py")
    assert "**not tested**: no result yet." in report.alibi_far({})
    one = {"passkey-alibi-s0": _passkey_result(20, 0)}  # 0 of 10 at depth 0: upper bound 28%
    line = report.alibi_far(one)
    assert "**reproduced**: depth 0 at 4096: passkey-alibi-s0 0 [0, 28] (n = 10); evidence **weak**" in line
    two = {**one, "passkey-alibi-s1": _passkey_result(20, 12)}  # 6 of 10: upper bound 83%
    line = report.alibi_far(two)
    assert "**not reproduced**" in line and "passkey-alibi-s1 60 [31, 83] (n = 10)" in line
    line = report.alibi_far({**two, "passkey-alibi-s1": _passkey_result(10, 12), "passkey-alibi-s2": _passkey_result(20, 1)})
    assert "**reproduced**" in line and "below the in-range bar: passkey-alibi-s1" in line
    # 2 seeds (0 and 1 of 10 at depth 0), their margins' spread floored at one count's noise, the mean over the
    # seeds of the Agresti–Coull standard error √(p(1 − p) / (n + 4)), p = (k + 2) / (n + 4): weak
    margins = [0.5 - _wilson(k, 10)[1] for k in (0, 1)]
    noise = statistics.mean(math.sqrt((k + 2) / 14 * (1 - (k + 2) / 14) / 14) for k in (0, 1))
    t = statistics.mean(margins) / (max(statistics.stdev(margins), noise) / math.sqrt(2))
    assert t < math.tan(math.pi * 0.4)  # below t80 at df 1 (Student's t at df 1 is Cauchy: 3.078): weak
    assert (f"evidence **weak** (upper bound below 50% holds by {statistics.mean(margins):+.3f} (t = {t:.1f}, 2 seeds))."
            in line)
    line = report.alibi_far({**one, "passkey-alibi-s1": _passkey_result(20, 0)})  # 0 of 10 at both: no spread but
    # the counts' own: t = 0.222 / (count_sd((0, 10)) / √2) = 3.4, past t80 at df 1
    assert "**reproduced**" in line and "evidence **moderate** (upper bound below 50% holds by +0.222 (t = 3.4" in line


def test_the_yarn_pi_verdict_tests_the_ordering_and_says_the_gap_is_not_tested():
    """With both fine-tunes in range at 1024, a non-inferiority test there: reproduced when YaRN − PI's 95%
    Newcombe interval ends above −5 points, not reproduced when YaRN is worse (z < −1.96), inconclusive between
    (one example short of 100 of 100 is: a Wald interval would have called it reproduced, at −3.0); the line says that the paper's gap (PI far below YaRN) cannot be
    seen by a rule that needs PI in range."""
    report = _load("length_generalization_report_yarn_pi", HERE / "report.py")

    def ft(correct, scaling="run", n=100):
        return {"rows": [{"length": 1024, "depth": None, "scaling": scaling, "method": "none", "n": n,
                          "status": "ok", "correct": correct}]}

    z95, wilson = Z95, _wilson

    def newcombe_low(a, b, n=100):  # the lower end of Newcombe's hybrid score interval of a/n − b/n
        return (a - b) / n - math.sqrt((a / n - wilson(a)[0]) ** 2 + (wilson(b)[1] - b / n) ** 2)

    def pooled_z(a, b, n=100):  # the two-proportion z with the pooled proportion
        p = (a + b) / (2 * n)
        return (a - b) / n / math.sqrt(p * (1 - p) * 2 / n)

    line = next(v for v in report.verdicts({"passkey-rope-s0-ftyarn4x": ft(100), "passkey-rope-s0-ftpi4x": ft(94)})
                if "YaRN retrieves" in v)
    assert (f"**reproduced**: YaRN 100 [96, 100] vs PI 94 [88, 97], z = {pooled_z(100, 94):.2f}, YaRN − PI ≥ "
            f"{100 * newcombe_low(100, 94):+.1f} points (one seed; the rule tests non-inferiority only") in line
    assert "with PI at 94% here); evidence **weak**" in line and "the test split informed it" in line
    for yarn_, pi_, verdict in ((100, 99, "reproduced"), (99, 100, "inconclusive"), (93, 97, "inconclusive")):
        line = next(v for v in report.verdicts({"passkey-rope-s0-ftyarn4x": ft(yarn_), "passkey-rope-s0-ftpi4x": ft(pi_)})
                    if "YaRN retrieves" in v)
        low = 100 * newcombe_low(yarn_, pi_)
        assert verdict == ("reproduced" if low > -5 else "inconclusive"), low  # the rule, at −5 points
        assert f"**{verdict}**: YaRN {yarn_} [" in line and f"YaRN − PI ≥ {low:.1f} points" in line
    line = next(v for v in report.verdicts({"passkey-rope-s0-ftyarn4x": ft(91), "passkey-rope-s0-ftpi4x": ft(99)})
                if "YaRN retrieves" in v)
    assert pooled_z(91, 99) < -z95 and "**not reproduced**: YaRN 91 [" in line
    assert f"z = {pooled_z(91, 99):.2f}" in line
    # YaRN worse and yet within 5 points: the evidence rates the condition that decided it, YaRN worse than PI
    line = next(v for v in report.verdicts({"passkey-rope-s0-ftyarn4x": ft(970, n=1000),
                                            "passkey-rope-s0-ftpi4x": ft(990, n=1000)}) if "YaRN retrieves" in v)
    assert "**not reproduced**" in line and "evidence **weak** (YaRN not worse than PI fails by +0.020 (one run))" in line
    line = next(v for v in report.verdicts({"passkey-rope-s0-ftyarn4x": ft(95, "none"), "passkey-rope-s0-ftpi4x": ft(99)})
                if "YaRN retrieves" in v)  # in range under `none` only: no accuracy with the run's own scaling
    assert "**not tested**: no accuracy at 1024 with the run's own scaling (YaRN undef., PI 99 [" in line


def _algo_result(correct, status="ok"):
    """A copy result with `correct` of 100 at 16, 32, 64, 96, 128 (None: undefined there)."""
    return {"rows": [{"length": n, "scaling": "none", "method": "none", "depth": None, "n": 100, "num_layers": 4,
                      "status": "ok" if c is not None else "undefined", "correct": c or 0}
                     for n, c in zip(run.ALGO_LENGTHS, correct)]}


def test_the_kazemnejad_verdict_pools_seeds_by_their_spread():
    """Per seed, NoPE's accuracy past 32 minus the other's; NoPE is worse when the counts pooled over the paired
    seeds give z < −1.96 and, with several seeds, the 95% t interval of the mean difference is below 0 too: a
    consistent gap decides; one that flips sign between seeds, or sits at the floor, cannot show NoPE worse."""
    report = _load("length_generalization_report_kz", HERE / "report.py")
    consistent = {"copy-none-s0": _algo_result((100, 95, 10, 0, 0)), "copy-none-s1": _algo_result((100, 96, 12, 0, 0)),
                  "copy-none-s2": _algo_result((100, 97, 8, 0, 0)), "copy-rope-s0": _algo_result((100, 99, 40, 5, 0)),
                  "copy-rope-s1": _algo_result((100, 99, 45, 6, 0)), "copy-rope-s2": _algo_result((100, 99, 42, 3, 0))}
    line = report.kazemnejad(consistent, "copy")  # 30 of 900 against 141 of 900
    assert "**not reproduced**" in line and "vs rope -12.3 points (z = -8.92, seeds 0, 1, 2; 95% t interval [-18.3, -6.4]" in line
    flips = {**consistent, "copy-rope-s1": _algo_result((100, 99, 0, 0, 0))}  # per seed -11.7, +4.0, -12.3
    line = report.kazemnejad(flips, "copy")  # not worse; and with that spread NoPE at 0 could not be worse either
    assert "**inconclusive**" in line and "per seed -11.7, +4.0, -12.3" in line and "vs rope (90 of 900)" in line
    one = {"copy-none-s0": consistent["copy-none-s0"], "copy-rope-s0": consistent["copy-rope-s0"]}
    line = report.kazemnejad(one, "copy")
    assert "**not reproduced**: vs rope -11.7 points (z = -4.95, seed 0; 95% Newcombe interval from -16.4)" in line
    assert "; evidence weak (posenc.verdicts.firmness of the per-seed differences, below 0 where NoPE is worse" in line
    assert "evidence strong" in report.kazemnejad(consistent, "copy")  # three seeds, each 10–15 points worse
    floor = {f"copy-{e}-s{s}": _algo_result((100, 95, int(e == "rope"), 0, 0)) for e in ("none", "rope") for s in range(3)}
    line = report.kazemnejad(floor, "copy")  # 0 of 900 against 3 of 900: z = -1.73, and NoPE cannot do worse than 0
    # the seeds agree exactly: the interval's spread is the counts' own noise, not 0 (it was [-0.3, -0.3])
    assert "**inconclusive**" in line and "[-2.2, +1.5]" in line and "cannot test the claim: vs rope (3 of 900)" in line
    floor.update({f"copy-{e}-s{s}": _algo_result((100, 95, 10, 0, 0)) for e in ("none", "alibi") for s in range(3)})
    line = report.kazemnejad(floor, "copy")  # a tie with alibi at 30 of 900, which could have shown NoPE worse
    assert "**reproduced**" in line and "vs alibi +0.0 points (z = 0.00, seeds 0, 1, 2; 95% t interval [-3.9, +3.9]" in line
    assert "vs rope (3 of 900) correct past 32; evidence" in line
    # the same tie at two seeds: the t quantile at 1 degree of freedom (12.7) leaves it not shown within 5 points
    two_seeds = {k: v for k, v in floor.items() if not k.endswith("-s2")}
    assert "**inconclusive**" in report.kazemnejad(two_seeds, "copy")
    # seeds that agree are no evidence of more precision than one seed's counts give: 150 against 162 of 300 at
    # three seeds is not shown within 5 points (the bare spread, 0, gave [-4.0, -4.0] and "reproduced")
    agree = {f"copy-{e}-s{s}": _algo_result((100, 95, 100, 50, 0) if e == "none" else (100, 95, 100, 62, 0))
             for e in ("none", "rope") for s in range(3)}
    assert "**inconclusive**: vs rope -4.0 points" in report.kazemnejad(agree, "copy")
    # rope at 0 and 30 of 300: NoPE at 0 at both would give z = -5.5, but per-seed differences of 0 and -10 points
    # whose t interval cannot lie below 0, so this comparison could not show NoPE worse either
    spread = {"copy-none-s0": _algo_result((100, 95, 0, 0, 0)), "copy-none-s1": _algo_result((100, 95, 30, 0, 0)),
              "copy-rope-s0": _algo_result((100, 95, 0, 0, 0)), "copy-rope-s1": _algo_result((100, 95, 30, 0, 0))}
    line = report.kazemnejad(spread, "copy")
    assert "**inconclusive**" in line and "cannot test the claim: vs rope (30 of 600)" in line
    # not worse, but not shown within 5 points: 25 of 300 against 35 of 300 at one seed, z = -1.36, and the Newcombe
    # interval of the difference reaches -8.2 points: inconclusive, not reproduced
    close = {"copy-none-s0": _algo_result((100, 95, 25, 0, 0)), "copy-rope-s0": _algo_result((100, 99, 35, 0, 0))}
    line = report.kazemnejad(close, "copy")
    assert "**inconclusive**: vs rope -3.3 points (z = -1.36, seed 0; 95% Newcombe interval from -8.2)" in line
    assert "not worse, but not shown within 5 points either: vs rope (lower end -8.2); evidence weak (" in line
    two = {**one, "copy-alibi-s0": _algo_result((100, 98, 5, 0, 0))}  # worse than one of two: not reproduced
    assert "**not reproduced**" in report.kazemnejad(two, "copy") and "vs alibi +1.7 points" in report.kazemnejad(two, "copy")


def test_a_kazemnejad_failure_is_rated_by_the_comparisons_that_decide_it():
    """NoPE worse than rope at one seed decides "not reproduced", weakly (one seed); alibi, not worse but not shown
    within 5 points at three seeds, makes it no firmer."""
    report = _load("length_generalization_report_kz_firm", HERE / "report.py")
    results = {f"copy-none-s{s}": _algo_result((100, 95, 90, 0, 0)) for s in range(3)}
    results |= {f"copy-alibi-s{s}": _algo_result((100, 95, 100, c, 0)) for s, c in enumerate((80, 65, 20))}
    results |= {"copy-rope-s0": _algo_result((100, 95, 100, 20, 0)), "copy-rope-s1": _algo_result((100, 50, 30, 0, 0))}
    line = report.kazemnejad(results, "copy")
    assert "**not reproduced**" in line and "; evidence weak (" in line
    alone = {k: v for k, v in results.items() if "rope" not in k}  # alibi alone: not worse, not within: inconclusive
    assert "**inconclusive**" in report.kazemnejad(alone, "copy")


def test_the_kazemnejad_verdict_names_every_run_it_does_not_compare():
    """A run below the bar drops its seed from the pairs; a run undefined past 32 (at one seed, or at one length)
    is named, not pooled over fewer lengths; randomized-position and other tasks' runs are not read."""
    report = _load("length_generalization_report_kz2", HERE / "report.py")
    results = {"copy-none-s0": _algo_result((100, 95, 30, 0, 0)), "copy-none-s1": _algo_result((100, 50, 0, 0, 0)),
               "copy-none-s2": _algo_result((100, 95, 30, 0, 0)), "copy-rope-s0": _algo_result((100, 99, 30, 0, 0)),
               "copy-rope-s1": _algo_result((100, 99, 45, 6, 0)), "copy-rope-s2": _algo_result((100, 99, 30, 0, 0)),
               "copy-learned-s0": _algo_result((100, 99, None, None, None)),
               "copy-learned-s2": _algo_result((100, 99, 30, None, None)),  # defined at 64 only
               "copy-rope-rp-s0": _algo_result((100, 99, 100, 100, 100)), "reverse-rope-s0": _algo_result((100, 99, 100, 100, 100))}
    line = report.kazemnejad(results, "copy")
    assert "**inconclusive**: vs rope +0.0 points (z = 0.00, seeds 0, 2;" in line and "vs learned" not in line
    assert "below the in-range bar at 32: copy-none-s1;" in line
    assert "undefined at or past 32 (not compared): copy-learned-s0, copy-learned-s2;" in line
    assert "at a seed without an in-range NoPE run (not compared): copy-rope-s1; " in line
    assert set(report.plain_runs(results, "copy")) == {"none", "rope", "learned"}
    below = {"copy-none-s0": _algo_result((100, 50, 0, 0, 0)), "copy-rope-s0": _algo_result((100, 99, 40, 5, 0))}
    line = report.kazemnejad(below, "copy")
    assert "**not tested**: NoPE has no run in range (at 32: copy-none-s0 50 [" in line and line.count("copy-none-s0") == 1



def test_the_ruoss_verdict_names_pairs_undefined_past_training():
    """A plain learned table is undefined past 32: its pair with randomized positions is named, not dropped
    silently; a randomized run without its plain run is named; the groups that are defined are counted."""
    report = _load("length_generalization_report_ruoss", HERE / "report.py")
    results = {"copy-learned-s0": _algo_result((100, 99, None, None, None)),
               "copy-learned-rp-s0": _algo_result((100, 99, 50, 10, 0)),
               "reverse-rope-rp-s0": _algo_result((100, 99, 50, 10, 0))}
    results.update({f"copy-{p}{rp}-s0": _algo_result((100, 99, c, 0, 0)) for p in ("rope", "alibi", "sinusoidal")
                    for rp, c in (("", 0), ("-rp", 30))})
    line = next(v for v in report.verdicts(results) if v.startswith("- Ruoss"))
    assert "Pairs left out (a run undefined at a length past 32): copy-learned-rp-s0." in line
    assert "Randomized runs without their plain run yet (not compared): reverse-rope-rp-s0." in line
    # no spread between the groups: the interval's is floored at the pairs' count noise, hypot(count_sd) = 0.018
    assert ("**reproduced**: both runs in range: +10.0 points [+5.5, +14.5] over 3 groups (3 pairs, 1 seed; t = 9.5)"
            in line) and "evidence strong" in line
    two = {n: r for n, r in results.items() if "sinusoidal" not in n}
    assert "**not tested**: 2 (task, encoding) groups with paired runs in range so far (3 needed)." in report.ruoss(two)


def test_the_ruoss_verdict_takes_task_and_encoding_groups_as_its_unit():
    """Seeds of one (task, encoding) are replicates: the t interval is over the groups' means, so three seeds of
    one large gain cannot carry the claim. Extrapolation is not interpreted below the in-range bar: the randomized
    runs that fall below it (their plain twins in range) are counted only in a sensitivity check beside the
    verdict, which says whether it falls on the same side."""
    report = _load("length_generalization_report_ruoss2", HERE / "report.py")

    def pairs(task, enc, gains, rp_train=99):  # d = `gain` points past 32 (3 · gain correct at 64, 0 at 96 and 128)
        return {f"{task}-{enc}{rp}-s{s}": _algo_result((100, rp_train if rp else 99, max(0, 3 * g if rp else -3 * g), 0, 0))
                for s, g in enumerate(gains) for rp in ("", "-rp")}

    results = pairs("copy", "rope", (20, 20, 20)) | pairs("copy", "alibi", (10, 11, 12)) | pairs("reverse", "rope", (5, 5, 5))
    line = report.ruoss(results)  # group means +20, +11, +5: mean +12.0, sd 7.55, half-width 4.303 · 7.55 / √3 = 18.7
    assert "**reproduced**" not in line
    assert "**inconclusive**: both runs in range: +12.0 points [-6.8, +30.8] over 3 groups (9 pairs, 3 seeds; t = 2.8)" in line
    assert "evidence weak (the t of the group means)" in line and "by task and encoding (pairs): copy-alibi +11.0 (3), copy-rope +20.0 (3), reverse-rope +5.0 (3)." in line
    agree = results | pairs("copy", "rope", (20, 20, 20)) | pairs("reverse", "rope", (11, 11, 11))
    line = report.ruoss(agree)  # +20, +11, +11: mean 14, sd 5.2, half-width 12.9
    assert "**reproduced**: both runs in range: +14.0 points [+1.1, +26.9] over 3 groups" in line and "evidence strong" in line
    assert "plain run in range" not in line and "sensitivity check," not in line
    # one group's randomized runs fall below the bar (at 80% at 32), with a loss past 32: the sensitivity check only
    below = agree | pairs("recall", "rope", (-30, -30, -30), rp_train=80)
    line = report.ruoss(below)
    assert ("Pairs with a run below the in-range bar (in the sensitivity check where the plain run is in range): "
            "recall-rope-rp-s0") in line
    assert "**inconclusive**: both runs in range: +14.0 points [+1.1, +26.9] over 3 groups" in line  # hangs on them
    assert "sensitivity check, plain run in range: +3.0 points [" in line and "over 4 groups (12 pairs, 3 seeds" in line
    assert "— inconclusive" in line and "evidence weak" in line and "the sensitivity check's own group means: recall-rope -30.0." in line
    small = pairs("copy", "rope", (2, 2, 3)) | pairs("copy", "alibi", (1, 1, 1)) | pairs("reverse", "rope", (0, 1, 0))
    line = report.ruoss(small)  # group means +2.3, +1.0, +0.3: the interval ends below the paper's +12.0
    assert "**not reproduced**: both runs in range: +1.2 points [" in line and "evidence strong" in line


def test_the_status_gives_the_finished_first_tier_s_cost(tmp_path):
    """Once the first tier is complete the status says what it cost: its timed training steps (from the curves)
    plus its evaluation, as job time and as wall-clock time on 2 one-core workers."""
    report = _load("length_generalization_report_cost", HERE / "report.py")
    (tmp_path / "results").mkdir()
    jobs = [run.Job(f"copy-{p}-s0", f"task=copy,posenc={p},seed=0") for p in ("rope", "none")]
    for job in jobs:  # 1000 steps of 600 tokens at 1000 tokens/s: 10 min of training, plus 5 min of evaluation
        res = {**_algo_result((100, 99, 0, 0, 0)), "curve": [{"step": 1000, "tokens_per_s": 1000.0}],
               "tokens_per_step": 600, "timing": {"train_s": 700.0, "eval_s": 300.0}, "cpu": "AMD EPYC"}
        (tmp_path / "results" / f"{job.name}.json").write_text(json.dumps(res))
    text = report.write_report(tmp_path, jobs=jobs)
    assert "2 of 2 jobs. Its jobs took 0.5 hours of job time (timed training steps and evaluation; AMD EPYC): " \
           "about 0.2 hours of wall-clock time" in text


def test_committed_readme_is_rendered_from_the_committed_results(tmp_path):
    """A result added (or the report changed) without the README rendered again would leave stale numbers."""
    report = _load("length_generalization_report", HERE / "report.py")
    report.write_report(HERE, out=tmp_path)
    assert (tmp_path / "README.md").read_text() == (HERE / "README.md").read_text()
    assert ({p.name for p in (tmp_path / "figures").glob("*.png")}
            == {p.name for p in (HERE / "figures").glob("*.png")})  # each figure drawn, none stale
    for figure in (HERE / "figures").glob("*.png"):
        assert_same_figure(tmp_path / "figures" / figure.name, figure)
