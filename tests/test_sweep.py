"""Sweeps: grid expansion and naming, sharding, skip-if-done, failure isolation, and an eval sweep at
factor 1 matching the plain evaluation."""

import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from posenc.config import with_fields
from posenc import evaluate as ev
from posenc import sweep, train

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_grid_zip_and_names():
    axes = sweep.parse_axes(["model.rope.base=100,1e4", "model.rope.scaling.factor=2,4.5", "model.posenc=rope,alibi"])
    assert axes[0] == ("model.rope.base", [100, 10000.0]) and axes[2][1] == ["rope", "alibi"]
    assert sweep.parse_axes(["model.rope.scaling.dynamic=true,False"]) == [("model.rope.scaling.dynamic", [True, False])]
    grid = sweep.expand(axes[:2], "grid")
    assert len(grid) == 4 and grid[1] == {"model.rope.base": 100, "model.rope.scaling.factor": 4.5}
    assert sweep.point_name(grid[1]) == "base=100,factor=4.5"
    zipped = sweep.expand(axes[:2], "zip")
    assert zipped == [{"model.rope.base": 100, "model.rope.scaling.factor": 2},
                      {"model.rope.base": 10000.0, "model.rope.scaling.factor": 4.5}]
    clash = {"model.rope.base": 10, "model.sinusoidal_base": 5, "data.base": 1}
    assert sweep.point_name({"a.base": 1, "b.base": 2}) == "a.base=1,b.base=2"
    assert "sinusoidal_base=5" in sweep.point_name(clash)
    with pytest.raises(ValueError, match="same number of values"):
        sweep.expand(sweep.parse_axes(["a=1,2", "b=1"]), "zip")
    with pytest.raises(ValueError, match="field=v1,v2"):
        sweep.parse_axes(["model.rope.base"])
    with pytest.raises(ValueError, match="distinct"):
        sweep.parse_axes(["a=1", "a=2"])
    for spec in ("train_len=,", "train_len=32,,64", "train_len=32, "):  # a value lost would shrink the sweep
        with pytest.raises(ValueError, match="has an empty value"):
            sweep.parse_axes([spec])


def test_select_shards_and_named_points():
    points = sweep.expand(sweep.parse_axes(["x=1,2,3,4,5"]))
    assert [n for n, _ in sweep.select(points, shard="1/2")] == ["x=2", "x=4"]
    assert [n for n, _ in sweep.select(points, names=["x=3"])] == ["x=3"]
    with pytest.raises(ValueError, match="unknown point"):
        sweep.select(points, names=["x=9"])
    with pytest.raises(ValueError, match="shard must be"):
        sweep.select(points, shard="2/2")
    for axes in (["learning_rate=1e-3,0.0010000001"], ["model.posenc=a/b,a_b"]):  # one name: one record for two
        with pytest.raises(ValueError, match="names coincide"):
            sweep.select(sweep.expand(sweep.parse_axes(axes)))


def test_points_of_a_multi_axis_sweep_can_be_named_through_the_list_flag():
    """`--points` is a comma-separated list flag, and a point of two axes is named `factor=2,attention_factor=1.1`:
    the flag hands select its pieces, which are rejoined one part per axis."""
    points = sweep.expand(sweep.parse_axes(["factor=2,4", "attention_factor=1.0,1.1"]))
    chosen = sweep.select(points, names=["factor=2", "attention_factor=1.1", "factor=4", "attention_factor=1"])
    assert chosen == [("factor=2,attention_factor=1.1", {"factor": 2, "attention_factor": 1.1}),
                      ("factor=4,attention_factor=1", {"factor": 4, "attention_factor": 1.0})]
    whole = sweep.select(points, names=["factor=4,attention_factor=1.1"])  # a name as written, in a Python list
    assert [n for n, _ in whole] == ["factor=4,attention_factor=1.1"]
    with pytest.raises(ValueError, match=r"does not split into names of 2 field=value parts"):
        sweep.select(points, names=["factor=2", "attention_factor=1.1", "factor=4"])
    with pytest.raises(ValueError, match=r"unknown point\(s\) \['factor=3,attention_factor=1.1'\]"):
        sweep.select(points, names=["factor=3", "attention_factor=1.1"])


def test_script_names_points_of_two_axes_and_refuses_a_root_of_other_axes(tmp_path):
    """--points with a two-axis name, and a --root whose points were swept over other axes: their table would
    show those points with None for this sweep's axes (and the heatmap fails on them)."""
    common = ["--mode=eval", f"--root={tmp_path}", "--axis=factor=2,4", "--axis=attention_factor=1.0,1.1",
              "--lengths=32", "--aggregate_only"]
    result = sweep_script(*common, "--points=factor=2,attention_factor=1.1")
    assert result.returncode == 0, result.stderr[-2000:]
    (tmp_path / "points").mkdir()
    record = {"name": "beta_fast=16", "point": {"beta_fast": 16}, "status": "done", "run": "/r", "split": "validation",
              "scaling": "yarn", "num_bytes": 128, "key": {"corpus": "c"}, "bpb_L32": 2.0}
    (tmp_path / "points" / "beta_fast=16.json").write_text(json.dumps(record))
    result = sweep_script(*common)
    assert result.returncode != 0 and "holds sweep points over other axes than ['factor', 'attention_factor'] (or " \
        "these in another order): beta_fast=16" in result.stderr
    with pytest.raises(ValueError, match="other axes"):
        sweep.gather(str(tmp_path), "eval", ["factor", "attention_factor"])
    assert [r["name"] for r in sweep.gather(str(tmp_path), "eval", ["beta_fast"])] == ["beta_fast=16"]
    (tmp_path / "points" / "beta_fast=16.json").unlink()  # the same axes in another order: every point named anew
    (tmp_path / "points" / "factor=2,attention_factor=1.json").write_text(json.dumps(
        {**record, "name": "factor=2,attention_factor=1", "point": {"factor": 2, "attention_factor": 1.0}}))
    assert len(sweep.gather(str(tmp_path), "eval", ["factor", "attention_factor"])) == 1
    with pytest.raises(ValueError, match=r"other axes than \['attention_factor', 'factor'\] \(or these in another "
                                         r"order\)"):
        sweep.gather(str(tmp_path), "eval", ["attention_factor", "factor"])


def test_gather_refuses_records_of_other_settings_under_one_root(tmp_path):
    """`--scaling=yarn --axis=factor=2,4`, then `--scaling=ntk --axis=factor=8` into the same root: one table
    would show factors 2, 4 and 8 as one series."""
    (tmp_path / "points").mkdir()
    record = {"point": {}, "status": "done", "run": "/r", "split": "test", "num_bytes": 128, "key": {"corpus": "text-A"}}
    for name, scaling in (("factor=2", "yarn"), ("factor=4", "yarn")):
        (tmp_path / "points" / f"{name}.json").write_text(json.dumps({**record, "name": name, "scaling": scaling}))
    assert [r["name"] for r in sweep.gather(str(tmp_path), "eval")] == ["factor=2", "factor=4"]
    (tmp_path / "points" / "factor=8.json").write_text(json.dumps({**record, "name": "factor=8", "scaling": "ntk"}))
    with pytest.raises(ValueError, match=r"other settings: scaling: 'yarn' \(factor=2, factor=4\), 'ntk' \(factor=8\)"):
        sweep.gather(str(tmp_path), "eval")
    # a Hugging Face sweep of another --text: another corpus
    (tmp_path / "points" / "factor=8.json").write_text(json.dumps({**record, "name": "factor=8", "scaling": "yarn",
                                                                   "key": {"corpus": "text-B"}}))
    with pytest.raises(ValueError, match=r"corpus: 'text-A' \(factor=2, factor=4\), 'text-B' \(factor=8\)"):
        sweep.gather(str(tmp_path), "eval")


def test_train_gather_refuses_points_of_other_bytes_corpus_or_base_config(tmp_path):
    """`--shard=0/2 --lengths=256,512` then `--shard=1/2 --lengths=256,512,1024` score 4,096 and 8,192 bytes
    (8 × the longest length); another base config or corpus is another series too."""
    def write(name, **fields):
        record = {"name": name, "point": {"model.rope.base": name}, "status": "done", "scaling": "none",
                  "split": "validation", "num_bytes": 4096, "base": "b0", "key": {"corpus": "c0"}, **fields}
        (tmp_path / name).mkdir(exist_ok=True)
        (tmp_path / name / "sweep_point.json").write_text(json.dumps(record))

    write("base=100")
    write("base=1000")
    assert len(sweep.gather(str(tmp_path), "train")) == 2
    for fields, match in (({"num_bytes": 8192}, "num_bytes: 4096"), ({"base": "b1"}, "base: 'b0'"),
                          ({"key": {"corpus": "c1"}}, "corpus: 'c0'"), ({"split": "test"}, "split: 'validation'")):
        write("base=1000", **fields)
        with pytest.raises(ValueError, match=match):
            sweep.gather(str(tmp_path), "train")


def test_with_fields_copies_and_names_unknown_fields(tiny_config):
    """posenc.config.with_fields (the sweep's axes, the experiments' overrides): a copy, ints cast to float
    fields, and an unknown field or section an error naming it and where it came from."""
    base = tiny_config()
    config = with_fields(base, {"model.rope.base": 100, "train_len": 16}, "sweep axis")
    assert config.model.rope.base == 100.0 and isinstance(config.model.rope.base, float) and config.train_len == 16
    assert base.train_len != 16  # the original is untouched
    # a value of another type than the field's: a ValueError naming the field (the script reports it as a usage
    # error), an unset field's type included
    with pytest.raises(ValueError, match=r"sweep axis schedule_steps='many': the field's type is int, not str"):
        with_fields(base, {"schedule_steps": "many"}, "sweep axis")
    with pytest.raises(ValueError, match=r"sweep axis train_len=32.0: the field's type is int, not float"):
        with_fields(base, {"train_len": 32.0}, "sweep axis")
    with pytest.raises(ValueError, match=r"eval.lengths=64: the field's type is str, not int \(a value that reads as a "
                                         r"number or another Python literal is taken as one\)"):
        with_fields(base, {"eval.lengths": 64}, "sweep axis")
    assert with_fields(base, {"init_from": None}).init_from is None and with_fields(
        base, {"model.rope.scaling.original_max_len": 64}).model.rope.scaling.original_max_len == 64
    # None only for an optional field (ml_collections would store it anywhere: data.cache_dir=None passed)
    for field in ("data.cache_dir", "train_len"):
        with pytest.raises(ValueError, match=rf"sweep axis {field}=None: config.{field} is not optional \(None clears "
                                             r"only the fields whose default is None: init_from, "):
            with_fields(base, {field: None}, "sweep axis")
    assert with_fields(base, {"schedule_steps": None}).schedule_steps is None
    with pytest.raises(ValueError, match="sweep axis 'model.rope.bse': config has no field 'bse'"):
        with_fields(base, {"model.rope.bse": 1}, "sweep axis")
    with pytest.raises(ValueError, match="--set 'modle.rope.base': config has no section 'modle'"):
        with_fields(base, [("modle.rope.base", 1)], "--set")
    with pytest.raises(ValueError, match="no section 'train_len'"):  # a leaf is not a section
        with_fields(base, {"train_len.x": 1})


def test_train_sweep_skips_done_points_and_isolates_failures(tiny_config, tmp_path):
    calls = []

    def counting_train(config, workdir):
        calls.append(pathlib.Path(workdir).name)
        if config.model.rope.base == 1000:  # a failure while training (the configs were all valid)
            raise RuntimeError("the device ran out of memory")
        return train.train_and_evaluate(config, workdir)

    points = sweep.select(sweep.expand(sweep.parse_axes(["model.rope.base=100,1000"])))
    base = tiny_config(train_steps=4)
    records = sweep.run_train_sweep(base, str(tmp_path), points, lengths=[32, 64], train_fn=counting_train,
                                    progress=False)
    status = {r["name"]: r for r in records}
    assert status["base=100"]["status"] == "done" and status["base=100"]["bpb_L64"] > 0
    assert status["base=1000"]["status"] == "failed" and "ran out of memory" in status["base=1000"]["error"]
    assert calls == ["base=100", "base=1000"]
    sweep.run_train_sweep(base, str(tmp_path), points, lengths=[32, 64], train_fn=counting_train, progress=False)
    assert calls == ["base=100", "base=1000", "base=1000"]  # the finished point is skipped, the failed one retried
    paths = sweep.write_outputs(sweep.gather(str(tmp_path), "train"), str(tmp_path), ["model.rope.base"], [32, 64])
    text = paths["md"].read_text()
    assert "Failed points" in text and "| 100 | done |" in text and paths["png"].exists()


def test_train_sweep_validates_every_point_before_training_any(tiny_config, tmp_path):
    """A point whose config is invalid stops the sweep before the first point trains (not after it)."""
    calls = []
    points = sweep.select(sweep.expand(sweep.parse_axes(["train_len=32,0"])))
    with pytest.raises(ValueError, match=r"sweep point train_len=0: config.train_len must be a positive integer"):
        sweep.run_train_sweep(tiny_config(train_steps=4), str(tmp_path), points, lengths=[32, 64],
                              train_fn=lambda config, workdir: calls.append(workdir), progress=False)
    assert calls == [] and not list(tmp_path.iterdir())


def test_eval_sweep_refuses_axes_its_scaling_kind_does_not_read():
    """--scaling=none --axis=factor=2,4 would write points 'factor=2', 'factor=4' scored unscaled."""
    for name, point, kind, field in [("factor=2", {"factor": 2}, "none", "factor=2"),
                                     ("beta_fast=8", {"beta_fast": 8.0}, "linear", "beta_fast=8.0"),
                                     ("truncate=False", {"truncate": False}, "llama3", "truncate=False"),
                                     ("kind=ntk,beta_slow=2", {"kind": "ntk", "beta_slow": 2.0}, "yarn", "beta_slow=2.0"),
                                     ("dynamic=True,factor=2", {"dynamic": True, "factor": 2.0}, "yarn", "factor=2.0")]:
        with pytest.raises(ValueError, match=f"sweep point {re.escape(name)}: RoPE scaling kind .* does not read "
                                             f"{re.escape(field)}"):
            sweep.check_eval_point(name, point, kind)
    sweep.check_eval_point("factor=2,beta_fast=8", {"factor": 2, "beta_fast": 8}, "yarn")  # yarn reads both
    sweep.check_eval_point("window=32", {"window": 32}, "none")  # a method field: no scaling field
    sweep.check_eval_point("attention_factor=0.9", {"attention_factor": 0.9}, "none")  # a temperature: every kind


def test_eval_sweep_refuses_an_axis_value_of_another_type_than_its_field_s():
    """`--axis=factor=true` would score factor 1.0 (float(True)) under the label factor=True; a bool is no number."""
    points = sweep.select(sweep.expand(sweep.parse_axes(["factor=true,2"])))
    assert points[0] == ("factor=True", {"factor": True})
    for name, point, text in [
            ("factor=True", {"factor": True}, "axis factor=True: factor takes a number (float), not bool"),
            ("beta_fast=False", {"beta_fast": False}, "axis beta_fast=False: beta_fast takes a number"),
            ("original_max_len=True", {"original_max_len": True}, "original_max_len takes an integer"),
            ("original_max_len=64.0", {"original_max_len": 64.0}, "original_max_len takes an integer (int or None), "
                                                                  "not float"),
            ("attention_factor=x", {"attention_factor": "x"}, "attention_factor takes a number"),
            ("dynamic=1", {"dynamic": 1}, "axis dynamic=1: dynamic takes True or False (bool), not int")]:
        with pytest.raises(ValueError, match=re.escape(f"sweep point {name}: ") + ".*" + re.escape(text)):
            sweep.check_eval_point(name, point, "yarn")
    sweep.check_eval_point("factor=2,attention_factor=None", {"factor": 2, "attention_factor": None}, "yarn")
    sweep.check_eval_point("original_max_len=64,truncate=False", {"original_max_len": 64, "truncate": False}, "yarn")


def test_a_sweep_of_other_settings_is_refused_before_its_new_points_run(trained_run, tiny_config, tmp_path):
    """New point names under a root of other settings (another --num_bytes, split, scaling, base config): the table
    would refuse them after they ran and wrote their records; they are refused before."""
    root = tmp_path / "eval"
    first = sweep.select(sweep.expand(sweep.parse_axes(["factor=2.0"])))
    assert sweep.run_eval_sweep(str(trained_run), str(root), first, lengths=[32], num_bytes=128,
                                progress=False)[0]["status"] == "done"
    more = sweep.select(sweep.expand(sweep.parse_axes(["factor=4.0"])))
    for kwargs, match in (({"num_bytes": 256}, r"num_bytes: 128 \(factor=2\), 256 \(factor=4\)"),
                          ({"split": "test"}, r"split: 'validation' \(factor=2\), 'test' \(factor=4\)")):
        with pytest.raises(ValueError, match=f"holds sweep points made with other settings: {match}"):
            sweep.run_eval_sweep(str(trained_run), str(root), more, lengths=[32], **{"num_bytes": 128, **kwargs},
                                 progress=False)
        assert sorted(p.name for p in (root / "points").iterdir()) == ["factor=2.json"]
    # train mode: a finished point of another base config under the root
    (tmp_path / "train" / "base=100").mkdir(parents=True)
    (tmp_path / "train" / "base=100" / "sweep_point.json").write_text(json.dumps(
        {"name": "base=100", "point": {"model.rope.base": 100}, "mode": "train", "status": "done",
         "split": "validation", "base": "another base", "scaling": "none", "num_bytes": 128, "bpb_L32": 2.0}))
    points = sweep.select(sweep.expand(sweep.parse_axes(["model.rope.base=1000"])))
    with pytest.raises(ValueError, match=r"other settings: base: 'another base' \(base=100\), '[0-9a-f]{16}' "
                                         r"\(base=1000\)"):
        sweep.run_train_sweep(tiny_config(train_steps=4), str(tmp_path / "train"), points, lengths=[32], num_bytes=128,
                              train_fn=lambda config, workdir: pytest.fail("trained"), progress=False)
    assert [p.name for p in (tmp_path / "train").iterdir()] == ["base=100"]


def test_eval_sweep_refuses_an_unread_axis_before_loading_the_run(tmp_path):
    points = sweep.select(sweep.expand(sweep.parse_axes(["factor=2,4"])))
    with pytest.raises(ValueError, match="kind 'none' .* does not read factor=2"):  # the workdir does not exist
        sweep.run_eval_sweep(str(tmp_path / "no_run"), str(tmp_path / "s"), points, lengths=[32], scaling="none",
                             progress=False)


def test_tables_mark_a_choice_on_validation_only(tmp_path, monkeypatch):
    """A test-split table marks no best point (choosing there would report the choice on the bytes it was chosen
    on); a validation table does, in its header and its heatmap's title."""
    import matplotlib.axes  # noqa: PLC0415

    titles = []
    monkeypatch.setattr(matplotlib.axes.Axes, "set_title", lambda self, t, *a, **k: titles.append(t))
    for split in ("validation", "test"):
        records = [{"name": f"a={a},b={b}", "point": {"a": a, "b": b}, "status": "done", "split": split,
                    "bpb_L64": a + b} for a in (1, 2) for b in (3, 4)]
        paths = sweep.write_outputs(records, str(tmp_path / split), ["a", "b"], [64])
        head = paths["md"].read_text().splitlines()[0]
        assert f"on the {split} split" in head
        assert ("in bold, is the sweep's choice" in head) == (split == "validation")
        assert ("| **4.000** |" in paths["md"].read_text()) == (split == "validation")  # a=1, b=3: the lowest
        assert "split" in paths["csv"].read_text().splitlines()[0] and f",{split},done," in paths["csv"].read_text()
    assert titles == ["best on validation: a=1, b=3", "test split"]
    with pytest.raises(ValueError, match="different splits"):
        sweep.records_split([{"split": "validation"}, {"key": {"split": "test"}}])


def test_a_rerun_names_the_run_by_its_parameters_not_its_path(tmp_path):
    """Points copied back from another machine (or a moved checkout) have the run at another path: the same
    parameters are the same run; other parameters are refused."""
    key = {"run": "/machineB/runs/x", "params_sha256": "abc", "split": "validation", "point": {"factor": 2.0}}
    old = {"status": "done", "key": key, "bpb_L32": 1.0}
    here = {**key, "run": "/machineA/runs/x"}
    sweep.check_rerun("root", [("factor=2", old, here)])
    assert sweep.missing_lengths(old, here, [32, 64]) == [64]
    # a length scored without its per-window scores is missing only to a caller that needs them
    assert sweep.missing_lengths(old, here, [32], windows=True) == [32]
    assert sweep.missing_lengths({**old, "window_bpb_L32": [1.0]}, here, [32], windows=True) == []
    assert sweep.missing_lengths({**old, "bpb_L32": None}, here, [32], windows=True) == []  # undefined: nothing to redo
    with pytest.raises(ValueError, match="params_sha256: 'abc' in the record, 'other' now"):
        sweep.check_rerun("root", [("factor=2", old, {**here, "params_sha256": "other"})])
    unnamed = {k: v for k, v in key.items() if k != "params_sha256"}  # no parameters recorded: the path is the run
    with pytest.raises(ValueError, match="run: '/machineB/runs/x' in the record"):
        sweep.check_rerun("root", [("factor=2", {**old, "key": unnamed}, {**unnamed, "run": "/machineA/runs/x"})])


def test_write_outputs_refuses_a_plot_length_not_among_the_lengths(tmp_path):
    with pytest.raises(ValueError, match=r"plot_length=999 is not one of the lengths \[32, 64\]"):
        sweep.write_outputs([], str(tmp_path), ["factor"], [32, 64], plot_length=999)


def test_eval_sweep_at_factor_one_matches_plain_evaluation(tiny_config, tmp_path):
    train.train_and_evaluate(tiny_config(train_steps=4), str(tmp_path / "run"))
    points = sweep.select(sweep.expand(sweep.parse_axes(["factor=1.0,2.0", "attention_factor=1.0,1.2"])))
    records = sweep.run_eval_sweep(str(tmp_path / "run"), str(tmp_path / "sweep"), points, lengths=[32, 64],
                                   scaling="linear", num_bytes=128, split="test", progress=False)
    plain = ev.evaluate([str(tmp_path / "run")], [32, 64], ["none"], num_bytes=128, progress=False)
    rows = {r["length"]: r for r in plain["rows"] if r["protocol"] == "nonoverlap"}
    floors = {r["length"]: r["bpb"] for r in plain["baselines"]}
    by = {r["name"]: r for r in records}
    for n in (32, 64):  # the number, its interval over windows and the n-gram floor on the same windows
        one = by["factor=1,attention_factor=1"]
        assert one["bpb_L{}".format(n)] == pytest.approx(rows[n]["bpb"], rel=1e-12)
        assert one[f"ci_L{n}"] == pytest.approx([rows[n]["bpb_lo"], rows[n]["bpb_hi"]], rel=1e-12)
        assert one[f"floor_L{n}"] == pytest.approx(floors[n], rel=1e-12)
    text = sweep.write_outputs(records, str(tmp_path / "sweep"), ["factor", "attention_factor"], [32, 64])["md"].read_text()
    lo, hi = by["factor=1,attention_factor=1"]["ci_L64"]
    assert f" [{lo:.3f}, {hi:.3f}] |" in text and f"| n-gram floor | — | baseline | {floors[32]:.3f} | {floors[64]:.3f} |" in text
    assert by["factor=2,attention_factor=1"]["bpb_L64"] != by["factor=1,attention_factor=1"]["bpb_L64"]
    assert by["factor=1,attention_factor=1.2"]["bpb_L64"] != by["factor=1,attention_factor=1"]["bpb_L64"]
    with pytest.raises(ValueError, match="RopeScaling fields"):
        sweep.eval_scaling(ev.load_run(str(tmp_path / "run")), {"base": 10}, "yarn", 64)


def test_script_eval_sweep_heatmap(tiny_config, tmp_path, cache_dir):
    train.train_and_evaluate(tiny_config(train_steps=4), str(tmp_path / "run"))
    result = subprocess.run(
        [sys.executable, "scripts/sweep.py", "--mode=eval", f"--workdir={tmp_path / 'run'}", f"--root={tmp_path / 's'}",
         "--scaling=yarn", "--axis=factor=2,4", "--axis=attention_factor=1.0,1.1", "--lengths=64", "--num_bytes=128"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "| 4 | 1.1 | done |" in result.stdout and (tmp_path / "s" / "sweep.png").exists()
    assert len(list((tmp_path / "s" / "points").glob("*.json"))) == 4
    record = json.loads((tmp_path / "s" / "points" / "factor=2,attention_factor=1.json").read_text())
    assert record["status"] == "done"


def test_train_sweep_reuses_a_point_only_for_its_config_and_extends_lengths(tiny_config, tmp_path):
    points = sweep.select(sweep.expand(sweep.parse_axes(["model.rope.base=100"])))
    base = tiny_config(train_steps=4)
    first = sweep.run_train_sweep(base, str(tmp_path), points, lengths=[32], num_bytes=128, progress=False)[0]
    # more lengths: the point is extended, its old number kept
    extended = sweep.run_train_sweep(base, str(tmp_path), points, lengths=[32, 64], num_bytes=128, progress=False)[0]
    assert extended["bpb_L32"] == first["bpb_L32"] and extended["bpb_L64"] > 0 and extended["status"] == "done"
    # a length scored under another scaling than it resolves to now is scored again (the run is not retrained)
    path = tmp_path / points[0][0] / "sweep_point.json"
    stale = json.loads(path.read_text())
    stale["scaling_L64"]["factor"], stale["bpb_L64"] = 3.0, 99.0
    path.write_text(json.dumps(stale))
    again = sweep.run_train_sweep(base, str(tmp_path), points, lengths=[32, 64], num_bytes=128, progress=False,
                                  train_fn=lambda config, workdir: None)[0]
    assert (again["bpb_L32"], again["bpb_L64"]) == (first["bpb_L32"], extended["bpb_L64"])
    # another base config, split or bytes: refused before any work, the finished record kept
    kept = path.read_text()
    for config, kwargs, field in ((tiny_config(train_steps=6), {}, "config.schedule_steps: 4 in the record, 6 now"),
                                  (base, {"split": "test"}, "split: 'validation' in the record, 'test' now"),
                                  (base, {"num_bytes": 256}, "num_bytes: 128 in the record, 256 now")):
        kwargs = {"num_bytes": 128, **kwargs}
        with pytest.raises(ValueError, match=r"computed from other settings.*" + re.escape(field)):
            sweep.run_train_sweep(config, str(tmp_path), points, lengths=[32, 64], progress=False,
                                  train_fn=lambda config, workdir: pytest.fail("trained"), **kwargs)
        assert path.read_text() == kept
    # a run directory holding a run of another config (its record lost) refuses to become another run
    path.unlink()
    rerun = sweep.run_train_sweep(tiny_config(train_steps=6), str(tmp_path), points, lengths=[32, 64], num_bytes=128,
                                  progress=False)[0]
    assert rerun["status"] == "failed" and "RunMismatchError" in rerun["error"] and "schedule_steps" in rerun["error"]
    assert "bpb_L32" not in rerun


def test_eval_sweep_extends_lengths_and_refuses_other_bytes(trained_run, tmp_path):
    points = sweep.select(sweep.expand(sweep.parse_axes(["factor=2.0"])))
    root = str(tmp_path / "sweep")
    first = sweep.run_eval_sweep(str(trained_run), root, points, lengths=[32], num_bytes=128, progress=False)[0]
    more = sweep.run_eval_sweep(str(trained_run), root, points, lengths=[32, 64], num_bytes=128, progress=False)[0]
    assert more["bpb_L32"] == first["bpb_L32"] and more["bpb_L64"] > 0 and more["split"] == "validation"
    kept = (pathlib.Path(root) / "points" / f"{points[0][0]}.json").read_text()
    for kwargs, field in (({"num_bytes": 256}, "num_bytes: 128 in the record, 256 now"),
                          ({"split": "test"}, "split: 'validation' in the record, 'test' now"),
                          ({"scaling": "ntk"}, "scaling: 'yarn' in the record, 'ntk' now")):
        with pytest.raises(ValueError, match=r"computed from other settings; .*: factor=2 \(" + re.escape(field)):
            sweep.run_eval_sweep(str(trained_run), root, points, lengths=[64], **{"num_bytes": 128, **kwargs},
                                 progress=False)
        assert (pathlib.Path(root) / "points" / f"{points[0][0]}.json").read_text() == kept
    other = sweep.run_eval_sweep(str(trained_run), str(tmp_path / "other"), points, lengths=[64], num_bytes=256,
                                 progress=False)[0]
    assert other["num_bytes"] == 256 and "bpb_L32" not in other and other["bpb_L64"] != more["bpb_L64"]
    # a length scored under another scaling than it resolves to now (a named scaling whose meaning changed), or
    # with none recorded (an older record), is scored again
    sweep.run_eval_sweep(str(trained_run), root, points, lengths=[32, 64], num_bytes=128, progress=False)
    path = pathlib.Path(root) / "points" / f"{points[0][0]}.json"
    stale = json.loads(path.read_text())
    assert stale["scaling_L32"]["factor"] == 2.0
    stale["scaling_L32"]["factor"], stale["bpb_L32"], stale["bpb_L64"] = 3.0, 99.0, 98.0
    del stale["scaling_L64"]
    path.write_text(json.dumps(stale))
    again = sweep.run_eval_sweep(str(trained_run), root, points, lengths=[32, 64], num_bytes=128, progress=False)[0]
    assert (again["bpb_L32"], again["bpb_L64"]) == (first["bpb_L32"], more["bpb_L64"])
    assert again["scaling_L64"] == sweep.scaling_fields(sweep.eval_scaling(ev.load_run(str(trained_run)), {"factor": 2.0},
                                                                           "yarn", 64))
    # a record is reused for the same parameters only: a run trained again to the same step is scored again
    from posenc import checkpoint  # noqa: PLC0415

    assert again["key"]["params_sha256"] == checkpoint.tree_sha256(ev.load_run(str(trained_run)).params)
    path.write_text(json.dumps({**json.loads(path.read_text()), "bpb_L32": 99.0}))
    reused = sweep.run_eval_sweep(str(trained_run), root, points, lengths=[32], num_bytes=128, progress=False)[0]
    assert reused["bpb_L32"] == 99.0
    stale_key = {**json.loads(path.read_text())["key"], "params_sha256": "another run"}
    path.write_text(json.dumps({**json.loads(path.read_text()), "key": stale_key}))
    with pytest.raises(ValueError, match="params_sha256: 'another run' in the record"):
        sweep.run_eval_sweep(str(trained_run), root, points, lengths=[32], num_bytes=128, progress=False)
    path.write_text(json.dumps({**json.loads(path.read_text()), "status": "failed"}))  # a failed point is retried
    fresh = sweep.run_eval_sweep(str(trained_run), root, points, lengths=[32], num_bytes=128, progress=False)[0]
    assert fresh["bpb_L32"] == first["bpb_L32"]


def sweep_script(*args):
    return subprocess.run([sys.executable, "scripts/sweep.py", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_script_errors_and_a_sweep_that_failed_everywhere_exits_non_zero(trained_run, tmp_path):
    common = ["--mode=eval", f"--workdir={trained_run}", f"--root={tmp_path / 's'}", "--num_bytes=128"]
    result = sweep_script(*common, "--axis=kind=cubic,quartic", "--lengths=32")  # refused before any work
    assert result.returncode != 0 and "--axis: sweep point kind=cubic: kind must be one of" in result.stderr
    assert not (tmp_path / "s").exists()
    result = sweep_script(*common, "--axis=original_max_len=0,-1", "--lengths=32")  # each point's RopeScaling fails
    assert result.returncode != 0 and "every point of the sweep failed (2)" in result.stderr
    assert "Failed points" in (tmp_path / "s" / "results.md").read_text()  # the table is still written
    result = sweep_script(*common, "--axis=factor=2", "--lengths=32", "--shard=abc")
    assert result.returncode != 0 and "shard must be i/n with integers 0 <= i < n (such as 0/3), got 'abc'" in result.stderr
    result = sweep_script(*common, "--axis=factor=2", "--lengths=32.5")
    assert result.returncode != 0 and "--lengths: '32.5' is not a positive integer" in result.stderr
    result = sweep_script(*common, "--axis=factor=2", "--lengths=32", "--config.train_steps=3")
    assert result.returncode != 0 and "--config.train_steps: for --mode=train only" in result.stderr
    result = sweep_script("--mode=train", f"--workdir={trained_run}", f"--root={tmp_path / 't'}", "--axis=seed=1")
    assert result.returncode != 0 and "--workdir: for --mode=eval only" in result.stderr
    result = sweep_script("--mode=train", "--config=configs/default.py:tiny", f"--root={tmp_path / 't'}",
                          "--axis=train_len=32,0", "--lengths=32")  # every point checked before --root is made
    assert result.returncode != 0 and "sweep point train_len=0: config.train_len must be a positive" in result.stderr
    assert not (tmp_path / "t").exists()
    result = sweep_script("--mode=train", "--config=configs/default.py:tiny", f"--root={tmp_path / 't'}",
                          "--axis=seed=0", "--scaling=yran", "--lengths=32")
    assert result.returncode != 0 and "--scaling: scaling must be one of" in result.stderr
    assert not (tmp_path / "t").exists()
    with pytest.raises(ValueError, match=r"scaling \(the RoPE scaling kind the points modify\) must be one of"):
        sweep.run_eval_sweep(str(trained_run), str(tmp_path / "u"), [("factor=2", {"factor": 2.0})], lengths=[32],
                             scaling="yran")


def test_a_root_under_the_home_directory_is_written_there(tmp_path):
    """--root=~/… as the shell passes it (bash expands no `~` after `--root=`): the table and plot go under $HOME,
    not into a directory named `~` in the working directory."""
    import os  # noqa: PLC0415

    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir(), cwd.mkdir()
    env = {**os.environ, "HOME": str(home),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "sweep.py"), "--mode=eval", "--root=~/sw",
                             "--axis=factor=2", "--lengths=32", "--aggregate_only"], cwd=cwd, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (home / "sw" / "results.md").exists() and not (cwd / "~").exists()


def test_a_train_sweep_refuses_a_scaling_its_points_cannot_take_before_training(tiny_config, tmp_path):
    points = sweep.select(sweep.expand(sweep.parse_axes(["model.posenc=rope,alibi"])))
    trained = []
    for scaling, match in (("yran", "scaling must be one of"), ("yarn", "does not apply to point posenc=alibi")):
        with pytest.raises(ValueError, match=match):
            sweep.run_train_sweep(tiny_config(train_steps=4), str(tmp_path), points, lengths=[32], scaling=scaling,
                                  train_fn=lambda c, w: trained.append(w), progress=False)
    assert trained == []
    # a field only one point's encoding reads: refused at the other, with the way to sweep it along
    with pytest.raises(ValueError, match=r"sweep point .*posenc=alibi: posenc='alibi' does not read "
                                         r"model.rope.base=500.0 .*: --combine=zip"):
        sweep.check_train_points(tiny_config(**{"model.rope.base": 500.0}), points, "none")


def test_eval_sweep_over_training_free_method_fields_matches_evaluation_and_compiles_once(trained_run, tiny_config,
                                                                                          tmp_path):
    points = sweep.select(sweep.expand(sweep.parse_axes(["window=8,16", "group=2,4"])))
    records = sweep.run_eval_sweep(str(trained_run), str(tmp_path / "s"), points, lengths=[64], scaling="none",
                                   method="self_extend", num_bytes=128, split="test", progress=False)
    by = {r["name"]: r for r in records}
    assert all(r["status"] == "done" for r in records), [r.get("error") for r in records]
    rows = ev.evaluate([str(trained_run)], [64], ["none"], methods=["self_extend,window=16,group=4"], num_bytes=128,
                       progress=False)["rows"]
    want = [r["bpb"] for r in rows if r["protocol"] == "nonoverlap"][0]
    assert by["window=16,group=4"]["bpb_L64"] == pytest.approx(want, rel=1e-12)
    assert len({r["bpb_L64"] for r in records}) == 4
    # one compiled forward for every value of the traced parameters
    e = ev.Evaluator(ev.load_run(str(trained_run)))
    x = np.zeros((2, 64), np.int32)
    from posenc.training_free import Method

    e.nll(x, x, e.run.cfg.rope_scaling, Method("self_extend", window=4, group=2))
    traced = e._fn(64)._cache_size()  # the function is shared by every Evaluator of this model in the process
    for w, g in ((8, 2), (16, 4), (12, 3)):
        e.nll(x, x, e.run.cfg.rope_scaling, Method("self_extend", window=w, group=g))
    assert e._fn(64)._cache_size() == traced
    # a method the encoding does not define fails before any work; method axes need no RoPE scaling
    with pytest.raises(ValueError, match="method fields"):
        sweep.split_point({"base": 3})
    alibi = tmp_path / "alibi"
    train.train_and_evaluate(tiny_config("posenc=alibi,tiny", train_steps=4), str(alibi))
    with pytest.raises(ValueError, match="rotary encodings only"):
        sweep.run_eval_sweep(str(alibi), str(tmp_path / "a"), points, lengths=[64], scaling="none",
                             method="self_extend", num_bytes=128, progress=False)
    sinks = sweep.select(sweep.expand(sweep.parse_axes(["num_sinks=1,4"])))
    done = sweep.run_eval_sweep(str(alibi), str(tmp_path / "a"), sinks, lengths=[64], scaling="none", method="sinks",
                                num_bytes=128, progress=False)
    assert len(done) == 2 and all(r["status"] == "done" for r in done)


def test_the_line_plot_draws_the_tables_intervals_and_n_gram_floor(tmp_path, monkeypatch):
    """One axis: each point's line is its table cells, shaded over their intervals, and the n-gram floor the table
    has as its last row is drawn too."""
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figure to read it back
    records = [{"name": f"base={b}", "point": {"model.rope.base": b}, "status": "done", "train_len": 32,
                "bpb_L32": 2.0 + k, "bpb_L64": 3.0 + k, "ci_L32": [1.9 + k, 2.1 + k], "ci_L64": [2.8 + k, 3.2 + k],
                "floor_L32": 2.5, "floor_L64": 2.4} for k, b in enumerate((100, 10000))]
    paths = sweep.write_outputs(records, str(tmp_path), ["model.rope.base"], [32, 64])
    assert "| n-gram floor | baseline | 2.500 | 2.400 |" in paths["md"].read_text()
    (ax,) = figures[0].axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert list(lines["n-gram floor"].get_ydata()) == [2.5, 2.4]
    assert list(lines["base=10000"].get_ydata()) == [3.0, 4.0]
    bands = [c.get_paths()[0].vertices for c in ax.collections]
    assert len(bands) == 2
    for band, k in zip(bands, (0, 1)):
        assert np.isclose(band[:, 1].min(), 1.9 + k) and np.isclose(band[:, 1].max(), 3.2 + k)
    plt.close(figures[0])
