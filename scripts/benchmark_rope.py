r"""Benchmark jitted `apply_rope` against two bounds measured in the same run.

    python scripts/benchmark_rope.py [--shape=4,2048,16,128] [--repeats=20]

For each dtype (float32, bfloat16) it times, on the same tensor:
  * `apply_rope` (half and interleaved layouts), jitted, positions and frequencies as inputs;
  * a jitted elementwise pass over the same bytes (`x * c + 1`: one read, one write) — what XLA itself
    reaches for a memory-bound op of this size;
  * NumPy's in-place copy of the same bytes (`np.copyto`), the machine's memory bound.
and prints the ratios (bound time / apply_rope time: 1.0 means as fast as the bound). The last line is JSON,
with the CPU (`posenc.timing.cpu_record`), the commit and the XLA_FLAGS.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

import posenc
from posenc.timing import code_version, cpu_record, emit, median_seconds

_SHAPE = flags.DEFINE_list("shape", ["4", "2048", "16", "128"], "x shape [B, T, N, H].")
_REPEATS = flags.DEFINE_integer("repeats", 20, "Timed calls per measurement (median reported).")


def main(argv):
    del argv
    shape = tuple(int(s) for s in _SHAPE.value)
    b, t, n, h = shape
    inv_freq = jnp.asarray(posenc.rope_frequencies(h)[0], jnp.float32)
    positions = jnp.arange(t)  # shared by the batch, as in training; [B, T] positions also work
    results = {"shape": shape, "backend": jax.default_backend(), "device": str(jax.devices()[0]), **cpu_record(),
               "commit": code_version(), "jax": jax.__version__}
    for dtype in (jnp.float32, jnp.bfloat16):
        name = jnp.dtype(dtype).name
        x = jax.random.normal(jax.random.key(0), shape, dtype)
        x.block_until_ready()
        elementwise = jax.jit(lambda v: v * jnp.asarray(1.0001, v.dtype) + jnp.asarray(1, v.dtype))
        t_elem = median_seconds(lambda: elementwise(x).block_until_ready(), _REPEATS.value)
        src = np.asarray(x)
        dst = np.empty_like(src)
        t_copy = median_seconds(lambda: np.copyto(dst, src), _REPEATS.value)
        row = {"bytes": int(x.nbytes), "elementwise_ms": 1e3 * t_elem, "numpy_copy_ms": 1e3 * t_copy}
        for layout in posenc.LAYOUTS:
            rope = jax.jit(lambda v, p, f, layout=layout: posenc.apply_rope(v, p, f, layout=layout))
            t_rope = median_seconds(lambda: rope(x, positions, inv_freq).block_until_ready(), _REPEATS.value)
            row[f"rope_{layout}_ms"] = 1e3 * t_rope
            row[f"rope_{layout}_vs_elementwise"] = t_elem / t_rope
            row[f"rope_{layout}_vs_memcopy"] = t_copy / t_rope
            print(f"{name:8s} {layout:11s} apply_rope {1e3 * t_rope:7.2f} ms | elementwise pass "
                  f"{1e3 * t_elem:7.2f} ms (ratio {t_elem / t_rope:.2f}) | numpy copy {1e3 * t_copy:7.2f} ms "
                  f"(ratio {t_copy / t_rope:.2f})")
        results[name] = row
    emit(results)


if __name__ == "__main__":
    app.run(main)
