r"""Synthetic tasks: passkey retrieval, associative recall, copy and reverse (posenc/tasks.py).

    python scripts/train.py --config=configs/tasks.py:task=passkey,posenc=rope --workdir=runs/passkey-rope
    python scripts/train.py --config=configs/tasks.py:task=copy,posenc=alibi,randomize --workdir=runs/copy-alibi-rp
    python scripts/eval_tasks.py --workdir=runs/passkey-rope --lengths=256,512,1024 --depths=0,0.5,1

The arg is a comma-separated list of variants:
  task=NAME    passkey (default) | recall | copy | reverse | lm (plain text windows, e.g. with randomize)
  posenc=NAME  an encoding of posenc/encodings.py, or a RoPE scaling kind (as in configs/default.py)
  randomize    randomized positions (Ruoss et al. 2023): positions are a sorted random subset of
               [0, positions.max_position) (8192 for passkey, whose longest evaluation example has 4097
               tokens; 512 for copy, recall and reverse; 4096 for lm; 512 in tiny)
  tiny         a model and run small enough for tests

Everything else is configs/default.py's (the same model and optimiser fields). A task field the task does not
read in training must keep its default: task.filler is passkey's (scripts/eval_tasks.py's default filler when an
lm run is tested on passkey: --filler sets it there); min_len, lm_ratio and prompt_weight are the answer tasks'. The loss counts only answer
tokens; the validation metrics add `val_accuracy`, the teacher-forced exact match of the answers.

Defaults (chosen by the pilot runs in experiments/length_generalization/pilot/, rendered in that folder's
README; the pilot rows named below are its runs.json and <row>.jsonl): a smaller model than configs/default.py
(2 layers, d_model 128, MLP 512). Passkey at learning rate 1e-3, at which the validation answer loss fell
further than at 3e-3 (pilot row pkC against pk-default, pkA and pkB); 2 layers learn it in about the same steps
as 4 (55% against 59% validation exact match at step 2000; pilot rows pk-2l and passkey-rope-4l) at 1.8x the
tokens per second (the medians of their logged tokens_per_s, both on the AMD EPYC that runs.json names, its CPU
family not recorded). Passkey trains on an 8000-step schedule and stops at the first validation with 99% exact
match (`task.stop_accuracy`; on the 64 validation examples of `eval_windows`, all 64): on a 3000-step schedule
(experiments/length_generalization/results/passkey-3000/), seed 0 of RoPE, ALiBi and sinusoidal passed 90% at
steps 2000–2800, but seed 1 of RoPE ended at 20% and seed 1 of ALiBi stayed on a plateau (answer loss 1.6)
throughout; on the 8000-step schedule those two seeds stopped at steps 4000 and 1900 (pilots pk-8000-rope-s1,
pk-8000-alibi-s1; 95% and 97% test exact match at 256). Stopping at the criterion gives every encoding the same
in-range competence before its extrapolation is compared, at the cost of unequal steps (the results record
them). The algorithmic tasks train on examples of at most 32 tokens: 4 layers on lengths up to 64 for 4000
steps (the pilot's step-time column has each run's time) still fell below the 90% in-range bar at 64 in 3 of
the 4 copy runs (pilot rows copy-*-4000, test exact match). At 32, 2 layers at 1e-3 for 2500 steps put RoPE
over the bar (91% at 32) but not ALiBi (0%) or randomized positions (17%) (pilot rows copy32-*-2500); ALiBi at
2e-3 for 6000 steps reached 87% at 32 (copy32-alibi-lr2e-3-6000), so the default is 2e-3 for 8000 steps:
  passkey                 train_len 256, batch 16, lr 1e-3, 8000 steps, stopping at 99% validation exact match
  recall, copy, reverse   train_len 32 (examples of every length from the task's minimum to 32), batch 32,
                          lr 2e-3, 8000 steps; tested to 4x (128). Randomized positions are drawn from
                          [0, 512). The test range alone, [0, 128), learned copying slower with RoPE (28%
                          validation exact match at step 3600, pilot row copy-rope-rp-maxpos128, against
                          69% at [0, 512): experiments/length_generalization/results/2layers/
                          copy-rope-rp-s0.json).
The length-generalization experiment trains recall, copy and reverse with 4 layers instead
(experiments/length_generalization/config.py): at 2 layers, NoPE and randomized positions stayed below the
in-range bar (experiments/length_generalization/results/2layers/; at 4 layers, pilot rows copy-none-4l,
copy-rope-rp-4l). It trains recall at 5e-4 (its RECALL_LR): at 2e-3
recall stays on a plateau without key matching (pilot rows recall3-rope-4l*).
"""

import importlib.util
import pathlib

from ml_collections import config_dict

from posenc.tasks import POSITIONS_VERSION, TASKS, VERSIONS

_default = importlib.util.spec_from_file_location("posenc_default_config", pathlib.Path(__file__).with_name("default.py"))
default = importlib.util.module_from_spec(_default)
_default.loader.exec_module(default)


def get_config(arg: str | None = None):
    variants = default.parse_arg(arg, {"task": "|".join(TASKS + ("lm",)),
                                       "posenc": "|".join(default.POSENCS + default.SCALINGS)},
                                 ("randomize", "tiny"), where="configs/tasks.py")
    task = variants.get("task", "passkey")
    if task not in TASKS + ("lm",):
        raise ValueError(f"configs/tasks.py: task must be one of {TASKS + ('lm',)}, got {task!r}")
    if variants.get("posenc"):
        default.check_posenc(variants["posenc"], "configs/tasks.py")
    base = ",".join(f"{k}={v}" if v else k for k, v in variants.items() if k in ("posenc", "tiny"))
    config = default.get_config(base)

    config.task = config_dict.ConfigDict()
    config.task.name = task  # passkey | recall | copy | reverse | lm
    config.task.version = VERSIONS[task]  # the generator's layout (posenc.tasks.VERSIONS); other versions are refused
    config.task.filler = "repeat"  # passkey filler: repeat (the papers' sentence) | shakespeare (the corpus)
    config.task.min_len = config_dict.placeholder(int)  # shortest example (inputs); unset: train_len for passkey, else the task's minimum
    config.task.lm_ratio = 0.0  # fraction of each batch's rows that are LM text windows (of rows, not of the loss)
    config.task.prompt_weight = 0.0  # loss weight of the non-answer bytes of a task row (0: the answer only)
    # stop at the first evaluation (eval_every) whose validation exact match reaches this (unset: never); the
    # match is over eval_windows examples, so it reaches 0.99 only at ceil(0.99 * eval_windows) of them
    config.task.stop_accuracy = config_dict.placeholder(float)

    config.positions = config_dict.ConfigDict()
    config.positions.randomize = "randomize" in variants  # sorted random subset of [0, max_position)
    # positions' range with randomize (the learned table's rows): set below by task; unset without randomize,
    # where nothing reads it
    config.positions.max_position = config_dict.placeholder(int)
    max_position = 4096
    # how they are drawn (posenc.tasks.POSITIONS_VERSION), recorded by randomized runs; other versions are refused
    config.positions.version = POSITIONS_VERSION if config.positions.randomize else config_dict.placeholder(int)

    if task != "lm":
        config.model.num_layers = 2
        config.model.d_model = 128
        config.model.mlp_dim = 512
        config.learning_rate = 1e-3
        config.warmup_steps = 100
    if task == "passkey":
        config.train_steps = 8000
        config.task.stop_accuracy = 0.99
        config.eval.lengths = "256,512,1024,2048,4096"
        max_position = 8192  # the 4096 cell's 4097 tokens each draw a position
    elif task != "lm":
        config.train_len = 32
        config.batch_size = 32
        config.learning_rate = 2e-3
        config.train_steps = 8000
        max_position = 512
        config.eval.lengths = "16,32,64,96,128"
    config.eval.depths = "0,0.25,0.5,0.75,1"  # passkey needle depths in eval_tasks.py
    config.eval.examples = 50  # examples per cell in eval_tasks.py

    if "tiny" in variants:
        config.train_steps = 8
        config.warmup_steps = 2
        config.batch_size = 4
        config.model.d_model = 32
        config.model.mlp_dim = 64
        config.train_len = 128 if task == "passkey" else 32
        max_position = 512
        config.eval.lengths = "128,256" if task == "passkey" else "32,64"
        config.eval.examples = 4
    if config.positions.randomize:
        config.positions.max_position = max_position
    return config
