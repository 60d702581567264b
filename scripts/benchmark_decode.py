r"""Decoding speed with the KV cache against full recomputation, as the context grows.

    python scripts/benchmark_decode.py [--contexts=256,512,1024,2048,4096] [--new_tokens=64]

For each context length C (default model, RoPE, batch 1): the cached per-token time is measured by
generating `new_tokens` (≥ 2) after a C-token prompt and after the same prompt with 1 token, and dividing the
difference by `new_tokens − 1` (so the prefill cancels out); the recompute per-token time is one jitted
forward pass over C tokens (what generating without a cache costs per token at that context). Where the
difference is not positive (timing noise larger than the extra tokens' cost) the cached time is unresolved:
its row says so (`resolved` false, the cached time and the speedup null) instead of reporting a speedup.
Prints both, tokens/s and the speedup; the last line is JSON, with each row's raw medians (`generate_n_s`,
`generate_1_s`, `recompute_s`), the CPU (`posenc.timing.cpu_record`), the commit and the XLA_FLAGS.
"""

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from flax import nnx

from posenc import decode
from posenc.model import ModelConfig, Transformer
from posenc.timing import code_version, cpu_record, emit, median_seconds

_CONTEXTS = flags.DEFINE_list("contexts", ["256", "512", "1024", "2048", "4096"], "Context lengths.")
_NEW = flags.DEFINE_integer("new_tokens", 64, "Tokens generated per cached measurement (at least 2).")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Repeats (median).")


def decode_row(context: int, new_tokens: int, generate_n_s: float, generate_1_s: float, recompute_s: float) -> dict:
    """One context's row from its median times: generating `new_tokens` and 1 token after the prompt, and one
    forward pass over it. The cached time a token is (generate_n_s − generate_1_s) / (new_tokens − 1); where that
    difference is not positive it is unresolved (`resolved` false; cached time, cached tokens/s and speedup None)."""
    if new_tokens < 2:
        raise ValueError(f"new_tokens={new_tokens}: needs at least 2 (the cached time is a difference over "
                         "new_tokens − 1 tokens)")
    row = {"context": context, "new_tokens": new_tokens, "generate_n_s": generate_n_s, "generate_1_s": generate_1_s,
           "recompute_s": recompute_s, "recompute_ms_per_token": 1e3 * recompute_s,
           "recompute_tokens_per_s": 1 / recompute_s}
    resolved = generate_n_s > generate_1_s
    cached = (generate_n_s - generate_1_s) / (new_tokens - 1) if resolved else None
    return {**row, "resolved": resolved, "cached_ms_per_token": 1e3 * cached if resolved else None,
            "cached_tokens_per_s": 1 / cached if resolved else None,
            "speedup": recompute_s / cached if resolved else None}


def main(argv):
    del argv
    n = _NEW.value
    if n < 2:
        raise app.UsageError(f"--new_tokens={n}: needs at least 2 (the cached time a token is the difference between "
                             "generating new_tokens and 1 token, over new_tokens − 1)")
    cfg = ModelConfig(posenc="rope", max_len=256)
    graphdef, params = nnx.split(Transformer(cfg, rngs=nnx.Rngs(0)))
    forward = jax.jit(lambda p, x: nnx.merge(graphdef, p)(x)[:, -1])
    rows = []
    for c in map(int, _CONTEXTS.value):
        prompt = np.random.default_rng(0).integers(0, 256, (1, c)).astype(np.int32)
        size = c + n
        t_n = median_seconds(lambda: decode.generate(graphdef, params, prompt, n, temperature=0.0, cache_size=size),
                             _REPEATS.value)
        t_1 = median_seconds(lambda: decode.generate(graphdef, params, prompt, 1, temperature=0.0, cache_size=size),
                             _REPEATS.value)
        x = jnp.asarray(prompt)
        recompute = median_seconds(lambda: forward(params, x).block_until_ready(), _REPEATS.value)
        row = decode_row(c, n, t_n, t_1, recompute)
        rows.append(row)
        if row["resolved"]:
            print(f"context {c:5d}: cached {row['cached_ms_per_token']:7.2f} ms/token "
                  f"({row['cached_tokens_per_s']:7.1f} tok/s) | recompute {1e3 * recompute:8.2f} ms/token "
                  f"({1 / recompute:6.1f} tok/s) | speedup {row['speedup']:6.1f}x")
        else:
            print(f"context {c:5d}: cached time unresolved (generating {n} tokens took {t_n:.4f} s, not more than "
                  f"1 token's {t_1:.4f} s: raise --new_tokens or --repeats) | recompute {1e3 * recompute:8.2f} ms/token")
    emit({"device": str(jax.devices()[0]), "rows": rows, **cpu_record(), "commit": code_version(),
          "jax": jax.__version__})


if __name__ == "__main__":
    app.run(main)
