r"""Task accuracy past the training length: a table, results.json / results.csv, heatmaps and a plot.

    python scripts/eval_tasks.py --workdir=runs/passkey-rope [--workdir=RUN2 ...] \
        [--lengths=256,512,1024,2048,4096] [--depths=0,0.25,0.5,0.75,1] [--scalings=none,linear,ntk,yarn] \
        [--method=none --method=self_extend,group=4 ...] [--examples=50] [--out=DIR]

Each cell is `--examples` test examples of the run's task (configs/tasks.py) at one length (× needle depth
for passkey), scored by exact match of greedy decoding with the KV cache, with a Wilson 95% interval, the
teacher-forced exact match and the answer's log-probability (posenc/task_eval.py). Scalings and methods are
eval_extrapolation.py's; a learned table past its length (xPos past its float range) is `undefined`. A Hugging Face checkpoint is
tested on passkey in its own tokens (lengths count tokens):

    python scripts/eval_tasks.py --hf_model=~/models/Llama-3.2-1B --lengths=4096,8192 --scalings=run,yarn

Lengths, depths and examples default to the first run's `config.eval`. Writes results.json, results.csv,
results.md, accuracy_vs_length.png and heatmap_<run>__<scaling>[__<method>].png (depth × length) to --out (default
<first workdir>/eval_tasks) and prints the table.
"""

import pathlib

from absl import app, flags, logging

from posenc import checkpoint, malloc
from posenc.config import parse_lengths
from posenc.evaluate import prepare_out_dir
from posenc.task_eval import evaluate_tasks, markdown_table, write_outputs
from posenc.tasks import FILLERS, TASKS
from posenc.evaluate import ATTN_CHUNK

_WORKDIRS = flags.DEFINE_multi_string("workdir", [], "Run directories (repeat the flag).")
_HF = flags.DEFINE_multi_string("hf_model", [], "Hugging Face checkpoint directories, tested on passkey in their "
                                "own tokens (repeat the flag).")
_HF_DTYPE = flags.DEFINE_enum("hf_dtype", None, ["float32", "bfloat16"], "Weights of the --hf_model checkpoints.")
_LENGTHS = flags.DEFINE_list("lengths", None, "Input lengths (default: the first run's config.eval.lengths).")
_DEPTHS = flags.DEFINE_list("depths", None, "Passkey needle depths in [0, 1] (default: the first run's "
                            "config.eval.depths if it is a passkey run, else 0, 0.25, 0.5, 0.75, 1).")
_SCALINGS = flags.DEFINE_list("scalings", None, "RoPE scalings (default: none, and run for a run fine-tuned with one).")
_METHODS = flags.DEFINE_multi_string("method", None, "Training-free method spec, repeatable (default none); as in "
                                     "eval_extrapolation.py.")
_EXAMPLES = flags.DEFINE_integer("examples", None, "Test examples per cell (default: config.eval.examples, else 50).")
_SEED = flags.DEFINE_integer("seed", 0, "Seed of the test examples (the same for every run and scaling).")
_TASK = flags.DEFINE_enum("task", None, list(TASKS), "Override the runs' task (needed for --hf_model: passkey).")
_FILLER = flags.DEFINE_enum("filler", None, list(FILLERS), "Override the passkey filler.")
_CHUNK = flags.DEFINE_integer("attn_chunk", ATTN_CHUNK, "Attention query chunk at long lengths (bounds memory).")
_OUT = flags.DEFINE_string("out", None, "Output directory (default <first workdir>/eval_tasks).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    malloc.keep_buffers()  # before JAX starts its threads: posenc/malloc.py
    logging.set_verbosity(logging.ERROR)
    if not _WORKDIRS.value and not _HF.value:
        raise app.UsageError("give --workdir=RUN and/or --hf_model=DIR")
    if _HF_DTYPE.value and not _HF.value:
        raise app.UsageError("--hf_dtype is the weights' dtype of the --hf_model checkpoints: give --hf_model too "
                             "(--workdir runs evaluate in their own config.model.dtype)")
    out = prepare_out_dir(_OUT.value or pathlib.Path((_WORKDIRS.value or _HF.value)[0]) / "eval_tasks")
    first = checkpoint.load_config(_WORKDIRS.value[0]) if _WORKDIRS.value else None
    ev = first.get("eval") if first is not None else None
    if _LENGTHS.value:
        lengths = parse_lengths(_LENGTHS.value, "--lengths")
    elif ev is not None:
        lengths = parse_lengths(ev.lengths, f"config.eval.lengths of {_WORKDIRS.value[0]}")
    else:
        raise app.UsageError("--lengths is required with --hf_model alone (lengths in tokens)")
    if _DEPTHS.value is not None and not [d for d in _DEPTHS.value if d.strip()]:
        raise app.UsageError("--depths is empty: give depths in [0, 1] (e.g. --depths=0,0.5,1), or leave it out for "
                             "the run's config.eval.depths")
    own = first.task.name if first is not None and first.get("task") is not None else None
    passkey = (_TASK.value or own) == "passkey"  # the task the first run is tested on
    depth_text = _DEPTHS.value if _DEPTHS.value is not None else (  # a non-passkey run's config depths are unused
        ev.get("depths", "0,0.25,0.5,0.75,1").split(",") if ev is not None and passkey else None)
    try:
        depths = None if depth_text is None else [float(d) for d in depth_text]
    except ValueError:
        raise app.UsageError(f"--depths must be numbers in [0, 1], got {depth_text}") from None
    examples = _EXAMPLES.value if _EXAMPLES.value is not None else (ev.get("examples", 50) if ev is not None else 50)
    task = _TASK.value or ("passkey" if _HF.value and not _WORKDIRS.value else None)
    result = evaluate_tasks(_WORKDIRS.value, lengths, depths=depths, scalings=_SCALINGS.value, methods=_METHODS.value,
                            examples=examples, seed=_SEED.value, task=task, filler=_FILLER.value,
                            hf_models=_HF.value, hf_dtype=_HF_DTYPE.value, attn_chunk=_CHUNK.value)
    paths = write_outputs(result, out)
    print(markdown_table(result))
    for reason in sorted({r["reason"] for r in result["rows"] if r["status"] != "ok"}):
        print(f"undefined: {reason}")
    print(f"\nwrote {', '.join(str(p) for p in paths.values())}")


if __name__ == "__main__":
    app.run(main)
