"""Checkpoint integrity (checksums, fallback to the previous good checkpoint, no good one left) and the
one-writer-per-workdir lock, as small end-to-end runs of the tiny config."""

import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from posenc import checkpoint, train
from posenc import evaluate as ev

ROOT = pathlib.Path(__file__).resolve().parent.parent


def largest_param_file(workdir, step):
    files = [f for f in (pathlib.Path(workdir) / "checkpoints" / str(step) / "params").rglob("*") if f.is_file()]
    return max(files, key=lambda f: f.stat().st_size)


def flip_bytes(path, offsets=(100, 1000, 3000)):
    data = bytearray(path.read_bytes())
    for i in offsets:
        data[i % len(data)] ^= 0xFF
    path.write_bytes(bytes(data))


def garbage(path):
    path.write_bytes(np.random.default_rng(0).integers(0, 256, path.stat().st_size, dtype=np.uint8).tobytes())


def swap_params(workdir, step, source):
    """Replaces checkpoint `step`'s params with checkpoint `source`'s: files Orbax reads without an error, holding
    other values than the ones `step` saved (and hashed)."""
    target = pathlib.Path(workdir) / "checkpoints" / str(step) / "params"
    shutil.rmtree(target)
    shutil.copytree(target.parent.parent / str(source) / "params", target)


def losses(workdir):
    rows = [json.loads(line) for line in (pathlib.Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["train_loss"] for r in rows}


def test_checkpoints_carry_checksums_of_values_and_files(trained_run):
    mngr = checkpoint.manager(trained_run, read_only=True)
    assert mngr.all_steps() == [4, 8]
    meta = json.loads((trained_run / "checkpoints" / "8" / "meta" / "metadata").read_text())
    _, _, _, params, step = checkpoint.restore_params(trained_run)
    from flax import nnx  # noqa: PLC0415

    assert step == 8 and meta["sha256"]["params"] == checkpoint.tree_sha256(nnx.to_pure_dict(params))
    sums = json.loads((trained_run / "checksums" / "8.json").read_text())
    assert any(k.startswith("params/") for k in sums) and any(k.startswith("opt_state/") for k in sums)
    assert sorted(p.name for p in (trained_run / "checksums").iterdir()) == ["4.json", "8.json"]  # pruned with them


def test_abstract_model_is_traced_once_per_config_and_each_call_gets_its_own_container(tiny_config):
    from posenc.config import model_config  # noqa: PLC0415

    cfg = model_config(tiny_config("tiny"))
    checkpoint._abstract_model.cache_clear()
    g1, a1 = checkpoint.abstract_model(cfg)
    g2, a2 = checkpoint.abstract_model(cfg)
    assert checkpoint._abstract_model.cache_info().misses == 1 and g1 == g2
    assert a1 is not a2 and jax.tree.leaves(a1) == jax.tree.leaves(a2)
    a1["embed"] = None  # one caller filling its template leaves the next one's whole
    assert "embed" in a2 and checkpoint.abstract_model(cfg)[1]["embed"] is not None


@pytest.mark.parametrize("damage", [flip_bytes, garbage])
def test_corrupt_newest_checkpoint_falls_back_to_the_previous_one(damage, copy_run, tiny_config):
    workdir = copy_run()
    before = losses(workdir)
    damage(largest_param_file(workdir, 8))
    with pytest.warns(checkpoint.CheckpointWarning, match=r"checkpoints/8: .*SHA-256.*older checkpoint 4 instead of 8"):
        *_, step = checkpoint.restore_params(workdir)
    assert step == 4
    # training resumes from 4, keeps the corrupt checkpoint aside, and redoes steps 5..8 exactly
    with pytest.warns(checkpoint.CheckpointWarning):
        train.train_and_evaluate(tiny_config("tiny"), str(workdir))
    assert checkpoint.manager(workdir, read_only=True).all_steps() == [4, 8]
    assert [p.name.split(".")[0] for p in (workdir / "corrupt_checkpoints").iterdir()] == ["8"]
    after = losses(workdir)
    assert sorted(after) == sorted(before) and all(after[s] == pytest.approx(before[s], rel=1e-6) for s in before)
    lines = (workdir / "metrics.jsonl").read_text().splitlines()  # steps 5..8 rewritten, not logged twice
    assert [json.loads(line)["step"] for line in lines] == list(range(1, 9))
    _, _, _, _, step = checkpoint.restore_params(workdir)  # and the rewritten 8 verifies
    assert step == 8


def test_a_run_is_shortened_to_no_fewer_steps_than_it_resumes_from(copy_run, tiny_config):
    """train_steps behind the run is refused, judged by the step it resumes from: with its newest checkpoint
    corrupt, a run at [4, 8] resumes from 4, so train_steps 6 (the schedule pinned) trains steps 5 and 6."""
    workdir = copy_run()
    shorter = tiny_config("tiny", train_steps=6, schedule_steps=8)
    with pytest.raises(train.RunMismatchError, match=r"is at step 8 already; config.train_steps=6 is behind it"):
        train.train_and_evaluate(shorter, str(workdir))
    flip_bytes(largest_param_file(workdir, 8))
    with pytest.warns(checkpoint.CheckpointWarning, match="checkpoints/8"):
        assert train.train_and_evaluate(shorter, str(workdir))["step"] == 6


def test_value_checksum_catches_what_the_file_checksums_do_not_cover(copy_run):
    """Without its file checksums (a crash between the save and writing them), values that read without an error
    but are not the ones saved are still caught by the SHA-256 of the values saved inside the checkpoint."""
    workdir = copy_run()
    (workdir / "checksums" / "8.json").unlink()
    swap_params(workdir, 8, 4)
    with pytest.warns(checkpoint.CheckpointWarning, match=r"checkpoints/8: the params do not match their saved "
                                                          r"SHA-256.*older checkpoint 4 instead of 8"):
        *_, step = checkpoint.restore_params(workdir)
    assert step == 4


def test_an_unreadable_checksum_file_leaves_the_values_to_their_sha256(copy_run):
    """A checksum file cut short (a crash while it was written) does not condemn its checkpoint: the values are
    restored and checked against their SHA-256, which still catch values that are not the ones saved."""
    workdir = copy_run()
    (workdir / "checksums" / "8.json").write_text("")
    with pytest.warns(checkpoint.CheckpointWarning, match="not valid JSON; its files are not checked"):
        *_, step = checkpoint.restore_params(workdir)
    assert step == 8
    swap_params(workdir, 8, 4)
    with pytest.warns(checkpoint.CheckpointWarning, match="not valid JSON; its files are not checked"):
        with pytest.warns(checkpoint.CheckpointWarning, match=r"checkpoints/8: the params do not match their saved "
                                                              r"SHA-256.*older checkpoint 4 instead of 8"):
            *_, step = checkpoint.restore_params(workdir)
    assert step == 4


def test_a_checkpoint_without_the_saved_sha256_of_its_values_is_corrupt(copy_run):
    """Every part restored is checked against its saved SHA-256: a checkpoint whose meta lacks one (and that has
    no file checksums either) is not restored unchecked."""
    workdir = copy_run()
    (workdir / "checksums" / "8.json").unlink()
    swap_params(workdir, 8, 4)
    meta_file = workdir / "checkpoints" / "8" / "meta" / "metadata"
    meta = json.loads(meta_file.read_text())
    del meta["sha256"]["params"]
    meta_file.write_text(json.dumps(meta))
    with pytest.warns(checkpoint.CheckpointWarning, match=r"checkpoints/8 holds no saved SHA-256 of its params"):
        *_, step = checkpoint.restore_params(workdir)
    assert step == 4


def test_a_checkpoint_copied_into_another_steps_folder_is_corrupt(copy_run):
    """A checkpoint records its step: one copied or renamed into another step's folder (files and checksums
    alike, so its files verify) is not resumed from as that step."""
    workdir = copy_run()
    shutil.copytree(workdir / "checkpoints" / "4", workdir / "checkpoints" / "12")
    shutil.copy(workdir / "checksums" / "4.json", workdir / "checksums" / "12.json")
    with pytest.warns(checkpoint.CheckpointWarning, match=r"checkpoints/12 records step 4, not 12 .*older "
                                                          r"checkpoint 8 instead of 12"):
        *_, step = checkpoint.restore_params(workdir)
    assert step == 8


def test_a_file_its_checksum_file_does_not_list_makes_a_checkpoint_corrupt(copy_run):
    """The checksum file lists exactly the checkpoint's files: one it does not list is corrupt, as one missing."""
    workdir = copy_run()
    (workdir / "checkpoints" / "8" / "params" / "stray").write_bytes(b"not written by the save")
    with pytest.warns(checkpoint.CheckpointWarning, match=r"checkpoints/8: file params/stray is not listed in its "
                                                          r"checksum file.*older checkpoint 4 instead of 8"):
        *_, step = checkpoint.restore_params(workdir)
    assert step == 4


def test_a_checksum_file_that_lists_no_files_checks_none(copy_run):
    """A checksum file that lists no files (`{}`) does not show the checkpoint's files intact: as for one cut
    short, the values alone are checked, and files that cannot be read make the checkpoint corrupt."""
    workdir = copy_run()
    (workdir / "checksums" / "8.json").write_text("{}")
    flip_bytes(largest_param_file(workdir, 8), offsets=(40, 41, 42))  # TensorStore cannot read the file
    with pytest.warns(checkpoint.CheckpointWarning, match="lists no files' SHA-256; its files are not checked"):
        with pytest.warns(checkpoint.CheckpointWarning, match=r"checkpoints/8 cannot be read .*older checkpoint 4 "
                                                              r"instead of 8"):
            *_, step = checkpoint.restore_params(workdir)
    assert step == 4


def test_intact_files_restored_to_other_values_are_the_readers_error_not_corruption(copy_run, tiny_config,
                                                                                    monkeypatch):
    """Files that match their checksums but restore to other values than saved (here: into bfloat16 targets, which
    Orbax casts to) are reported as the reader's fault; nothing is set aside, nor the run's discarding advised."""
    workdir = copy_run()
    real = checkpoint._abstract

    def bfloat16(tree, shardings=None):
        return jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, jnp.bfloat16 if s.dtype == jnp.float32
                                                           else s.dtype, sharding=s.sharding), real(tree, shardings))

    monkeypatch.setattr(checkpoint, "_abstract", bfloat16)
    with pytest.raises(checkpoint.CheckpointReaderError, match=r"checkpoints/8: its files match their checksums, "
                                                               r"but its params restored to other values") as err:
        checkpoint.restore_params(workdir)
    assert "afresh" not in str(err.value)
    with pytest.raises(checkpoint.CheckpointReaderError):
        train.train_and_evaluate(tiny_config("tiny"), str(workdir))
    assert not (workdir / "corrupt_checkpoints").exists()
    assert checkpoint.manager(workdir, read_only=True).all_steps() == [4, 8]


def test_file_checksums_are_computed_in_chunks(copy_run, monkeypatch):
    """Files are hashed as they are read, never read into memory whole (a real model's data files are GBs)."""
    workdir = copy_run()

    def whole(path):
        raise AssertionError(f"{path} read into memory whole")

    monkeypatch.setattr(pathlib.Path, "read_bytes", whole)
    listed = json.loads((workdir / "checksums" / "8.json").read_text())
    assert checkpoint._file_sums(workdir / "checkpoints" / "8") == listed
    assert checkpoint.verify_files(checkpoint.manager(workdir, read_only=True), 8)


@pytest.mark.parametrize("file_sums", ["kept", "lost"])
def test_a_read_error_of_a_checkpoint_is_raised_not_set_aside(copy_run, tiny_config, monkeypatch, file_sums):
    """An I/O error reading a checkpoint is the machine's, not the checkpoint's, whether its files match their
    checksums or it has none (a crash between its save and writing them): it is raised, and the checkpoint stays
    where it is."""
    import orbax.checkpoint as ocp  # noqa: PLC0415

    workdir = copy_run()
    if file_sums == "lost":
        (workdir / "checksums" / "8.json").unlink()
    real = ocp.CheckpointManager.restore

    def failing(self, step, *args, **kwargs):
        if step == 8:
            raise OSError(5, "Input/output error")
        return real(self, step, *args, **kwargs)

    monkeypatch.setattr(ocp.CheckpointManager, "restore", failing)
    with pytest.raises(OSError, match="Input/output error"):
        train.train_and_evaluate(tiny_config("tiny"), str(workdir))
    assert not (workdir / "corrupt_checkpoints").exists()
    assert checkpoint.manager(workdir, read_only=True).all_steps() == [4, 8]


def test_no_good_checkpoint_left_is_a_clear_error(copy_run, tiny_config):
    workdir = copy_run()
    for step in (4, 8):
        flip_bytes(largest_param_file(workdir, step))
    with pytest.raises(checkpoint.CorruptCheckpointError, match=r"no good checkpoint left.*checkpoints/8.*checkpoints/4"):
        ev.evaluate([str(workdir)], [32], ["none"], num_bytes=64, progress=False)
    with pytest.raises(checkpoint.CorruptCheckpointError, match="no good checkpoint left"):
        train.train_and_evaluate(tiny_config("tiny"), str(workdir))
    assert checkpoint.manager(workdir, read_only=True).all_steps() == [4, 8]  # nothing is deleted


def test_a_checkpoint_is_never_written_with_non_finite_parameters(trained_run, tmp_path):
    _, cfg, _, params, _ = checkpoint.restore_params(trained_run)
    params["head"]["kernel"][...] = params["head"]["kernel"][...].at[0, 0].set(np.nan)
    mngr = checkpoint.manager(tmp_path)
    with pytest.raises(FloatingPointError, match="not finite"):
        checkpoint.save(mngr, 1, params, {})
    assert mngr.all_steps() == []


def test_a_save_orbax_declines_is_an_error_not_a_checkpoint(trained_run, tmp_path):
    """Orbax returns False, writing nothing, for a step at or before its latest: `save` says so."""
    _, _, _, params, _ = checkpoint.restore_params(trained_run)
    mngr = checkpoint.manager(tmp_path)
    checkpoint.save(mngr, 4, params, None)
    sums = checkpoint._sums_path(mngr, 4).read_text()
    for step in (2, 4):  # before it, or itself again
        with pytest.raises(RuntimeError, match=rf"checkpoint step {step} was not saved .* \(its latest step is 4\)"):
            checkpoint.save(mngr, step, params, None)
    assert mngr.all_steps() == [4] and checkpoint._sums_path(mngr, 4).read_text() == sums  # its checksums kept


def test_a_lock_that_cannot_name_its_holder_is_released(tmp_path, monkeypatch):
    """A failure after the flock (the holder's name not written: a full disk) releases it: the same process can
    take the lock again once the disk has room."""
    def full(*args):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(os, "pwrite", full)
        with pytest.raises(OSError, match="No space left"):
            checkpoint.WorkdirLock(tmp_path).__enter__()
    with checkpoint.WorkdirLock(tmp_path):  # not WorkdirBusyError naming this process
        assert f"pid {os.getpid()}" in (tmp_path / ".lock").read_text()


def test_second_writer_is_refused_and_a_dead_holder_does_not_block(tiny_config, tmp_path, cache_dir):
    args = ["--config=configs/default.py:tiny", "--config.train_steps=100000", "--config.checkpoint_every=5",
            f"--config.data.cache_dir={cache_dir}", f"--workdir={tmp_path}"]
    first = subprocess.Popen([sys.executable, "scripts/train.py", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not (tmp_path / "checkpoints" / "5").exists():
            assert first.poll() is None and time.time() < deadline, "the first training ended early"
            time.sleep(0.05)
        with pytest.raises(checkpoint.WorkdirBusyError, match=rf"in use by pid {first.pid} "):
            train.train_and_evaluate(tiny_config("tiny", train_steps=100000, checkpoint_every=5), str(tmp_path))
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # the killed holder's lock is gone with it: the run resumes (stopping at its next checkpoint; the
    # schedule is pinned to the killed run's, so train_steps may change)
    latest = checkpoint.manager(tmp_path, read_only=True).latest_step()
    config = tiny_config("tiny", train_steps=latest + 5, checkpoint_every=5, schedule_steps=100000)
    assert train.train_and_evaluate(config, str(tmp_path))["step"] == latest + 5
    assert f"pid {os.getpid()} " in (tmp_path / ".lock").read_text()


def test_exported_parameters_import_to_the_same_hash_evaluate_alike_and_refuse_to_resume(trained_run, tmp_path,
                                                                                          tiny_config):
    """`export_params` → `import_params` gives back the run's parameters bit for bit (its hash, its scores); the
    imported checkpoint starts a run (`init_from`) but resuming it is refused, not silently reinitialised."""
    config = checkpoint.load_config(trained_run)
    sha = checkpoint.export_params(trained_run, tmp_path / "rope.npz")
    _, _, _, params, _ = checkpoint.restore_params(trained_run)
    assert sha == checkpoint.tree_sha256(params)
    imported = tmp_path / "imported"
    assert checkpoint.import_params(tmp_path / "rope.npz", imported, config, step=8) == sha
    _, _, _, again, step = checkpoint.restore_params(imported)
    assert step == 8 and checkpoint.tree_sha256(again) == sha
    meta = json.loads((imported / "checkpoints" / "8" / "meta" / "metadata").read_text())
    assert meta["params_only"] and "opt_state" not in meta["sha256"]
    score = lambda w: ev.evaluate([str(w)], [32], ["none"], num_bytes=64, progress=False)["rows"][0]["nll"]  # noqa: E731
    assert score(imported) == score(trained_run)
    with pytest.raises(checkpoint.ParamsOnlyError, match="parameters only.*init_from"):
        train.train_and_evaluate(tiny_config("tiny", train_steps=12, schedule_steps=8), str(imported))
    with pytest.raises(ValueError, match="already has checkpoints"):
        checkpoint.import_params(tmp_path / "rope.npz", imported, config, step=8)
    busy = tmp_path / "busy"
    busy.mkdir()
    with checkpoint.WorkdirLock(busy):  # a run training there: no import relabels it
        with pytest.raises(checkpoint.WorkdirBusyError, match="is in use by pid"):
            checkpoint.import_params(tmp_path / "rope.npz", busy, config, step=8)
    assert not (busy / "config.json").exists()
    finetune = train.train_and_evaluate(tiny_config("tiny", init_from=str(imported)), str(tmp_path / "ft"))
    assert np.isfinite(finetune["val_loss"])


def test_an_imported_run_evaluates_with_the_activations_its_export_recorded(copy_run, tmp_path):
    """The exported file carries the run's activations (`ACTIVATIONS_KEY`) and the imported run.json records
    them, so a bf16-activation run is evaluated with bf16 activations after export and import; a file written
    without the entry imports as float32 (the activations of every run exported before it existed)."""
    workdir = copy_run()
    stored = json.loads((workdir / "config.json").read_text())
    (workdir / "config.json").write_text(json.dumps({**stored, "model": {**stored["model"], "dtype": "bfloat16"}}))
    config = checkpoint.load_config(workdir)
    info = json.loads((workdir / "run.json").read_text())
    (workdir / "run.json").write_text(json.dumps({**info, "activations": "bfloat16"}))  # as a GPU's auto records
    checkpoint.export_params(workdir, tmp_path / "run.npz")
    with np.load(tmp_path / "run.npz") as f:
        assert str(f[checkpoint.ACTIVATIONS_KEY]) == "bfloat16"
        arrays = {k: v for k, v in f.items() if k != checkpoint.ACTIVATIONS_KEY}
    float32 = checkpoint.load_config(workdir)
    float32.model.act_dtype = "float32"
    with pytest.raises(ValueError, match="trained with 'bfloat16' activations, which model.dtype='bfloat16' and "
                                         "model.act_dtype='float32' do not give"):
        checkpoint.import_params(tmp_path / "run.npz", tmp_path / "refused", float32, step=8)
    checkpoint.import_params(tmp_path / "run.npz", tmp_path / "imported", config, step=8)
    assert checkpoint.restore_params(tmp_path / "imported")[1].act_dtype == "bfloat16"
    np.savez(tmp_path / "old.npz", **arrays)
    checkpoint.import_params(tmp_path / "old.npz", tmp_path / "old", config, step=8)
    assert checkpoint.restore_params(tmp_path / "old")[1].act_dtype == "float32"


def test_importing_another_models_parameters_names_the_difference(trained_run, tmp_path, tiny_config):
    checkpoint.export_params(trained_run, tmp_path / "rope.npz")
    wider = tiny_config("tiny")
    wider.model.mlp_dim *= 2
    with pytest.raises(ValueError, match=r"parameter .*fc.* is float32\[.*this model's is float32\["):
        checkpoint.import_params(tmp_path / "rope.npz", tmp_path / "wider", wider, step=8)
    learned = tiny_config("posenc=learned,tiny")
    with pytest.raises(ValueError, match="not this model's .*missing"):
        checkpoint.import_params(tmp_path / "rope.npz", tmp_path / "learned", learned, step=8)


def test_a_checkpoint_missing_its_optimiser_state_is_corrupt_not_params_only(copy_run, tiny_config):
    """Only a checkpoint written parameters-only (meta `params_only`) refuses to resume; a full one that lost
    its opt_state files is corrupt, and training falls back to the previous checkpoint."""
    workdir = copy_run()
    import shutil  # noqa: PLC0415

    shutil.rmtree(workdir / "checkpoints" / "8" / "opt_state")
    with pytest.warns(checkpoint.CheckpointWarning, match=r"checkpoints/8.*older checkpoint 4 instead of 8"):
        assert train.train_and_evaluate(tiny_config("tiny"), str(workdir))["step"] == 8


def test_export_refuses_a_dtype_npz_cannot_store(trained_run, tmp_path, monkeypatch):
    import jax.numpy as jnp  # noqa: PLC0415

    config, cfg, graphdef, params, step = checkpoint.restore_params(trained_run)
    half = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
    monkeypatch.setattr(checkpoint, "restore_params", lambda workdir: (config, cfg, graphdef, half, step))
    with pytest.raises(ValueError, match=r"parameter .* is bfloat16, which .npz does not store"):
        checkpoint.export_params(trained_run, tmp_path / "half.npz")
    assert not list(tmp_path.iterdir())


def test_a_run_is_evaluated_with_the_activations_it_trained_with(copy_run):
    """`restore_params` (every evaluation's loader) resolves model.act_dtype='auto' to the activations run.json
    records, not to this backend's default: a GPU-trained bf16-activation run evaluated on a CPU keeps bf16
    activations, and a CPU-trained run evaluated on a GPU float32 ones. Without a record: float32."""
    workdir = copy_run()
    config = json.loads((workdir / "config.json").read_text())
    assert config["model"]["act_dtype"] == "auto"
    assert checkpoint.restore_params(workdir)[1].act_dtype == "float32"  # recorded by a CPU's auto
    info = json.loads((workdir / "run.json").read_text())
    (workdir / "run.json").write_text(json.dumps({k: v for k, v in info.items() if k != "activations"}))
    assert checkpoint.restore_params(workdir)[1].act_dtype == "float32"  # recorded before act_dtype existed
    (workdir / "config.json").write_text(json.dumps({**config, "model": {**config["model"], "dtype": "bfloat16"}}))
    (workdir / "run.json").write_text(json.dumps({**info, "activations": "bfloat16"}))  # as a GPU's auto records
    run = ev.load_run(str(workdir))
    assert run.cfg.act_dtype == "bfloat16" and run.cfg.dtype == "bfloat16"
    (workdir / "run.json").write_text(json.dumps({**info, "activations": "float32"}))
    again = ev.load_run(str(workdir))
    assert again.cfg.act_dtype == "float32"
    tokens = jnp.arange(16)[None]
    bf16, f32 = (np.asarray(nnx.merge(r.graphdef, r.params)(tokens), np.float32) for r in (run, again))
    assert 0 < np.abs(bf16 - f32).max() < 0.5  # the models differ in their activations only


def test_a_checkpoint_that_lost_its_checksum_file_gets_it_back_once_its_values_verify(copy_run, tiny_config):
    """A process that ended between a checkpoint's commit and its checksum file leaves the checkpoint without one.
    Resuming restores every part of it and checks them against their saved SHA-256: then its files are the ones
    saved, and their checksum file is written (warned), so the checkpoint is verified by its files again. An
    evaluation, which restores the parameters alone, writes none (the optimiser state was not checked)."""
    workdir = copy_run()
    sums = workdir / "checksums" / "8.json"
    saved = json.loads(sums.read_text())
    sums.unlink()
    assert checkpoint.restore_params(workdir)[4] == 8 and not sums.exists()
    with pytest.warns(checkpoint.CheckpointWarning, match=r"checkpoints/8 has no checksum file .* its values match "
                                                          r"their saved SHA-256: its files' checksums are written now"):
        train.train_and_evaluate(tiny_config("tiny"), str(workdir))  # resumes at 8, its last step
    assert json.loads(sums.read_text()) == saved
    assert checkpoint.verify_files(checkpoint.manager(workdir, read_only=True), 8)


def test_a_checkpoint_without_its_checksum_file_whose_values_differ_gets_none(copy_run, tiny_config):
    """Values that do not match their saved SHA-256 are corruption: the checkpoint is set aside, and no checksum
    file vouches for its files."""
    workdir = copy_run()
    (workdir / "checksums" / "8.json").unlink()
    swap_params(workdir, 8, 4)
    with pytest.warns(checkpoint.CheckpointWarning, match=r"checkpoints/8: the params do not match"):
        assert train.train_and_evaluate(tiny_config("tiny"), str(workdir))["step"] == 8  # steps 5..8 again
    assert [p.name.split(".")[0] for p in (workdir / "corrupt_checkpoints").iterdir()] == ["8"]
    assert checkpoint.verify_files(checkpoint.manager(workdir, read_only=True), 8)  # the rewritten 8's own


@pytest.mark.parametrize("file_sums", ["kept", "lost"])
def test_restoring_into_another_shape_names_the_parameter_and_both_shapes(copy_run, file_sums):
    """A model built from another config than the run's cannot hold its checkpoint: the error names the
    parameter, its saved and its expected shape and the likely cause — not Orbax's message without the
    parameter, nor (without file checksums) a corruption that sets every checkpoint aside."""
    workdir = copy_run()
    if file_sums == "lost":
        (workdir / "checksums" / "8.json").unlink()
    stored = json.loads((workdir / "config.json").read_text())
    mlp = stored["model"]["mlp_dim"]
    (workdir / "config.json").write_text(json.dumps({**stored, "model": {**stored["model"], "mlp_dim": 2 * mlp}}))
    with pytest.raises(checkpoint.CheckpointShapeError,
                       match=rf"checkpoints/8: params\[.*\] was saved with shape \((\d+, )?{mlp}(, \d+)?\), the model "
                             rf"restoring it has \((\d+, )?{2 * mlp}(, \d+)?\) .*config"):
        checkpoint.restore_params(workdir)
    assert checkpoint.manager(workdir, read_only=True).all_steps() == [4, 8]


def test_restoring_into_a_model_with_other_parameters_names_them(trained_run, tiny_config):
    from posenc.config import validate  # noqa: PLC0415

    _, learned = checkpoint.abstract_model(validate(tiny_config("posenc=learned,tiny"), training=False))
    with pytest.raises(checkpoint.CheckpointShapeError,
                       match=r"checkpoints/8: it lacks params\['encoding'\]\['table'\], which the model restoring it "
                             r"has: .*config"):
        checkpoint.restore(checkpoint.manager(trained_run, read_only=True), 8, learned)


def test_a_killed_saves_temporary_folder_is_removed_when_the_checkpoints_are_opened_for_writing(copy_run,
                                                                                              monkeypatch):
    """Orbax writes a checkpoint into `<step>.orbax-checkpoint-tmp…` and renames it when complete; a killed save
    leaves that folder. Process 0 removes such folders when it opens the checkpoints for writing; a reader, or
    another process, leaves them, and finalized steps and other names are never touched."""
    workdir = copy_run()
    root = workdir / "checkpoints"
    tmp = root / "12.orbax-checkpoint-tmp-1712345678"
    (tmp / "params").mkdir(parents=True)
    (tmp / "params" / "part").write_bytes(b"half written")
    other = root / "notes"
    other.mkdir()
    checkpoint.manager(workdir, read_only=True).close()
    monkeypatch.setattr(jax, "process_index", lambda: 1)
    checkpoint.manager(workdir).close()
    assert tmp.is_dir()
    monkeypatch.undo()
    mngr = checkpoint.manager(workdir)
    assert not tmp.exists() and other.is_dir() and mngr.all_steps() == [4, 8]
    mngr.close()
    assert checkpoint.restore_params(workdir)[4] == 8


def test_export_writes_through_a_temporary_file_no_other_writer_has(trained_run, tmp_path, monkeypatch):
    """Writers sharing a PID (processes on hosts sharing the folder) each write their own temporary file: another
    writer's file is left alone, and the export's mode is a plain open's."""
    from posenc import jobs  # noqa: PLC0415

    monkeypatch.setattr(os, "getpid", lambda: 1)
    others = tmp_path / ".rope.npz.1.tmp"
    others.write_bytes(b"another writer's export")
    sha = checkpoint.export_params(trained_run, tmp_path / "rope.npz")
    assert others.read_bytes() == b"another writer's export"
    assert sorted(p.name for p in tmp_path.iterdir()) == [".rope.npz.1.tmp", "rope.npz"]
    assert (tmp_path / "rope.npz").stat().st_mode & 0o777 == 0o666 & ~jobs._UMASK
    with np.load(tmp_path / "rope.npz") as f:
        assert str(f[checkpoint.ACTIVATIONS_KEY]) == "float32" and len(f.files) > 1
    assert sha == checkpoint.tree_sha256(checkpoint.restore_params(trained_run)[3])
