r"""Perplexity past the training length, with inference-time RoPE scaling: a table and two plots.

    python scripts/eval_extrapolation.py --workdir=runs/rope [--workdir=runs/alibi ...] \
        [--lengths=256,512,1024,2048,4096] [--scalings=none,linear,ntk,dynamic_ntk,yarn] \
        [--method=none --method=self_extend,group=4 --method=rerope --method=sinks,num_sinks=4 ...] [--out=DIR]

A Hugging Face checkpoint (--hf_model=DIR: config.json, safetensors, tokenizer.json; Llama, Mistral, Qwen2/3,
Phi-3, GPT-NeoX) is evaluated the same way in its own tokens — lengths and --num_bytes count tokens, nll/ppl
are per token, bpb per UTF-8 byte — on the --split of --text=FILE|DIR (split 90/5/5% like data.path: `test`
is the last 5%) or of the bundled corpus, with its own scaling as the row
`run` next to every scaling and method:

    python scripts/eval_extrapolation.py --hf_model=~/models/Llama-3.2-1B --text=book.txt \
        --lengths=4096,8192,16384,32768 --scalings=run,none,yarn --method=none --method=self_extend,group=8

Lengths and the number of test bytes default to the first run's `config.eval`, scalings to each run's own
`config.eval.scalings` that apply to its encoding (a non-RoPE run gets `none`; a run trained or fine-tuned
with a RoPE scaling is also evaluated with that scaling, `run`). Each run is scored on its own corpus, named
in the table. Each --method (a training-free method of posenc/training_free.py with its parameters:
`self_extend[,window=W,group=G]`, `rerope[,window=w]`, `leaky_rerope[,window=w,leak=k]`,
`lm_infinite[,window=L,n_global=n]`, `sinks[,window=R,num_sinks=S]`, any of them with `,logn=L0`) is
evaluated with every scaling, as rows of the same table; its unset parameters default per run and length.
--documents scores the whole split by document (each document's first multiple of the longest length; shorter
documents are left out, and the table says how many were scored) instead of the first --num_bytes bytes.
The row `n-gram` is the floor: an interpolated Witten–Bell byte n-gram (posenc/ngram.py) fit on the corpus's
train split, its context (0–6 bytes) chosen on validation, scoring the same windows (--nongram: left out).
Writes
results.csv / results.json / results.md, ppl_vs_length.png and per_position.png to --out (default
<first workdir>/eval) and prints the markdown table. See posenc/evaluate.py for the protocols.
"""

import pathlib

from absl import app, flags, logging

from posenc import checkpoint, malloc
from posenc.config import parse_lengths
from posenc.evaluate import evaluate, markdown_table, prepare_out_dir, window_level_note, write_outputs
from posenc.evaluate import ATTN_CHUNK, FACTOR_SCALINGS


_WORKDIRS = flags.DEFINE_multi_string("workdir", [], "Run directories (repeat the flag).")
_HF = flags.DEFINE_multi_string("hf_model", [], "Hugging Face checkpoint directories (config.json, safetensors, "
                                "tokenizer.json; repeat the flag), scored in their own tokens.")
_TEXT = flags.DEFINE_string("text", None, "The corpus the --hf_model checkpoints score: a UTF-8 text file or a "
                            "directory, split 90/5/5% as data.path (--split of it; default the bundled corpus).")
_HF_DTYPE = flags.DEFINE_enum("hf_dtype", None, ["float32", "bfloat16"], "Weights of the --hf_model checkpoints.")
_LENGTHS = flags.DEFINE_list("lengths", None, "Evaluation lengths (default: the run's config.eval.lengths).")
_SCALINGS = flags.DEFINE_list("scalings", None, "Scalings (default: each run's config.eval.scalings that apply).")
_FACTOR = flags.DEFINE_float("factor", None, "Fixed scaling factor instead of L / L0 (L0: original_max_len of a run "
                             "trained with a scaling, else train_len; dynamic_ntk: Hugging Face's slope instead of 1).")
_NUM_BYTES = flags.DEFINE_integer("num_bytes", None, "Test bytes scored at every length (default: config.eval.num_bytes).")
_STRIDE = flags.DEFINE_integer("stride", None, "Sliding-window stride (default train_len / 2).")
_SPLIT = flags.DEFINE_enum("split", "test", ["test", "validation"], "Which split to score.")
_LEARNED = flags.DEFINE_enum("learned_beyond", None, ["error", "interpolate"],
                             "Learned tables past max_len: report undefined (error) or resample (interpolate).")
_CHUNK = flags.DEFINE_integer("attn_chunk", ATTN_CHUNK, "Attention query chunk at long lengths (bounds memory).")
_METHODS = flags.DEFINE_multi_string(
    "method", None, "Training-free method spec, repeatable (default: the run's config.eval.methods, 'none'): "
    "self_extend,window=64,group=4 | rerope,window=64 | leaky_rerope,window=64,leak=4 | lm_infinite,n_global=10 | "
    "sinks,num_sinks=4,window=251 | none,logn=256 (any method takes logn=L0).")
_LONGROPE = flags.DEFINE_string("longrope", None, "LongRoPE JSON (scripts/search_longrope.py) for --scalings=longrope.")
_PREFIX = flags.DEFINE_bool("prefix_dynamic", False, "For the length-dependent scalings (dynamic_ntk, dynamic_linear, "
                             "dynamic_yarn, longrope), also score each position with its own prefix's frequencies, "
                             "as decoding does (rows `<scaling> · per-prefix`; one cached step per position).")
_SLIDING_LONG = flags.DEFINE_bool("sliding_long", False, "Also score sliding windows of each length L past train_len "
                                  "at stride L/2 (columns `sliding L/(L/2)`).")
_NGRAM = flags.DEFINE_bool("ngram", True, "Also score the corpus's Witten-Bell byte n-gram (fit on its train split, "
                            "context chosen on validation) on the same windows: the row `n-gram`, the floor.")
_DOCS = flags.DEFINE_bool("documents", False, "Score the whole split by document instead of its first --num_bytes: "
                          "each document of at least max(lengths) + 1 bytes, its first multiple of max(lengths); "
                          "no window crosses from one document into the next.")
_OUT = flags.DEFINE_string("out", None, "Output directory (default <first workdir>/eval).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    malloc.keep_buffers()  # before JAX starts its threads: posenc/malloc.py
    logging.set_verbosity(logging.ERROR)  # Orbax warns that a read-only checkpoint directory is read-only
    for flag in (_FACTOR, _NUM_BYTES, _STRIDE):
        if flag.value is not None and not flag.value > 0:
            raise app.UsageError(f"--{flag.name} must be > 0 (or left out for its default), got {flag.value}")
    if not _WORKDIRS.value and not _HF.value:
        raise app.UsageError("give --workdir=RUN and/or --hf_model=DIR")
    if _DOCS.value and (_NUM_BYTES.value is not None or _HF.value):
        raise app.UsageError("--documents scores the whole split of byte runs: not with --num_bytes or --hf_model")
    if _TEXT.value and not _HF.value:
        raise app.UsageError("--text is the text of the --hf_model checkpoints (byte runs score their own corpus)")
    if _HF_DTYPE.value and not _HF.value:
        raise app.UsageError("--hf_dtype is the weights' dtype of the --hf_model checkpoints: give --hf_model too "
                             "(byte runs evaluate in their own config.model.dtype)")
    if _SCALINGS.value is not None:  # the default (each run's config.eval.scalings) is checked when it is read
        if _FACTOR.value is not None and not set(_SCALINGS.value) & set(FACTOR_SCALINGS):
            raise app.UsageError(f"--factor={_FACTOR.value} is read only by --scalings of {FACTOR_SCALINGS}, got "
                                 f"--scalings={','.join(_SCALINGS.value)}")
        if _LONGROPE.value and "longrope" not in _SCALINGS.value:
            raise app.UsageError(f"--longrope is read only by --scalings=longrope, got --scalings="
                                 f"{','.join(_SCALINGS.value)}")
    first_dir = (_WORKDIRS.value or _HF.value)[0]
    out = prepare_out_dir(_OUT.value or pathlib.Path(first_dir) / "eval")  # fails before any work
    if _WORKDIRS.value:
        first = checkpoint.load_config(_WORKDIRS.value[0])
        lengths = parse_lengths(_LENGTHS.value or first.eval.lengths,
                                "--lengths" if _LENGTHS.value else f"config.eval.lengths of {_WORKDIRS.value[0]}")
        num_bytes = None if _DOCS.value else _NUM_BYTES.value or first.eval.num_bytes
    else:
        if not _LENGTHS.value:
            raise app.UsageError("--lengths is required with --hf_model alone (lengths in tokens)")
        lengths, num_bytes = parse_lengths(_LENGTHS.value, "--lengths"), _NUM_BYTES.value
    result = evaluate(_WORKDIRS.value, lengths, _SCALINGS.value, num_bytes=num_bytes, factor=_FACTOR.value,
                      stride=_STRIDE.value, split=_SPLIT.value, learned_beyond=_LEARNED.value,
                      attn_chunk=_CHUNK.value, longrope_file=_LONGROPE.value, methods=_METHODS.value,
                      hf_models=_HF.value, text=_TEXT.value, hf_dtype=_HF_DTYPE.value, ngram_floor=_NGRAM.value,
                      prefix_dynamic=_PREFIX.value, sliding_long=_SLIDING_LONG.value, documents=_DOCS.value)
    paths = write_outputs(result, out)
    print(markdown_table(result))
    print("\n" + markdown_table(result, "bpb_ci"))
    undefined = {r["reason"] for r in result["rows"] if r["status"] != "ok"}
    for reason in undefined:
        print(f"undefined: {reason}")
    note = window_level_note(result)
    if note:
        print(note)
    print(f"\nwrote {', '.join(str(p) for p in paths.values())}")


if __name__ == "__main__":
    app.run(main)
