"""Smoke tests of the benchmark and figure scripts (small sizes): they run and print their ratios."""

import importlib.util
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile

import pytest

from conftest import assert_same_figure

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run(*args, env=None, preexec_fn=None):
    result = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600,
                            env=env, preexec_fn=preexec_fn)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def script_call(module: str, code: str) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh Python with scripts/`module` imported as `m` (each script defines its absl flags at
    import, so two scripts cannot share the test process)."""
    return subprocess.run([sys.executable, "-c", f"import sys; sys.path.insert(0, 'scripts'); import {module} as m\n"
                           + code], cwd=ROOT, capture_output=True, text=True, timeout=300)


def assert_records_the_machine_and_code(result: dict) -> None:
    """A benchmark result names its CPU (model name and lscpu's family/model/stepping) and the code's commit."""
    assert result["cpu"] and set(result["cpu_id"]) == {"vendor", "family", "model", "stepping", "bf16"}
    assert result["commit"]


def test_benchmark_rope_prints_ratios():
    """Each dtype's row: the bytes of the shape, and every ratio its bound's raw time over apply_rope's."""
    out = run("scripts/benchmark_rope.py", "--shape=2,128,4,32", "--repeats=2")
    result = json.loads(out.strip().splitlines()[-1])
    for dtype, itemsize in (("float32", 4), ("bfloat16", 2)):
        row = result[dtype]
        assert row["bytes"] == 2 * 128 * 4 * 32 * itemsize
        for layout in ("half", "interleaved"):
            assert row[f"rope_{layout}_ms"] > 0
            assert row[f"rope_{layout}_vs_elementwise"] == pytest.approx(row["elementwise_ms"] / row[f"rope_{layout}_ms"])
            assert row[f"rope_{layout}_vs_memcopy"] == pytest.approx(row["numpy_copy_ms"] / row[f"rope_{layout}_ms"])
    assert_records_the_machine_and_code(result)


def test_benchmark_decode_rows_follow_from_their_raw_timings():
    """Each row's cached time and speedup are its raw medians' (generate n − generate 1) / (n − 1), or unresolved
    where that difference is not positive, never a clamped figure."""
    out = run("scripts/benchmark_decode.py", "--contexts=32,64", "--new_tokens=4", "--repeats=1")
    result = json.loads(out.strip().splitlines()[-1])
    assert [r["context"] for r in result["rows"]] == [32, 64]
    for r in result["rows"]:
        diff = r["generate_n_s"] - r["generate_1_s"]
        if diff > 0:
            cached = diff / (r["new_tokens"] - 1)
            assert r["resolved"] and r["cached_ms_per_token"] == pytest.approx(1e3 * cached)
            assert r["speedup"] == pytest.approx(r["recompute_s"] / cached)
        else:
            assert not r["resolved"] and r["speedup"] is None and r["cached_ms_per_token"] is None
    assert_records_the_machine_and_code(result)


def test_benchmark_decode_reports_noise_as_unresolved_and_refuses_one_new_token():
    proc = script_call("benchmark_decode", "import json; print(json.dumps([m.decode_row(32, 4, 0.5, 0.6, 0.2), "
                                           "m.decode_row(32, 4, 0.8, 0.5, 0.2)]))")
    assert proc.returncode == 0, proc.stderr[-3000:]
    noisy, clean = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not noisy["resolved"] and noisy["speedup"] is None and noisy["cached_tokens_per_s"] is None
    assert clean["resolved"] and clean["cached_ms_per_token"] == pytest.approx(100.0)
    assert clean["speedup"] == pytest.approx(2.0)
    bad = subprocess.run([sys.executable, "scripts/benchmark_decode.py", "--contexts=32", "--new_tokens=1"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "--new_tokens=1: needs at least 2" in bad.stderr
    assert "ZeroDivisionError" not in bad.stderr


@pytest.mark.parametrize("without,dtype,act", [("attention_vjp", "float32", "auto"),  # one ablation (suite time)
                                               ("", "bfloat16", "bfloat16")])  # dtype_ab.py's third arm
def test_benchmark_train_prints_mfu(without, dtype, act):
    out = run("scripts/benchmark_train.py", "--steps=1", "--rounds=1", "--train_len=32", "--batch_size=2", "--profile",
              f"--without={without}", f"--dtype={dtype}", f"--act_dtype={act}")
    result = json.loads(out.strip().splitlines()[-1])
    assert (result["dtype"], result["act_dtype"]) == (dtype, act)
    assert result["tokens_per_s"] > 0 and 0 < result["mfu"] < 1 and len(result["rounds_tokens_per_s"]) == 1
    # the reference model (bytes, d_model 256, 4 layers) at T = 32: PaLM's count and the causal one
    n = result["params"] - 256 * 256
    assert result["flops_per_token"] == 6 * n + 12 * 4 * 256 * 32
    assert result["causal_flops_per_token"] == 6 * n + 6 * 4 * 256 * 32
    assert result["mfu_causal"] == pytest.approx(result["mfu"] * result["causal_flops_per_token"]
                                                 / result["flops_per_token"])
    assert_records_the_machine_and_code(result)
    assert result["without"] == [w for w in without.split(",") if w]
    assert result["profile"] and all(row["ms"] >= 0 and "[" in row["shape"] for row in result["profile"])


def test_benchmark_train_s_pytorch_peer_takes_posenc_s_gelu_norm_and_adamw():
    """The PyTorch peer trains the model posenc trains (tanh GELU, the norms' epsilon) with posenc's AdamW
    (posenc.train.make_optimizer: betas, weight decay on the matrices only, the gradient-norm clip), and a model
    outside the peer's architecture is refused, naming the field."""
    proc = script_call("benchmark_train", """import json
from absl import flags
flags.FLAGS(["benchmark_train.py"])
config = m.reference_config()
out = {"peer": m.torch_peer(config), "config": [config.learning_rate, config.b1, config.b2, config.weight_decay,
                                                config.grad_clip]}
config.model.posenc = "alibi"
try:
    m.torch_peer(config)
except ValueError as e:
    out["refused"] = str(e)
print(json.dumps(out))""")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    lr, b1, b2, weight_decay, grad_clip = out["config"]
    assert out["peer"] == {"gelu_approximate": "tanh", "norm_eps": 1e-6, "lr": lr, "betas": [b1, b2], "eps": 1e-8,
                           "weight_decay": weight_decay, "decayed": "parameters of 2 or more axes",
                           "grad_clip": grad_clip}
    assert (b2, weight_decay, grad_clip) == (0.95, 0.1, 1.0)  # not torch's AdamW defaults (0.999, 0.01, no clip)
    assert "model.posenc='rope' only, got 'alibi'" in out["refused"]


def test_benchmark_xla_options_compiles_each_variant_with_its_options():
    """The variant without YNNPACK fusions really runs none (its options reach the compiler), and a malformed
    variant is an error naming the expected form."""
    out = run("scripts/benchmark_xla_options.py", "--steps=1", "--rounds=1", "--train_len=32", "--batch_size=2",
              "--variant=default:", "--variant=no_ynn:xla_cpu_experimental_ynn_fusion_type=",
              "--variant=onednn:xla_cpu_use_onednn=true,xla_cpu_experimental_onednn_fusion_type=LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT")
    rows = {row["variant"]: row for row in json.loads(out.strip().splitlines()[-1])["rows"]}
    assert rows["default"]["dots"]["ynnpack"] > 0 and rows["default"]["over_first"] == 1.0
    assert rows["no_ynn"]["dots"]["ynnpack"] == 0 and rows["no_ynn"]["dots"]["xla"] > 0
    assert rows["onednn"]["options"]["xla_cpu_use_onednn"] is True and rows["onednn"]["dots"]["onednn"] > 0
    assert all(row["tokens_per_s"] > 0 for row in rows.values())
    bad = subprocess.run([sys.executable, "scripts/benchmark_xla_options.py", "--variant=nocolon"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "NAME:KEY=VALUE" in bad.stderr


def test_figures_script(tmp_path):
    run("experiments/figures/make_figures.py", f"--out={tmp_path}")
    for name in ("rope_decay", "sinusoidal_similarity", "yarn_regions", "rope_scores"):
        assert_same_figure(tmp_path / f"{name}.png", ROOT / "experiments" / "figures" / f"{name}.png")


@pytest.mark.parametrize("script", ["scripts/train.py", "scripts/eval_extrapolation.py", "scripts/generate.py",
                                    "scripts/sweep.py", "scripts/search_longrope.py", "scripts/eval_tasks.py",
                                    "scripts/tune_scaling.py", "scripts/prefix_gap.py"])
def test_entry_points_document_themselves(script):
    """--helpshort prints the module docstring (the exact command) and the flags; absl exits 1 after it."""
    result = subprocess.run([sys.executable, script, "--helpshort"], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 1 and f"python {script}" in result.stdout and "flags:" in result.stdout


def test_documented_commands_use_only_flags_their_scripts_define():
    """Every `scripts/NAME.py --flag` written in README.md, the experiments' READMEs, the configs' and the scripts'
    docstrings names a flag NAME.py defines (or a script it imports defines), a `--config.FIELD` override where
    it has --config, or `--noFLAG` for a boolean: a renamed flag leaves no documented command that fails."""
    import re  # noqa: PLC0415

    texts = {p.stem: p.read_text() for p in (ROOT / "scripts").glob("*.py")}
    defined = {stem: {m.group(2): m.group(1) for m in re.finditer(r'DEFINE_(\w+)\(\s*"(\w+)"', text)}
               for stem, text in texts.items()}
    for stem, text in texts.items():  # benchmark_xla_options takes benchmark_train's flags
        for other in re.findall(r"^import (\w+)", text, re.M):
            defined[stem] = {**defined.get(other, {}), **defined[stem]}
    docs = [ROOT / "README.md", *sorted((ROOT / "experiments").glob("*/README.md")),
            *sorted((ROOT / "configs").glob("*.py")), *sorted((ROOT / "scripts").glob("*.py"))]
    seen, unknown = 0, []
    for doc in docs:
        text = re.sub(r"\\\n\s*", " ", doc.read_text())  # a command continued over lines is one line
        for m in re.finditer(r"scripts/(\w+)\.py(\s[^`#\n]*)", text):
            names = defined.get(m.group(1), {})
            if not names:  # a script that reads sys.argv itself (render_readme.py --check)
                continue
            for flag in re.findall(r"(?<![\w-])--(\w[\w.]*)", m.group(2).split("&&")[0]):
                seen += 1
                if not (flag in names or (flag.startswith("config.") and "config" in names)
                        or (flag.startswith("no") and names.get(flag[2:]) == "bool")):
                    unknown.append(f"{doc.relative_to(ROOT)}: scripts/{m.group(1)}.py --{flag}")
    assert seen > 100 and not unknown, unknown


# (argv, the UsageError's text): flags that would be ignored, contradict each other or make no sense, each refused
# before the script loads a run or compiles anything (the paths named here do not exist: MISSING, under the
# temporary directory, is never created unless a script starts work it should have refused)
MISSING = str(pathlib.Path(tempfile.gettempdir()) / f"posenc-missing-{os.getpid()}")
USAGE_CASES = {
    "generate": [
        ([f"--workdir={MISSING}", "--factor=4"], "--factor=4.0 is read only with --scaling in"),
        ([f"--workdir={MISSING}", "--longrope=x.json"], "--longrope is read only with --scaling=longrope, got --scaling=run"),
        ([f"--workdir={MISSING}", "--scaling=none", "--factor=2"], "got --scaling=none"),
    ],
    "eval_extrapolation": [
        ([f"--workdir={MISSING}", "--hf_dtype=bfloat16"], "--hf_dtype is the weights' dtype of the --hf_model"),
        ([f"--workdir={MISSING}", "--scalings=none", "--longrope=x.json"], "--longrope is read only by --scalings=longrope"),
        ([f"--workdir={MISSING}", "--scalings=none", "--factor=4"], "--factor=4.0 is read only by --scalings of"),
    ],
    "eval_tasks": [
        ([f"--workdir={MISSING}", "--hf_dtype=float32"], "--hf_dtype is the weights' dtype of the --hf_model"),
    ],
    "search_longrope": [
        ([f"--workdir={MISSING}", "--target_len=64", "--text=book.txt"], "--text is the corpus of a --hf_model"),
        ([f"--workdir={MISSING}", "--target_len=64", "--num_bytes=0"], "--num_bytes must be a positive integer"),
        ([f"--workdir={MISSING}", "--target_len=64", "--short_generations=0"],
         "--short_generations must be a positive integer"),
    ],
    "tune_scaling": [
        ([f"--workdir={MISSING}", "--target_len=64", "--budget=0", f"--out={MISSING}/o"],
         "--budget (validation evaluations per rule) must be a positive integer, got 0"),
        ([f"--workdir={MISSING}", "--target_len=-5", "--budget=4", f"--out={MISSING}/o"],
         "--target_len (the length the rules are tuned for) must be a positive integer, got -5"),
        ([f"--workdir={MISSING}", "--target_len=64", "--budget=4", "--test_num_bytes=0", f"--out={MISSING}/o"],
         "--test_num_bytes must be a positive integer"),
    ],
    "train": [
        ([f"--workdir={MISSING}", "--num_processes=2"], "--num_processes: read only with --jax_distributed"),
        ([f"--workdir={MISSING}", "--coordinator_address=h:1", "--process_id=0"],
         "--coordinator_address, --process_id: read only with --jax_distributed"),
        ([f"--workdir={MISSING}", "--config=configs/default.py:tiny", "--config.init_from=A", "--init_from=B"],
         "--init_from=B and --config.init_from=A both set config.init_from"),
    ],
    "sweep": [
        (["--mode=eval", f"--root={MISSING}/s", f"--workdir={MISSING}", "--axis=factor=2", "--lengths=32,64",
          "--plot_length=999"], "--plot_length=999 is not one of --lengths=32,64"),
        (["--mode=eval", f"--root={MISSING}/s", "--axis=factor=2", "--aggregate_only", "--workdir=a",
          "--hf_model=b"], "--mode=eval needs exactly one of --workdir"),
        (["--mode=eval", f"--root={MISSING}/s", f"--workdir={MISSING}", "--scaling=none", "--axis=factor=2,4"],
         "--axis: sweep point factor=2: RoPE scaling kind 'none' (--scaling or a kind axis) does not read factor=2"),
    ],
}


@pytest.mark.parametrize("module", sorted(USAGE_CASES))
def test_scripts_refuse_ignored_or_contradicting_flags(module):
    """Each case raises its UsageError from main() before any work: no run is loaded (none exists)."""
    cases = USAGE_CASES[module]
    code = (f"from absl import app, flags\ncases = {[argv for argv, _ in cases]!r}\n"
            "for argv in cases:\n"
            "    flags.FLAGS.unparse_flags()\n"
            "    sys.argv = [m.__file__, *argv]  # config_flags reads the --config.* overrides from sys.argv\n"
            "    rest = flags.FLAGS(sys.argv)\n"
            "    try:\n"
            "        m.main(rest)\n"
            "        print('NO ERROR', argv)\n"
            "    except app.UsageError as e:\n"
            "        print('USAGE', e)\n")
    result = script_call(module, code)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith(("USAGE", "NO ERROR"))]
    assert len(lines) == len(cases), result.stdout
    for line, (argv, text) in zip(lines, cases):
        assert line.startswith("USAGE") and text in line, (argv, line)
    assert not pathlib.Path(MISSING).exists()


def test_a_config_field_of_configs_tasks_py_on_default_py_names_that_config():
    result = subprocess.run([sys.executable, "scripts/train.py", "--config=configs/default.py:tiny",
                             f"--workdir={MISSING}/run", "--config.positions.randomize=True"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "--config.positions.randomize: the config has no field or section 'positions' (it has: b1, " in result.stderr
    assert "; the `task` and `positions` sections exist only in configs/tasks.py" in result.stderr


def flags_of(script: str, *argv: str) -> subprocess.CompletedProcess:
    """Parses `argv` as `python scripts/<script>.py *argv` would (its config flag defined at import, with argv
    as sys.argv) and prints the config's optional fields and whether --config.init_from counts as given."""
    code = (f"import sys; sys.argv = ['scripts/{script}.py', *{list(argv)!r}]; sys.path.insert(0, 'scripts')\n"
            f"import {script} as m\nfrom absl import flags\nm.parse_config_flags(sys.argv)\nc = m._CONFIG.value\n"
            "task = c.get('task')\n"
            "print('PARSED', repr(c.schedule_steps), repr(c.init_from), repr(task and task.stop_accuracy),"
            " 'config.init_from' in flags.FLAGS and flags.FLAGS['config.init_from'].present)")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("config", [[], ["--config=configs/default.py"]])
def test_an_override_of_a_field_the_config_lacks_is_a_flags_error_with_or_without_config(config):
    """Without --config, ml_collections loads the default config and applies the overrides when the script
    defines its flag (at import): the same error as with --config, not a traceback."""
    for script, argv in (("train", [f"--workdir={MISSING}/run"]), ("sweep", ["--mode=train", f"--root={MISSING}/s"])):
        result = subprocess.run([sys.executable, f"scripts/{script}.py", *config, *argv, "--config.lrr=1",
                                 "--config.model.posenk=rope"], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
        assert "FATAL Flags parsing error: --config.lrr: the config has no field or section 'lrr' (it has: b1, b2, " \
            "batch_size," in result.stderr
        assert "--config.model.posenk: section 'model' has no field or section 'posenk' (it has: act_dtype," \
            in result.stderr
    assert not pathlib.Path(MISSING).exists()


def test_none_clears_a_field_whose_default_is_none_and_is_refused_for_another():
    """`--config.FIELD=None`: absl parses the text by the field's type (int('None') fails; a str field took the
    text 'None' as a workdir to start from); a field declared config_dict.placeholder(type) is cleared, whatever
    the config file set it to, and counts as given."""
    result = flags_of("train", f"--workdir={MISSING}", "--config.schedule_steps=5", "--config.schedule_steps=None",
                      "--config.init_from=None")
    assert "PARSED None None None 1" in result.stdout, result.stderr[-3000:]
    result = flags_of("train", f"--workdir={MISSING}", "--config.init_from", "None")  # the value as its own argument
    assert "PARSED None None None 1" in result.stdout, result.stderr[-3000:]  # (it took the text 'None')
    result = flags_of("train", "--config=configs/tasks.py:task=passkey", f"--workdir={MISSING}",
                      "--config.task.stop_accuracy=None", "--config.schedule_steps=None", "--config.schedule_steps=7")
    assert "PARSED 7 None None False" in result.stdout, result.stderr[-3000:]  # (passkey's is 0.99; the last wins)
    for config, where, value in (([], "configs/default.py", 256),
                                 (["--config=configs/default.py:tiny"], "configs/default.py:tiny", 32)):
        result = flags_of("sweep", "--mode=train", *config, f"--root={MISSING}", "--config.train_len=None")
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
        assert f"FATAL Flags parsing error: --config.train_len=None: config.train_len is not optional (its value in " \
            f"{where} is {value}); None clears only the fields whose default is None: init_from, " \
            "model.rope.scaling.attention_factor, model.rope.scaling.factors_file, " \
            "model.rope.scaling.original_max_len, schedule_steps\n" in result.stderr, result.stderr
    result = subprocess.run([sys.executable, "scripts/sweep.py", "--mode=eval", f"--workdir={MISSING}",
                             f"--root={MISSING}/s", "--axis=factor=2", "--config.init_from=None"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1 and "--config.init_from: for --mode=train only" in result.stderr, result.stderr
    assert not pathlib.Path(MISSING).exists()


def test_measure_eval_memory_records_the_machine_and_code():
    """Its JSON has the peak of each measurement, the CPU, the cores it may run on and the commit (the README's
    memory table names them)."""
    out = run("scripts/measure_eval_memory.py", "--lengths=64", "--unchunked_lengths=64", "--attn_chunk=32")
    result = json.loads(out.strip().splitlines()[-1])
    assert result["baseline_mib"] > 0 and result["L64_chunked_mib"] > 0 and result["L64_unchunked_mib"] > 0
    assert result["cores"] == len(os.sched_getaffinity(0))
    assert_records_the_machine_and_code(result)
    assert result["malloc_kept"] is True and "compiler_options" in result  # as the evaluation runs (below)


def test_measure_eval_memory_s_child_runs_under_the_evaluation_s_malloc_settings():
    """The child that measures applies posenc/malloc.py's settings before JAX starts, as scripts/eval_extrapolation.py
    does (freed buffers stay in the heap and count in its peak), and jits with the evaluation's compiler options;
    it says so, and where the user chose glibc's defaults (POSENC_MALLOC=system) it says that instead."""
    from posenc.xla_options import compiler_options  # noqa: PLC0415

    assert "malloc.keep_buffers()" in open(ROOT / "scripts/eval_extrapolation.py").read()
    code = "import json; print(json.dumps(m.measure(0, 0)))"
    for value, kept in ((None, True), ("system", False)):
        env = {k: v for k, v in os.environ.items() if k != "POSENC_MALLOC" and not k.startswith("MALLOC_")}
        env.update({"POSENC_MALLOC": value} if value else {})
        proc = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, 'scripts'); "
                               f"import measure_eval_memory as m\n{code}"], cwd=ROOT, capture_output=True, text=True,
                              timeout=300, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        child = json.loads(proc.stdout.strip().splitlines()[-1])
        assert child["malloc_kept"] is kept and child["peak_rss_mib"] > 0
        assert child["compiler_options"] == compiler_options()


def test_benchmark_methods_prints_ratios_against_plain_attention():
    """Each method's ratio to plain attention and its verdict, from the rounds' raw times; the result names the
    cores the benchmark ran on: the affinity it was given (here one core), not the machine's count."""
    core = min(os.sched_getaffinity(0))
    out = run("scripts/benchmark_methods.py", "--length=64", "--rounds=2", "--attn_chunk=32", "--d_model=32",
              preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    result = json.loads(out.strip().splitlines()[-1])
    assert result["cores"] == 1
    by = {r["method"]: r for r in result["rows"]}
    assert set(by) == {"none+logn(256)", "self_extend", "rerope", "leaky_rerope", "lm_infinite", "sinks"}
    assert by["self_extend"]["bound"] == 4.0 and by["none+logn(256)"]["bound"] == 2.0
    # each method ran with its defaults for L0 = 256 at length 64
    assert by["self_extend"]["resolved"] == {"window": 64, "group": 1} and by["sinks"]["resolved"] == {
        "window": 251, "num_sinks": 4}
    # each ratio and verdict follows from the rounds' raw times (medians), not from the script's own ratio
    plain = statistics.median(result["plain_rounds_seconds"])
    assert len(result["plain_rounds_seconds"]) == 2 and result["plain_seconds"] == pytest.approx(plain)
    for r in by.values():
        ratio = statistics.median(r["rounds_seconds"]) / plain
        assert r["ratio_to_plain"] == pytest.approx(ratio) and r["within_bound"] == (ratio <= r["bound"])
    assert_records_the_machine_and_code(result)


def test_benchmark_gpu_runs_its_path_on_cpu_with_tiny_shapes(tmp_path):
    out = run("scripts/benchmark_gpu.py", "--tiny", "--steps=1", "--rounds=1", "--profile=gpt2_small",
              f"--out={tmp_path / 'gpu.json'}")
    result = json.loads(out.strip().splitlines()[-1])
    assert [r["model"] for r in result["rows"]] == ["reference", "gpt2_small"]
    assert all(r["tokens_per_s"] > 0 and 0 < r["mfu"] for r in result["rows"])
    n = result["rows"][0]["params"] - 256 * 32  # --tiny: vocab 256, d_model 32, 2 layers, T 64
    assert all(r["causal_flops_per_token"] == 6 * n + 6 * 2 * 32 * 64 for r in result["rows"])
    assert all(r["mfu_causal"] == pytest.approx(r["mfu"] * r["causal_flops_per_token"] / r["flops_per_token"])
               for r in result["rows"])
    assert result["host_cpu"] and "family" in result["host_cpu_id"]
    import flax, jax, optax  # noqa: PLC0415, E401  (the software the run measured, as imported)
    stack = result["stack"]
    assert (stack["jax"], stack["flax"], stack["optax"]) == (jax.__version__, flax.__version__, optax.__version__)
    assert stack["jaxlib"] and stack["orbax-checkpoint"] and isinstance(stack["plugins"], dict)
    assert stack["cuda_runtime"] is stack["cudnn"] is stack["nvidia_driver"] is None  # a CPU backend
    assert result["peak_source"] == "measured bf16 matmul" and result["rows"][0]["attention"] == "posenc"  # a CPU
    profile = result["rows"][1]["profile"]  # the profiled model's ops, with their HLO shapes; its trace kept
    assert all(r["activations"] == "float32" for r in result["rows"])  # auto on a CPU
    assert "profile" not in result["rows"][0] and (tmp_path / "gpu_gpt2_small.trace.json.gz").stat().st_size > 0
    assert profile and all(op["ms"] >= 0 and "[" in op["shape"] for op in profile)
    shares = [op["share"] for op in profile]  # of all counted time: the top ops, largest first
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1 + 1e-3


def test_benchmark_gpu_peak_is_the_most_specific_variant_and_an_unknown_device_is_refused():
    """H100 PCIe / NVL and H200 NVL have their own data-sheet peaks, L40 is not an L4, and an accelerator the
    table does not know needs --peak_tflops (a CPU falls back to the measured matmul)."""
    proc = script_call("benchmark_gpu", """import json
kinds = ["NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA H200 NVL",
         "NVIDIA L40", "NVIDIA L40S", "NVIDIA L4", "NVIDIA A100-SXM4-80GB", "NVIDIA B200", "cpu"]
peaks = {k: m.device_peak(k) for k in kinds}
out = {"peaks": peaks, "cpu": m.resolve_peak("cpu", "cpu", None, 1e12), "flag": m.resolve_peak("NVIDIA B200", "gpu", 2250.0, 1e15)}
try:
    m.resolve_peak("NVIDIA B200", "gpu", None, 1e15)
except Exception as e:
    out["refused"] = str(e)
print(json.dumps(out))""")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    tflops = {k: round(v / 1e12, 1) if v else v for k, v in out["peaks"].items()}
    assert tflops == {"NVIDIA H100 80GB HBM3": 989.4, "NVIDIA H100 PCIe": 756, "NVIDIA H100 NVL": 835,
                      "NVIDIA H200": 989.4, "NVIDIA H200 NVL": 835, "NVIDIA L40": 181, "NVIDIA L40S": 362,
                      "NVIDIA L4": 121, "NVIDIA A100-SXM4-80GB": 312, "NVIDIA B200": None, "cpu": None}
    assert out["cpu"] == [1e12, "measured bf16 matmul"] and out["flag"] == [2250e12, "--peak_tflops"]
    assert "'NVIDIA B200'" in out["refused"] and "--peak_tflops=" in out["refused"]


def test_benchmark_gpu_names_cuda_and_cudnn_versions_from_their_integers():
    """CUDA's 1000·major + 10·minor and cuDNN's 10000·major + 100·minor + patch (1000·major before cuDNN 9)."""
    proc = script_call("benchmark_gpu", "print([m.cuda_version_text(12080), m.cuda_version_text(12090), "
                       "m.cudnn_version_text(91002), m.cudnn_version_text(90100), m.cudnn_version_text(8907), "
                       "m.cudnn_version_text(None), bool(m.PLUGIN.match('jax-cuda12-plugin')), "
                       "bool(m.PLUGIN.match('jax_cuda12_pjrt')), bool(m.PLUGIN.match('jaxlib'))])")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "['12.8', '12.9', '9.10.2', '9.1.0', '8.9.7', None, True, True, False]"


def test_benchmark_eval_agrees_with_pytorch_and_prints_ratios():
    pytest.importorskip("torch", reason="benchmark_eval.py times PyTorch SDPA; CI installs no torch")
    out = run("scripts/benchmark_eval.py", "--lengths=64,128", "--rounds=1", "--round_tokens=128", "--attn_chunk=32",
              "--d_model=32", "--profile")
    result = json.loads(out.strip().splitlines()[-1])
    assert [r["length"] for r in result["rows"]] == [64, 128]
    assert all(r["profile"] and not any(p["op"].startswith("while") for p in r["profile"]) for r in result["rows"])
    assert all(r["max_abs_nll_diff"] < 1e-3 and r["ratio"] > 0 for r in result["rows"])  # the same model


def test_benchmark_matmul_compares_the_same_products_with_pytorch():
    """PyTorch gets one thread per core the process may run on (as XLA:CPU uses them), recorded; each row records
    the result dtypes the two sides wrote."""
    pytest.importorskip("torch", reason="benchmark_matmul.py times PyTorch's products; CI installs no torch")
    core = min(os.sched_getaffinity(0))
    out = run("scripts/benchmark_matmul.py", "--divide=16", "--rounds=1", "--repeats=1",
              preexec_fn=lambda: os.sched_setaffinity(0, {core}))
    result = json.loads(out.strip().splitlines()[-1])
    rows = result["rows"]
    assert result["torch_threads"] == 1  # the affinity the script ran under: one core
    assert {r["form"] for r in rows} == {"nn", "nt", "tn"} and {r["dtype"] for r in rows} == {"float32", "bfloat16"}
    assert all(r["ratio"] > 0 and r["max_rel_diff"] < (1e-5 if r["dtype"] == "float32" else 1e-2) for r in rows)
    assert {(r["dtype"], r["jax_result_dtype"], r["torch_result_dtype"]) for r in rows} == {
        ("float32", "float32", "float32"), ("bfloat16", "float32", "bfloat16")}
    assert_records_the_machine_and_code(result)


def test_benchmark_malloc_times_both_arms_to_the_same_parameters(tmp_path):
    """With the user's GLIBC_TUNABLES in the environment the keep arm still applies its settings (the children do
    not inherit it), and the keep arm's ratio is its rounds' median over the system arm's."""
    env = {**os.environ, "GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1000"}
    out = run("scripts/benchmark_malloc.py", "--rounds=1", "--warmup=1", "--steps=1", "--train_len=32", "--batch_size=2",
              f"--out={tmp_path / 'ab.json'}", env=env)
    result = json.loads(out.strip().splitlines()[-1])
    assert result == json.loads((tmp_path / "ab.json").read_text())
    assert set(result["arms"]) == {"system", "keep"} and result["same_parameters"]
    assert [r["applied"] for r in result["rounds"]["system"]] == [False]
    assert [r["applied"] for r in result["rounds"]["keep"]] == [True]
    keep, system = ([r["tokens_per_s"] for r in result["rounds"][arm]] for arm in ("keep", "system"))
    assert result["arms"]["keep"]["ratio_to_system"] == pytest.approx(statistics.median(keep) / statistics.median(system))
    assert_records_the_machine_and_code(result)


def test_benchmark_malloc_strips_the_user_s_malloc_settings_and_fails_an_unapplied_keep_round():
    proc = script_call("benchmark_malloc", """import json
env = m.child_env({"GLIBC_TUNABLES": "glibc.malloc.mmap_max=1", "MALLOC_ARENA_MAX": "2", "PATH": "/bin"}, "keep")
print(json.dumps(env))
m.check_keep_applied({"system": [{"applied": False}], "keep": [{"applied": True}, {"applied": False}]})""")
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"PATH": "/bin", "POSENC_MALLOC": "keep"}
    assert proc.returncode != 0 and "keep arm's settings did not apply in round(s) [2]" in proc.stderr


def test_bf16_quality_records_the_cpu_kind_and_code_it_ran_on(tmp_path):
    """bf16_quality.sh's result names its CPU as every benchmark result does (model name and lscpu's family,
    model, stepping: cpu_record) and the commit, not only through its folder's name. Its Python part is run here with the runs' summaries stubbed."""
    script = (ROOT / "experiments/benchmarks/bf16_quality.sh").read_text()
    code = script.split("<<'PY'\n", 1)[1].split("\nPY\n", 1)[0]
    stub = "import posenc.train\nposenc.train.run_summary = lambda path: {'val_bpb': 2.0 + len(path) / 1000}\n"
    env = {**os.environ, "SEEDS": "0 1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-c", stub + code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [path] = (tmp_path / "experiments/benchmarks/cpu").glob("*/bf16_quality.json")
    result = json.loads(path.read_text())
    assert_records_the_machine_and_code(result)
    assert result["differences"]["bfloat16"] == {"0": pytest.approx(0.005), "1": pytest.approx(0.005)}


def _benchmarks_report():
    """experiments/benchmarks/report.py as a module: importing it renders the README's text without writing it."""
    spec = importlib.util.spec_from_file_location("benchmarks_report", ROOT / "experiments/benchmarks/report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_benchmarks_readme_is_rendered_from_the_committed_results():
    """Fails when a result or report.py changed and experiments/benchmarks/README.md was not rerendered
    (python experiments/benchmarks/report.py); the top-level AMD results, which record no CPU family, are not
    presented as the per-kind folder's machine."""
    report = _benchmarks_report()
    assert report.text == (ROOT / "experiments/benchmarks/README.md").read_text()
    assert "AMD EPYC machine whose CPU family was not recorded" in report.text
    assert "| AMD EPYC of CPU family 26 (model 2, stepping 1) | `cpu/amd-epyc-family-26-model-2/` |" in report.text


def _report_of_a_copy(tmp_path, edit) -> str:
    """experiments/benchmarks/report.py's text, rendered from a copy of the folder (and of the
    scripts/benchmark_gpu.py it reads) after `edit(folder)` changed the copy's results."""
    import shutil  # noqa: PLC0415

    folder = tmp_path / "experiments/benchmarks"
    shutil.copytree(ROOT / "experiments/benchmarks", folder)
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts/benchmark_gpu.py", tmp_path / "scripts")
    edit(folder)
    spec = importlib.util.spec_from_file_location("benchmarks_report_copy", folder / "report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.text


def test_gpu_report_says_when_the_pinned_wheels_replaced_the_machine_s_stack(tmp_path):
    """Where scripts/device_env.sh's smoke benchmark failed and the pins of .whl/pins were installed (its log says
    so, then prints the stack again), the GPU section names the stack the runs used as the pins, not as "the
    machine's own Python stack, …, not this project's pins"."""
    def edit(folder):
        log = folder / "gpu/gpu_check.log"
        lines = log.read_text().splitlines(keepends=True)
        at = next(i for i, line in enumerate(lines) if line.startswith("python stack:")) + 1
        lines[at:at] = ["smoke failed\n", "posenc failed under the machine's flax / optax / orbax: installing the "
                        "pinned ones from .whl/pins\n", "python stack: jax 0.11.2 flax 0.12.8 optax 0.2.8 devices "
                        "[CudaDevice(id=0)]\n"]
        log.write_text("".join(lines))

    gpu = _report_of_a_copy(tmp_path, edit).split("\n## GPU")[1]
    assert ("the machine's jax with this project's pinned flax / optax / orbax (scripts/device_env.sh: posenc failed "
            "under the machine's), jax 0.11.2 flax 0.12.8 optax 0.2.8; commit") in gpu
    assert "not this project's pins" not in gpu
    committed = (ROOT / "experiments/benchmarks/README.md").read_text()  # one stack in the committed log
    assert "the machine's own Python stack, jax 0.11.2 flax 0.12.10 optax 0.2.8, not this project's pins" in committed


def test_gpu_report_names_the_stack_each_result_recorded_and_the_steps_that_did_not_measure(tmp_path):
    """Where the GPU results record their software (`stack`: benchmark_gpu.py's software_stack), the README names it
    (jaxlib, the CUDA plugin, orbax, CUDA, cuDNN, the NVIDIA driver), each distinct stack with its files where they
    differ and the check log's line for results without one; the steps of the check that timed out, failed or were
    skipped (provenance.json's `steps`) are listed."""
    stack = {"jax": "0.11.2", "jaxlib": "0.11.2", "flax": "0.12.10", "optax": "0.2.8", "orbax-checkpoint": "0.12.8",
             "ml-collections": "1.1.0", "numpy": "2.3.0", "plugins": {"jax-cuda12-pjrt": "0.11.2",
                                                                   "jax-cuda12-plugin": "0.11.2"},
             "cuda_runtime": "12.8", "cuda_driver_api": "13.0", "cudnn": "9.10.2", "nvidia_driver": "580.159.04"}
    named = ("jax 0.11.2 (jaxlib 0.11.2, jax-cuda12-pjrt 0.11.2, jax-cuda12-plugin 0.11.2), flax 0.12.10, optax 0.2.8, "
             "orbax-checkpoint 0.12.8; CUDA runtime 12.8, cuDNN 9.10.2, NVIDIA driver 580.159.04 (CUDA 13.0)")

    def every(folder):
        for path in (folder / "gpu").glob("gpu*.json"):
            _edit_json(path, lambda r: r.update(stack=stack))
        _edit_json(folder / "gpu/provenance.json", lambda r: r.update(deadline_seconds=270, steps={
            "benchmark": "ok (50 s)", "accuracy": "ok (60 s)", "posenc_attention": "timed out after 40 s (its own "
            "limit 70 s)", "batch64": "skipped: 12 s left before the 270 s deadline (a step needs 30)"}))

    gpu = _report_of_a_copy(tmp_path / "every", every).split("\n## GPU")[1]
    assert f"the machine's own Python stack, {named}, not this project's pins" in gpu
    assert ("**Steps of the check's last run that did not measure** (`provenance.json`, deadline 270 s): "
            "posenc_attention: timed out after 40 s (its own limit 70 s); batch64: skipped: 12 s left") in gpu
    assert "accuracy:" not in gpu.split("did not measure")[1].split("\n")[0]

    def one(folder):
        _edit_json(folder / "gpu/gpu.json", lambda r: r.update(stack=stack))

    gpu = _report_of_a_copy(tmp_path / "one", one).split("\n## GPU")[1]
    assert f"{named} in `gpu.json`; jax 0.11.2 flax 0.12.10 optax 0.2.8 (the check log; not recorded in" in gpu
    assert "did not measure" not in gpu


def _edit_json(path: pathlib.Path, change) -> None:
    """Applies `change(result)` to a result file: one JSON document, or a log whose last line is the JSON."""
    lines = path.read_text().strip().splitlines()
    try:
        result = json.loads("\n".join(lines))
        lines = []
    except json.JSONDecodeError:
        result = json.loads(lines.pop())
    change(result)
    path.write_text("\n".join([*lines, json.dumps(result)]) + "\n")


def test_benchmarks_readme_s_figures_follow_the_results_they_describe(tmp_path):
    """Every figure the README states of a run — shape, rounds, steps, flags, parameters, the machine — is read from
    the result files, not typed into report.py: changed in a copy of the results, the text follows; and runs whose
    PyTorch peer predates `torch_peer` are said to have trained with torch's AdamW defaults."""
    amd = {"cpu": "AMD EPYC", "cpu_id": {"vendor": "AuthenticAMD", "family": 26, "model": 2, "stepping": 1,
                                         "bf16": []}}
    intel = "cpu/intel-xeon-processor-family-6-model-207"

    def edit(folder):
        _edit_json(folder / "rope.log", lambda r: r.update(shape=[2, 1024, 8, 64], **amd))
        _edit_json(folder / "decode.log", lambda r: r.update(**amd))
        _edit_json(folder / "eval_throughput_without_key_tiles.json", lambda r: r.update(attn_chunk=2048))
        _edit_json(folder / "eval_throughput.json", lambda r: r.update(head_groups=4, d_model=512, num_heads=8))
        _edit_json(folder / "baseline.json", lambda r: r.update(steps=20, num_heads=8, mlp_dim=2048))
        _edit_json(folder / f"{intel}/train_float32.json", lambda r: r.update(rounds_tokens_per_s=[1.0, 2.0, 3.0]))
        _edit_json(folder / f"{intel}/eval_throughput.json", lambda r: r.update(rounds=4))
        _edit_json(folder / f"{intel}/xla_flags/default_train_float32_1.json",
                   lambda r: r.update(rounds_tokens_per_s=[1.0, 2.0]))

        def more_parameters(run):  # 10M more, with the FLOPs a token that follow (6 a parameter)
            row = next(r for r in run["rows"] if r["model"] == "gpt2_small")
            row.update(params=row["params"] + 10_000_000, flops_per_token=row["flops_per_token"] + 60_000_000)

        _edit_json(folder / "gpu/gpu.json", more_parameters)

    text = _report_of_a_copy(tmp_path, edit)
    rope = text.split("## RoPE on its own")[1].split("##")[0]
    assert "`apply_rope` on `[2, 1024, 8, 64]`, jitted, on an AMD EPYC of CPU family 26 (model 2, stepping 1)" in rope
    decoding = text.split("## Decoding with the KV cache")[1].split("##")[0]
    assert "RoPE, on an AMD EPYC of CPU family 26 (model 2, stepping 1):" in decoding
    assert "`--attn_chunk=2048 --attn_key_block=0`" in text
    assert "contract over head_dim only (64), and besides each product's own threads the 4 head groups are" in text
    assert "(10/20 timed steps per round" in text and "4 layers, 4/8 heads, MLP 1024/2048, RoPE" in text
    assert "Reference model, 5/3 alternating rounds a training run, 5/4 an evaluation run;" in text
    assert "alternated in one sitting, 2/3 rounds a run)" in text
    assert "so the 124M-sized model has 172M/162M parameters in all" in text
    assert text.count("predates `torch_peer`") == 2  # the top-level runs and the per-kind ones

    peer = {"gelu_approximate": "tanh"}

    def with_peer(folder):
        for path in [*folder.glob("*.json"), *folder.glob("cpu/*/train_*.json")]:
            _edit_json(path, lambda r: r.update(torch_peer=peer) if "torch_tokens_per_s" in r else None)

    assert "predates `torch_peer`" not in _report_of_a_copy(tmp_path / "peer", with_peer)


def test_benchmarks_report_says_on_which_side_separated_runs_fall(tmp_path):
    """Where one arm's runs all lie above or all below the other's, the README says which, in each of its run-by-run
    comparisons (bf16 activations on one core, bf16 activations on the GPU, oneDNN's evaluation forward), and
    never that the ranges overlap."""
    intel = "cpu/intel-xeon-processor-family-6-model-207"

    def edit(folder):
        def faster(ab):
            for r in ab["runs"]:
                if r["arm"] == "bfloat16_activations":
                    r["tokens_per_s"] = 1e6

        _edit_json(folder / "cpu/amd-epyc-family-26-model-2/dtype_ab_one_core.json", faster)
        for i in (1, 2):
            _edit_json(folder / f"gpu/gpu_gpt2_bf16_activations_{i}.json",
                       lambda run: [r.update(mfu=0.10) for r in run["rows"]])
            _edit_json(folder / f"{intel}/xla_options/eval_onednn_{i}.json",
                       lambda run: [r.update(ratio=0.01) for r in run["rows"]])

    text = _report_of_a_copy(tmp_path, edit)
    assert "float32 activations (medians; every run faster)." in text
    assert "(every bf16 run below every float32 run)" in text
    evals = text.split("Evaluation forward against PyTorch SDPA (`eval_{xla,onednn}_<i>.json`")[1].split("\n")[0]
    assert evals.count("(oneDNN lower in every run)") == 2 and "overlap" not in evals


def test_benchmarks_report_judges_the_dot_library_ab_per_length_and_shows_each_variant_s_options(tmp_path):
    """xla_flags_ab.sh's verdict is per evaluation length (a length where oneDNN is slower in every run is not
    pooled away), arm pairs measured at different commits are flagged, and each XLA-options variant is shown with
    the compiler options its row recorded."""
    report = _benchmarks_report()
    flags = tmp_path / "xla_flags"
    flags.mkdir()

    def write(path, **fields):
        path.write_text(json.dumps(fields))

    onednn = "--xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_fusion_type=dot"
    for i, (default, other) in enumerate([((0.47, 0.754), (0.762, 0.717)), ((0.787, 0.782), (0.519, 0.587))], 1):
        for arm, ratios, xla_flags in (("default", default, ""), ("onednn", other, onednn)):
            write(flags / f"{arm}_eval_throughput_{i}.json", commit="abc1234", xla_flags=xla_flags,
                  rows=[{"length": n, "ratio": r} for n, r in zip((4096, 16384), ratios)])
    write(flags / "default_train_float32_1.json", commit="abc1234", xla_flags="", jax_over_torch=0.72)
    write(flags / "onednn_train_float32_1.json", commit="abc1234+changes", xla_flags=onednn, jax_over_torch=0.67)
    text = report.xla_flags_ab(tmp_path)
    assert "evaluation at L = 4096: the ranges overlap" in text
    assert "evaluation at L = 16384: oneDNN slower in every run" in text
    mixed = text.split("different commits")[1]
    assert "`default_train_float32_1.json` (abc1234) against `onednn_train_float32_1.json` (abc1234+changes)" in mixed
    assert "eval_throughput" not in mixed  # those pairs share a commit

    options = tmp_path / "xla_options"
    options.mkdir()
    dot = {"xla_cpu_use_onednn": True, "xla_cpu_experimental_onednn_fusion_type": "LIBRARY_FUSION_TYPE_DOT"}
    rows = [{"variant": "default", "options": {}, "rounds_tokens_per_s": [1.0, 1.0], "over_first": 1.0},
            {"variant": "onednn", "options": dot, "rounds_tokens_per_s": [1.1, 1.1], "over_first": 1.1}]
    write(options / "train_float32_1.json", dtype="float32", rounds=2, rows=rows)
    for arm, compiler_options in (("xla", None), ("onednn", dot)):
        write(options / f"eval_{arm}_1.json", compiler_options=compiler_options, rows=[{"length": 4096, "ratio": 0.8}])
    text = report.xla_options_ab(tmp_path)
    shown = "`xla_cpu_use_onednn=true, xla_cpu_experimental_onednn_fusion_type=LIBRARY_FUSION_TYPE_DOT`"
    assert f"default XLA's defaults; onednn {shown}" in text
    assert f"=onednn {shown}" in text  # the evaluation's recorded compiler options


def test_benchmarks_report_refuses_a_dot_library_ab_whose_arm_ran_with_posenc_s_own_options(tmp_path):
    """xla_flags_ab.sh compares XLA_FLAGS under XLA's default options: a run that recorded compiler options
    (posenc/xla_options.py's choice, oneDNN dots on an Intel CPU, taken when POSENC_CPU_DOTS is not `xla`) ran
    its "default" arm with oneDNN too, and is refused, naming the file, rather than rendered as YNNPACK's."""
    report = _benchmarks_report()
    flags = tmp_path / "xla_flags"
    flags.mkdir()
    onednn = "--xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_fusion_type=dot"
    for arm, xla_flags in (("default", ""), ("onednn", onednn)):
        (flags / f"{arm}_train_float32_1.json").write_text(json.dumps(
            {"commit": "abc1234", "xla_flags": xla_flags, "jax_over_torch": 0.7, "compiler_options": None}))
    assert "float32 training default 0.70 against oneDNN 0.70" in report.xla_flags_ab(tmp_path)
    chosen = {"xla_cpu_use_onednn": True, "xla_cpu_experimental_onednn_fusion_type": "LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"}
    (flags / "default_train_float32_1.json").write_text(json.dumps(
        {"commit": "abc1234", "xla_flags": "", "jax_over_torch": 0.8, "compiler_options": chosen}))
    with pytest.raises(ValueError, match=r"default_train_float32_1.json: compiler_options .*xla_cpu_use_onednn.*"
                                         r"POSENC_CPU_DOTS=xla"):
        report.xla_flags_ab(tmp_path)
    assert "export POSENC_CPU_DOTS=xla" in (ROOT / "experiments/benchmarks/xla_flags_ab.sh").read_text()


def _wheel(folder: pathlib.Path, name: str) -> None:
    """A minimal pure-Python wheel of package `name` (version 0.1) in `folder`."""
    import zipfile  # noqa: PLC0415

    folder.mkdir(parents=True, exist_ok=True)
    info = f"{name}-0.1.dist-info"
    files = {f"{name}/__init__.py": "VERSION = '0.1'\n",
             f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n",
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    files[f"{info}/RECORD"] = "".join(f"{p},,\n" for p in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(folder / f"{name}-0.1-py3-none-any.whl", "w") as z:
        for path, text in files.items():
            z.writestr(path, text)


def test_device_env_installs_the_pinned_wheels_only_when_posenc_fails_under_the_machine_s_stack(tmp_path):
    """scripts/device_env.sh (the GPU machine's setup) installs .whl/*.whl, then runs a one-step tiny benchmark:
    when it fails (here: a Python that fails that script), the wheels of .whl/pins replace the machine's. (When it
    passes, as in tests/test_lm_study.py's device_jobs test, nothing more is installed.)"""
    wheels, site = tmp_path / "whl", tmp_path / "site"
    _wheel(wheels, "posenc_test_extra")
    _wheel(wheels / "pins", "posenc_test_pin")
    failing = tmp_path / "python"
    failing.write_text(f'#!/bin/sh\n[ "$1" = scripts/benchmark_gpu.py ] && {{ echo "smoke failed"; exit 1; }}\n'
                       f'exec {sys.executable} "$@"\n')
    failing.chmod(0o755)
    out = subprocess.run(["bash", "-c", "source scripts/device_env.sh"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PYTHON": str(failing), "WHEELS": str(wheels),
                                           "SITE": str(site)})
    assert out.returncode == 0, out.stderr
    assert "smoke failed" in out.stdout and "installing the pinned ones from .whl/pins" in out.stdout
    assert (site / "posenc_test_extra").is_dir() and (site / "posenc_test_pin").is_dir()
    assert out.stdout.count("python stack: jax") == 2  # the versions before and after the pins


def test_gpu_check_runs_its_steps_records_the_given_commit_and_fails_on_a_failed_step(tmp_path):
    """experiments/benchmarks/gpu_check.sh, the GPU check, here on a CPU with a stand-in for the machine's
    python3: its benchmarks run tiny, its accuracy step only collects its tests (the flags and the selection are
    pytest's to accept), and the batch-64 step fails. Every result and provenance.json record COMMIT (the copy's
    git is not the code's), the failed step is named and the exit status says so."""
    import re  # noqa: PLC0415

    stand_in = tmp_path / "bin" / "python3"
    stand_in.parent.mkdir()
    stand_in.write_text(f"""#!/bin/bash
case " $* " in
  *" --batch_size=64 "*) echo "batch 64 failed"; exit 3;;
  *" scripts/benchmark_gpu.py "*) exec {sys.executable} "$@" --tiny --steps=1 --rounds=1;;
  *" -m pytest "*) exec {sys.executable} "$@" --collect-only;;
esac
exec {sys.executable} "$@"
""")
    stand_in.chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{stand_in.parent}:{os.environ['PATH']}", "OUT": str(out), "COMMIT": "abc1234",
           "WHEELS": str(tmp_path / "no_wheels"), "SITE": str(tmp_path / "site")}
    env.pop("PYTHON", None)
    env.pop("POSENC_COMMIT", None)
    done = subprocess.run(["bash", "experiments/benchmarks/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    log = (out / "gpu_check.log").read_text()
    assert done.returncode == 1 and "step batch64: failed (exit 3)" in log, log[-3000:]
    assert re.search(r"^tests/test_attention.py: [1-9]\d*$", log, re.M), log[:3000]  # the accuracy tests collected
    results = {p.name: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert sorted(results) == ["gpu.json", "gpu_gpt2_profile.json", "gpu_posenc_attention.json", "provenance.json"]
    assert {r["commit"] for r in results.values()} == {"abc1234"}
    steps = results["provenance.json"]["steps"]  # in the order they ran, the 124M benchmark first
    assert list(steps) == ["benchmark", "accuracy", "posenc_attention", "batch64", "profile"]
    assert steps["batch64"] == "failed (exit 3)" and all(steps[k].startswith("ok (") for k in steps if k != "batch64")
    assert results["gpu_gpt2_profile.json"]["xla_flags"] == "--xla_gpu_enable_command_buffer="
    assert [r["model"] for r in results["gpu.json"]["rows"]] == ["reference", "gpt2_small"]


def _fake_python(path: pathlib.Path, cases: str) -> pathlib.Path:
    """An executable `path` standing in for python3: a bash `case " $* " in` over its arguments with `cases`, each
    ending the script; any other call exits 0. Runs in milliseconds (for the scripts' logic, not the Python)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/bash\ncase " $* " in\n{cases}\nesac\nexit 0\n')
    path.chmod(0o755)
    return path


def test_gpu_check_ends_by_its_deadline_and_records_the_steps_it_had_no_time_for(tmp_path):
    """gpu_check.sh ends within its deadline (DEADLINE_SECONDS after its start, the setup included): the 124M
    benchmark runs first, a hung step is stopped at the time left (not its own, longer timeout) and recorded as
    timed out, and the steps with too little time left are skipped, each named in the log and in provenance.json,
    and the exit status is non-zero. Everything here is a stand-in that takes milliseconds, but the hung
    accuracy step, which would sleep 60 s."""
    import re  # noqa: PLC0415
    import time  # noqa: PLC0415

    fake = _fake_python(tmp_path / "bin" / "python3", """  *" --tiny "*) exit 0;;
  *"python stack"*) echo "python stack: jax fake flax fake optax fake devices []"; exit 0;;
  *" -m pytest "*) exec sleep 60;;
  *" scripts/benchmark_gpu.py "*)
    for a in "$@"; do [[ $a == --out=* ]] && echo '{"commit": "abc1234", "rows": []}' > "${a#--out=}"; done; exit 0;;""")
    out = tmp_path / "out"
    out.mkdir()
    (out / "gpu_posenc_attention.json").write_text('{"commit": "old"}')  # an earlier run's, of a step skipped now
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}", "OUT": str(out), "COMMIT": "abc1234",
           "WHEELS": str(tmp_path / "no_wheels"), "SITE": str(tmp_path / "site"), "DEADLINE_SECONDS": "12",
           "MIN_STEP_SECONDS": "3", "KILL_AFTER_SECONDS": "1"}
    env.pop("PYTHON", None)
    started = time.monotonic()
    done = subprocess.run(["bash", "experiments/benchmarks/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=45)
    took = time.monotonic() - started
    log = (out / "gpu_check.log").read_text()
    assert done.returncode == 1 and took < 12 + 5, (took, log[-3000:])
    assert (out / "gpu.json").exists()  # the benchmark ran, before everything else
    assert not (out / "gpu_posenc_attention.json").exists()  # skipped: no older result left under this commit
    steps = json.loads((out / "provenance.json").read_text())["steps"]
    assert list(steps) == ["benchmark", "accuracy", "posenc_attention", "batch64", "profile"]
    assert steps["benchmark"].startswith("ok (")
    limit = int(re.search(r"timed out after (\d+) s \(its own limit 100 s\)", steps["accuracy"]).group(1))
    assert 3 <= limit <= 11  # the time left before the deadline less the kill grace, not its own 100 s
    for name in ("posenc_attention", "batch64", "profile"):
        assert steps[name].startswith("skipped: ") and "before the 12 s deadline" in steps[name]
        assert f"step {name}: skipped: " in log
    assert json.loads((out / "provenance.json").read_text())["deadline_seconds"] == 12


def test_device_env_puts_its_site_and_the_checkout_before_the_callers_pythonpath(tmp_path):
    """scripts/device_env.sh prepends its SITE and the checkout to PYTHONPATH: what the caller had set stays, after
    them (the pinned wheels of SITE still win)."""
    fake = _fake_python(tmp_path / "python", "")
    out = subprocess.run(["bash", "-c", 'source scripts/device_env.sh > /dev/null; echo "$PYTHONPATH"'], cwd=ROOT,
                         capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHON": str(fake), "WHEELS": str(tmp_path / "none"),
                              "SITE": str(tmp_path / "site"), "PYTHONPATH": "/callers/path"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"{tmp_path / 'site'}:{ROOT}:/callers/path"


def test_device_env_ends_its_calls_by_the_callers_setup_deadline_and_keeps_the_stack_when_the_smoke_times_out(
        tmp_path):
    """Under the caller's SETUP_DEADLINE (gpu_check.sh's), scripts/device_env.sh's smoke benchmark, hung here, is
    stopped by that deadline, not its own 60 s; a smoke that timed out is no evidence against the machine's flax /
    optax / orbax, so the pins are not installed."""
    fake = _fake_python(tmp_path / "python", """  *" --tiny "*) exec sleep 60;;""")
    _wheel(tmp_path / "whl" / "pins", "posenc_test_pin")
    out = subprocess.run(["bash", "-c", 'SECONDS=0; SETUP_DEADLINE=3; source scripts/device_env.sh; echo "took $SECONDS"'],
                         cwd=ROOT, capture_output=True, text=True, timeout=30,
                         env={**os.environ, "PYTHON": str(fake), "WHEELS": str(tmp_path / "whl"),
                              "SITE": str(tmp_path / "site")})
    assert out.returncode == 0, out.stderr
    assert "the smoke benchmark timed out (exit 124): the machine's flax / optax / orbax are kept" in out.stdout
    assert "installing the pinned ones" not in out.stdout and not (tmp_path / "site" / "posenc_test_pin").exists()
    assert int(out.stdout.split("took ")[1]) <= 3 + 5 + 1  # the deadline, the kill grace and the clock's rounding


def test_xla_flags_ab_records_a_crashed_arm_and_goes_on_without_the_fusion_type_posenc_calls_crashing(tmp_path):
    """xla_flags_ab.sh's oneDNN arm does not use the `dot` fusion type (posenc/xla_options.py: it kills the process
    at attention's batched products) but individual dots; a run that crashes anyway is written as its .failed
    file (exit status, error output) and the comparison goes on with the other runs; the report lists it and keeps
    it out of the ratios; the exit status says a run failed."""
    train = json.dumps({"commit": "abc1234", "jax_over_torch": 0.8, "rounds_tokens_per_s": [1.0, 1.0, 1.0]})
    evals = json.dumps({"commit": "abc1234", "rows": [{"length": 4096, "ratio": 0.7}], "rounds": 3})
    fake = _fake_python(tmp_path / "python", f"""  *" -c "*) echo fake-kind; exit 0;;
  *" --dtype=bfloat16 "*) [[ $XLA_FLAGS == *onednn* ]] && {{ echo "partition compile failed" >&2; exit 132; }}
    echo '{train[:-1]}, "xla_flags": "'"$XLA_FLAGS"'"}}'; exit 0;;
  *" scripts/benchmark_train.py "*) echo progress; echo '{train[:-1]}, "xla_flags": "'"$XLA_FLAGS"'"}}'; exit 0;;
  *" scripts/benchmark_eval.py "*) echo '{evals[:-1]}, "xla_flags": "'"$XLA_FLAGS"'"}}'; exit 0;;""")
    ab = tmp_path / "kind" / "xla_flags"
    done = subprocess.run(["bash", "experiments/benchmarks/xla_flags_ab.sh"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PYTHON": str(fake), "AB_OUT": str(ab)})
    assert done.returncode == 1 and "onednn_train_bfloat16_1 failed: exit 132" in done.stdout, done.stdout
    failed = (ab / "onednn_train_bfloat16_1.failed").read_text()
    assert failed.startswith("exit 132 (XLA_FLAGS=") and "partition compile failed" in failed
    names = sorted(p.name for p in ab.glob("*.json"))
    assert len(names) == 9 and "onednn_train_bfloat16_1.json" not in names  # every other run ran
    flags = json.loads((ab / "onednn_train_float32_2.json").read_text())["xla_flags"]
    assert "fusion_type=individual_dot" in flags and "fusion_type=dot" not in flags
    text = _benchmarks_report().xla_flags_ab(ab.parent)
    assert "**Runs that failed** (in none of the ratios above): `onednn_train_bfloat16_1.failed` (exit 132" in text
    assert "bf16 training 0.80 against —" in text


def test_prefix_gap_script_prints_and_writes_its_rows(trained_run, tmp_path):
    """--out=~/gap.json as the shell passes it (no `~` expanded after `--out=`) is written under $HOME, not into a
    directory named `~` in the working directory."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir(), cwd.mkdir()
    env = {**os.environ, "HOME": str(home),
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    result = subprocess.run([sys.executable, str(ROOT / "scripts" / "prefix_gap.py"), f"--workdir={trained_run}",
                             "--lengths=64", "--scalings=dynamic_ntk,dynamic_yarn", "--positions=3", "--out=~/gap.json"],
                            cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert not (cwd / "~").exists()
    written = json.loads((home / "gap.json").read_text())
    assert [(r["scaling"], r["length"], r["positions"]) for r in written["rows"]] == [
        ("dynamic_ntk", 64, [32, 48, 63]), ("dynamic_yarn", 64, [32, 48, 63])]
    for r in written["rows"]:
        assert f"| {r['run']} | {r['scaling']} | 64 | {r['cached_bpb']:.4f} | {r['recompute_bpb']:.4f} |" in out
    assert written["positions"] == 3 and written["machine"]["cores"] >= 1
