"""Run directories: the config, verified Orbax checkpoints, the run's identity, and one writer at a time.

A workdir holds
  * `config.json`: the latest command's full ConfigDict;
  * `run.json`: what the run is (its corpus's fingerprint, its activations, the parameters it started from
    with `init_from`) and what happened to it (divergences, the optimiser changes made to recover from them,
    an early stop), see `posenc.train`;
  * `checkpoints/<step>/`: Orbax items `params`, `opt_state` and `meta` = {step, sha256 of params and of
    opt_state}; the data position is the step, since batches are a function of (seed, step). A checkpoint
    made by `import_params` has no `opt_state` (meta `params_only`): it can be evaluated and fine-tuned from
    (`init_from`), not resumed;
  * `checksums/<step>.json`: the SHA-256 of each file of checkpoint <step> (written after its save commits; one
    a crash left unwritten is written when a resume has restored the checkpoint and verified its values);
  * `metrics.jsonl`, TensorBoard events, and `.lock` (held by the process training in it).

Orbax writes a checkpoint to a temporary directory and renames it when complete, so a crash never leaves a
half-written checkpoint as the latest (the temporary directory a killed save leaves is removed when the checkpoints
are next opened for writing, `manager`). A checkpoint is only written with finite parameters, and restoring one
checks its files against their checksums (exactly the files listed, no more, no fewer), its recorded step against
its folder's, and its values against their SHA-256: a corrupt checkpoint (flipped bytes, garbage, a missing or extra
file, a missing hash, a checkpoint copied into another step's folder) is reported and the previous one is used
instead (`restore_latest_good`). Files that match their checksums but restore to other values than were saved, and
parameters saved in other shapes than the restoring model's, are the reader's fault, not the checkpoint's
(`CheckpointReaderError`, `CheckpointShapeError`).
"""

from __future__ import annotations

import dataclasses
import datetime
import fcntl
import functools
import hashlib
import io
import json
import logging
import os
import pathlib
import shutil
import socket
import warnings

import jax
import ml_collections
import numpy as np
import orbax.checkpoint as ocp
from flax import nnx

from posenc.config import check_rope_factors, validate
from posenc.jobs import write_atomic, write_bytes_atomic
from posenc.model import ModelConfig, Transformer


def manager(workdir: str | pathlib.Path, keep: int = 2, read_only: bool = False) -> ocp.CheckpointManager:
    """The Orbax manager of `workdir/checkpoints`. Opened for writing (by the one process that holds the
    workdir's lock, `WorkdirLock`), process 0 first removes the temporary folders of saves killed before their
    rename (`_remove_killed_saves`)."""
    path = pathlib.Path(workdir).expanduser().resolve() / "checkpoints"
    if read_only:
        options = ocp.CheckpointManagerOptions(read_only=True, create=False, save_interval_steps=0)
    else:  # synchronous, so that the files can be checksummed as soon as `save` returns
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True, enable_async_checkpointing=False)
        if jax.process_index() == 0:
            _remove_killed_saves(path)
    return ocp.CheckpointManager(path, options=options)


def _remove_killed_saves(root: pathlib.Path) -> None:
    """Removes from `root` the folders Orbax names as unfinished saves (`<step>.orbax-checkpoint-tmp…`, its own
    test: `ocp.step.tmp_checkpoints`), left by a save killed before its rename; finalized steps are never
    touched. Only for a writer: no save of the workdir runs while it holds the lock."""
    for name in ocp.step.tmp_checkpoints(root):
        logging.getLogger(__name__).info("removing %s, an unfinished save", root / name)
        shutil.rmtree(root / name)


def save_config(workdir: pathlib.Path, config: ml_collections.ConfigDict) -> None:
    """Replaces `workdir/config.json`, atomically and on disk before the rename (`jobs.write_atomic`)."""
    write_atomic(pathlib.Path(workdir) / "config.json", config.to_json_best_effort(indent=2))


def load_config(workdir: str | pathlib.Path) -> ml_collections.ConfigDict:
    path = pathlib.Path(workdir).expanduser() / "config.json"
    if not path.exists():
        raise ValueError(f"workdir={str(workdir)!r} has no config.json: not a posenc run directory")
    return ml_collections.ConfigDict(json.loads(path.read_text()))


def abstract_model(cfg: ModelConfig):
    """(graphdef, abstract params) without allocating or computing anything. The model is traced once per
    config in a process; each call gets its own container of the abstract leaves."""
    graphdef, abstract = _abstract_model(cfg)
    return graphdef, jax.tree.map(lambda leaf: leaf, abstract)


@functools.lru_cache(maxsize=16)
def _abstract_model(cfg: ModelConfig):
    return nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))


def init_params(cfg: ModelConfig, seed: int, shardings=None):
    """Initial parameters, with the whole initialisation compiled as one program (eager NNX init would
    compile dozens of tiny ones), traced once per config in a process for the default device (the seed is an
    argument). `shardings`: a pytree of the parameters' shardings, which the program writes its outputs in
    (FSDP: no device holds the whole model; compiled per call), or None (the default device)."""
    if shardings is None:
        return _init_fn(cfg)(seed)
    return jax.jit(_init_state(cfg), out_shardings=shardings)(seed)


def _init_state(cfg: ModelConfig):
    return lambda seed: nnx.state(Transformer(cfg, rngs=nnx.Rngs(jax.random.key(seed))))


@functools.lru_cache(maxsize=16)
def _init_fn(cfg: ModelConfig):
    return jax.jit(_init_state(cfg))


class CorruptCheckpointError(ValueError):
    """A checkpoint whose contents do not match its checksums, or that cannot be read at all."""


class CheckpointReaderError(ValueError):
    """A checkpoint whose files match their checksums restored to other values than it saved: the reader differs
    from the writer (the restore targets' dtypes or structure, a change of code or library), not the checkpoint,
    which is left where it is."""


class CheckpointShapeError(CheckpointReaderError):
    """A checkpoint holds parameters (or optimiser state) in other shapes, or under other names, than the model
    restoring it: it was saved by another model (another config), and is left where it is."""


class CheckpointWarning(UserWarning):
    """A corrupt checkpoint was skipped in favour of an older one, or a checksum file was written after the fact."""


class WorkdirBusyError(RuntimeError):
    """Another process is training in the same workdir."""


class ParamsOnlyError(ValueError):
    """Training was asked to resume from a checkpoint that holds parameters only (`import_params`)."""


def _local(leaf) -> np.ndarray:
    """A leaf as a whole NumPy array, whatever its layout: an array spread over several processes is read
    from the local copy when replicated and gathered from every process when sharded (FSDP; a collective,
    so every process calls this in the same order), so checksums do not depend on the mesh."""
    if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
        if leaf.is_fully_replicated:
            return np.asarray(leaf.addressable_data(0))
        from jax.experimental import multihost_utils  # noqa: PLC0415

        return np.asarray(multihost_utils.process_allgather(leaf, tiled=True))
    return np.asarray(leaf)


def tree_sha256(tree) -> str:
    """SHA-256 over a pytree's leaves in path order: each leaf's path, dtype, shape and bytes."""
    h = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        arr = np.ascontiguousarray(_local(leaf))
        h.update(f"{jax.tree_util.keystr(path)}|{arr.dtype}|{arr.shape}|".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def all_finite(tree) -> bool:
    arrays = [_local(x) for x in jax.tree.leaves(tree)]
    return all(bool(np.isfinite(a).all()) for a in arrays if np.issubdtype(a.dtype, np.inexact))


def _sums_path(mngr: ocp.CheckpointManager, step: int) -> pathlib.Path:
    return pathlib.Path(mngr.directory).parent / "checksums" / f"{step}.json"


def _file_sha256(path: pathlib.Path) -> str:
    """The SHA-256 of a file's bytes, read in chunks: a checkpoint's data files are never held in memory whole."""
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _files(step_dir: pathlib.Path) -> list[pathlib.Path]:
    return sorted(f for f in step_dir.rglob("*") if f.is_file())


def _file_sums(step_dir: pathlib.Path) -> dict[str, str]:
    return {str(f.relative_to(step_dir)): _file_sha256(f) for f in _files(step_dir)}


def save(mngr: ocp.CheckpointManager, step: int, params, opt_state) -> None:
    """Saves a checkpoint and its two checksums: the SHA-256 of the parameter and optimiser-state values
    (in its `meta` item, written with it) and of every file it consists of (`workdir/checksums/<step>.json`,
    written once the save has committed). A checkpoint without the file checksums (a crash in between) is
    still verified by its values, and gets them once a restore has verified all of it (`restore`).
    `opt_state=None` writes a parameters-only checkpoint (`import_params`).

    Raises:
      FloatingPointError: a parameter is not finite (nothing is written).
    """
    pure = nnx.to_pure_dict(params)
    if not all_finite(pure):
        raise FloatingPointError(f"step {step}: parameters are not finite; no checkpoint written")
    sums = _sums_path(mngr, step)
    declined = RuntimeError(f"checkpoint step {step} was not saved in {mngr.directory} (its latest step is "
                            f"{mngr.latest_step()}): a step is saved once, after the ones before it")
    if not mngr.should_save(step):  # Orbax would write nothing: said before any checksum file is touched
        raise declined
    is_main = jax.process_index() == 0
    if is_main:
        sums.unlink(missing_ok=True)  # a stale file of an earlier checkpoint at this step
    sha = {"params": tree_sha256(pure)}
    items = {"params": ocp.args.StandardSave(pure)}
    if opt_state is not None:
        sha["opt_state"] = tree_sha256(opt_state)
        items["opt_state"] = ocp.args.StandardSave(opt_state)
    meta = {"step": step, "sha256": sha, **({} if opt_state is not None else {"params_only": True})}
    if not mngr.save(step, args=ocp.args.Composite(**items, meta=ocp.args.JsonSave(meta))):
        raise declined
    mngr.wait_until_finished()
    if is_main:
        sums.parent.mkdir(exist_ok=True)
        write_atomic(sums, json.dumps(_file_sums(pathlib.Path(mngr.directory) / str(step)), indent=0))
        kept = {str(s) for s in mngr.all_steps()}
        for old in sums.parent.glob("*.json"):
            if old.stem not in kept:
                old.unlink(missing_ok=True)


def verify_files(mngr: ocp.CheckpointManager, step: int) -> bool:
    """Compares checkpoint `step`'s files with the checksums written after its save: the files it lists must be
    exactly the checkpoint's files, each with its SHA-256. Returns whether it could: False without a checksum
    file, or with one that is not valid JSON or lists no files (cut short by a crash, or damaged: the restored
    values are then checked against their SHA-256 alone, `restore`).

    Raises:
      CorruptCheckpointError: naming a file the checksum file does not list, or the first listed file that is
        missing or changed.
    """
    sums = _sums_path(mngr, step)
    if not sums.exists():
        return False
    where = pathlib.Path(mngr.directory) / str(step)
    try:
        expected = json.loads(sums.read_text())
        fault = "" if (isinstance(expected, dict) and expected
                       and all(isinstance(d, str) for d in expected.values())) else "lists no files' SHA-256"
    except json.JSONDecodeError:
        fault = "is not valid JSON"
    if fault:
        warnings.warn(f"checkpoint {where}: its checksum file {sums} {fault}; its files are not checked, its values "
                      "are (against their SHA-256)", CheckpointWarning)
        return False
    unlisted = [rel for rel in (str(f.relative_to(where)) for f in _files(where)) if rel not in expected]
    if unlisted:
        raise CorruptCheckpointError(f"checkpoint {where}: file {unlisted[0]} is not listed in its checksum file "
                                     f"{sums} (added after it was written)")
    for rel, digest in expected.items():
        f = where / rel
        if not f.is_file():
            raise CorruptCheckpointError(f"checkpoint {where}: file {rel} is missing")
        if _file_sha256(f) != digest:
            raise CorruptCheckpointError(f"checkpoint {where}: file {rel} does not match its SHA-256 "
                                         "(changed after it was written)")
    return True


def _abstract(tree, shardings=None):
    """Restore targets: shapes and dtypes of `tree`, placed by `shardings` (a matching tree), or on the first
    local device — never on the mesh the checkpoint was saved from, which may not exist here."""
    if shardings is None:
        device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
        shardings = jax.tree.map(lambda _: device, tree)
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def _path_key(path) -> tuple[str, ...]:
    """A pytree key path as strings: Orbax's metadata names a list's items '0', '1', … where the tree has 0, 1, …"""
    return tuple(str(getattr(k, "key", getattr(k, "idx", getattr(k, "name", k)))) for k in path)


def _shape_mismatch(step_dir: pathlib.Path, targets: dict) -> str:
    """How the arrays checkpoint `step_dir` saved differ from the restore targets ({item name: abstract tree}):
    the first array whose shape differs (its path, both shapes, how many more differ), else the arrays only one
    side has; "" where they agree or the checkpoint's metadata cannot be read (a corrupt checkpoint: left to
    `restore`)."""
    for name, target in targets.items():
        handler = ocp.StandardCheckpointHandler()
        try:
            saved = {_path_key(k): v.shape for k, v in jax.tree_util.tree_flatten_with_path(
                handler.metadata(step_dir / name))[0]}
        except Exception:  # noqa: BLE001 — unreadable metadata: not a shape to compare
            continue
        finally:
            handler.close()
        wanted = {_path_key(k): (jax.tree_util.keystr(k), v.shape)
                  for k, v in jax.tree_util.tree_flatten_with_path(target)[0]}
        differ = [(label, tuple(saved[k]), tuple(shape)) for k, (label, shape) in wanted.items()
                  if k in saved and tuple(saved[k]) != tuple(shape)]
        if differ:
            label, was, now = differ[0]
            more = f" (and {len(differ) - 1} more arrays differ)" if len(differ) > 1 else ""
            return f"{name}{label} was saved with shape {was}, the model restoring it has {now}{more}"
        missing = [label for k, (label, _) in wanted.items() if k not in saved]
        extra = ["".join(f"[{p!r}]" for p in k) for k in saved if k not in wanted]

        def listed(labels):
            return ", ".join(name + x for x in labels[:3]) + (" …" if len(labels) > 3 else "")

        said = ([f"lacks {listed(missing)}, which the model restoring it has"] if missing else []) + (
            [f"holds {listed(extra)}, which the model restoring it lacks"] if extra else [])
        if said:
            return "it " + " and ".join(said)
    return ""


def _meta(mngr: ocp.CheckpointManager, step: int) -> dict:
    """Checkpoint `step`'s `meta` item, or {} where it cannot be read (`restore` then reports the corruption)."""
    try:
        return mngr.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))["meta"] or {}
    except Exception:  # noqa: BLE001 — unreadable: left to restore's checks
        return {}


def restore(mngr: ocp.CheckpointManager, step: int, abstract_params, abstract_opt_state=None, shardings=None):
    """Restores and verifies (params as nnx.State, opt_state or None) at `step`, shaped like the targets and
    placed by `shardings = (params', opt_state's)` (default: the first local device), whatever mesh saved it.

    Raises:
      CorruptCheckpointError: its files do not match their checksums, the checkpoint cannot be read and has no
        valid checksum record to show its files intact, it records another step than `step`, it lacks the saved
        SHA-256 of a part it restores, its values do not match their SHA-256, or it holds non-finite parameters.
        (A read error of files that match their checksums, and an OSError other than a missing file, are raised
        as they are.)
      CheckpointShapeError: it holds arrays of other shapes (or names) than the targets: named, with both shapes.
      CheckpointReaderError: its files match their checksums, but its values do not match their SHA-256.
      ParamsOnlyError: `abstract_opt_state` is given and the checkpoint holds parameters only.

    A checkpoint without a readable checksum file (its process ended between the save and writing it) is
    checked by its values alone; when every part it holds was restored and matched its saved SHA-256
    (`abstract_opt_state` given, or a parameters-only checkpoint), process 0 writes its checksum file (warned).
    """
    if abstract_opt_state is not None and _meta(mngr, step).get("params_only"):
        raise ParamsOnlyError(f"checkpoint {mngr.directory / str(step)} holds parameters only (imported with "
                              "posenc.checkpoint.import_params): it cannot be resumed. Evaluate it, start a new run "
                              "from it (--config.init_from=<this workdir> with another --workdir), or delete the "
                              "workdir to train the run from scratch")
    param_shardings, opt_shardings = shardings if shardings is not None else (None, None)
    pure_shardings = None if param_shardings is None else nnx.to_pure_dict(param_shardings)
    targets = {"params": _abstract(nnx.to_pure_dict(abstract_params), pure_shardings)}
    if abstract_opt_state is not None:
        targets["opt_state"] = _abstract(abstract_opt_state, opt_shardings)
    items = {name: ocp.args.StandardRestore(target) for name, target in targets.items()}
    items["meta"] = ocp.args.JsonRestore()
    where = f"checkpoint {mngr.directory / str(step)}"
    verified = verify_files(mngr, step)
    try:
        restored = mngr.restore(step, args=ocp.args.Composite(**items))
    except Exception as e:  # noqa: BLE001 — a failure to read the files is corruption to the caller …
        mismatch = _shape_mismatch(pathlib.Path(mngr.directory) / str(step), targets)
        if mismatch:  # … but not a checkpoint of another model
            raise CheckpointShapeError(
                f"{where}: {mismatch}: the model restoring it is not the one that saved it. Likely a config that "
                "differs from the run's (an edited config.json, another model.d_model, model.mlp_dim, "
                "model.num_layers or posenc variant) or code that builds the model otherwise; restore it with the "
                "config it trained with. The checkpoint is left as it is") from None
        if (verified or isinstance(e, MemoryError) or "RESOURCE_EXHAUSTED" in str(e)
                or (isinstance(e, OSError) and not isinstance(e, FileNotFoundError))
                or not (mngr.directory / str(step)).is_dir()):
            raise  # … but not of files that match their checksums (an I/O error, a reader that cannot parse
            # them), an OSError but a missing file (EIO, too many open files: the machine's, checksums or not), a
            # machine out of memory, or a directory that is not there (an unmounted disk)
        first = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        raise CorruptCheckpointError(f"{where} cannot be read ({type(e).__name__}: {first})") from None
    meta = restored["meta"] if isinstance(restored["meta"], dict) else {}
    if meta.get("step") != step:
        raise CorruptCheckpointError(f"{where} records step {meta.get('step')!r}, not {step} (copied or renamed from "
                                     "another step's folder)")
    sums = meta["sha256"] if isinstance(meta.get("sha256"), dict) else {}
    for name in [n for n in ("params", "opt_state") if n in items]:
        if name not in sums:
            raise CorruptCheckpointError(f"{where} holds no saved SHA-256 of its {name}: they cannot be verified")
        if tree_sha256(restored[name]) == sums[name]:
            continue
        if verified:
            raise CheckpointReaderError(
                f"{where}: its files match their checksums, but its {name} restored to other values than it "
                "saved: the reader differs from the writer (the restore targets' dtypes or structure, a change of "
                "code or library), not the checkpoint, which is left as it is. Restore it into the dtypes and "
                "structure it was saved with")
        raise CorruptCheckpointError(f"{where}: the {name} do not match their saved SHA-256 (the files changed "
                                     "after they were written)")
    if not all_finite(restored["params"]):
        raise CorruptCheckpointError(f"{where} holds non-finite parameters")
    if not verified and ("opt_state" in items or meta.get("params_only")) and jax.process_index() == 0:
        _write_checked_sums(mngr, step, where)
    params = jax.tree.map(lambda x: x, abstract_params)
    nnx.replace_by_pure_dict(params, restored["params"])
    return params, restored.get("opt_state") if abstract_opt_state is not None else None


def _write_checked_sums(mngr: ocp.CheckpointManager, step: int, where: str) -> None:
    """Writes the checksum file of checkpoint `step`, which has none (or an unreadable one), after every part
    of it restored to the values it saved: its files are the ones saved. A folder that cannot be written (a
    read-only copy) is warned about, not raised: the checkpoint itself verified."""
    sums = _sums_path(mngr, step)
    had = "has no checksum file (its process ended between its save and writing it)" if not sums.exists() else \
        f"has an unreadable checksum file {sums}"
    try:
        sums.parent.mkdir(exist_ok=True)
        write_atomic(sums, json.dumps(_file_sums(pathlib.Path(mngr.directory) / str(step)), indent=0))
    except OSError as e:
        warnings.warn(f"{where} {had}; its values match their saved SHA-256, but its files' checksums could not "
                      f"be written ({e})", CheckpointWarning, stacklevel=3)
        return
    warnings.warn(f"{where} {had}; every part of it restored and its values match their saved SHA-256: its "
                  f"files' checksums are written now ({sums})", CheckpointWarning, stacklevel=3)


def restore_latest_good(mngr: ocp.CheckpointManager, abstract_params, abstract_opt_state=None, shardings=None):
    """Restores the newest checkpoint that verifies, newest first; warns about each corrupt one skipped.

    Returns:
      (step, params, opt_state, skipped): `skipped` lists (step, reason) of the corrupt newer checkpoints;
      step is None when there is no checkpoint at all.

    Raises:
      CorruptCheckpointError: there are checkpoints, and none of them verifies.
    """
    skipped: list[tuple[int, str]] = []
    for step in sorted(mngr.all_steps(), reverse=True):
        try:
            params, opt_state = restore(mngr, step, abstract_params, abstract_opt_state, shardings)
        except CorruptCheckpointError as e:
            skipped.append((step, str(e)))
            continue
        for bad, reason in skipped:
            warnings.warn(f"{reason}; using the older checkpoint {step} instead of {bad}", CheckpointWarning,
                          stacklevel=2)
        return step, params, opt_state, skipped
    if skipped:
        raise CorruptCheckpointError(
            f"no good checkpoint left in {mngr.directory}: " + "; ".join(reason for _, reason in skipped)
            + ". Move the checkpoints directory away to start the run afresh.")
    return None, None, None, skipped


def read_run_info(workdir: str | pathlib.Path) -> dict:
    """`workdir/run.json`: the corpus fingerprint, a pending divergence, and the recovery history."""
    path = pathlib.Path(workdir) / "run.json"
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not valid JSON ({e}); it records the run's identity, restore it or start "
                         "the run in another --workdir") from None


def write_run_info(workdir: str | pathlib.Path, info: dict) -> None:
    """Replaces `workdir/run.json` with `info`, atomically and on disk before the rename (`jobs.write_atomic`)."""
    write_atomic(pathlib.Path(workdir) / "run.json", json.dumps(info, indent=1))


def trained_activations(workdir: str | pathlib.Path) -> str:
    """The dtype `model.act_dtype` resolved to when the run trained (`run.json`'s `activations`; float32 for a run
    recorded without it, the only activations then)."""
    return read_run_info(workdir).get("activations", "float32")


def restore_params(workdir: str | pathlib.Path, step: int | None = None):
    """Loads a run for evaluation: (config, ModelConfig, graphdef, params, step).

    Without `step`, the newest checkpoint that verifies (a warning names each corrupt one skipped).

    Raises:
      ValueError: the workdir has no config or no checkpoint, or its config is refused (named with the
        workdir: e.g. a task layout or positions version posenc no longer generates); CorruptCheckpointError:
        `step` (or, without it, every checkpoint) is corrupt.
    """
    config = load_config(workdir)
    try:
        cfg = validate(config, training=False)
    except ValueError as e:  # a field its config.json holds that posenc no longer accepts: name the run
        raise ValueError(f"workdir={str(workdir)!r}: its config.json: {e}") from None
    check_rope_factors(config, read_run_info(workdir), workdir)  # LongRoPE factors read by path: the same ones
    if cfg.act_dtype == "auto":  # the activations it trained with, not this backend's default (activation_dtype)
        cfg = dataclasses.replace(cfg, act_dtype=trained_activations(workdir))
    mngr = manager(workdir, read_only=True)
    graphdef, abstract = abstract_model(cfg)
    try:
        if step is None:
            step, params, _, _ = restore_latest_good(mngr, abstract)
            if step is None:
                raise ValueError(f"workdir={str(workdir)!r} has no checkpoint (train it first: scripts/train.py)")
        else:
            if step not in mngr.all_steps():
                raise ValueError(f"workdir={str(workdir)!r} has no checkpoint at step {step} "
                                 f"(it has {mngr.all_steps()})")
            params, _ = restore(mngr, step, abstract)
    finally:
        mngr.close()
    return config, cfg, graphdef, params, step


def params_sha256(workdir: str | pathlib.Path) -> str:
    """The SHA-256 of a run's newest good checkpoint's parameters (`tree_sha256`): what a run started from it
    (`init_from`) or scored from it loads."""
    return tree_sha256(restore_params(workdir)[3])


ACTIVATIONS_KEY = "__activations__"  # an exported file's entry naming the activations the run trained with


def export_params(workdir: str | pathlib.Path, path: str | pathlib.Path) -> str:
    """Writes the newest good checkpoint's parameters of `workdir` to `path` (a compressed `.npz`, one array per
    parameter named by its key path, plus `ACTIVATIONS_KEY`: the run's `trained_activations`; its bytes read back
    to check, then written atomically by `jobs.write_bytes_atomic`); returns their SHA-256 (`tree_sha256`), the
    same `import_params` gives back. For keeping a run's weights where its workdir is not kept (a repository).

    Raises:
      ValueError: a parameter's dtype is not one NumPy stores (bfloat16), or the file read back differs.
    """
    _, _, _, params, _ = restore_params(workdir)
    arrays = {jax.tree_util.keystr(k): _local(v)
              for k, v in jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(params))[0]}
    for name, a in arrays.items():
        if np.dtype(a.dtype.str) != a.dtype:
            raise ValueError(f"export_params: parameter {name} is {a.dtype}, which .npz does not store; export "
                             "float32 parameters")
    if jax.process_index() == 0:
        activations = trained_activations(workdir)
        data = io.BytesIO()
        np.savez_compressed(data, **arrays, **{ACTIVATIONS_KEY: np.array(activations)})
        with np.load(io.BytesIO(data.getvalue())) as f:
            back = dict(f)
        if str(back.pop(ACTIVATIONS_KEY)) != activations:
            raise ValueError(f"export_params: the file for {path} does not read back the run's activations")
        if back.keys() != arrays.keys() or any(
                back[n].dtype != a.dtype or back[n].shape != a.shape or back[n].tobytes() != a.tobytes()
                for n, a in arrays.items()):
            raise ValueError(f"export_params: the file for {path} does not read back as the parameters written to it")
        write_bytes_atomic(pathlib.Path(path), data.getbuffer())
    return tree_sha256(params)


def import_params(path: str | pathlib.Path, workdir: str | pathlib.Path, config: ml_collections.ConfigDict,
                  step: int) -> str:
    """Makes `workdir` a run directory of `config` whose checkpoint `step` holds the parameters of `path`
    (`export_params`) and no optimiser state: it evaluates (with the activations the file records, in
    `run.json`; float32 for a file without them), and `init_from` starts a run from it, but it cannot be resumed
    (`ParamsOnlyError`). Returns the parameters' SHA-256.

    Raises:
      ValueError: `workdir` already has checkpoints, the file's parameters are not `config`'s model's
        (a missing, extra or reshaped parameter, named), or its activations are not ones `config` gives.
    """
    workdir = pathlib.Path(workdir)
    with np.load(path) as f:
        arrays = dict(f)
    activations = str(arrays.pop(ACTIVATIONS_KEY, "float32"))
    cfg = validate(config, training=False)
    if activations not in ("float32", cfg.dtype) or cfg.act_dtype not in ("auto", activations):
        raise ValueError(f"{path}: its run trained with {activations!r} activations, which model.dtype="
                         f"{cfg.dtype!r} and model.act_dtype={cfg.act_dtype!r} do not give (activations are float32 "
                         f"or model.dtype; model.act_dtype 'auto' or {activations!r})")
    _, abstract = abstract_model(cfg)
    flat, treedef = jax.tree_util.tree_flatten_with_path(nnx.to_pure_dict(abstract))
    names = [jax.tree_util.keystr(k) for k, _ in flat]
    if set(names) != set(arrays):
        raise ValueError(f"{path}: its parameters are not this model's (missing {sorted(set(names) - set(arrays))}, "
                         f"extra {sorted(set(arrays) - set(names))})")
    for name, (_, leaf) in zip(names, flat):
        if arrays[name].shape != leaf.shape or arrays[name].dtype != leaf.dtype:
            raise ValueError(f"{path}: parameter {name} is {arrays[name].dtype}{list(arrays[name].shape)}, this "
                             f"model's is {leaf.dtype}{list(leaf.shape)}")
    params = jax.tree.map(lambda x: x, abstract)
    nnx.replace_by_pure_dict(params, jax.tree_util.tree_unflatten(treedef, [arrays[n] for n in names]))
    workdir.mkdir(parents=True, exist_ok=True)
    with WorkdirLock(workdir):  # a run training here, not yet checkpointed, is not relabelled under it
        mngr = manager(workdir)
        try:
            if mngr.all_steps():
                raise ValueError(f"workdir={str(workdir)!r} already has checkpoints {mngr.all_steps()}: import into "
                                 "a new one")
            save_config(workdir, config)
            write_run_info(workdir, {"activations": activations})
            save(mngr, step, params, None)
        finally:
            mngr.close()
    return tree_sha256(params)


class WorkdirLock:
    """An exclusive `flock` on `workdir/.lock`: one training process per workdir.

    The kernel drops the lock when its process ends, however it ends, so a crashed run never blocks the
    next one; the file itself stays and names the last holder.
    """

    def __init__(self, workdir: str | pathlib.Path):
        self.path = pathlib.Path(workdir) / ".lock"
        self._fd: int | None = None

    def __enter__(self) -> "WorkdirLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise WorkdirBusyError(f"workdir {self.path.parent} is in use by {holder}; wait for it to finish, "
                                   "or train in another --workdir") from None
        try:  # the holder's name; a failure to write it (a full disk) releases the lock it took
            os.ftruncate(fd, 0)
            stamp = datetime.datetime.now().isoformat(timespec="seconds")
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since {stamp}\n".encode(), 0)
        except BaseException:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            raise
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
