"""Benchmark bookkeeping: the CPU kind's folder name, and the code version and XLA flags a result records."""

import json
import subprocess

import pytest

from posenc import timing
from posenc.timing import code_version, cpu_description, cpu_identity, cpu_slug

# lscpu's lines that name a CPU (the rest of its output omitted), as on this project's AMD VMs
LSCPU_AMD = """Architecture:                            x86_64
Vendor ID:                               AuthenticAMD
Model name:                              AMD EPYC
CPU family:                              {family}
Model:                                   2
Thread(s) per core:                      1
Stepping:                                1
Flags:                                   fpu sse avx2 avx512f avx512_bf16 clzero
"""


def test_cpu_slug_names_a_folder_per_cpu_kind_with_its_family_and_model():
    """Two AMD EPYCs of different families (different float32 and bf16 peaks) get different folders."""
    zen4, zen5 = cpu_slug(LSCPU_AMD.format(family=25)), cpu_slug(LSCPU_AMD.format(family=26))
    assert zen4 != zen5 and zen5 == "amd-epyc-family-26-model-2"
    intel = "Model name: Intel(R) Xeon(R) Processor\nCPU family: 6\nModel: 207\n"
    assert cpu_slug(intel) == "intel-xeon-processor-family-6-model-207"
    assert cpu_slug("Model name: AMD EPYC 9R14 96-Core Processor\n") == "amd-epyc-9r14-96-core-processor"
    assert cpu_slug("") == "unknown"


def test_cpu_identity_reads_family_model_stepping_and_bf16_flags_and_the_report_names_them():
    identity = cpu_identity(LSCPU_AMD.format(family=26))
    assert identity == {"vendor": "AuthenticAMD", "family": 26, "model": 2, "stepping": 1, "bf16": ["avx512_bf16"]}
    assert cpu_identity("") == {"vendor": None, "family": None, "model": None, "stepping": None, "bf16": []}
    assert cpu_description("AMD EPYC", identity) == "an AMD EPYC of CPU family 26 (model 2, stepping 1)"
    assert cpu_description("AMD EPYC") == "an AMD EPYC machine whose CPU family was not recorded"
    assert cpu_description("Intel(R) Xeon(R) Processor", {}, article=False) == (
        "Intel(R) Xeon(R) Processor machine whose CPU family was not recorded")


def test_cpu_record_is_the_model_name_and_this_machine_s_identity(monkeypatch):
    monkeypatch.setattr(timing, "lscpu_text", lambda: LSCPU_AMD.format(family=26))
    assert timing.cpu_record() == {"cpu": "AMD EPYC", "cpu_id": cpu_identity(LSCPU_AMD.format(family=26))}


def _git_checkout(path) -> str:
    """A git checkout at `path` with one commit of f.py and result.json; its short hash."""
    git = ["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    (path / "f.py").write_text("a")
    (path / "result.json").write_text("{}")
    subprocess.run(git + ["add", "f.py", "result.json"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "x"], check=True)
    return subprocess.run(git + ["rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()


def test_code_version_is_the_commit_marked_when_tracked_code_changed(tmp_path):
    assert code_version(tmp_path) == "unknown"  # not a git checkout
    commit = _git_checkout(tmp_path)
    assert code_version(tmp_path) == commit
    (tmp_path / "new.txt").write_text("untracked files do not count")
    assert code_version(tmp_path) == commit
    (tmp_path / "result.json").write_text('{"a benchmark": "writing its own output"}')
    assert code_version(tmp_path) == commit
    (tmp_path / "f.py").write_text("b")
    assert code_version(tmp_path) == commit + "+changes"


def test_code_version_describes_the_code_s_checkout_not_the_working_directory_s(tmp_path, monkeypatch):
    """A script run from inside another repository (or a copy of the code without its .git lying inside one)
    must not record that repository's commit as the code's."""
    other = _git_checkout(tmp_path)
    monkeypatch.chdir(tmp_path)  # the working directory: another repository
    assert not code_version().startswith(other)
    own = subprocess.run(["git", "-C", str(timing.CHECKOUT), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip() or "unknown"  # the code's own checkout's commit
    assert code_version().removesuffix("+changes") == own
    copy = tmp_path / "copy_of_the_code"  # a folder inside that repository, not a checkout of its own
    copy.mkdir()
    (copy / "f.py").write_text("a")
    assert code_version(copy) == "unknown"


def test_emit_records_the_xla_flags_it_ran_under(tmp_path, monkeypatch, capsys):
    """A benchmark's JSON names the XLA_FLAGS in effect (an A/B of flags must not read as the default)."""
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_use_onednn=true")
    timing.emit({"tokens_per_s": 1.0}, str(tmp_path / "r.json"))
    assert json.loads((tmp_path / "r.json").read_text())["xla_flags"] == "--xla_cpu_use_onednn=true"
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["xla_flags"] == "--xla_cpu_use_onednn=true"
    monkeypatch.delenv("XLA_FLAGS")
    timing.emit({"tokens_per_s": 1.0})
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["xla_flags"] == ""


def test_device_record_names_the_accelerator_and_its_numerics_and_machine_reads_it(monkeypatch):
    import jax  # noqa: PLC0415

    monkeypatch.setattr(jax, "default_backend", lambda: "cpu")
    assert timing.device_record() == {}  # on a CPU: the result's "cpu" says it all
    assert timing.machine({"cpu": "AMD EPYC 9R14"}) == "AMD EPYC 9R14" and timing.machine({}) == "unrecorded"
    amd = timing.cpu_identity("Model name: AMD EPYC\nCPU family: 26\nModel: 2\n")
    assert timing.machine({"cpu": "AMD EPYC", "cpu_id": amd}) == "AMD EPYC (family 26)"
    assert timing.machine({"cpu": "AMD EPYC", "cpu_id": timing.cpu_identity("")}) == "AMD EPYC"

    class H200:
        device_kind = "NVIDIA H200"

    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax, "devices", lambda: [H200()])
    monkeypatch.setenv("POSENC_COMMIT", "abc1234")
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_deterministic_ops=true")
    with jax.default_matmul_precision("highest"):
        record = timing.device_record()
    assert record == {"device": "NVIDIA H200", "jax": jax.__version__, "matmul_precision": "highest",
                      "deterministic": True, "commit": "abc1234"}
    monkeypatch.delenv("XLA_FLAGS")
    assert timing.device_record()["deterministic"] is False
    assert timing.machine({"cpu": "Intel(R) Xeon(R) Processor", **record}) == "NVIDIA H200"


def test_hlo_ops_reads_whole_tuple_shapes_dashed_names_sources_and_control_flow():
    """A profile names ops by their HLO instruction: a tuple-valued one keeps its whole shape, names with dashes
    parse, the op_name metadata is the source, and while / conditional / call are the control-flow ops."""
    hlo = """
  %get-tuple-element.14 = f32[4,8]{1,0} get-tuple-element(%while.3), index=1
  %custom-call.86 = (f32[16,32]{1,0}, s8[64]{0}) custom-call(%p.1), custom_call_target="x", metadata={op_name="jit(f)/dot_general"}
  %while.3 = (s32[], f32[4,8]{1,0}) while(%tuple.2), condition=%cond, body=%body
  %conditional.7 = f32[4,8]{1,0} conditional(%pred.1, %a, %b), true_computation=%t, false_computation=%f
  %fusion.2 = f32[4,8]{1,0} fusion(%p.0), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(f)/while/body/exp"}
"""
    shapes, names, containers = timing.hlo_ops(hlo)
    assert shapes["custom-call.86"] == "(f32[16,32]{1,0}, s8[64]{0})"
    assert shapes["get-tuple-element.14"] == "f32[4,8]{1,0}" and shapes["while.3"] == "(s32[], f32[4,8]{1,0})"
    assert names == {"custom-call.86": "jit(f)/dot_general", "fusion.2": "jit(f)/while/body/exp"}
    assert containers == {"while.3", "conditional.7"}


def test_trace_op_times_counts_the_gpu_process_else_the_module_s_ops():
    """A trace with a GPU process: only its kernel events count, by `args.hlo_op` where given (two kernels of one
    op add up), host events left out. Without one (a CPU): the events named after the module's ops, leaving out
    the control-flow ops (their time is their bodies'). Times are µs per event, ms per call over `repeats`."""
    ops = ({"fusion.2": "f32[4]", "dot.1": "f32[4,4]", "while.3": "(s32[])"}, {"dot.1": "jit(f)/dot_general"},
           {"while.3"})
    host = [{"ph": "X", "pid": 1, "name": "fusion.2", "dur": 900.0}, {"ph": "X", "pid": 1, "name": "while.3", "dur": 5e4},
            {"ph": "X", "pid": 1, "name": "PjitFunction", "dur": 7e4}]
    gpu = [{"ph": "M", "pid": 2, "name": "process_name", "args": {"name": "/device:GPU:0"}},
           {"ph": "M", "pid": 1, "name": "process_name", "args": {"name": "/host:CPU"}},
           {"ph": "X", "pid": 2, "name": "loop_fusion_kernel", "dur": 300.0, "args": {"hlo_op": "fusion.2"}},
           {"ph": "X", "pid": 2, "name": "loop_fusion_kernel", "dur": 100.0, "args": {"hlo_op": "fusion.2"}},
           {"ph": "X", "pid": 2, "name": "gemm_kernel", "dur": 1200.0},  # no hlo_op: its own name
           {"ph": "i", "pid": 2, "name": "marker"}]
    rows = timing.trace_op_times({"traceEvents": host + gpu}, ops, repeats=2)
    assert [(r["op"], r["ms"], r["share"]) for r in rows] == [("gemm_kernel", 0.6, 0.75), ("fusion.2", 0.2, 0.25)]
    assert rows[1]["shape"] == "f32[4]" and rows[0]["shape"] == ""
    rows = timing.trace_op_times(host, ops, repeats=1)  # a CPU trace (a bare list): the module's ops only
    assert [(r["op"], r["ms"], r["share"], r["shape"]) for r in rows] == [("fusion.2", 0.9, 1.0, "f32[4]")]


def test_machines_text_names_each_machine_a_wall_time_was_measured_on(monkeypatch):
    """A report's wall time names its machine (cores, CPU model and family) as each time recorded it, once per
    distinct machine; a time recorded without one says so instead of borrowing another's."""
    monkeypatch.setattr(timing, "lscpu_text", lambda: LSCPU_AMD.format(family=26))
    record = timing.machine_record()
    assert record == {**timing.cpu_record(), "cores": len(__import__("os").sched_getaffinity(0))}
    amd = {**record, "cores": 2}
    text = "2 cores of an AMD EPYC of CPU family 26 (model 2, stepping 1)"
    assert timing.machines_text([amd, amd]) == text
    assert timing.machines_text([{**amd, "cores": 1}]) == "1 core of an AMD EPYC of CPU family 26 (model 2, stepping 1)"
    assert timing.machines_text([amd, None]) == text + " and a machine whose CPU was not recorded"
    assert timing.machines_text([{"cpu": "AMD EPYC"}]) == (
        "an AMD EPYC machine whose CPU family was not recorded, its cores not recorded")
    assert timing.machines_text([]) == timing.machines_text([{}]) == "a machine whose CPU was not recorded"


def test_a_wall_time_measured_on_an_accelerator_names_it_not_only_its_host(monkeypatch):
    """`machine_record` on a GPU records the device: a time measured there must not read as its host CPU's."""
    import jax  # noqa: PLC0415

    class H200:
        device_kind = "NVIDIA H200"

    monkeypatch.setattr(timing, "lscpu_text", lambda: LSCPU_AMD.format(family=26))
    assert "device" not in timing.machine_record()  # on a CPU
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax, "devices", lambda: [H200()])
    record = timing.machine_record()
    assert record["device"] == "NVIDIA H200" and record["cpu"] == "AMD EPYC"
    cpu = {k: v for k, v in record.items() if k != "device"}
    cores = f"{record['cores']} core{'s' if record['cores'] != 1 else ''}"
    host = f"{cores} of an AMD EPYC of CPU family 26 (model 2, stepping 1)"
    assert timing.machines_text([record]) == f"NVIDIA H200 (host: {host})"
    assert timing.machines_text([record, cpu]) == f"NVIDIA H200 (host: {host}) and {host}"


def test_median_seconds_refuses_no_repeats_instead_of_timing_nan():
    """No timed call would be a NaN median (numpy's of nothing) written as a benchmark's time."""
    calls = []
    assert timing.median_seconds(lambda: calls.append(1), 3) >= 0 and len(calls) == 4  # a warm-up, then 3 timed
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="repeats .* must be an integer >= 1"):
            timing.median_seconds(lambda: None, bad)
