"""Run directories: the config, Orbax checkpoints of parameters and optimiser state, and loading a run.

A workdir holds `config.json` (the run's full ConfigDict), `checkpoints/<step>/` (Orbax items `params`
and `opt_state`, and `meta` = {step}; the data position is the step, since batches are a function of
(seed, step)), `metrics.jsonl` and TensorBoard events. Orbax writes a
checkpoint to a temporary directory and renames it when complete, so a crash never leaves a half-written
checkpoint as the latest.
"""

from __future__ import annotations

import json
import pathlib

import jax
import ml_collections
import orbax.checkpoint as ocp
from flax import nnx

from posenc.config import validate
from posenc.model import ModelConfig, Transformer


def manager(workdir: str | pathlib.Path, keep: int = 2, read_only: bool = False) -> ocp.CheckpointManager:
    path = pathlib.Path(workdir).expanduser().resolve() / "checkpoints"
    if read_only:
        options = ocp.CheckpointManagerOptions(read_only=True, create=False, save_interval_steps=0)
    else:
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True)
    return ocp.CheckpointManager(path, options=options)


def save_config(workdir: pathlib.Path, config: ml_collections.ConfigDict) -> None:
    tmp = workdir / "config.json.tmp"
    tmp.write_text(config.to_json_best_effort(indent=2))
    tmp.replace(workdir / "config.json")


def load_config(workdir: str | pathlib.Path) -> ml_collections.ConfigDict:
    path = pathlib.Path(workdir).expanduser() / "config.json"
    if not path.exists():
        raise ValueError(f"workdir={str(workdir)!r} has no config.json: not a posenc run directory")
    return ml_collections.ConfigDict(json.loads(path.read_text()))


def abstract_model(cfg: ModelConfig):
    """(graphdef, abstract params) without allocating or computing anything."""
    return nnx.split(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))


def init_params(cfg: ModelConfig, seed: int):
    """Initial parameters, with the whole initialisation compiled as one program (eager NNX init would
    compile dozens of tiny ones)."""
    return jax.jit(lambda: nnx.state(Transformer(cfg, rngs=nnx.Rngs(seed))))()


def save(mngr: ocp.CheckpointManager, step: int, params, opt_state) -> None:
    mngr.save(step, args=ocp.args.Composite(
        params=ocp.args.StandardSave(nnx.to_pure_dict(params)),
        opt_state=ocp.args.StandardSave(opt_state),
        meta=ocp.args.JsonSave({"step": step}),
    ))


def _abstract(tree):
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


def restore(mngr: ocp.CheckpointManager, step: int, abstract_params, abstract_opt_state=None):
    """Restores (params as nnx.State, opt_state or None) at `step`, shaped like the abstract targets."""
    items = {"params": ocp.args.StandardRestore(_abstract(nnx.to_pure_dict(abstract_params)))}
    if abstract_opt_state is not None:
        items["opt_state"] = ocp.args.StandardRestore(_abstract(abstract_opt_state))
    restored = mngr.restore(step, args=ocp.args.Composite(**items))
    params = jax.tree.map(lambda x: x, abstract_params)
    nnx.replace_by_pure_dict(params, restored["params"])
    return params, restored.get("opt_state") if abstract_opt_state is not None else None


def restore_params(workdir: str | pathlib.Path, step: int | None = None):
    """Loads a run for evaluation: (config, ModelConfig, graphdef, params, step).

    Raises:
      ValueError: the workdir has no config or no checkpoint.
    """
    config = load_config(workdir)
    cfg = validate(config)
    mngr = manager(workdir, read_only=True)
    step = mngr.latest_step() if step is None else step
    if step is None:
        raise ValueError(f"workdir={str(workdir)!r} has no checkpoint (train it first: scripts/train.py)")
    graphdef, abstract = abstract_model(cfg)
    params, _ = restore(mngr, step, abstract)
    mngr.close()
    return config, cfg, graphdef, params, step
