"""Benchmark bookkeeping: the CPU kind's folder name and the code version a result records."""

import subprocess

from posenc.timing import code_version, cpu_slug


def test_cpu_slug_names_a_folder_per_cpu_kind():
    assert cpu_slug("Intel(R) Xeon(R) Processor") == "intel-xeon-processor"
    assert cpu_slug("AMD EPYC 9R14 96-Core Processor") == "amd-epyc-9r14-96-core-processor"
    assert cpu_slug("") == "unknown"


def test_code_version_is_the_commit_marked_when_tracked_files_changed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert code_version() == "unknown"  # not a git checkout
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(git + ["init", "-q"], check=True)
    (tmp_path / "f.txt").write_text("a")
    subprocess.run(git + ["add", "f.txt"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "x"], check=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert code_version() == commit
    (tmp_path / "new.txt").write_text("untracked files do not count")
    assert code_version() == commit
    (tmp_path / "f.txt").write_text("b")
    assert code_version() == commit + "+changes"
