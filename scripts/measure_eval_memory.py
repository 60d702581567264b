r"""Peak memory of evaluating the default model at long lengths, with and without query chunking.

    python scripts/measure_eval_memory.py [--lengths=4096,16384,32768] [--attn_chunk=512]

Each measurement runs in a fresh subprocess (one forward pass of the default model on one window of
random bytes at length L) and reports the process's peak resident memory (`ru_maxrss`), so the numbers
include the Python/JAX baseline, which is printed too. The subprocess runs as the evaluation does
(scripts/eval_extrapolation.py): posenc's malloc settings applied before JAX starts (`posenc.malloc.keep_buffers`,
which keep freed buffers in the heap, so they count in the peak) and the forward jitted with the evaluation's
compiler options (`posenc.xla_options.compiler_options`); the JSON records both (`malloc_kept`,
`compiler_options`). The last line is JSON, with the CPU
(`posenc.timing.cpu_record`), the cores this process may run on (its affinity) and the commit. The README's
memory figures come from this script.
"""

from __future__ import annotations

import json
import subprocess
import sys

from absl import app, flags

from posenc.evaluate import ATTN_CHUNK  # the evaluation's query chunk (the child process measures)
from posenc.timing import code_version, machine_record

_LENGTHS = flags.DEFINE_list("lengths", ["4096", "16384", "32768"], "Lengths to measure.")
_CHUNK = flags.DEFINE_integer("attn_chunk", ATTN_CHUNK, "Query chunk used by the evaluation.")
_UNCHUNKED = flags.DEFINE_list("unchunked_lengths", ["4096"], "Lengths also measured without chunking.")

CHILD = r"""
import json, resource, sys
from posenc import malloc
kept = malloc.keep_buffers()  # before JAX starts its threads, as scripts/eval_extrapolation.py
import jax, jax.numpy as jnp, numpy as np
from flax import nnx
from posenc.model import ModelConfig, Transformer
from posenc.xla_options import compiler_options
length, chunk = int(sys.argv[1]), int(sys.argv[2])
if length:
    cfg = ModelConfig(posenc="rope", max_len=256, attn_chunk=chunk)
    graphdef, state = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    f = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x), compiler_options=compiler_options())
    x = jnp.asarray(np.random.default_rng(0).integers(0, 256, (1, length)), jnp.int32)
    f(state, x).block_until_ready()
print(json.dumps({"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "malloc_kept": kept,
                  "compiler_options": compiler_options()}))
"""


def measure(length: int, chunk: int) -> dict:
    """The child's record of one measurement: its peak resident memory (`peak_rss_mib`), whether posenc's malloc
    settings applied there (`malloc_kept`) and the compiler options its forward was jitted with."""
    out = subprocess.run([sys.executable, "-c", CHILD, str(length), str(chunk)], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv):
    del argv
    from posenc.model import ModelConfig  # noqa: PLC0415

    children = [measure(0, 0)]
    rows = {"attn_chunk": _CHUNK.value, "attn_key_block": ModelConfig.attn_key_block,
            "baseline_mib": children[0]["peak_rss_mib"]}
    print(f"baseline (imports, no model): {rows['baseline_mib']:.0f} MiB")
    for length in map(int, _LENGTHS.value):
        children.append(measure(length, _CHUNK.value))
        mib = rows[f"L{length}_chunked_mib"] = children[-1]["peak_rss_mib"]
        print(f"L={length:6d} chunked ({_CHUNK.value}, key tiles {ModelConfig.attn_key_block}): peak {mib:7.0f} MiB")
    for length in map(int, _UNCHUNKED.value):
        children.append(measure(length, 0))
        mib = rows[f"L{length}_unchunked_mib"] = children[-1]["peak_rss_mib"]
        print(f"L={length:6d} unchunked:      peak {mib:7.0f} MiB")
    # every child runs in this process's environment, so under the same settings
    rows["malloc_kept"], rows["compiler_options"] = children[0]["malloc_kept"], children[0]["compiler_options"]
    print(json.dumps({**rows, **machine_record(), "commit": code_version()}))


if __name__ == "__main__":
    app.run(main)
