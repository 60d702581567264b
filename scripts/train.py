r"""Train (or resume) a posenc language model.

    python scripts/train.py --config=configs/default.py --workdir=runs/rope [--config.field=value ...]
    python scripts/train.py --config=configs/default.py:posenc=alibi --workdir=runs/alibi
    python scripts/train.py --config=configs/default.py:posenc=yarn --workdir=runs/yarn4x --init_from=runs/rope \
        --config.train_len=1024 --config.model.rope.scaling.factor=4 --config.model.rope.scaling.original_max_len=256

Rerunning the same command resumes from the latest checkpoint in --workdir.
"""

from absl import app, flags, logging

from posenc import malloc
from posenc.config import DEFINE_config_file, parse_config_flags
from posenc.train import initialize_distributed, train_and_evaluate

_CONFIG = DEFINE_config_file("config", "configs/default.py", "Config file (get_config(arg)).",
                              lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Run directory: checkpoints, metrics, config.", required=True)
_DISTRIBUTED = flags.DEFINE_bool("jax_distributed", False,
                                  "Call jax.distributed.initialize() first (multi-host; see the README).")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None,
                                   "With --jax_distributed: host:port of process 0 (default $JAX_COORDINATOR_ADDRESS).")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None,
                                      "With --jax_distributed: number of processes (default $JAX_NUM_PROCESSES).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None,
                                   "With --jax_distributed: this process's index (default $JAX_PROCESS_ID).")
_INIT_FROM = flags.DEFINE_string("init_from", None, "Start from another run's latest weights (sets config.init_from).")


def check_flags() -> None:
    """Raises a UsageError for flags that would be ignored or would override each other without a word."""
    stray = [f"--{f.name}" for f in (_COORDINATOR, _NUM_PROCESSES, _PROCESS_ID) if f.present]
    if stray and not _DISTRIBUTED.value:
        raise app.UsageError(f"{', '.join(stray)}: read only with --jax_distributed (jax.distributed.initialize); "
                             "give --jax_distributed too, or leave them out")
    if _INIT_FROM.present and "config.init_from" in flags.FLAGS and flags.FLAGS["config.init_from"].present:
        raise app.UsageError(f"--init_from={_INIT_FROM.value} and --config.init_from="
                             f"{flags.FLAGS['config.init_from'].value} both set config.init_from: give one of them")


def main(argv):
    malloc.keep_buffers()  # before JAX starts its threads: posenc/malloc.py
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    logging.set_verbosity(logging.WARNING)  # Orbax logs every file operation at INFO
    check_flags()
    if _DISTRIBUTED.value:
        initialize_distributed(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
    config = _CONFIG.value
    if _INIT_FROM.value:
        config.init_from = _INIT_FROM.value
    train_and_evaluate(config, _WORKDIR.value)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_config_flags)
