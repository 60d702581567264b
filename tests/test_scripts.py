"""Smoke tests of the benchmark and figure scripts (small sizes): they run and print their ratios."""

import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def run(*args):
    result = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_benchmark_rope_prints_ratios():
    out = run("scripts/benchmark_rope.py", "--shape=2,128,4,32", "--repeats=2")
    result = json.loads(out.strip().splitlines()[-1])
    assert result["float32"]["rope_half_vs_elementwise"] > 0 and "rope_interleaved_vs_memcopy" in result["bfloat16"]


def test_benchmark_decode_prints_speedup():
    out = run("scripts/benchmark_decode.py", "--contexts=32,64", "--new_tokens=4", "--repeats=1")
    rows = json.loads(out.strip().splitlines()[-1])["rows"]
    assert [r["context"] for r in rows] == [32, 64] and all(r["speedup"] > 0 for r in rows)


@pytest.mark.parametrize("without,dtype,act", [("attention_vjp", "float32", "auto"),  # one ablation (suite time)
                                               ("", "bfloat16", "bfloat16")])  # dtype_ab.py's third arm
def test_benchmark_train_prints_mfu(without, dtype, act):
    out = run("scripts/benchmark_train.py", "--steps=1", "--rounds=1", "--train_len=32", "--batch_size=2", "--profile",
              f"--without={without}", f"--dtype={dtype}", f"--act_dtype={act}")
    result = json.loads(out.strip().splitlines()[-1])
    assert (result["dtype"], result["act_dtype"]) == (dtype, act)
    assert result["tokens_per_s"] > 0 and 0 < result["mfu"] < 1 and len(result["rounds_tokens_per_s"]) == 1
    assert result["without"] == [w for w in without.split(",") if w]
    assert result["profile"] and all(row["ms"] >= 0 and "[" in row["shape"] for row in result["profile"])


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
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000


@pytest.mark.parametrize("script", ["scripts/train.py", "scripts/eval_extrapolation.py", "scripts/generate.py",
                                    "scripts/sweep.py", "scripts/search_longrope.py"])
def test_entry_points_document_themselves(script):
    """--helpshort prints the module docstring (the exact command) and the flags; absl exits 1 after it."""
    result = subprocess.run([sys.executable, script, "--helpshort"], cwd=ROOT, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 1 and f"python {script}" in result.stdout and "flags:" in result.stdout


def test_benchmark_methods_prints_ratios_against_plain_attention():
    out = run("scripts/benchmark_methods.py", "--length=64", "--rounds=1", "--attn_chunk=32", "--d_model=32")
    result = json.loads(out.strip().splitlines()[-1])
    by = {r["method"]: r for r in result["rows"]}
    assert set(by) == {"none+logn(256)", "self_extend", "rerope", "leaky_rerope", "lm_infinite", "sinks"}
    assert by["self_extend"]["bound"] == 4.0 and by["none+logn(256)"]["bound"] == 2.0
    # each method ran with its defaults for L0 = 256 at length 64
    assert by["self_extend"]["resolved"] == {"window": 64, "group": 1} and by["sinks"]["resolved"] == {
        "window": 251, "num_sinks": 4}
    assert all(r["within_bound"] == (r["ratio_to_plain"] <= r["bound"]) for r in by.values()) and result["cpu"]


def test_benchmark_gpu_runs_its_path_on_cpu_with_tiny_shapes(tmp_path):
    out = run("scripts/benchmark_gpu.py", "--tiny", "--steps=1", "--rounds=1", "--profile=gpt2_small",
              f"--out={tmp_path / 'gpu.json'}")
    result = json.loads(out.strip().splitlines()[-1])
    assert [r["model"] for r in result["rows"]] == ["reference", "gpt2_small"]
    assert all(r["tokens_per_s"] > 0 and 0 < r["mfu"] for r in result["rows"])
    assert result["peak_source"] == "measured bf16 matmul" and result["rows"][0]["attention"] == "posenc"  # a CPU
    profile = result["rows"][1]["profile"]  # the profiled model's ops, with their HLO shapes; its trace kept
    assert all(r["activations"] == "float32" for r in result["rows"])  # auto on a CPU
    assert "profile" not in result["rows"][0] and (tmp_path / "gpu_gpt2_small.trace.json.gz").stat().st_size > 0
    assert profile and all(op["ms"] >= 0 and "[" in op["shape"] for op in profile)
    shares = [op["share"] for op in profile]  # of all counted time: the top ops, largest first
    assert shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1 + 1e-3


def test_benchmark_eval_agrees_with_pytorch_and_prints_ratios():
    pytest.importorskip("torch", reason="benchmark_eval.py times PyTorch SDPA; CI installs no torch")
    out = run("scripts/benchmark_eval.py", "--lengths=64,128", "--rounds=1", "--round_tokens=128", "--attn_chunk=32",
              "--d_model=32", "--profile")
    result = json.loads(out.strip().splitlines()[-1])
    assert [r["length"] for r in result["rows"]] == [64, 128]
    assert all(r["profile"] and not any(p["op"].startswith("while") for p in r["profile"]) for r in result["rows"])
    assert all(r["max_abs_nll_diff"] < 1e-3 and r["ratio"] > 0 for r in result["rows"])  # the same model


def test_benchmark_matmul_compares_the_same_products_with_pytorch():
    pytest.importorskip("torch", reason="benchmark_matmul.py times PyTorch's products; CI installs no torch")
    out = run("scripts/benchmark_matmul.py", "--divide=16", "--rounds=1", "--repeats=1")
    rows = json.loads(out.strip().splitlines()[-1])["rows"]
    assert {r["form"] for r in rows} == {"nn", "nt", "tn"} and {r["dtype"] for r in rows} == {"float32", "bfloat16"}
    assert all(r["ratio"] > 0 and r["max_rel_diff"] < (1e-5 if r["dtype"] == "float32" else 1e-2) for r in rows)


def test_benchmark_malloc_times_both_arms_to_the_same_parameters(tmp_path):
    out = run("scripts/benchmark_malloc.py", "--rounds=1", "--warmup=1", "--steps=1", "--train_len=32", "--batch_size=2",
              f"--out={tmp_path / 'ab.json'}")
    result = json.loads(out.strip().splitlines()[-1])
    assert result == json.loads((tmp_path / "ab.json").read_text())
    assert set(result["arms"]) == {"system", "keep"} and result["same_parameters"]
    assert result["arms"]["system"]["ratio_to_system"] == 1.0 and result["arms"]["keep"]["tokens_per_s"] > 0
    assert [r["applied"] for r in result["rounds"]["system"]] == [False]
