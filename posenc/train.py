"""Training: `train_and_evaluate(config, workdir)`, resumable, data-parallel over all JAX devices.

One jitted step (AdamW with warmup + cosine decay and global-norm clipping) over a pure-function view of
the NNX model (`nnx.split` once, `nnx.merge` inside the step: no per-step Python graph traversal). The
batch is sharded over every device of a `(data, fsdp)` mesh (`posenc/sharding.py`); parameters and optimiser
state are replicated, or split over the `fsdp` axis with `config.mesh.fsdp > 1`.

Rerunning the same command resumes from the newest good checkpoint in `workdir`: parameters, optimiser
state and the step, which fixes the data position (batches are a function of (seed, step)). A rerun is the
same run or an error: a config that differs in what the run computes is refused with the fields named
(`posenc.config.run_changes`), and so is a corpus whose bytes changed. `train_steps` may grow only with the
schedule pinned (`schedule_steps`). One process trains in a workdir at a time (`checkpoint.WorkdirLock`).

A non-finite loss, gradient norm or updated parameter, or a non-finite validation loss at a checkpoint,
stops the run before anything is written, names the last good checkpoint, and records the divergence in
`run.json`; the rerun that resumes from it may lower the learning rate (`RECOVERY_FIELDS`), and `run.json`
keeps that change in its history.

A task run with `task.stop_accuracy` stops at the first evaluation whose validation exact match reaches it:
that step is checkpointed and recorded in `run.json` (`stopped`), and a rerun finds the run complete.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pathlib
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import optax
from flax import nnx
from jax.sharding import NamedSharding
from tqdm.auto import tqdm

from posenc import checkpoint, data, jobs, sharding, tasks
from posenc.config import (RECOVERY_FIELDS, RESUMABLE_FIELDS, check_rope_factors, defining_fields, is_default,
                           rope_factors_sha256, run_changes, schedule_steps, stop_accuracy, validate)
from posenc.evaluate import LN2, MAX_NLL
from posenc.learned import interpolate_table
from posenc.model import ModelConfig, activation_dtype
from posenc.xla_options import compiler_options



class NonFiniteLossError(RuntimeError):
    """The run diverged: a non-finite loss, gradient, parameter or validation loss."""


class RunMismatchError(ValueError):
    """A rerun whose config defines another run than the one in its workdir."""


def load_config_file(path: str, arg: str | None = None) -> ml_collections.ConfigDict:
    """`get_config(arg)` of a config file, as `--config=path:arg` would load it (for scripts and tests)."""
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("posenc_config_file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


def initialize_distributed(coordinator_address: str | None = None, num_processes: int | None = None,
                           process_id: int | None = None) -> None:
    """`jax.distributed.initialize` with every value given, from the arguments or else the environment
    (`JAX_COORDINATOR_ADDRESS`, `JAX_NUM_PROCESSES`, `JAX_PROCESS_ID`): with no arguments, jax 0.10 does not
    read the last two on a plain machine ("Number of processes must be defined").

    Raises:
      ValueError: a value is missing or not an integer, naming the flag and the variable.
    """
    values = {}
    for name, given, env in (("coordinator_address", coordinator_address, "JAX_COORDINATOR_ADDRESS"),
                             ("num_processes", num_processes, "JAX_NUM_PROCESSES"),
                             ("process_id", process_id, "JAX_PROCESS_ID")):
        value = given if given is not None else os.environ.get(env)
        if value is None or value == "":
            raise ValueError(f"--jax_distributed needs --{name} or ${env}")
        if name != "coordinator_address":
            try:
                value = int(value)
            except ValueError:
                raise ValueError(f"--{name} / ${env} must be an integer, got {value!r}") from None
        values[name] = value
    if values["num_processes"] < 1:
        raise ValueError(f"--num_processes / $JAX_NUM_PROCESSES must be at least 1, got {values['num_processes']}")
    if not 0 <= values["process_id"] < values["num_processes"]:
        raise ValueError(f"process_id must be in [0, num_processes={values['num_processes']}), got {values['process_id']}")
    jax.distributed.initialize(**values)


def make_optimizer(config: ml_collections.ConfigDict):
    """`(tx, schedule)`: AdamW with linear warmup, cosine decay to lr·min_lr_ratio, and clipping, and its
    learning-rate schedule. Weight decay falls on every parameter of two or more axes (as nanoGPT's): the
    matrices and embeddings, and with them the position parameters stored per layer or head in one array
    (KERPLE's r1 and r2 `[layers, heads]`, T5's bias table, CoPE's position embeddings); vectors (norms, biases,
    FIRE's c and L) are not decayed. The runs of the committed studies were trained so. The same hyperparameters give the same objects within a process,
    so that runs which share them share the train step's trace (`make_train_step`)."""
    return _optimizer(config.learning_rate, config.warmup_steps, schedule_steps(config), config.min_lr_ratio,
                      config.grad_clip, config.b1, config.b2, config.weight_decay)  # warmup < schedule: validate()


@functools.lru_cache(maxsize=16)
def _optimizer(learning_rate, warmup_steps, decay_steps, min_lr_ratio, grad_clip, b1, b2, weight_decay):
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=learning_rate, warmup_steps=warmup_steps, decay_steps=decay_steps,
        end_value=learning_rate * min_lr_ratio,
    )
    decay_mask = lambda params: jax.tree.map(lambda p: p.ndim >= 2, params)  # noqa: E731
    return optax.chain(
        optax.clip_by_global_norm(grad_clip),
        optax.adamw(schedule, b1=b1, b2=b2, weight_decay=weight_decay, mask=decay_mask),
    ), schedule


@functools.lru_cache(maxsize=32)
def _jit(fn):
    """One jitted wrapper per function in a process (an optimizer's `init` and schedule: one program each
    instead of one per eager op, traced once per optimizer)."""
    return jax.jit(fn)


def _logits(graphdef, params, inputs, positions=None, seq_len=None):
    model = nnx.merge(graphdef, params)
    return model(inputs) if positions is None else model(inputs, positions, seq_len=seq_len)


def cross_entropy(graphdef, params, inputs, targets, weights=None, positions=None, seq_len=None):
    """Summed next-byte NLL (nats) and its denominator: Σ w·nll and Σ w (every target when `weights` is None;
    a task's answer tokens otherwise). `positions [B, T]` (randomized positions) need the static `seq_len`."""
    nll = optax.softmax_cross_entropy_with_integer_labels(_logits(graphdef, params, inputs, positions, seq_len),
                                                          targets)
    if weights is None:
        return jnp.sum(nll), nll.size
    return jnp.sum(nll * weights), jnp.sum(weights)


def make_train_step(graphdef, tx, shardings=None, seq_len=None):
    """`step(params, opt_state, inputs, targets, weights=None, positions=None) -> (params, opt_state, metrics)`,
    jitted, donating the state. The loss is the weighted mean NLL (`cross_entropy`); `seq_len` is the static
    context length that randomized `positions` need.

    metrics: `loss` (mean NLL before the update), `grad_norm`, and `finite`: whether the loss (and its
    perplexity, `MAX_NLL`), the gradient norm and every updated parameter are finite (a finite loss can still
    be followed by an update that overflows the weights). `shardings`: optional (params, opt_state) shardings
    the updated state keeps (FSDP); None leaves the layout to XLA, and then one step is made per (graphdef, tx,
    seq_len) in a process, so that runs of one model and optimizer share its trace.
    """
    if shardings is None:
        return _train_step(graphdef, tx, seq_len)
    return _make_train_step(graphdef, tx, shardings, seq_len)


@functools.lru_cache(maxsize=16)
def _train_step(graphdef, tx, seq_len):
    return _make_train_step(graphdef, tx, None, seq_len)


def _make_train_step(graphdef, tx, shardings, seq_len):
    def loss_fn(params, inputs, targets, weights, positions):
        total, count = cross_entropy(graphdef, params, inputs, targets, weights, positions, seq_len)
        return total / jnp.maximum(count, 1)

    def step(params, opt_state, inputs, targets, weights=None, positions=None):
        loss, grads = jax.value_and_grad(loss_fn)(params, inputs, targets, weights, positions)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        if shardings is not None:
            params, opt_state = jax.lax.with_sharding_constraint((params, opt_state), shardings)
        grad_norm = optax.tree.norm(grads)
        finite = jnp.isfinite(loss) & (loss <= MAX_NLL) & jnp.isfinite(grad_norm)
        for leaf in jax.tree.leaves(params):
            finite &= jnp.isfinite(leaf).all()
        return params, opt_state, {"loss": loss, "grad_norm": grad_norm, "finite": finite}

    return jax.jit(step, donate_argnums=(0, 1), compiler_options=compiler_options())


def shard_batch(batch: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """A global batch (the same on every process) -> a jax.Array sharded over the 'data' axis.

    Each process contributes its own slice of rows, so this works unchanged across hosts after
    `jax.distributed.initialize()`.
    """
    n, i = jax.process_count(), jax.process_index()
    rows = len(batch) // n
    return jax.make_array_from_process_local_data(sharding, batch[i * rows:(i + 1) * rows], batch.shape)


@functools.lru_cache(maxsize=16)
def make_eval_step(graphdef, seq_len=None):
    """`eval_step(params, batch) -> {nll, count, exact}`: summed weighted NLL, its weight, and the number of
    rows whose every weighted target is the argmax (a task's teacher-forced exact match). One per (graphdef,
    seq_len) in a process, so that runs of one model share its traces."""

    def fn(params, batch):
        x, y = batch["inputs"], batch["targets"]
        w = batch.get("weights")
        logits = _logits(graphdef, params, x, batch.get("positions"), seq_len)
        nll = optax.softmax_cross_entropy_with_integer_labels(logits, y)
        w = jnp.ones_like(nll) if w is None else w
        wrong = (jnp.argmax(logits, -1) != y) & (w > 0)
        return {"nll": jnp.sum(nll * w), "count": jnp.sum(w), "exact": jnp.sum(~wrong.any(-1))}

    return jax.jit(fn, compiler_options=compiler_options())


def evaluate_windows(eval_step, params, batch: dict[str, np.ndarray], batch_size: int,
                     sharding=None) -> dict[str, float]:
    """Mean (weighted) NLL, bits per byte, perplexity and exact-match accuracy over the rows of `batch`
    (`inputs`, `targets` `[n, T]`, optional `weights`, `positions`), in batches of `batch_size`."""
    total, count, exact, rows = 0.0, 0.0, 0, 0
    for i in range(0, len(batch["inputs"]), batch_size):
        part = {k: v[i:i + batch_size] for k, v in batch.items()}
        if sharding is not None and len(part["inputs"]) % sharding.mesh.size == 0:
            part = {k: shard_batch(v, sharding) for k, v in part.items()}
        out = eval_step(params, part)
        total, count = total + float(out["nll"]), count + float(out["count"])
        exact, rows = exact + int(out["exact"]), rows + len(part["inputs"])
    nll = total / count
    return {"nll": nll, "bpb": nll / LN2, "ppl": float(np.exp(nll)) if nll <= MAX_NLL else float("inf"),
            "accuracy": exact / rows}


def _init_from(other: str, cfg: ModelConfig, params):
    """Copies another run's latest weights into `params`, extending a learned table as configured. Returns
    (params, the record run.json keeps as `init_from`: that run's workdir, step and parameters' SHA-256)."""
    _, other_cfg, _, other_params, other_step = checkpoint.restore_params(other)
    src, dst = nnx.to_pure_dict(other_params), nnx.to_pure_dict(params)
    src_paths = {p for p, _ in jax.tree_util.tree_flatten_with_path(src)[0]}
    dst_paths = {p for p, _ in jax.tree_util.tree_flatten_with_path(dst)[0]}
    if src_paths != dst_paths:
        raise ValueError(
            f"init_from={other!r}: its parameters do not match this model's (posenc {other_cfg.posenc!r} vs "
            f"{cfg.posenc!r}; differing entries: {sorted(map(str, src_paths ^ dst_paths))[:4]})"
        )

    def take(path, new, old):
        if new.shape == old.shape:
            return old
        # a table whose rows are positions, [max_len, d] (an encoding that reads `learned_beyond`:
        # posenc/learned.py), in both runs; T5's bias table has the same path ([layers or 1, buckets, heads]) and
        # is never cut or resampled
        if (jax.tree_util.keystr(path) == "['encoding']['table']" and cfg.posenc == other_cfg.posenc
                and "learned_beyond" in cfg.encoding.model_fields and new.shape[1:] == old.shape[1:]):
            if new.shape[0] < old.shape[0]:
                return old[: new.shape[0]]
            if cfg.learned_beyond != "interpolate":
                raise ValueError(
                    f"init_from={other!r}: its learned table has {old.shape[0]} rows, this run needs "
                    f"{new.shape[0]}; set model.learned_beyond='interpolate' to resample it"
                )
            return interpolate_table(old, new.shape[0])
        raise ValueError(f"init_from={other!r}: parameter {jax.tree_util.keystr(path)} has shape {old.shape}, "
                         f"this model needs {new.shape}")

    merged = jax.tree_util.tree_map_with_path(take, dst, src)
    nnx.replace_by_pure_dict(params, merged)
    tqdm.write(f"initialised from {other} (step {other_step})")
    return params, {"workdir": str(other), "step": other_step, "params_sha256": checkpoint.tree_sha256(other_params)}


def _read_metrics(path: pathlib.Path, upto_step: int) -> list[str]:
    """The metrics lines of steps <= upto_step: a resumed run rewrites what followed its checkpoint. A last line
    cut short (the process died writing it) is dropped with a warning; a bad line before it is an error."""
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line]
    kept = []
    for i, line in enumerate(lines):
        try:
            step = json.loads(line)["step"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            if i < len(lines) - 1:
                raise ValueError(f"{path}: line {i + 1} is not a metrics row ({e}): {line[:80]!r}") from None
            tqdm.write(f"{path}: its last line is cut short (dropped): {line[:80]!r}")
            continue
        if step <= upto_step:
            kept.append(line)
    return kept


def timed_curve(curve: list[dict], tokens_per_step: int, resumed_at: int | None = None) -> list[tuple[int, int, float]]:
    """(step, timed tokens, timed seconds) at each row of a metrics.jsonl curve that has a rate, cumulative over
    the run's sittings.

    A row's `tokens_per_s` is the mean rate of its sitting so far (the sitting's first step, which compiles, is not
    timed), not the rate since the previous row; `sitting_start` (the step the sitting resumed from) and `timed_s`
    (the sitting's timed seconds so far) locate the sittings. A row without them (curves written before they were
    logged) is taken to belong to a sitting that started at `resumed_at` if its step is past it, else at step 0:
    exact for a run trained in one sitting, or resumed once at `resumed_at`.
    """
    out, base_tokens, base_seconds = [], 0, 0.0
    sitting, last = None, (0, 0.0)  # the current sitting's start and its (timed tokens, seconds) at the last row
    for r in curve:
        tps = r.get("tokens_per_s")
        if not tps:
            continue
        start = r.get("sitting_start", resumed_at if resumed_at is not None and r["step"] > resumed_at else 0)
        if start != sitting:
            if sitting is not None:
                base_tokens, base_seconds = base_tokens + last[0], base_seconds + last[1]
            sitting = start
        tokens = (r["step"] - start - 1) * tokens_per_step
        last = (tokens, r.get("timed_s", tokens / tps))
        out.append((r["step"], base_tokens + last[0], base_seconds + last[1]))
    return out


def run_summary(workdir: str | pathlib.Path) -> dict:
    """A finished run's last validation (step, bits per byte), its mean training rate over the timed steps of
    every sitting (`timed_curve`), and its dtypes: what the bf16 checks compare (experiments/benchmarks/
    bf16_quality.sh, experiments/lm_study/bf16_pilot.sh)."""
    workdir = pathlib.Path(workdir)
    rows = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
    val = [r for r in rows if "val_bpb" in r][-1]
    config = json.loads((workdir / "config.json").read_text())
    _, tokens, seconds = timed_curve(rows, config["batch_size"] * config["train_len"])[-1]
    return {"step": val["step"], "val_bpb": val["val_bpb"], "tokens_per_s": tokens / seconds,
            "dtype": config["model"]["dtype"], "act_dtype": config["model"].get("act_dtype", "auto"),
            "activations": checkpoint.trained_activations(workdir)}


def _fmt_changes(changes: dict) -> str:
    return "; ".join(f"{k}: {a!r} in the run, {b!r} now" for k, (a, b) in changes.items())


def check_rerun(workdir: pathlib.Path, config: ml_collections.ConfigDict, corpus: data.Corpus, info: dict,
                latest_step: int, activations: str) -> dict:
    """Refuses a rerun that is not the run in `workdir`; returns the recovery changes it may apply.

    `activations`: the dtype `model.act_dtype` resolves to here (`auto` depends on the backend); it must be the
    one `run.json` recorded (a run recorded without it had float32 activations, the only ones then).

    Raises:
      RunMismatchError: naming each differing field with both values, or the corpus whose bytes changed.
    """
    stored = checkpoint.load_config(workdir)
    changes = run_changes(stored, config)
    recovering = "diverged" in info
    recovery = {k: v for k, v in changes.items() if recovering and k in RECOVERY_FIELDS}
    blocking = {k: v for k, v in changes.items() if k not in recovery}
    if blocking:
        hint = ""
        if "schedule_steps" in blocking and config.train_steps != stored.train_steps:
            hint = (f" To stop earlier, or to train on past step {schedule_steps(stored)} at the schedule's final "
                    f"learning rate (learning_rate * min_lr_ratio), keep the schedule: --config.schedule_steps="
                    f"{schedule_steps(stored)}.")
        raise RunMismatchError(
            f"workdir {workdir} holds another run (its newest checkpoint: step {latest_step}): "
            f"{_fmt_changes(blocking)}. A rerun resumes "
            f"the same run: use another --workdir, or the run's own values (its config.json).{hint} A rerun may "
            f"change only {', '.join(RESUMABLE_FIELDS)} (eval_every not where task.stop_accuracy stops the run), "
            "eval.*, and train_steps (to stop earlier or go on) "
            + (f"and, after a divergence, {', '.join(RECOVERY_FIELDS)}." if not recovering else
               f"and, since the run diverged, {', '.join(RECOVERY_FIELDS)}."))
    try:
        check_rope_factors(config, info, workdir)
    except ValueError as e:
        raise RunMismatchError(str(e)) from None
    fingerprint = info.get("corpus", {}).get("sha256")
    if fingerprint and fingerprint != corpus.sha256:
        raise RunMismatchError(f"workdir {workdir}: data.path={config.data.path!r} now holds other bytes than the "
                               f"run was trained on (corpus sha256 {corpus.sha256} now, {fingerprint} in the run)")
    recorded = info.get("activations", "float32")
    if recorded != activations:
        raise RunMismatchError(
            f"workdir {workdir} was trained with {recorded} activations; model.act_dtype="
            f"{config.model.get('act_dtype', 'auto')!r} gives {activations} on this {jax.default_backend()}: pass "
            f"--config.model.act_dtype={recorded} to resume the same run")
    return recovery


def _restore_or_init(workdir: pathlib.Path, mngr, cfg, config, tx, abstract_params, mesh):
    """(start step, params, opt_state, manager, `_init_from`'s record or None) from the newest good checkpoint,
    or a fresh initialisation.

    Corrupt newer checkpoints are moved to `workdir/corrupt_checkpoints/` (kept, not deleted) so that the
    run can write those steps again.
    """
    abstract_opt = jax.eval_shape(tx.init, abstract_params)
    targets = (sharding.tree_shardings(mesh, abstract_params), sharding.tree_shardings(mesh, abstract_opt))
    start, params, opt_state, skipped = checkpoint.restore_latest_good(mngr, abstract_params, abstract_opt,
                                                                       shardings=targets)
    if skipped and jax.process_count() > 1:  # no process is still reading a checkpoint when one is moved
        from jax.experimental import multihost_utils  # noqa: PLC0415

        multihost_utils.sync_global_devices("posenc: checkpoints verified")
    if skipped and jax.process_index() == 0:
        aside = workdir / "corrupt_checkpoints"
        aside.mkdir(exist_ok=True)
        for bad, _ in skipped:
            target = aside / f"{bad}.{int(time.time())}"
            os.replace(mngr.directory / str(bad), target)
            tqdm.write(f"moved corrupt checkpoint {bad} to {target}")
    if skipped:
        if jax.process_count() > 1:  # every process sees the moves before it reopens its manager
            from jax.experimental import multihost_utils  # noqa: PLC0415

            multihost_utils.sync_global_devices("posenc: corrupt checkpoints moved aside")
        mngr.close()
        mngr = checkpoint.manager(workdir, keep=config.keep_checkpoints)
    if start is not None:
        tqdm.write(f"resuming {workdir} from step {start}")
        return start, params, opt_state, mngr, None
    # on a mesh, initialised straight into its layout: sharded parameters never exist whole on one device
    on_mesh = mesh.size > 1
    params, init = checkpoint.init_params(cfg, config.seed, shardings=targets[0] if on_mesh else None), None
    if config.init_from:
        params, init = _init_from(config.init_from, cfg, params)
        if on_mesh:  # the other run's values, whole on every process, into the mesh's layout
            params = jax.tree.map(_from_every_process, params, targets[0])
    opt_init = jax.jit(tx.init, out_shardings=targets[1]) if on_mesh else _jit(tx.init)
    return 0, params, opt_init(params), mngr, init


def _from_every_process(value, sharding: NamedSharding) -> jax.Array:
    """A global array in `sharding` from `value`, which every process holds whole (the same values): each
    process places its devices' slices. `jax.device_put` cannot, with several processes: the mesh's other
    devices are not addressable from one process."""
    value = np.asarray(value)
    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])


def fsdp_size(config: ml_collections.ConfigDict) -> int:
    """`config.mesh.fsdp` (1 for a config without a `mesh` section)."""
    return config.mesh.fsdp if "mesh" in config else 1


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, float]:
    """Trains (or resumes) the run in `workdir`; returns the final metrics.

    Raises:
      RunMismatchError: `workdir` holds another run (see `check_rerun`).
      checkpoint.WorkdirBusyError: another process is training in `workdir`.
      checkpoint.CorruptCheckpointError: `workdir` has checkpoints and none of them verifies.
      checkpoint.CheckpointReaderError: a checkpoint's files are intact but restore to other values than saved
        (this code or its libraries read them otherwise); the checkpoint is left as it is.
      NonFiniteLossError: the run diverged; its last good checkpoint is kept and named.
    """
    cfg = validate(config)
    workdir_path = pathlib.Path(workdir).expanduser().resolve()
    workdir_path.mkdir(parents=True, exist_ok=True)

    corpus = data.load_corpus(config.data.path, config.data.cache_dir)
    data.check_length(corpus, "train", config.train_len, "one training window")
    data.check_length(corpus, "validation", config.train_len, "one validation window")
    spec = tasks.TaskSpec.from_config(config)
    if spec is None:
        val_x, val_y = data.eval_windows(corpus.validation, length=config.train_len, max_windows=config.eval_windows)
        val = {"inputs": val_x, "targets": val_y}
        if len(val_x) < config.eval_windows:  # eval_windows is a most: the split decides, and says so
            tqdm.write(f"validation: {len(val_x)} windows of {config.train_len} bytes, all the validation split of "
                       f"data.path holds (config.eval_windows={config.eval_windows} asks for up to that many)")
    else:
        val = tasks.validation_batch(spec, corpus, seed=config.seed, batch_size=config.eval_windows,
                                     length=config.train_len)

    devices = jax.devices()
    if config.batch_size % len(devices):
        raise ValueError(f"config.batch_size={config.batch_size} must be divisible by the {len(devices)} devices")
    sharding.make_mesh(devices, fsdp_size(config))  # fails here, before anything is written
    is_main = jax.process_index() == 0  # one process writes metrics, events, run.json and holds the lock
    with _workdir_lock(workdir_path):
        return _train(config, cfg, workdir_path, corpus, spec, val, devices, is_main)


@contextlib.contextmanager
def _workdir_lock(workdir: pathlib.Path):
    """Process 0 holds `checkpoint.WorkdirLock(workdir)`. With several processes, every one learns whether it
    got it (`broadcast_one_to_all`) and all raise when it did not (the others `WorkdirBusyError`): the others
    do not go on alone into the run's first collective, which fails at a timeout with no word of the lock."""
    lock, error = None, None
    if jax.process_index() == 0:
        try:
            lock = checkpoint.WorkdirLock(workdir).__enter__()
        except Exception as e:  # noqa: BLE001 — busy, or the lock file cannot be written: raised below
            error = e
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils  # noqa: PLC0415

        if not bool(multihost_utils.broadcast_one_to_all(np.int32(lock is not None))) and error is None:
            error = checkpoint.WorkdirBusyError(f"workdir {workdir} is in use: process 0 could not lock it (its "
                                                "error says why); wait for it to finish, or train in "
                                                "another --workdir")
    if error is not None:
        raise error
    try:
        yield
    finally:
        if lock is not None:
            lock.__exit__(None, None, None)


def _train(config, cfg, workdir_path, corpus, spec, val_batch, devices, is_main) -> dict[str, float]:
    mesh = sharding.make_mesh(devices, fsdp_size(config))
    batch_sharding = sharding.batch_sharding(mesh)

    tx, schedule = make_optimizer(config)
    schedule = _jit(schedule)
    graphdef, abstract_params = checkpoint.abstract_model(cfg)
    mngr = checkpoint.manager(workdir_path, keep=config.keep_checkpoints)
    info = checkpoint.read_run_info(workdir_path)
    recovery = {}
    if mngr.all_steps():
        recovery = check_rerun(workdir_path, config, corpus, info, mngr.latest_step(), str(activation_dtype(cfg)))
    else:
        info = {}  # nothing trained yet: whatever ran here before left no state to resume
    start, params, opt_state, mngr, init = _restore_or_init(workdir_path, mngr, cfg, config, tx, abstract_params, mesh)
    if config.train_steps < start:  # the step it resumes from: a corrupt newer checkpoint was set aside
        raise RunMismatchError(f"workdir {workdir_path} is at step {start} already; config.train_steps="
                               f"{config.train_steps} is behind it (a run cannot be shortened after the fact)")
    if init is not None:
        info["init_from"] = init  # the parameters the run started from (a resumed run keeps its record)
    recovered = None  # the history entry of a recovery, recorded with its first checkpoint
    if "diverged" in info:
        diverged = info["diverged"]  # kept until the recovery's first checkpoint: a rerun before it may change again
        # against the values the run diverged with (recorded then), not config.json, which a rerun killed after
        # writing it and before run.json already holds the new ones; a record without them: check_rerun's
        was = diverged.get("config")
        now = defining_fields(config)
        changed = ({k: [was[k], now[k]] for k in RECOVERY_FIELDS if k in was and not is_default(was[k], now[k])}
                   if was is not None else {k: list(v) for k, v in recovery.items()})
        if changed:
            tqdm.write(f"recovering from the divergence at step {diverged['step']}: "
                       + "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in changed.items()))
        recovered = {"resumed_at": start, "after_divergence": diverged, "changed": changed}
    info["corpus"] = {"path": config.data.path, "sha256": corpus.sha256}
    if rope_factors_sha256(config):
        info["rope_factors"] = {"path": config.model.rope.scaling.factors_file, "sha256": rope_factors_sha256(config)}
    info["activations"] = str(activation_dtype(cfg))  # what model.act_dtype resolved to (auto: by backend)
    # each sitting's XLA options ({}: XLA's defaults) and the XLA_FLAGS under them (a jit's options override those)
    info.setdefault("compiler_options", []).append({"from_step": start, "options": compiler_options() or {},
                                                    "xla_flags": os.environ.get("XLA_FLAGS", "")})
    stop = stop_accuracy(config)
    end = config.train_steps
    if info.get("stopped", {}).get("step") == start:
        end = start  # stopped early at its criterion: complete
    else:
        info.pop("stopped", None)  # resumed before the stop (an older checkpoint): it is reached again
    if is_main:  # config.json first: a kill between the two leaves run.json's divergence record to recover by
        checkpoint.save_config(workdir_path, config)  # the latest command's config (eval reads it)
        checkpoint.write_run_info(workdir_path, info)
    state_shardings = (sharding.tree_shardings(mesh, params), sharding.tree_shardings(mesh, opt_state))
    params, opt_state = jax.device_put((params, opt_state), state_shardings)

    seq_len = spec.max_position if spec is not None and spec.randomize else None
    train_step = make_train_step(graphdef, tx, state_shardings if mesh.shape["fsdp"] > 1 else None, seq_len)
    eval_step = make_eval_step(graphdef, seq_len)
    metrics_path = workdir_path / "metrics.jsonl"
    if is_main:
        kept = _read_metrics(metrics_path, start)
        jobs.write_atomic(metrics_path, "".join(line + "\n" for line in kept))

    def diverged(reason: str, step: int):
        mngr.wait_until_finished()
        last = mngr.latest_step()
        # the recovery fields the checkpoints were trained with: a recovery that diverged again before its first
        # checkpoint keeps the record it recovered from
        trained = (info.get("diverged") or {}).get("config") or {
            k: v for k, v in defining_fields(config).items() if k in RECOVERY_FIELDS}
        info["diverged"] = {"step": step, "last_good": last, "reason": reason, "config": trained}
        if is_main:
            checkpoint.write_run_info(workdir_path, info)
        where = (f"its last good checkpoint (step {last}) is kept in {workdir_path / 'checkpoints'}. Rerun the same "
                 f"command with a lower --config.learning_rate (or a larger --config.warmup_steps) to resume from "
                 f"step {last}: after a divergence a rerun may change {', '.join(RECOVERY_FIELDS)}, and run.json "
                 "records the change." if last is not None else
                 "no checkpoint was written before it. Rerun with a lower --config.learning_rate.")
        return NonFiniteLossError(f"{reason} at step {step}; the run stopped and {where}")

    from tensorboardX import SummaryWriter  # noqa: PLC0415  (import cost only when training)

    # the main process's events only (another's file would purge its steps); purge_step drops what followed
    # the checkpoint, and at step 0 the events of an attempt that wrote none
    writer = SummaryWriter(str(workdir_path / "tensorboard"), purge_step=start + 1) if is_main else None
    tokens_per_step = config.batch_size * config.train_len
    timed_tokens, timed_seconds = 0, 0.0
    last: dict[str, float] = {}
    if start >= end:
        tqdm.write(f"{workdir_path} is complete (step {start} of train_steps={config.train_steps}"
                   + (", stopped at task.stop_accuracy" if end < config.train_steps else "") + ")")
    bar = tqdm(range(start, end), initial=start, total=config.train_steps, desc=workdir_path.name,
               disable=None, dynamic_ncols=True)
    try:
        with open(metrics_path if is_main else os.devnull, "a") as metrics_file:
            for step in bar:
                if spec is None:
                    batch = data.train_batch(corpus.train, seed=config.seed, step=step, batch_size=config.batch_size,
                                             length=config.train_len)
                else:
                    b = tasks.train_batch(spec, corpus, seed=config.seed, step=step, batch_size=config.batch_size,
                                          length=config.train_len)
                    batch = (b["inputs"], b["targets"], b["weights"]) + ((b["positions"],) if "positions" in b else ())
                batch = [shard_batch(a, batch_sharding) for a in batch]
                t0 = time.perf_counter()
                params, opt_state, out = train_step(params, opt_state, *batch)
                loss = float(out["loss"])
                dt = time.perf_counter() - t0
                if step > start:  # the first step of a session includes compilation
                    timed_tokens, timed_seconds = timed_tokens + tokens_per_step, timed_seconds + dt
                done = step + 1
                if not bool(out["finite"]):
                    what = ("training loss" if not np.isfinite(loss) or loss > MAX_NLL
                            else "gradient norm or updated parameters")
                    raise diverged(f"non-finite {what} (loss {loss})", done)
                tps = timed_tokens / timed_seconds if timed_seconds else None
                row = {"step": done, "train_loss": loss, "train_bpb": loss / LN2, "grad_norm": float(out["grad_norm"]),
                       "learning_rate": float(schedule(step)), "tokens_per_s": tps, "sitting_start": start,
                       "timed_s": timed_seconds}
                save_now = done % config.checkpoint_every == 0 or done == config.train_steps
                if done % config.eval_every == 0 or done == config.train_steps:
                    val = evaluate_windows(eval_step, params, val_batch, config.batch_size, batch_sharding)
                    row.update({"val_loss": val["nll"], "val_bpb": val["bpb"], "val_ppl": val["ppl"]})
                    if spec is not None and spec.name != "lm":  # teacher-forced exact match of the answers
                        row["val_accuracy"] = val["accuracy"]
                        # only at the evaluations of the whole run: a sitting's last step (train_steps short of
                        # the schedule) is evaluated too, where the uninterrupted run would not stop
                        if stop is not None and val["accuracy"] >= stop and done % config.eval_every == 0:
                            save_now = True
                            info["stopped"] = {"step": done, "val_accuracy": val["accuracy"], "stop_accuracy": stop}
                elif save_now:  # a checkpoint is good only if it evaluates to finite numbers
                    n = config.batch_size
                    first = {k: v[:n] for k, v in val_batch.items()}
                    val = {"nll": evaluate_windows(eval_step, params, first, n, batch_sharding)["nll"]}
                if (save_now or "val_loss" in row) and not val["nll"] <= MAX_NLL:  # NaN fails too
                    raise diverged(f"non-finite validation perplexity (loss {val['nll']})", done)
                if is_main and (done % config.log_every == 0 or "val_loss" in row):
                    metrics_file.write(json.dumps(row) + "\n")
                    metrics_file.flush()
                    for key, value in row.items():
                        if key != "step" and value is not None:
                            writer.add_scalar(key, value, done)
                if "stopped" in info and is_main:  # recorded before its checkpoint: a kill between the two
                    checkpoint.write_run_info(workdir_path, info)  # resumes at the stop and finds the run complete
                if save_now and recovered is not None:  # recorded before its checkpoint: a kill between the two
                    info.pop("diverged")  # resumes from the older one, with the recovery's config.json
                    info.setdefault("history", []).append(recovered)
                    recovered = None
                    if is_main:
                        checkpoint.write_run_info(workdir_path, info)
                if save_now:
                    checkpoint.save(mngr, done, params, opt_state)
                bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tps or 0:.0f}")
                last = row
                if "stopped" in info:
                    tqdm.write(f"stopped at step {done}: validation exact match {row['val_accuracy']:.3f} >= "
                               f"task.stop_accuracy={stop}")
                    break
    finally:
        bar.close()
        if writer is not None:
            writer.close()
        mngr.wait_until_finished()
        mngr.close()
    return last
