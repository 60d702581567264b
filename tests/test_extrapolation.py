"""The extrapolation study's report (experiments/extrapolation/report.py) over the committed results."""

import copy
import importlib.util
import json
import pathlib
import shutil

import pytest

from conftest import assert_same_figure

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("extrapolation_report", ROOT / "experiments/extrapolation/report.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)


def _claims(text: str) -> list[list[str]]:
    """The claims table's rows as cells (claim, source, measured, verdict, why, evidence)."""
    rows = [line for line in text.split("## Claims", 1)[1].splitlines() if line.startswith("| ")][1:]
    return [[c.strip() for c in row.strip("|").split(" | ")] for row in rows if not row.startswith("|---")]


def _copy_results(tmp_path):
    """A copy of the results the report reads, in a study folder of its own (the report writes its figures next
    to them): returns the study's folder."""
    here = tmp_path / "extrapolation"
    shutil.copytree(ROOT / "experiments/extrapolation/results", here / "results")
    shutil.copytree(ROOT / "experiments/longrope/results", tmp_path / "longrope" / "results")
    (tmp_path / "quickstart").mkdir()
    shutil.copy(ROOT / "experiments/quickstart/results.json", tmp_path / "quickstart")
    return here


def test_committed_report_is_rendered_from_the_results_and_inconclusive_verdicts_are_weak(tmp_path):
    """The committed README is what the report renders from the committed results (a copy: the report writes its
    figures next to them), and every inconclusive verdict is rated weak, whatever its conditions' margins."""
    here = _copy_results(tmp_path)
    text = report.write_report(here)
    assert text == (ROOT / "experiments/extrapolation/README.md").read_text()
    for figure in (ROOT / "experiments/extrapolation/figures").glob("*.png"):
        assert_same_figure(here / "figures" / figure.name, figure)
    claims = _claims(text)
    assert len(claims) >= 8 and all(len(c) == 6 for c in claims)
    verdicts = {c[3] for c in claims}
    assert "inconclusive" in verdicts and "reproduced" in verdicts
    for claim in claims:
        if claim[3] == "inconclusive" and claim[5] != "none":
            assert claim[5].startswith("**weak** (inconclusive; "), claim



def test_bpb_vs_length_draws_the_tables_cells_and_the_n_gram_floor(tmp_path, monkeypatch):
    """Every point of figures/bpb_vs_length.png is its table's cell, mean ± std over seeds (the encodings' table, the
    interpolated learned table among them, and the scalings'), and each panel draws the n-gram floor's row."""
    here = _copy_results(tmp_path)
    figures = []
    monkeypatch.setattr(report.plt, "close", figures.append)  # keep the figures to read them back
    text = report.write_report(here)
    cells = {}
    for line in text.splitlines():
        parts = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(parts) > len(report.LENGTHS):
            cells.setdefault(parts[0], parts[1:len(report.LENGTHS) + 1])
    axes = figures[0].axes
    assert len(axes) == 2
    for ax in axes:
        drawn = 0
        for bars in ax.containers:
            points, _, (ranges,) = bars.lines
            half = {seg[0][0]: (seg[1][1] - seg[0][1]) / 2 for seg in ranges.get_segments()}
            row = cells[bars.get_label()]
            for n, y in zip(points.get_xdata(), points.get_ydata()):
                cell = row[report.LENGTHS.index(n)]
                assert cell in (f"{y:.3f} ± {half[n]:.3f}", f"{y:.3f}"), (bars.get_label(), n, cell)
                drawn += 1
        floor = next(line for line in ax.get_lines() if line.get_label() == "n-gram floor")
        assert [f"{y:.3f}" for y in floor.get_ydata()] == cells["n-gram floor"]
        assert drawn >= 5 * len(report.LENGTHS)
    assert "learned, table interpolated" in [bars.get_label() for bars in axes[0].containers]


def test_a_base_run_trained_again_must_score_as_its_result_did(trained_run):
    """run.py trains a scored base run again only for its missing fine-tunes; another run under its name (trained
    on another CPU kind, or with other code) is refused, so that no fine-tune starts from a run its table does not
    describe."""
    import pytest  # noqa: PLC0415

    from posenc import evaluate as ev  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("extrapolation_run", ROOT / "experiments/extrapolation/run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    n = run.LENGTHS[0]
    result = ev.evaluate([str(trained_run)], [n], ["none"], num_bytes=2 * n, ngram_floor=False, progress=False)
    run.check_same_run(str(trained_run), result)
    for row in result["rows"]:
        row["bpb"] += 2e-4
    with pytest.raises(RuntimeError, match=f"scores .* bits per byte at {n} where its result scored"):
        run.check_same_run(str(trained_run), result)


def test_the_pi_control_claim_follows_the_fine_tunes_bits_per_byte(tmp_path):
    """A control fine-tune (no scaling, the same steps) of seed 0 made from PI's own result with its bits per byte at
    1024 moved by ±0.2: the claim is reproduced where PI's fine-tune is the lower, not reproduced where the control
    is, and its gain is the control's minus PI's."""
    here = _copy_results(tmp_path)
    pi = json.loads((here / "results" / "rope-s0-ft-pi4x.json").read_text())
    pi_1024 = next(r["bpb"] for r in pi["rows"] if (r["scaling"], r["protocol"], r["length"]) == ("run", "nonoverlap", 1024))
    for shift, verdict in ((0.2, "reproduced"), (-0.2, "not reproduced")):
        control = copy.deepcopy(pi)
        run_rows = {(r["protocol"], r["length"]): r for r in pi["rows"] if r["scaling"] == "run"}
        control["rows"] = [{**r, "bpb": run_rows[r["protocol"], r["length"]]["bpb"] + shift} if r["scaling"] == "none"
                           else r for r in control["rows"]]  # its own rows ("none"): PI's ("run") moved by shift
        (here / "results" / "rope-s0-ft-noscale4x.json").write_text(json.dumps(control))
        claim = next(c for c in _claims(report.write_report(here)) if c[0].startswith("PI's fine-tune beats"))
        assert claim[3] == verdict, claim
        assert f"PI fine-tuned {pi_1024:.3f}, fine-tuned without scaling {pi_1024 + shift:.3f} bpb" in claim[2], claim
        held = "holds" if shift > 0 else "fails"
        assert f"PI below the control {held} by {abs(shift):+.3f} (one run)" in claim[5], claim


def test_the_wall_time_names_the_machine_each_run_was_timed_on(tmp_path, monkeypatch):
    """run.py records with each wall time the machine it ran on (`posenc.timing.machine_record`), once per machine
    across sittings; the report names those machines (cores, CPU model and family), and says so where a time
    was recorded without one (the committed timing.json), instead of a machine typed into the template."""
    spec = importlib.util.spec_from_file_location("extrapolation_run_timing", ROOT / "experiments/extrapolation/run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    amd = {"cpu": "AMD EPYC", "cpu_id": {"vendor": "AuthenticAMD", "family": 26, "model": 2, "stepping": 1,
                                         "bf16": ["avx512_bf16"]}, "cores": 2}
    intel = {"cpu": "Intel(R) Xeon(R) Processor", "cpu_id": {"family": 6, "model": 207, "stepping": 2}, "cores": 1}
    log = {}
    for record in (amd, amd, intel):
        monkeypatch.setattr(run, "machine_record", lambda r=record: r)
        assert run._timed(log, "train/rope-s0", lambda: 7) == 7
    assert log["machines"] == {"train/rope-s0": [amd, intel]}

    here = _copy_results(tmp_path)
    text = report.write_report(here)
    assert "on a machine whose CPU was not recorded" in text and "2-core" not in text
    timing = json.loads((here / "results" / "timing.json").read_text())
    timing["machines"] = {k: [amd] for k in timing if k.startswith(("train/", "eval/"))}
    (here / "results" / "timing.json").write_text(json.dumps(timing))
    setup = report.write_report(here).split("## Encodings")[0].replace("\n", " ")
    assert "on 2 cores of an AMD EPYC of CPU family 26 (model 2, stepping 1), which" in setup
    assert "not recorded" not in setup
    timing["machines"]["eval/rope-s1"] = [intel]
    (here / "results" / "timing.json").write_text(json.dumps(timing))
    setup = report.write_report(here).split("## Encodings")[0].replace("\n", " ")
    assert ("on 2 cores of an AMD EPYC of CPU family 26 (model 2, stepping 1) and 1 core of an Intel(R) Xeon(R) "
            "Processor of CPU family 6 (model 207, stepping 2)") in setup


def test_setup_is_read_from_the_config_and_the_fine_tuning_recipe(tmp_path, monkeypatch):
    """The report's setup line is rendered from experiments/extrapolation/config.py and run.py's fine-tuning
    constants, so that a changed budget cannot leave a stale description: changing them changes the text."""
    here = _copy_results(tmp_path)
    setup = report.write_report(here).split("## Encodings")[0].replace("\n", " ")
    assert "d_model 128, 4 layers, 4 heads (head_dim 32), MLP 512, train_len 256, batch 16, 400 AdamW steps" in setup
    assert "(lr 0.001, 15 warmup steps)" in setup and "4096 tokens a step" in setup
    assert "Hardware" not in setup  # the machines come from timing.json's machine records only
    real = report.load_config_file

    def wider(path, arg):
        config = real(path, arg)
        config.model.d_model, config.train_steps = 256, 800
        return config

    monkeypatch.setattr(report, "load_config_file", wider)
    monkeypatch.setattr(report.run, "FT_WARMUP_STEPS", 30)
    setup = report.write_report(here).split("## Encodings")[0].replace("\n", " ")
    assert "d_model 256, 4 layers, 4 heads (head_dim 64)" in setup and "800 AdamW steps (3.3 M training bytes)" in setup
    assert "30 warmup steps" in setup


def test_encodings_with_different_seeds_are_refused(tmp_path):
    """The claims' margins subtract one encoding's per-seed values from another's, seed by seed: results for
    different seeds (learned missing seed 1) are refused, not paired by list position (numpy would broadcast a
    lone seed against three)."""
    import pytest  # noqa: PLC0415

    here = _copy_results(tmp_path)
    (here / "results" / "learned-s1.json").unlink()
    (here / "results" / "learned-s2.json").unlink()
    with pytest.raises(SystemExit, match=r"different seeds .*'learned': \[0\]"):
        report.write_report(here)


def test_interval_verdicts_need_every_interval_below_and_one_above_refutes():
    below, across, above = (-0.03, -0.01), (-0.02, 0.01), (0.01, 0.02)
    verdict, conditions = report.interval_verdict({"a": below, "b": below}, 0.0)
    assert verdict == "reproduced" and conditions == {"a": (True, [0.01]), "b": (True, [0.01])}
    assert report.interval_verdict({"a": below, "b": across}, 0.0)[0] == "inconclusive"
    assert report.interval_verdict({"a": across, "b": above}, 0.0)[0] == "not reproduced"
    verdict, conditions = report.interval_verdict({"a": across}, 0.02)  # the threshold moves the line
    assert verdict == "reproduced" and conditions["a"][1] == [pytest.approx(0.01)]
    # a refuting interval fails by its lower end's excess (what the rule established), not by its far end's
    verdict, conditions = report.interval_verdict({"a": below, "b": above}, 0.005)
    assert verdict == "not reproduced" and conditions["b"] == (False, [pytest.approx(-0.005)])
    assert conditions["a"] == (True, [pytest.approx(0.015)])
    assert report.interval_verdict({"a": across}, 0.0)[1]["a"] == (False, [pytest.approx(-0.01)])  # short of it


def test_a_kept_result_of_a_run_trained_otherwise_is_refused(tmp_path):
    """run.py builds each run's config in one place (`job_config`: config.py's, or a FINETUNES recipe from its
    base), records it in the result, and refuses a kept result whose run was trained otherwise (results from
    before the field are not compared)."""
    spec = importlib.util.spec_from_file_location("extrapolation_run_kept", ROOT / "experiments/extrapolation/run.py")
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    base = run.job_config("rope-s1", tmp_path, 150)
    assert base.model.posenc == "rope" and base.seed == 1
    ft = run.job_config("rope-s1-ft-pi4x", tmp_path, 150)
    assert (ft.model.posenc, ft.train_len, ft.batch_size, ft.train_steps, ft.init_from) == (
        "rope", 1024, run.FT_TOKENS_PER_STEP // 1024, 150, str(tmp_path / "rope-s1"))
    assert (ft.model.rope.scaling.kind, ft.model.rope.scaling.factor, ft.model.rope.scaling.original_max_len) == (
        "linear", 4.0, 256)
    config = ft.to_dict()
    run.check_kept("rope-s1-ft-pi4x", {"config": {**config, "init_from": "/elsewhere/rope-s1"}}, tmp_path, 150)
    run.check_kept("rope-s1-ft-pi4x", {}, tmp_path, 150)
    with pytest.raises(SystemExit, match=r"rope-s1-ft-pi4x.json was computed on a run trained with another config .*"
                                         r"learning_rate"):
        run.check_kept("rope-s1-ft-pi4x", {"config": {**config, "learning_rate": 3e-3}}, tmp_path, 150)
    with pytest.raises(SystemExit, match="train_steps 150 → 200"):
        run.check_kept("rope-s1-ft-pi4x", {"config": config}, tmp_path, 200)
    for name in ("rope-s1-ft-pi8x", "alibi-s0-ft-pi4x", "notes", "rope-sX"):  # no run of the study: named
        with pytest.raises(ValueError, match=f"'{name}' is no run of this study"):
            run.check_kept(name, {"config": config}, tmp_path, 150)
