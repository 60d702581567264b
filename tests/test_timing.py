"""Benchmark bookkeeping: the CPU kind's folder name, and the code version and XLA flags a result records."""

import json
import subprocess

from posenc import timing
from posenc.timing import code_version, cpu_slug


def test_cpu_slug_names_a_folder_per_cpu_kind():
    assert cpu_slug("Intel(R) Xeon(R) Processor") == "intel-xeon-processor"
    assert cpu_slug("AMD EPYC 9R14 96-Core Processor") == "amd-epyc-9r14-96-core-processor"
    assert cpu_slug("") == "unknown"


def test_code_version_is_the_commit_marked_when_tracked_code_changed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert code_version() == "unknown"  # not a git checkout
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    (tmp_path / "f.py").write_text("a")
    (tmp_path / "result.json").write_text("{}")
    subprocess.run(git + ["add", "f.py", "result.json"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "x"], check=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert code_version() == commit
    (tmp_path / "new.txt").write_text("untracked files do not count")
    assert code_version() == commit
    (tmp_path / "result.json").write_text('{"a benchmark": "writing its own output"}')
    assert code_version() == commit
    (tmp_path / "f.py").write_text("b")
    assert code_version() == commit + "+changes"


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
