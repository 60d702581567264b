r"""The length-generalization experiment's training config: configs/tasks.py with the experiment's budget.

    python scripts/train.py --config=experiments/length_generalization/config.py:task=passkey,posenc=alibi,seed=1 \
        --workdir=runs/lengthgen/passkey-alibi-s1

The arg: configs/tasks.py's variants (task=, posenc=, randomize) plus seed=N. Every encoding of a task gets
the same model, steps and data: passkey at train_len 256; copy, reverse and recall on lengths up to 32.
"""

import importlib.util
import pathlib

_TASKS = pathlib.Path(__file__).resolve().parents[2] / "configs" / "tasks.py"


def get_config(arg: str | None = None):
    spec = importlib.util.spec_from_file_location("posenc_tasks_config", _TASKS)
    tasks_config = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tasks_config)
    variants = tasks_config.default.parse_arg(arg)
    seed = int(variants.pop("seed", 0))
    config = tasks_config.get_config(",".join(f"{k}={v}" if v else k for k, v in variants.items()))
    config.seed = seed
    config.eval_every = 200
    config.checkpoint_every = 200
    return config
