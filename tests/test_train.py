"""End-to-end training: every posenc learns, checkpoints, resumes; kill -9 and resume; 2 devices = 1."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from posenc import checkpoint, train
from posenc.model import POSENCS

ROOT = pathlib.Path(__file__).resolve().parent.parent


def losses(workdir):
    rows = [json.loads(line) for line in (pathlib.Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["train_loss"] for r in rows}


@pytest.mark.parametrize("name", POSENCS)
def test_tiny_training_learns_checkpoints_and_resumes(name, tiny_config, tmp_path):
    config = tiny_config(f"posenc={name},tiny", train_steps=12, learning_rate=1e-2)
    final = train.train_and_evaluate(config, str(tmp_path))
    curve = losses(tmp_path)
    assert sorted(curve) == list(range(1, 13))
    assert np.mean([curve[s] for s in (10, 11, 12)]) < curve[1] - 0.3  # it learns
    assert "val_loss" in final and np.isfinite(final["val_loss"])
    mngr = checkpoint.manager(tmp_path, read_only=True)
    assert mngr.all_steps() == [8, 12]  # keep_checkpoints = 2, checkpoint_every = 4
    # resuming with more steps continues from 12 and keeps the first 12 rows untouched
    config.unlock()
    config.train_steps = 14
    train.train_and_evaluate(config, str(tmp_path))
    resumed = losses(tmp_path)
    assert sorted(resumed) == list(range(1, 15)) and all(resumed[s] == curve[s] for s in curve)


def run_script(args, env=None, **kw):
    return subprocess.run([sys.executable, "scripts/train.py", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300, **kw)


def test_killed_run_resumes_to_the_same_losses(tiny_config, tmp_path, cache_dir):
    steps, every = 300, 20
    args = ["--config=configs/default.py:tiny", f"--config.train_steps={steps}", f"--config.checkpoint_every={every}",
            "--config.eval_every=100", f"--config.data.cache_dir={cache_dir}"]
    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "scripts/train.py", *args, f"--workdir={killed}"], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (killed / "checkpoints" / str(2 * every)).exists():
        assert proc.poll() is None and time.time() < deadline, "training ended before it could be killed"
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    interrupted_at = checkpoint.manager(killed, read_only=True).latest_step()
    assert interrupted_at < steps
    result = run_script([*args, f"--workdir={killed}"])
    assert result.returncode == 0, result.stderr[-2000:]
    config = tiny_config("tiny", train_steps=steps, checkpoint_every=every, eval_every=100)
    train.train_and_evaluate(config, str(tmp_path / "straight"))
    a, b = losses(killed), losses(tmp_path / "straight")
    assert sorted(a) == sorted(b) == list(range(1, steps + 1))
    np.testing.assert_allclose([a[s] for s in range(1, steps + 1)], [b[s] for s in range(1, steps + 1)], rtol=1e-6)


def test_two_devices_give_the_same_losses_as_one(tmp_path, cache_dir):
    args = ["--config=configs/default.py:tiny", f"--config.data.cache_dir={cache_dir}"]
    one = run_script([*args, f"--workdir={tmp_path / 'one'}"])
    two = run_script([*args, f"--workdir={tmp_path / 'two'}"],
                     env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"})
    assert one.returncode == 0 and two.returncode == 0, (one.stderr[-2000:], two.stderr[-2000:])
    a, b = losses(tmp_path / "one"), losses(tmp_path / "two")
    np.testing.assert_allclose([a[s] for s in sorted(a)], [b[s] for s in sorted(b)], rtol=2e-5)
    meta = subprocess.run([sys.executable, "-c", "import jax; print(len(jax.devices()))"], capture_output=True,
                          text=True, env={**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert meta.stdout.strip() == "2"


def test_misspelt_config_field_fails(tmp_path):
    result = run_script(["--config=configs/default.py:tiny", f"--workdir={tmp_path}", "--config.model.posenk=rope"])
    assert result.returncode != 0 and "posenk" in result.stderr
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(
    "overrides,match",
    [
        ({"model.posenc": "xpos"}, r"model.posenc must be one of"),
        ({"model.d_model": 30, "model.num_heads": 2}, "rotary dimension"),
        ({"train_len": 0}, "config.train_len must be a positive integer"),
        ({"model.rope.scaling.kind": "yarn", "model.rope.scaling.factor": 4.0}, "original_max_len is required"),
        ({"model.rope.scaling.factor": 0.5}, "factor must be"),
        ({"batch_size": 3, "train_len": 10**7}, "train split has"),
    ],
)
def test_invalid_config_fails_before_training(tiny_config, tmp_path, overrides, match):
    with pytest.raises(ValueError, match=match):
        train.train_and_evaluate(tiny_config("tiny", **overrides), str(tmp_path))
    assert not (tmp_path / "checkpoints").exists()


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tiny_config, tmp_path, monkeypatch):
    real = train.make_train_step

    def poisoned(graphdef, tx):
        step = real(graphdef, tx)
        calls = {"n": 0}

        def wrapped(params, opt_state, x, y):
            calls["n"] += 1
            params, opt_state, loss, norm = step(params, opt_state, x, y)
            return params, opt_state, (loss * np.nan if calls["n"] == 6 else loss), norm

        return wrapped

    monkeypatch.setattr(train, "make_train_step", poisoned)
    with pytest.raises(train.NonFiniteLossError, match=r"non-finite training loss.*step 6.*checkpoint \(step 4\)"):
        train.train_and_evaluate(tiny_config("tiny"), str(tmp_path))
    assert checkpoint.manager(tmp_path, read_only=True).latest_step() == 4


def test_init_from_copies_weights_and_extends_learned_table(tiny_config, tmp_path):
    base = tiny_config("posenc=learned,tiny", train_steps=4)
    train.train_and_evaluate(base, str(tmp_path / "base"))
    longer = tiny_config("posenc=learned,tiny", train_steps=1, train_len=64, init_from=str(tmp_path / "base"))
    with pytest.raises(ValueError, match="learned_beyond='interpolate'"):
        train.train_and_evaluate(longer, str(tmp_path / "long_error"))
    longer.model.learned_beyond = "interpolate"
    train.train_and_evaluate(longer, str(tmp_path / "long"))
    _, _, _, params, _ = checkpoint.restore_params(tmp_path / "long")
    _, _, _, src, _ = checkpoint.restore_params(tmp_path / "base")
    table, src_table = np.asarray(params["pos_table"][...]), np.asarray(src["pos_table"][...])
    assert table.shape == (64, 32)
    # warmup starts at lr 0, so after its one step the run still holds the base weights, table resampled
    np.testing.assert_allclose(table[[0, -1]], src_table[[0, -1]], atol=1e-6)
    np.testing.assert_allclose(np.asarray(params["head"]["kernel"][...]), np.asarray(src["head"]["kernel"][...]),
                               atol=1e-7)
