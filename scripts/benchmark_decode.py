r"""Decoding speed with the KV cache against full recomputation, as the context grows.

    python scripts/benchmark_decode.py [--contexts=256,512,1024,2048,4096] [--new_tokens=64]

For each context length C (default model, RoPE, batch 1): the cached per-token time is measured by
generating `new_tokens` after a C-token prompt and after the same prompt with 1 token, and dividing the
difference by `new_tokens − 1` (so the prefill cancels out); the recompute per-token time is one jitted
forward pass over C tokens (what generating without a cache costs per token at that context). Prints both,
tokens/s and the speedup; the last line is JSON.
"""

import json

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from flax import nnx

from posenc import decode
from posenc.timing import median_seconds
from posenc.model import ModelConfig, Transformer

_CONTEXTS = flags.DEFINE_list("contexts", ["256", "512", "1024", "2048", "4096"], "Context lengths.")
_NEW = flags.DEFINE_integer("new_tokens", 64, "Tokens generated per cached measurement.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Repeats (median).")


def main(argv):
    del argv
    cfg = ModelConfig(posenc="rope", max_len=256)
    graphdef, params = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    forward = jax.jit(lambda p, x: nnx.merge(graphdef, p)(x)[:, -1])
    rows = []
    for c in map(int, _CONTEXTS.value):
        prompt = np.random.default_rng(0).integers(0, 256, (1, c)).astype(np.int32)
        n = _NEW.value
        size = c + n
        t_n = median_seconds(lambda: decode.generate(graphdef, params, prompt, n, temperature=0.0, cache_size=size),
                      _REPEATS.value)
        t_1 = median_seconds(lambda: decode.generate(graphdef, params, prompt, 1, temperature=0.0, cache_size=size),
                      _REPEATS.value)
        cached = max(t_n - t_1, 1e-9) / (n - 1)
        x = jnp.asarray(prompt)
        recompute = median_seconds(lambda: forward(params, x).block_until_ready(), _REPEATS.value)
        rows.append({"context": c, "cached_ms_per_token": 1e3 * cached, "recompute_ms_per_token": 1e3 * recompute,
                     "cached_tokens_per_s": 1 / cached, "recompute_tokens_per_s": 1 / recompute,
                     "speedup": recompute / cached})
        print(f"context {c:5d}: cached {1e3 * cached:7.2f} ms/token ({1 / cached:7.1f} tok/s) | recompute "
              f"{1e3 * recompute:8.2f} ms/token ({1 / recompute:6.1f} tok/s) | speedup {recompute / cached:6.1f}x")
    print(json.dumps({"device": str(jax.devices()[0]), "rows": rows}))


if __name__ == "__main__":
    app.run(main)
