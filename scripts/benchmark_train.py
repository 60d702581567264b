r"""Training throughput of the reference model, against the matmul peak measured in the same run.

    python scripts/benchmark_train.py [--steps=10] [--torch]

Reference model: bytes, d_model 256, 4 layers, 4 heads, MLP 1024 (GELU), RMSNorm, RoPE, train_len 512,
batch 8, float32, AdamW. Times the jitted train step (compilation excluded), and a 2048x2048 float32
matmul (the machine's peak for this workload). Model FLOPs per token (PaLM, arXiv 2204.02311, App. B):
6·N (N = non-embedding parameters, head included) + 12·layers·d_model·T. MFU = model FLOP/s / peak.
With --torch (needs `pip install torch==2.13.0`), the same model in PyTorch eager is timed too and the
ratio printed. The last line is JSON.
"""

from __future__ import annotations

import json
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags

from posenc import checkpoint, data
from posenc.config import validate
from posenc.model import count_params
from posenc.train import load_config_file, make_optimizer, make_train_step

_STEPS = flags.DEFINE_integer("steps", 10, "Timed steps.")
_TORCH = flags.DEFINE_bool("torch", False, "Also time the same model in PyTorch eager.")
_BATCH = flags.DEFINE_integer("batch_size", 8, "Batch size.")
_LEN = flags.DEFINE_integer("train_len", 512, "Sequence length.")
_BLOCK = flags.DEFINE_integer("attn_block", None, "model.attn_block (block-causal attention); default: the config's.")


def matmul_peak(n: int = 2048, repeats: int = 10) -> float:
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32)
    f = jax.jit(lambda x: x @ x)
    f(a).block_until_ready()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        f(a).block_until_ready()
        times.append(time.perf_counter() - t0)
    return 2 * n**3 / float(np.median(times))


def reference_config():
    config = load_config_file("configs/default.py", "posenc=rope")
    config.batch_size, config.train_len = _BATCH.value, _LEN.value
    config.model.d_model, config.model.num_layers, config.model.num_heads, config.model.mlp_dim = 256, 4, 4, 1024
    config.train_steps = 1000
    if _BLOCK.value is not None:
        config.model.attn_block = _BLOCK.value
    return config


def time_jax(config, steps: int) -> float:
    cfg = validate(config)
    tx, _ = make_optimizer(config)
    graphdef, _ = checkpoint.abstract_model(cfg)
    params = checkpoint.init_params(cfg, 0)
    opt_state = tx.init(params)
    step = make_train_step(graphdef, tx)
    corpus = data.load_corpus(config.data.path, config.data.cache_dir)
    batches = [data.train_batch(corpus.train, seed=0, step=i, batch_size=config.batch_size, length=config.train_len)
               for i in range(steps + 2)]
    for x, y in batches[:2]:  # compile + one warm step
        params, opt_state, loss, _ = step(params, opt_state, x, y)
    float(loss)
    t0 = time.perf_counter()
    for x, y in batches[2:]:
        params, opt_state, loss, _ = step(params, opt_state, x, y)
    float(loss)
    return steps * config.batch_size * config.train_len / (time.perf_counter() - t0), count_params_of(cfg)


def count_params_of(cfg):
    from flax import nnx  # noqa: PLC0415

    from posenc.model import Transformer  # noqa: PLC0415

    return count_params(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))


def time_torch(config, steps: int) -> float:
    import torch  # noqa: PLC0415
    import torch.nn.functional as F  # noqa: PLC0415

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
            self.n1, self.n2 = torch.nn.RMSNorm(d), torch.nn.RMSNorm(d)
            self.qkv, self.o = torch.nn.Linear(d, 3 * d, bias=False), torch.nn.Linear(d, d, bias=False)
            self.fc, self.proj = torch.nn.Linear(d, m.mlp_dim, bias=False), torch.nn.Linear(m.mlp_dim, d, bias=False)

        def forward(self, x):
            b = x.shape[0]
            q, k, v = self.qkv(self.n1(x)).view(b, t, 3, h, hd).permute(2, 0, 3, 1, 4)
            y = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
            x = x + self.o(y.transpose(1, 2).reshape(b, t, d))
            return x + self.proj(F.gelu(self.fc(self.n2(x))))

    model = torch.nn.Sequential(torch.nn.Embedding(256, d), *[Block() for _ in range(m.num_layers)],
                                torch.nn.RMSNorm(d), torch.nn.Linear(d, 256, bias=False))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 256, (config.batch_size, t))

    def step():
        loss = F.cross_entropy(model(x).view(-1, 256), x.view(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()
    step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * config.batch_size * t / (time.perf_counter() - t0)


def main(argv):
    del argv
    config = reference_config()
    peak = matmul_peak()
    tps, n_params = time_jax(config, _STEPS.value)
    m = config.model
    n_nonembed = n_params - 256 * m.d_model
    flops_per_token = 6 * n_nonembed + 12 * m.num_layers * m.d_model * config.train_len
    result = {"tokens_per_s": tps, "mfu": tps * flops_per_token / peak, "matmul_peak_gflops": peak / 1e9,
              "model_gflops_per_s": tps * flops_per_token / 1e9, "params": n_params,
              "backend": jax.default_backend(), "devices": len(jax.devices()), "attn_block": config.model.attn_block}
    print(f"JAX: {tps:.0f} tokens/s, {tps * flops_per_token / 1e9:.1f} GFLOP/s of model FLOPs; "
          f"float32 matmul peak {peak / 1e9:.1f} GFLOP/s; MFU {result['mfu']:.1%}")
    if _TORCH.value:
        ttps = time_torch(config, _STEPS.value)
        result.update(torch_tokens_per_s=ttps, jax_over_torch=tps / ttps)
        print(f"PyTorch eager: {ttps:.0f} tokens/s; JAX / PyTorch = {tps / ttps:.2f}")
    print(json.dumps(result))


if __name__ == "__main__":
    app.run(main)
