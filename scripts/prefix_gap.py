r"""How far cached decoding under a length-dependent RoPE scaling is from the per-prefix recompute.

    python scripts/prefix_gap.py --workdir=runs/lm_study/sympy-rope-s1 [--workdir=RUN2 ...] \
        [--lengths=1024,4096] [--scalings=dynamic_ntk,dynamic_linear,dynamic_yarn] [--positions=32] [--out=FILE]

Under a scaling whose frequencies depend on the sequence length, a KV cache holds each token's keys and
values from its own step, so cached decoding (the `prefix` protocol of `eval_extrapolation.py
--prefix_dynamic`, lm_study's "as decoding" rows) equals the forward pass over each prefix only in the first
layer (posenc/decode.py). This scores both on the first test window of each length: the cached protocol at
every position, the recompute at `--positions` evenly spaced positions past the training length (one forward
pass each), and prints their mean difference there in bits per byte (`posenc.evaluate.prefix_gap`). With
--out, the rows go to a JSON file ({"rows": [...], "machine": ...}).
"""

import json
import pathlib

from absl import app, flags, logging

from posenc import jobs, malloc
from posenc.config import parse_lengths
from posenc.evaluate import prefix_gap
from posenc.timing import machine_record

_WORKDIRS = flags.DEFINE_multi_string("workdir", [], "RoPE run directories (repeat the flag).")
_LENGTHS = flags.DEFINE_list("lengths", ["1024"], "Window lengths, each past the run's training length.")
_SCALINGS = flags.DEFINE_list("scalings", ["dynamic_ntk", "dynamic_linear", "dynamic_yarn"],
                              "Length-dependent scalings.")
_POSITIONS = flags.DEFINE_integer("positions", 32, "Positions the recompute scores per window.")
_OUT = flags.DEFINE_string("out", None, "JSON file for the rows (default: print only).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if not _WORKDIRS.value:
        raise app.UsageError("give --workdir=RUN (a RoPE run)")
    malloc.keep_buffers()  # before JAX starts its threads: posenc/malloc.py
    logging.set_verbosity(logging.ERROR)
    lengths = parse_lengths(_LENGTHS.value, "--lengths")
    rows = []
    print("| run | scaling | L | cached (as decoding) | recompute | gap | max abs gap (bits) | window, cached | window-level |")
    print("|---|---|---|---|---|---|---|---|---|")
    for workdir in _WORKDIRS.value:
        for length in lengths:
            for scaling in _SCALINGS.value:
                r = prefix_gap(workdir, scaling, length, positions=_POSITIONS.value)
                rows.append(r)
                print(f"| {r['run']} | {scaling} | {length} | {r['cached_bpb']:.4f} | {r['recompute_bpb']:.4f} | "
                      f"{r['gap_bpb']:+.4f} | {r['max_abs_gap_bits']:.3f} | {r['window_bpb']:.4f} | "
                      f"{r['window_level_bpb']:.4f} |", flush=True)
    if _OUT.value:
        out = pathlib.Path(_OUT.value).expanduser()
        out.parent.mkdir(parents=True, exist_ok=True)
        jobs.write_atomic(out, json.dumps({"rows": rows, "positions": _POSITIONS.value, "machine": machine_record()},
                                          indent=1))


if __name__ == "__main__":
    app.run(main)
