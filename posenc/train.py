"""Training: `train_and_evaluate(config, workdir)`, resumable, data-parallel over all JAX devices.

One jitted step (AdamW with warmup + cosine decay and global-norm clipping) over a pure-function view of
the NNX model (`nnx.split` once, `nnx.merge` inside the step: no per-step Python graph traversal). The
batch is sharded over a 1-D device mesh ('data'), parameters and optimiser state are replicated.

Rerunning the same command resumes from the latest checkpoint in `workdir`: parameters, optimiser state
and the step, which fixes the data position (batches are a function of (seed, step)). A non-finite loss
stops the run with an error and leaves the last good checkpoint as the latest.
"""

from __future__ import annotations

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
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from tqdm.auto import tqdm

from posenc import checkpoint, data
from posenc.config import validate
from posenc.model import ModelConfig, interpolate_table

LN2 = float(np.log(2.0))


class NonFiniteLossError(RuntimeError):
    pass


def load_config_file(path: str, arg: str | None = None) -> ml_collections.ConfigDict:
    """`get_config(arg)` of a config file, as `--config=path:arg` would load it (for scripts and tests)."""
    import importlib.util  # noqa: PLC0415

    spec = importlib.util.spec_from_file_location("posenc_config_file", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(arg)


def make_optimizer(config: ml_collections.ConfigDict) -> optax.GradientTransformation:
    """AdamW (decay on matrices only) with linear warmup, cosine decay to lr·min_lr_ratio, and clipping."""
    schedule = optax.warmup_cosine_decay_schedule(
        init_value=0.0, peak_value=config.learning_rate, warmup_steps=config.warmup_steps,
        decay_steps=max(config.train_steps, config.warmup_steps + 1),
        end_value=config.learning_rate * config.min_lr_ratio,
    )
    decay_mask = lambda params: jax.tree.map(lambda p: p.ndim >= 2, params)  # noqa: E731
    return optax.chain(
        optax.clip_by_global_norm(config.grad_clip),
        optax.adamw(schedule, b1=config.b1, b2=config.b2, weight_decay=config.weight_decay, mask=decay_mask),
    ), schedule


def cross_entropy(graphdef, params, inputs, targets, **model_kwargs):
    """Summed next-byte NLL (nats) and token count: metrics are sums with a denominator."""
    logits = nnx.merge(graphdef, params)(inputs, **model_kwargs)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    return jnp.sum(nll), nll.size


def make_train_step(graphdef, tx):
    def loss_fn(params, inputs, targets):
        total, count = cross_entropy(graphdef, params, inputs, targets)
        return total / count

    def step(params, opt_state, inputs, targets):
        loss, grads = jax.value_and_grad(loss_fn)(params, inputs, targets)
        updates, opt_state = tx.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss, optax.tree.norm(grads)

    return jax.jit(step, donate_argnums=(0, 1))


def shard_batch(batch: np.ndarray, sharding: NamedSharding) -> jax.Array:
    """A global batch (the same on every process) -> a jax.Array sharded over the 'data' axis.

    Each process contributes its own slice of rows, so this works unchanged across hosts after
    `jax.distributed.initialize()`.
    """
    n, i = jax.process_count(), jax.process_index()
    rows = len(batch) // n
    return jax.make_array_from_process_local_data(sharding, batch[i * rows:(i + 1) * rows], batch.shape)


def make_eval_step(graphdef):
    return jax.jit(lambda params, inputs, targets: cross_entropy(graphdef, params, inputs, targets)[0])


def evaluate_windows(eval_step, params, inputs, targets, batch_size: int, sharding=None) -> dict[str, float]:
    """Mean NLL, bits per byte and perplexity over windows `[n, T]`, in batches of `batch_size`."""
    total, count = 0.0, 0
    for i in range(0, len(inputs), batch_size):
        x, y = inputs[i:i + batch_size], targets[i:i + batch_size]
        if sharding is not None and len(x) % sharding.mesh.size == 0:
            x, y = shard_batch(x, sharding), shard_batch(y, sharding)
        total += float(eval_step(params, x, y))
        count += y.size
    nll = total / count
    return {"nll": nll, "bpb": nll / LN2, "ppl": float(np.exp(nll))}


def _init_from(other: str, cfg: ModelConfig, params):
    """Copies another run's latest weights into `params`, extending a learned table as configured."""
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
        if "pos_table" in jax.tree_util.keystr(path):
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
    return params


def _read_metrics(path: pathlib.Path, upto_step: int) -> list[str]:
    """The metrics lines of steps <= upto_step: a resumed run rewrites what followed its checkpoint."""
    if not path.exists():
        return []
    return [line for line in path.read_text().splitlines() if line and json.loads(line)["step"] <= upto_step]


def train_and_evaluate(config: ml_collections.ConfigDict, workdir: str) -> dict[str, float]:
    """Trains (or resumes) the run in `workdir`; returns the final metrics."""
    cfg = validate(config)
    workdir_path = pathlib.Path(workdir).expanduser().resolve()
    workdir_path.mkdir(parents=True, exist_ok=True)

    corpus = data.load_corpus(config.data.path, config.data.cache_dir)
    data.check_length(corpus, "train", config.train_len, "one training window")
    data.check_length(corpus, "validation", config.train_len, "one validation window")
    val_x, val_y = data.eval_windows(corpus.validation, length=config.train_len, max_windows=config.eval_windows)

    devices = jax.devices()
    if config.batch_size % len(devices):
        raise ValueError(f"config.batch_size={config.batch_size} must be divisible by the {len(devices)} devices")
    mesh = Mesh(np.asarray(devices), ("data",))
    batch_sharding, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())

    tx, schedule = make_optimizer(config)
    graphdef, abstract_params = checkpoint.abstract_model(cfg)
    mngr = checkpoint.manager(workdir_path, keep=config.keep_checkpoints)
    start = mngr.latest_step()
    if start is not None:
        abstract_opt = jax.eval_shape(tx.init, abstract_params)
        params, opt_state = checkpoint.restore(mngr, start, abstract_params, abstract_opt)
        tqdm.write(f"resuming {workdir_path} from step {start}")
    else:
        start = 0
        params = checkpoint.init_params(cfg, config.seed)
        if config.init_from:
            params = _init_from(config.init_from, cfg, params)
        opt_state = tx.init(params)
    checkpoint.save_config(workdir_path, config)  # the latest command's config (eval reads it)
    params, opt_state = jax.device_put((params, opt_state), replicated)

    train_step, eval_step = make_train_step(graphdef, tx), make_eval_step(graphdef)
    is_main = jax.process_index() == 0  # one process writes metrics and events
    metrics_path = workdir_path / "metrics.jsonl"
    if is_main:
        kept = _read_metrics(metrics_path, start)
        metrics_path.write_text("".join(line + "\n" for line in kept))

    from tensorboardX import SummaryWriter  # noqa: PLC0415  (import cost only when training)

    writer = SummaryWriter(str(workdir_path / "tensorboard"), purge_step=start + 1 if start else None)
    tokens_per_step = config.batch_size * config.train_len
    timed_tokens, timed_seconds = 0, 0.0
    last: dict[str, float] = {}
    bar = tqdm(range(start, config.train_steps), initial=start, total=config.train_steps, desc=workdir_path.name,
               disable=None, dynamic_ncols=True)
    try:
        with open(metrics_path if is_main else os.devnull, "a") as metrics_file:
            for step in bar:
                x, y = data.train_batch(corpus.train, seed=config.seed, step=step, batch_size=config.batch_size,
                                        length=config.train_len)
                x, y = shard_batch(x, batch_sharding), shard_batch(y, batch_sharding)
                t0 = time.perf_counter()
                params, opt_state, loss, grad_norm = train_step(params, opt_state, x, y)
                loss = float(loss)
                dt = time.perf_counter() - t0
                if step > start:  # the first step of a session includes compilation
                    timed_tokens, timed_seconds = timed_tokens + tokens_per_step, timed_seconds + dt
                done = step + 1
                if not np.isfinite(loss):
                    raise NonFiniteLossError(
                        f"non-finite training loss ({loss}) at step {done}; the run stopped and its last good "
                        f"checkpoint (step {mngr.latest_step()}) is kept in {workdir_path / 'checkpoints'}. "
                        "Lower config.learning_rate or raise config.warmup_steps, then rerun to resume."
                    )
                tps = timed_tokens / timed_seconds if timed_seconds else None
                row = {"step": done, "train_loss": loss, "train_bpb": loss / LN2, "grad_norm": float(grad_norm),
                       "learning_rate": float(schedule(step)), "tokens_per_s": tps}
                if done % config.eval_every == 0 or done == config.train_steps:
                    val = evaluate_windows(eval_step, params, val_x, val_y, config.batch_size, batch_sharding)
                    row.update({"val_loss": val["nll"], "val_bpb": val["bpb"], "val_ppl": val["ppl"]})
                if is_main and (done % config.log_every == 0 or "val_loss" in row):
                    metrics_file.write(json.dumps(row) + "\n")
                    metrics_file.flush()
                    for key, value in row.items():
                        if key != "step" and value is not None:
                            writer.add_scalar(key, value, done)
                if done % config.checkpoint_every == 0 or done == config.train_steps:
                    checkpoint.save(mngr, done, params, opt_state)
                bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{tps or 0:.0f}")
                last = row
    finally:
        bar.close()
        writer.close()
        mngr.wait_until_finished()
        mngr.close()
    return last
