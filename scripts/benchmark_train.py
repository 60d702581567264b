r"""Training throughput of the reference model, against the matmul peak measured in the same run.

    python scripts/benchmark_train.py [--steps=10] [--rounds=3] [--torch] [--profile] [--dtype=bfloat16]

Reference model: bytes, d_model 256, 4 layers, 4 heads, MLP 1024 (GELU), RMSNorm, RoPE, train_len 512,
batch 8, float32, AdamW. Times the jitted train step (compilation excluded) over `steps` steps, `rounds`
times, and reports the median round. The peak is the best of repeated 2048x2048 float32 matmuls, before and
after the rounds (the machine's best for this workload; the best, not the median, so that MFU is not
flattered by a slow moment). Model FLOPs per token (PaLM, arXiv 2204.02311, App. B): 6·N (N = non-embedding parameters, head
included) + 12·layers·d_model·T, which counts attention over all T×T query-key pairs. MFU = model FLOP/s / peak
in that count (`mfu`, PaLM's and nanoGPT's convention); `mfu_causal` uses 6·N + 6·layers·d_model·T, the pairs a
causal model attends (`posenc.timing.model_flops_per_token`).

With --torch (needs `pip install torch==2.13.0`), the same model in PyTorch eager
(`scaled_dot_product_attention`, posenc's GELU and norm epsilon, AdamW with posenc's betas, weight decay on the
matrices only and the global gradient-norm clip: `torch_peer`, recorded as `torch_peer`) is timed in the same
rounds, alternating with JAX so that both see the same machine load, and the median of the per-round ratios
(JAX tokens/s / PyTorch tokens/s) is printed.

With --dtype=bfloat16, posenc trains in mixed precision (`model.dtype=bfloat16`: float32 parameters and
optimizer state, products on bf16 operands with float32 results, the activations between them in
`--act_dtype`'s dtype — auto: float32 on a CPU, bf16 on a GPU —, float32 softmax, norms and loss), PyTorch under
`torch.autocast("cpu", dtype=torch.bfloat16)`, and the peak is the bf16 matmul's (float32 accumulation).
The CPU (lscpu's model name, `cpu`, and its family, model, stepping and bf16 instruction sets, `cpu_id`) and
the commit are part of the JSON.

The process runs with posenc/malloc.py's settings, as the training scripts do (POSENC_MALLOC=system: glibc's
defaults; `scripts/benchmark_malloc.py` measures the difference).

With --profile, one more round runs under `jax.profiler` and the XLA ops that took the most time are
printed with their shapes (op times overlap when XLA runs independent ops concurrently, so they add up to
more than the step). The last line is JSON.
"""

from __future__ import annotations

import json
import os
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from posenc import checkpoint, data, malloc
from posenc.timing import code_version, cpu_bf16_flags, cpu_record, model_flops_per_token, profile_ops
from posenc.config import validate
from posenc.model import DTYPES, count_params
from posenc.train import load_config_file, make_optimizer, make_train_step
from posenc.xla_options import compiler_options

_STEPS = flags.DEFINE_integer("steps", 10, "Timed steps per round.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Rounds (the median round is reported).")
_TORCH = flags.DEFINE_bool("torch", False, "Also time the same model in PyTorch eager.")
_PROFILE = flags.DEFINE_bool("profile", False, "Print the XLA ops of the step that take the most time.")
_BATCH = flags.DEFINE_integer("batch_size", 8, "Batch size.")
_LEN = flags.DEFINE_integer("train_len", 512, "Sequence length.")
_BLOCK = flags.DEFINE_integer("attn_block", None, "model.attn_block (block-causal attention); default: the config's.")
_DTYPE = flags.DEFINE_enum("dtype", "float32", ["float32", "bfloat16"], "Training precision (bfloat16: mixed).")
_ACT = flags.DEFINE_enum("act_dtype", "auto", ["auto", *DTYPES],
                         "model.act_dtype: the activations between products (auto: bf16 on a GPU, float32 on a CPU).")
_WITHOUT = flags.DEFINE_list("without", [], "Ablations, to measure what each optimisation is worth: dense_vjp "
                             "(nnx.Linear's plain product and autodiff; under bf16 also bf16 results, which XLA:CPU "
                             "upcasts), attention_vjp (autodiff through the softmax).")
ABLATIONS = ("dense_vjp", "attention_vjp")


def apply_ablations(names) -> None:
    """Swap an optimisation for the plain version it replaced (before the model is built)."""
    import posenc.attention  # noqa: PLC0415
    import posenc.model  # noqa: PLC0415

    for name in names:
        if name == "dense_vjp":
            posenc.model.dense_dot_general = jax.lax.dot_general
        elif name == "attention_vjp":
            posenc.attention._softmax_attend = posenc.attention._softmax_attend.fun
        else:
            raise ValueError(f"--without: unknown ablation {name!r}; valid: {ABLATIONS}")


def matmul_peak(n: int = 2048, repeats: int = 20, dtype: str = "float32") -> float:
    """FLOP/s of the fastest of `repeats` jitted [n, n] @ [n, n] products in `dtype` (bf16: float32
    accumulation, as the model's products), compiled with the step's `compiler_options()` (the same library
    multiplies both)."""
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32).astype(dtype)
    f = jax.jit(lambda x: jnp.dot(x, x, preferred_element_type=jnp.float32), compiler_options=compiler_options())
    f(a).block_until_ready()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f(a).block_until_ready()
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / min(times)


def reference_config():
    config = load_config_file("configs/default.py", "posenc=rope")
    config.batch_size, config.train_len = _BATCH.value, _LEN.value
    config.model.d_model, config.model.num_layers, config.model.num_heads, config.model.mlp_dim = 256, 4, 4, 1024
    config.train_steps = 1000
    config.model.dtype = _DTYPE.value
    config.model.act_dtype = _ACT.value
    if _BLOCK.value is not None:
        config.model.attn_block = _BLOCK.value
    return config


def jax_runner(config):
    """A function `run(steps) -> tokens/s` that trains the reference model in JAX (compiled on creation)."""
    cfg = validate(config)
    tx, _ = make_optimizer(config)
    graphdef, _ = checkpoint.abstract_model(cfg)
    state = {"params": checkpoint.init_params(cfg, 0)}
    state["opt"] = tx.init(state["params"])
    step = make_train_step(graphdef, tx)
    corpus = data.load_corpus(config.data.path, config.data.cache_dir)
    batches = [data.train_batch(corpus.train, seed=0, step=i, batch_size=config.batch_size, length=config.train_len)
               for i in range(16)]

    def run(steps: int) -> float:
        params, opt_state = state["params"], state["opt"]
        t0 = time.perf_counter()
        for i in range(steps):
            x, y = batches[i % len(batches)]
            params, opt_state, metrics = step(params, opt_state, x, y)
        float(metrics["loss"])
        seconds = time.perf_counter() - t0
        state["params"], state["opt"] = params, opt_state
        return steps * config.batch_size * config.train_len / seconds

    run(2)  # compile + one warm step
    return run, step, state, batches[0]


def count_params_of(cfg):
    from flax import nnx  # noqa: PLC0415

    from posenc.model import Transformer  # noqa: PLC0415

    return count_params(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))


def torch_peer(config) -> dict:
    """What the PyTorch peer (`torch_runner`) takes from posenc's model and optimizer, so that both train the same
    thing: the MLP's GELU (`torch.nn.functional.gelu(approximate=...)`: "tanh" for posenc's `gelu_tanh`, "none"
    for the exact `gelu`), the norms' epsilon, and AdamW as `posenc.train.make_optimizer` builds it — betas,
    epsilon (optax's default, torch's too), peak learning rate, decoupled weight decay on the parameters of two or
    more axes only, the global gradient-norm clip applied before the update. posenc's warmup and cosine schedule
    are left out: one scalar a step, no work to time. The peer is written for the reference model's architecture
    (RMSNorm, no biases, untied head, half-layout RoPE); a config outside it is refused, naming the field."""
    cfg = validate(config)
    plain = {"norm": "rms", "qkv_bias": False, "out_bias": False, "mlp_bias": False, "qk_norm": False,
             "parallel_residual": False, "tie_embeddings": False, "posenc": "rope", "rope_layout": "half",
             "rope_fraction": 1.0, "head_size": 0, "attn_window": 0}
    for field, value in plain.items():
        if getattr(cfg, field) != value:
            raise ValueError(f"--torch: the PyTorch peer has model.{field}={value!r} only, got {getattr(cfg, field)!r}")
    if cfg.mlp_act not in ("gelu_tanh", "gelu") or cfg.kv_heads != cfg.num_heads:
        raise ValueError(f"--torch: the PyTorch peer has a GELU MLP (gelu_tanh or gelu) and one key-value head per "
                         f"head, got mlp_act={cfg.mlp_act!r}, {cfg.kv_heads} key-value heads for {cfg.num_heads}")
    return {"gelu_approximate": "tanh" if cfg.mlp_act == "gelu_tanh" else "none", "norm_eps": cfg.norm_eps,
            "lr": config.learning_rate, "betas": [config.b1, config.b2], "eps": 1e-8,
            "weight_decay": config.weight_decay, "decayed": "parameters of 2 or more axes",
            "grad_clip": config.grad_clip}


def torch_runner(config):
    """The same model in PyTorch eager, with posenc's settings (`torch_peer`): `run(steps) -> tokens/s`."""
    import torch  # noqa: PLC0415
    import torch.nn.functional as F  # noqa: PLC0415

    peer = torch_peer(config)
    m = config.model
    d, h, t = m.d_model, m.num_heads, config.train_len
    hd = d // h
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, hd, 2).float() / hd))
    ang = torch.arange(t).float()[:, None] * inv_freq
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)

    def rope(x):  # [B, N, T, H], rotate_half
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = torch.nn.RMSNorm(d, eps=peer["norm_eps"]), torch.nn.RMSNorm(d, eps=peer["norm_eps"])
            self.qkv, self.o = torch.nn.Linear(d, 3 * d, bias=False), torch.nn.Linear(d, d, bias=False)
            self.fc, self.proj = torch.nn.Linear(d, m.mlp_dim, bias=False), torch.nn.Linear(m.mlp_dim, d, bias=False)

        def forward(self, x):
            b = x.shape[0]
            q, k, v = self.qkv(self.n1(x)).view(b, t, 3, h, hd).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
            x = x + self.o(y.transpose(1, 2).reshape(b, t, d))
            return x + self.proj(F.gelu(self.fc(self.n2(x)), approximate=peer["gelu_approximate"]))

    model = torch.nn.Sequential(torch.nn.Embedding(256, d), *[Block() for _ in range(m.num_layers)],
                                torch.nn.RMSNorm(d, eps=peer["norm_eps"]), torch.nn.Linear(d, 256, bias=False))
    params = list(model.parameters())
    opt = torch.optim.AdamW([{"params": [p for p in params if p.ndim >= 2], "weight_decay": peer["weight_decay"]},
                             {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}],
                            lr=peer["lr"], betas=tuple(peer["betas"]), eps=peer["eps"])
    x = torch.randint(0, 256, (config.batch_size, t))

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=config.model.dtype == "bfloat16"):
            logits = model(x)
        loss = F.cross_entropy(logits.float().view(-1, 256), x.view(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, peer["grad_clip"])
        opt.step()

    def run(steps: int) -> float:
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        return steps * config.batch_size * t / (time.perf_counter() - t0)

    run(2)
    return run, torch.get_num_threads(), peer


def main(argv):
    del argv
    malloc.keep_buffers()  # as the training scripts run: posenc/malloc.py
    apply_ablations(_WITHOUT.value)
    config = reference_config()
    m = config.model
    cfg = validate(config)
    n_params = count_params_of(cfg)
    flops = model_flops_per_token(n_params, cfg.vocab_size, m.d_model, m.num_layers, config.train_len)
    flops_per_token = flops["palm"]
    peak = matmul_peak(dtype=_DTYPE.value)
    run_jax, step, state, batch = jax_runner(config)
    run_torch, torch_threads, peer = torch_runner(config) if _TORCH.value else (None, None, None)
    jax_tps, torch_tps = [], []
    for _ in range(_ROUNDS.value):  # alternate, so both see the same machine load
        jax_tps.append(run_jax(_STEPS.value))
        if run_torch:
            torch_tps.append(run_torch(_STEPS.value))
    peak = max(peak, matmul_peak(dtype=_DTYPE.value))  # again after the rounds: the machine's best of both moments
    tps = float(np.median(jax_tps))
    result = {"tokens_per_s": tps, "mfu": tps * flops_per_token / peak, "mfu_causal": tps * flops["causal"] / peak,
              "matmul_peak_gflops": peak / 1e9, "model_gflops_per_s": tps * flops_per_token / 1e9,
              "flops_per_token": flops_per_token, "causal_flops_per_token": flops["causal"], "params": n_params,
              "vocab_size": cfg.vocab_size, "d_model": m.d_model, "num_layers": m.num_layers, "num_heads": m.num_heads,
              "mlp_dim": m.mlp_dim,
              "rounds_tokens_per_s": jax_tps, "steps": _STEPS.value,
              "batch_size": config.batch_size, "train_len": config.train_len, "attn_block": m.attn_block,
              "without": _WITHOUT.value, "dtype": _DTYPE.value, "act_dtype": _ACT.value, **cpu_record(),
              "xla_flags": os.environ.get("XLA_FLAGS", ""), "commit": code_version(), "cpu_bf16": cpu_bf16_flags(),
              "backend": jax.default_backend(), "devices": len(jax.devices()), "jax": jax.__version__,
              "compiler_options": compiler_options()}
    print(f"JAX: {tps:.0f} tokens/s (rounds: {', '.join(f'{r:.0f}' for r in jax_tps)}), "
          f"{result['model_gflops_per_s']:.1f} GFLOP/s of model FLOPs; {_DTYPE.value} matmul peak {peak / 1e9:.1f} GFLOP/s; "
          f"MFU {result['mfu']:.1%} (PaLM's 6N + 12·L·d·T; causal 6N + 6·L·d·T: {result['mfu_causal']:.1%})")
    if run_torch:
        ratio = float(np.median(np.asarray(jax_tps) / np.asarray(torch_tps)))
        import torch  # noqa: PLC0415

        result.update(torch_tokens_per_s=float(np.median(torch_tps)), rounds_torch_tokens_per_s=torch_tps,
                      jax_over_torch=ratio, torch=torch.__version__, torch_threads=torch_threads, torch_peer=peer)
        print(f"PyTorch eager ({torch_threads} threads): {result['torch_tokens_per_s']:.0f} tokens/s "
              f"(rounds: {', '.join(f'{r:.0f}' for r in torch_tps)}); JAX / PyTorch = {ratio:.2f} (median of rounds)")
    if _PROFILE.value:
        result["profile"] = profile_ops(step, state["params"], state["opt"], *batch)
        print("XLA ops with the most time per step (ms, shape, source):")
        for row in result["profile"]:
            print(f"  {row['ms']:7.2f}  {row['op']:32s} {row['shape']:28s} {row['source'][:70]}")
    print(json.dumps(result))


if __name__ == "__main__":
    app.run(main)
