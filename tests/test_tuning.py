"""The fair tuning budget: seeded points in each rule's space, selection on validation only, test scores of the
default and the winner, and the budget taken from a LongRoPE search."""

import json
import math

import numpy as np
import pytest

from posenc import data, sweep, tuning
from posenc.rope_scaling import RopeScaling


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
        assert set(p) - {"dynamic"} == set(space)
        for field, (lo, hi, _) in space.items():
            assert lo <= p[field] <= hi
    for p in points:  # every point is a valid scaling of the rule's kind
        assert sweep.eval_scaling(_FakeRun(), p, tuning.kind_of(rule), 1024).kind == tuning.kind_of(rule)


def test_log_uniform_draws_cover_the_range_evenly_in_log():
    factors = np.array([p["factor"] for p in tuning.sample_points("ntk", 4.0, 2001)[1:]])
    u = np.log(factors) / np.log(16.0)  # uniform on [0, 1] if the draw is log-uniform on [1, 16]
    assert abs(u.mean() - 0.5) < 0.03 and abs(u.var() - 1 / 12) < 0.01


def test_the_published_defaults():
    assert tuning.default_point("linear", 4.0) == {"factor": 4.0}
    yarn = sweep.eval_scaling(_FakeRun(), tuning.default_point("yarn", 4.0), "yarn", 1024)
    assert yarn == RopeScaling("yarn", 4.0, original_max_len=256)  # betas 32 / 1, attention factor 0.1 ln s + 1
    dyn = sweep.eval_scaling(_FakeRun(), tuning.default_point("dynamic_yarn", 4.0), "yarn", 1024)
    assert dyn.dynamic and dyn.kind == "yarn"


def test_bad_arguments_name_the_field():
    with pytest.raises(ValueError, match="rule must be one of"):
        tuning.sample_points("pi", 4.0, 8)
    with pytest.raises(ValueError, match="budget must be an integer >= 1"):
        tuning.sample_points("yarn", 4.0, 0)
    with pytest.raises(ValueError, match="s = target_len / train_len must be > 1"):
        tuning.sample_points("yarn", 1.0, 8)


class _FakeRun:
    base_len = 256


def test_tune_selects_on_validation_and_scores_test(trained_run, tmp_path, monkeypatch):
    reads = []
    real = data.load_corpus

    class Watched:
        def __init__(self, corpus):
            self._c = corpus

        def __getattr__(self, name):
            return getattr(self._c, name)

        def split(self, name):
            reads.append(name)
            return self._c.split(name)

    monkeypatch.setattr(data, "load_corpus", lambda *a, **k: Watched(real(*a, **k)))
    result = tuning.tune(str(trained_run), "yarn", 64, 4, str(tmp_path), num_bytes=128, progress=False)
    assert reads.index("test") > max(i for i, r in enumerate(reads) if r == "validation")  # selection first
    val = [t["val_bpb"] for t in result["trials"]]
    assert len(val) == result["evaluations"] == 4 and all(math.isfinite(v) for v in val)
    assert result["best"]["val_bpb"] == min(val) and result["default"]["val_bpb"] == val[0]
    assert result["best"]["point"] == result["trials"][int(np.argmin(val))]["point"]
    assert result["selection"]["split"] == "validation"
    # the test numbers are the eval sweep's on the test split for the same points
    again = sweep.run_eval_sweep(str(trained_run), str(tmp_path / "check"), [("x", result["best"]["point"])],
                                 lengths=[64], scaling="yarn", num_bytes=128, split="test", progress=False)[0]
    assert result["best"]["test_bpb"]["64"] == again["bpb_L64"]
    assert json.loads((tmp_path / "yarn_64.json").read_text())["best"] == result["best"]
    rerun = tuning.tune(str(trained_run), "yarn", 64, 4, str(tmp_path), num_bytes=128, progress=False)
    assert rerun["trials"] == result["trials"]  # resumed from the point records


def test_budget_from_a_longrope_result(tmp_path):
    (tmp_path / "a.json").write_text(json.dumps({"evaluations": 180}))
    assert tuning.longrope_evaluations(tmp_path / "a.json") == 180
    (tmp_path / "b.json").write_text(json.dumps({"factor": 4.0}))
    with pytest.raises(ValueError, match="no 'evaluations' count"):
        tuning.longrope_evaluations(tmp_path / "b.json")
