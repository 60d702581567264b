r"""The extrapolation study's training config: every encoding gets the identical budget.

    python scripts/train.py --config=experiments/extrapolation/config.py:posenc=alibi,seed=1 --workdir=runs/x

Smaller than configs/default.py so that 5 encodings x 3 seeds train in well under an hour on a CPU (each run's
time, and the machine it ran on where recorded, in results/timing.json; the README sums them):
d_model 128, 4 layers, 4 heads (head_dim 32), MLP 512, train_len 256, batch 16, 400 steps (1.6M bytes).
"""

import importlib.util
import pathlib

_DEFAULT = pathlib.Path(__file__).resolve().parents[2] / "configs" / "default.py"


def get_config(arg: str | None = None):
    spec = importlib.util.spec_from_file_location("posenc_default_config", _DEFAULT)
    default = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(default)
    where = "experiments/extrapolation/config.py"
    variants, config = default.extend_config(arg, {"seed": "integer"}, default.get_config, where)
    seed = default.int_variant(variants, "seed", 0, where)
    config.seed = seed
    config.train_steps = 400
    config.model.d_model = 128
    config.model.num_layers = 4
    config.model.num_heads = 4
    config.model.mlp_dim = 512
    config.model.attn_block = 0  # the results were trained with plain attention (the default became 128 later)
    config.eval_every = 200
    config.checkpoint_every = 200
    return config
