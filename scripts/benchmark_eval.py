r"""Evaluation throughput: forward tokens/s of the extrapolation evaluation against PyTorch SDPA.

    python scripts/benchmark_eval.py [--lengths=4096,16384,32768] [--rounds=3] [--profile] [--out=FILE.json]

The reference model (RoPE, d_model 256, 4 layers, 4 heads, MLP 1024, bytes; random weights), one window of
L tokens: posenc's jitted per-position NLL exactly as `scripts/eval_extrapolation.py` runs it
(`posenc.evaluate.Evaluator`, queries in chunks of `--attn_chunk`, keys in tiles of `--attn_key_block` with the
online softmax), against the same model in PyTorch
(`torch.nn.functional.scaled_dot_product_attention(is_causal=True)`, which picks its own fused CPU kernel,
under `torch.inference_mode`), with the same weights. Rounds alternate between the two, each scoring
`--round_tokens` tokens (the window repeated); the ratio is the median of the per-round ratios (JAX tokens/s /
PyTorch tokens/s). With --profile, posenc's forward is then traced at each length, and the XLA ops that took the
most time are printed and kept in its row (`posenc.timing.profile_calls`). Needs `pip install torch==2.13.0`. The
last line is JSON, with the CPU model. The process runs with posenc/malloc.py's settings, as
`eval_extrapolation.py` does (`malloc_keep_buffers` in the result: whether they applied).
"""

from __future__ import annotations

import time

import jax
import ml_collections
import numpy as np
from absl import app, flags
from flax import nnx

from posenc import attention, evaluate, malloc
from posenc.config import parse_lengths
from posenc.xla_options import compiler_options
from posenc.model import ModelConfig, Transformer
from posenc.rope_scaling import RopeScaling
from posenc.timing import code_version, cpu_record, emit, profile_calls
from posenc.evaluate import ATTN_CHUNK

_LENGTHS = flags.DEFINE_list("lengths", ["4096", "16384", "32768"], "Window lengths.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Alternating rounds (median of the ratios).")
_ROUND_TOKENS = flags.DEFINE_integer("round_tokens", 32768, "Tokens each side scores per round: windows of L are "
                                     "repeated to this many, so that a round at 4k is not a fraction of a second.")
_CHUNK = flags.DEFINE_integer("attn_chunk", ATTN_CHUNK, "posenc's attention query chunk (as in the evaluation).")
_KEY_BLOCK = flags.DEFINE_integer("attn_key_block", ModelConfig.attn_key_block,
                                  "posenc's key tile within a query chunk (model.attn_key_block; 0: all keys at once).")
_GROUPS = flags.DEFINE_integer("head_groups", None, "Independent loops the chunked attention splits its heads into "
                               "(default: posenc.attention.head_groups, 2 on CPU).")
_D_MODEL = flags.DEFINE_integer("d_model", 256, "Model width (tests shrink it).")
_PROFILE = flags.DEFINE_bool("profile", False, "Also trace posenc's forward at each length and keep its top XLA ops.")
_OUT = flags.DEFINE_string("out", None, "Also write the JSON here.")


def torch_forward(model: Transformer):
    """The posenc model's forward (per-position NLL) in PyTorch with its weights: a function of int tokens."""
    import torch  # noqa: PLC0415
    import torch.nn.functional as F  # noqa: PLC0415

    cfg = model.cfg
    t = lambda a: torch.from_numpy(np.array(a[...], np.float32))  # noqa: E731  (a writable copy for torch)
    d, n, h = cfg.d_model, cfg.num_heads, cfg.head_dim
    blocks = [{"n1": t(b.norm1.scale), "qkv": t(b.attn.qkv.kernel), "out": t(b.attn.out.kernel),
               "n2": t(b.norm2.scale), "fc": t(b.fc.kernel), "proj": t(b.proj.kernel)} for b in model.blocks]
    emb, final, head = t(model.embed.embedding), t(model.final_norm.scale), t(model.head.kernel)
    inv_freq = 1.0 / (cfg.rope_base ** (torch.arange(0, h, 2, dtype=torch.float64) / h))

    def rms(x, scale):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * scale

    def forward(tokens: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            x_ids = torch.from_numpy(tokens).long()
            length = x_ids.shape[1]
            ang = (torch.arange(length, dtype=torch.float64)[:, None] * inv_freq).float()
            cos, sin = ang.cos(), ang.sin()

            def rope(v):  # [B, N, T, H], half layout
                a, b = v[..., : h // 2], v[..., h // 2:]
                return torch.cat([a * cos - b * sin, b * cos + a * sin], -1)

            x = emb[x_ids]
            for p in blocks:
                q, k, v = (rms(x, p["n1"]) @ p["qkv"]).view(x.shape[0], length, 3, n, h).permute(2, 0, 3, 1, 4)
                y = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
                x = x + y.transpose(1, 2).reshape(x.shape[0], length, d) @ p["out"]
                x = x + F.gelu(rms(x, p["n2"]) @ p["fc"], approximate="tanh") @ p["proj"]
            logits = rms(x, final) @ head
            nll = F.cross_entropy(logits[:, :-1].reshape(-1, cfg.vocab_size), x_ids[:, 1:].reshape(-1),
                                  reduction="none")
            return nll.numpy()

    return forward


def main(argv):
    del argv
    kept = malloc.keep_buffers()  # as eval_extrapolation.py runs: posenc/malloc.py
    import torch  # noqa: PLC0415

    if _ROUND_TOKENS.value < 1:
        raise app.UsageError(f"--round_tokens must be >= 1, got {_ROUND_TOKENS.value}")
    groups = attention.head_groups(4) if _GROUPS.value is None else _GROUPS.value
    if _GROUPS.value is not None:  # the one place that chooses, overridden for the measurement
        if _GROUPS.value not in (1, 2, 4):
            raise app.UsageError(f"--head_groups must divide the model's 4 heads (1, 2 or 4), got {_GROUPS.value}")
        attention.head_groups = lambda num_heads, backend=None: _GROUPS.value
    cfg = ModelConfig(posenc="rope", max_len=256, d_model=_D_MODEL.value, num_heads=4, mlp_dim=4 * _D_MODEL.value,
                      attn_key_block=_KEY_BLOCK.value)
    model = Transformer(cfg, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model)
    run = evaluate.Run("bench", "bench", ml_collections.ConfigDict({"train_len": 256}), cfg, graphdef, params, 0)
    rows = []
    for length in parse_lengths(_LENGTHS.value, "--lengths"):
        ev = evaluate.Evaluator(run, attn_chunk=_CHUNK.value, tokens_per_batch=length)
        x = np.random.default_rng(0).integers(0, 256, (1, length + 1)).astype(np.int32)
        ours = lambda: ev.nll(x[:, :-1], x[:, 1:], RopeScaling())  # noqa: E731
        theirs = torch_forward(model)
        a, b = ours()[0, :-1], theirs(x[:, :-1])  # compile; and the same numbers (posenc scores the last target too)
        agree = float(np.abs(a - b).max())
        jax_tps, torch_tps = [], []
        repeats = max(1, _ROUND_TOKENS.value // length)
        for _ in range(_ROUNDS.value):
            t0 = time.perf_counter()
            for _ in range(repeats):
                ours()
            jax_tps.append(repeats * length / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            for _ in range(repeats):
                theirs(x[:, :-1])
            torch_tps.append(repeats * length / (time.perf_counter() - t0))
        ratio = float(np.median(np.asarray(jax_tps) / np.asarray(torch_tps)))
        rows.append({"length": length, "jax_tokens_per_s": float(np.median(jax_tps)),
                     "torch_tokens_per_s": float(np.median(torch_tps)), "ratio": ratio, "max_abs_nll_diff": agree,
                     "rounds_jax": jax_tps, "rounds_torch": torch_tps})
        print(f"L={length}: posenc {rows[-1]['jax_tokens_per_s']:.0f} tokens/s, PyTorch SDPA "
              f"{rows[-1]['torch_tokens_per_s']:.0f} tokens/s, ratio {ratio:.2f} (NLLs agree to {agree:.1e})")
        if _PROFILE.value:
            rows[-1]["profile"] = profile_calls(ours, ev.compiled_text(x[:, :-1], x[:, 1:], RopeScaling()), top=500)
            for op in rows[-1]["profile"][:20]:
                print(f"  {op['ms']:8.1f} ms  {op['op']:32s} {op['shape']:28s} {op['source'][:70]}")
    result = {"rows": rows, "attn_chunk": _CHUNK.value, "attn_key_block": _KEY_BLOCK.value, "head_groups": groups, "round_tokens": _ROUND_TOKENS.value, "d_model": _D_MODEL.value, "rounds": _ROUNDS.value,
              **cpu_record(), "commit": code_version(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
              "jax": jax.__version__, "compiler_options": compiler_options(), "malloc_keep_buffers": kept}
    emit(result, _OUT.value)


if __name__ == "__main__":
    app.run(main)
