r"""The reference model's dense products in JAX (XLA:CPU) against PyTorch on the same CPU, alternating.

    python scripts/benchmark_matmul.py [--rounds=5] [--out=FILE.json]

The products of one dense layer of the reference model (`scripts/benchmark_train.py`: 4096 tokens, d_model
256, MLP 1024, qkv 768), forward and backward — y = x·W, dx = dy·Wᵀ, dW = xᵀ·dy — plus a 2048² product, in
float32 and in bfloat16. Each round times every product in JAX (jitted with
`posenc.xla_options.compiler_options()`, as posenc's layers are, and written as they write them: float32
results, also from bf16 operands, as posenc's mixed precision; xᵀ·dy in bf16 with posenc's explicit copy of xᵀ)
and in PyTorch (`torch.matmul` with one thread per core this process may run on, `os.sched_getaffinity`, as
XLA:CPU uses them), one after the other. In the bf16 rows the two write different results: JAX float32, PyTorch
bf16 (its CPU matmul has no float32 output for bf16 operands; bf16 results are what its layers give under
autocast); each row records both (`jax_result_dtype`, `torch_result_dtype`). The best round of each is
reported with the JAX / PyTorch ratio (and how far the two products differ, relative to the largest entry).
Where the training step's ratio against PyTorch eager is below 1.0, this says whether the products themselves
account for it. Last line: JSON (with `torch_threads`).
"""

from __future__ import annotations

import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from posenc.attention import swap_last_copy
from posenc.timing import code_version, cpu_record, emit
from posenc.xla_options import compiler_options

_ROUNDS = flags.DEFINE_integer("rounds", 5, "Alternating rounds (the best of each side is reported).")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Products per timing.")
_OUT = flags.DEFINE_string("out", None, "Also write the JSON here.")
_DIVIDE = flags.DEFINE_integer("divide", 1, "Divide every dimension by this (tests run small shapes).")

# (name, m, k, n, form): y = x·W is "nn", dx = dy·Wᵀ is "nt", dW = xᵀ·dy is "tn".
PRODUCTS = [("x·W  fc", 4096, 256, 1024, "nn"), ("x·W  qkv", 4096, 256, 768, "nn"), ("x·W  proj", 4096, 1024, 256, "nn"),
            ("dy·Wᵀ fc", 4096, 1024, 256, "nt"), ("dy·Wᵀ proj", 4096, 256, 1024, "nt"),
            ("xᵀ·dy fc", 256, 4096, 1024, "tn"), ("xᵀ·dy proj", 1024, 4096, 256, "tn"), ("2048²", 2048, 2048, 2048, "nn")]


def _best(fn, repeats: int) -> float:
    fn()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t0) / repeats


def main(argv):
    del argv
    import torch  # noqa: PLC0415

    torch.set_num_threads(len(os.sched_getaffinity(0)))
    rng = np.random.default_rng(0)
    rows = []
    for dtype in ("float32", "bfloat16"):
        for name, *mkn, form in PRODUCTS:
            m, k, n = (d // _DIVIDE.value for d in mkn)
            a_shape = (k, m) if form == "tn" else (m, k)
            b_shape = (n, k) if form == "nt" else (k, n)
            a, b = rng.standard_normal(a_shape, np.float32), rng.standard_normal(b_shape, np.float32)
            ja, jb = jnp.asarray(a, dtype), jnp.asarray(b, dtype)
            if form == "tn":  # posenc's weight gradient: xᵀ copied for 16-bit operands (posenc.model.dense)
                f = jax.jit(lambda x, y: jax.lax.dot_general(swap_last_copy(x), y, (((1,), (0,)), ((), ())),
                                                             preferred_element_type=jnp.float32),
                            compiler_options=compiler_options())
            else:
                dims = {"nn": ((1,), (0,)), "nt": ((1,), (1,))}[form]
                f = jax.jit(lambda x, y, dims=dims: jax.lax.dot_general(x, y, (dims, ((), ())),
                                                                        preferred_element_type=jnp.float32),
                            compiler_options=compiler_options())
            tdt = torch.float32 if dtype == "float32" else torch.bfloat16
            ta, tb = torch.tensor(a).to(tdt), torch.tensor(b).to(tdt)
            tf = {"nn": lambda: ta @ tb, "nt": lambda: ta @ tb.T, "tn": lambda: ta.T @ tb}[form]
            jt, tt = [], []
            for _ in range(_ROUNDS.value):
                jt.append(_best(lambda: f(ja, jb).block_until_ready(), _REPEATS.value))
                tt.append(_best(tf, _REPEATS.value))
            flops = 2 * m * k * n
            jax_out, torch_out = f(ja, jb), tf()
            diff = np.abs(np.asarray(jax_out) - torch_out.float().numpy()).max() / np.abs(torch_out.float().numpy()).max()
            rows.append({"dtype": dtype, "product": name, "m": m, "k": k, "n": n, "form": form, "max_rel_diff": float(diff),
                         "jax_result_dtype": str(jax_out.dtype), "torch_result_dtype": str(torch_out.dtype).removeprefix("torch."),
                         "jax_gflops": flops / min(jt) / 1e9, "torch_gflops": flops / min(tt) / 1e9,
                         "ratio": min(tt) / min(jt)})
            print(f"{dtype:9s} {name:12s} [{m}×{k}]·[{k}×{n}]  JAX {rows[-1]['jax_gflops']:7.0f}  "
                  f"PyTorch {rows[-1]['torch_gflops']:7.0f} GFLOP/s  ratio {rows[-1]['ratio']:.2f}")
    emit({"rows": rows, "rounds": _ROUNDS.value, **cpu_record(), "commit": code_version(), "jax": jax.__version__,
          "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
          "compiler_options": compiler_options()}, _OUT.value)


if __name__ == "__main__":
    app.run(main)
