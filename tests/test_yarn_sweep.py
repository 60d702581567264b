"""experiments/yarn_sweep: the committed README is rendered from the committed results, and its choices are the
validation minima."""

import importlib.util
import json
import pathlib

import pytest

from conftest import assert_same_figure

ROOT = pathlib.Path(__file__).resolve().parent.parent
HERE = ROOT / "experiments" / "yarn_sweep"
_spec = importlib.util.spec_from_file_location("yarn_sweep_report", HERE / "report.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)


def test_committed_readme_is_rendered_from_the_results():
    assert (HERE / "README.md").read_text() == report.render(report.load())


def test_committed_figures_are_drawn_from_the_results(tmp_path, monkeypatch):
    results = report.load()
    monkeypatch.setattr(report, "HERE", tmp_path)  # _figures writes beside the README: here, into the test's folder
    report._figures(results)
    for name in ("best_attention_factor.png", "betas.png"):
        assert_same_figure(tmp_path / name, HERE / name)


def test_each_choice_is_the_validation_minimum_and_test_scores_the_choice():
    for r in report.load():
        for s, by_af in r["validation"]["temperature"].items():
            best = min(by_af, key=lambda a: (by_af[a], float(a)))
            assert r["chosen"]["temperature"][s] == float(best)
        betas = r["validation"]["betas"]
        best = min(betas, key=betas.get)
        assert f"{r['chosen']['betas']['beta_fast']:g},{r['chosen']['betas']['beta_slow']:g}" == best
        assert set(r["test"]["temperature"]) == set(r["validation"]["temperature"])
        assert json.dumps(r["test"]["ngram_floor"]) == json.dumps(report.load()[0]["test"]["ngram_floor"])


def test_the_sweeps_time_names_the_machine_and_cores_its_results_record():
    """The timed seed's machine as its result recorded it (`posenc.timing.machine_record`: cores, CPU model and
    family); results that record no cores say so."""
    results = report.load()
    text = " ".join(report.render(results).split())
    assert "its cores not recorded" in text and "one core" not in text  # the committed results: no cores
    for r in results:
        r["timing"]["cores"] = 1
    text = " ".join(report.render(results).split())
    assert ", on 1 core of an AMD EPYC of CPU family 26 (model 2, stepping 1)." in text


def test_a_kept_result_of_a_run_trained_otherwise_is_refused(tmp_path):
    """A seed whose result exists is skipped only if its run's config is what config.py gives now: a result of a
    run trained otherwise stops the command naming the field; one from before results kept their config passes."""
    run = report.run
    config = run.seed_config(0).to_dict()
    run.check_kept({"config": config}, 0, tmp_path / "seed0.json")
    run.check_kept({}, 0, tmp_path / "seed0.json")
    other = {**config, "model": {**config["model"], "num_layers": config["model"]["num_layers"] + 1}}
    with pytest.raises(SystemExit, match=r"seed0.json was computed on a run trained with another config .*model.num_layers"):
        run.check_kept({"config": other}, 0, tmp_path / "seed0.json")
    with pytest.raises(SystemExit, match="train_steps"):
        run.check_kept({"config": {**config, "train_steps": config["train_steps"] + 1}}, 0, tmp_path / "seed0.json")
