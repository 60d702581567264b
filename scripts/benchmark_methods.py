r"""Evaluation speed of the training-free methods against plain attention, at one length.

    python scripts/benchmark_methods.py [--length=4096] [--rounds=3] [--attn_chunk=512] [--out=FILE.json]

The reference model (RoPE, d_model 256, 4 layers, trained length 256; random weights: speed does not
depend on them), one batch of `length` tokens through the evaluation's jitted per-position NLL
(`posenc.evaluate.Evaluator`), for plain attention and each method of posenc/training_free.py with its
defaults at that length. Rounds alternate between the methods (plain first in every round), and each
method's time is the median of its rounds. A method's bound is 2× plain per pass: the two-branch methods
(a second q·kᵀ at the far positions) get 2 × 2 = 4×, log-n alone 2×; each row prints its ratio to plain,
the bound and whether it holds. The last line is JSON, with every round's time (`rounds_seconds`,
`plain_rounds_seconds`), the CPU (`posenc.timing.cpu_record`), the cores this process may run on (`cores`:
its affinity, as `taskset` sets it) and the commit.
"""

import time

import jax
import ml_collections
import numpy as np
from absl import app, flags
from flax import nnx

from posenc import evaluate
from posenc.model import ModelConfig, Transformer
from posenc.timing import code_version, emit, machine_record
from posenc.training_free import Method
from posenc.evaluate import ATTN_CHUNK

_LENGTH = flags.DEFINE_integer("length", 4096, "Tokens per evaluation window.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Alternating rounds (median).")
_CHUNK = flags.DEFINE_integer("attn_chunk", ATTN_CHUNK, "Attention query chunk (as in the evaluation).")
_D_MODEL = flags.DEFINE_integer("d_model", 256, "Model width (tests shrink it).")
_OUT = flags.DEFINE_string("out", None, "Also write the JSON here.")

METHODS = ("none", "none,logn=256", "self_extend", "rerope", "leaky_rerope", "lm_infinite", "sinks")


def main(argv):
    del argv
    length = _LENGTH.value
    cfg = ModelConfig(posenc="rope", max_len=256, d_model=_D_MODEL.value, num_heads=4, mlp_dim=4 * _D_MODEL.value)
    graphdef, params = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    config = ml_collections.ConfigDict({"train_len": 256})  # what a Run reads of its config here
    run = evaluate.Run("bench", "bench", config, cfg, graphdef, params, 0)
    ev = evaluate.Evaluator(run, attn_chunk=_CHUNK.value, tokens_per_batch=length)
    x = np.random.default_rng(0).integers(0, 256, (1, length)).astype(np.int32)
    methods = [Method.parse(m) for m in METHODS]
    for m in methods:  # compile everything first
        ev.nll(x, x, cfg.rope_scaling, m)
    times: dict[str, list[float]] = {m.label: [] for m in methods}
    for _ in range(_ROUNDS.value):
        for m in methods:
            t0 = time.perf_counter()
            ev.nll(x, x, cfg.rope_scaling, m)
            times[m.label].append(time.perf_counter() - t0)
    plain = float(np.median(times["none"]))
    rows = []
    for m in methods[1:]:
        passes = 2 if m.method != "none" else 1
        t = float(np.median(times[m.label]))
        rows.append({"method": m.label, "resolved": ev.resolve(m, length).set_fields(), "seconds": t,
                     "rounds_seconds": times[m.label], "ratio_to_plain": t / plain, "passes": passes, "bound": 2.0 * passes,
                     "within_bound": t / plain <= 2.0 * passes})
    print(f"plain attention at {length} tokens: {plain * 1e3:.0f} ms ({length / plain:.0f} tokens/s)")
    print(f"{'method':28s} {'ms':>8s} {'ratio':>7s} {'bound':>6s}")
    for r in rows:
        print(f"{r['method']:28s} {r['seconds'] * 1e3:8.0f} {r['ratio_to_plain']:7.2f} {r['bound']:6.1f} "
              f"{'ok' if r['within_bound'] else 'OVER'}")
    result = {"length": length, "attn_chunk": _CHUNK.value, "d_model": _D_MODEL.value, "plain_seconds": plain,
              "plain_rounds_seconds": times["none"], "rounds": _ROUNDS.value, "rows": rows, **machine_record(),
              "commit": code_version(),
              "jax": jax.__version__}
    emit(result, _OUT.value)


if __name__ == "__main__":
    app.run(main)
