r"""Training throughput on an accelerator: the reference model and a GPT-2-small-sized one, bf16, MFU.

    pip install -e '.[cuda]'
    python scripts/benchmark_gpu.py [--models=reference,gpt2_small] [--steps=20] [--rounds=3] [--batch_size=16]
        [--attn_impl=auto] [--act_dtype=auto] [--profile=MODEL] [--peak_tflops=TFLOPS] [--out=FILE.json]

Models (posenc's Transformer, RoPE, AdamW, mixed precision `model.dtype=bfloat16`: float32 parameters,
bf16 products; attention through the one chooser `posenc.attention.implementation`, i.e. cuDNN's fused
kernel on a GPU):
  * `reference`: d_model 256, 4 layers, 4 heads, MLP 1024, bytes, train_len 512, batch 8 (the CPU benchmark's);
  * `gpt2_small`: d_model 768, 12 layers, 12 heads, MLP 3072, vocab 50304, T 1024 (124M parameters), batch
    `--batch_size` (default 16).
Each round times `steps` jitted steps on random tokens (compilation excluded); the median round is reported.
MFU = model FLOP/s (6·N + 12·layers·d_model·T per token, PaLM App. B, nanoGPT's convention: attention over
all T×T query-key pairs) / the device's dense bf16 peak; `mfu_causal` counts 6·N + 6·layers·d_model·T, the
pairs the causal model attends (`posenc.timing.model_flops_per_token`). The peak: `--peak_tflops` if given,
else the data sheet's for the device's `device_kind` (`device_peak`: the most specific variant in
`BF16_PEAKS` wins, "H100 PCIe" over "H100", "L40" apart from "L4"); an accelerator the table does not know is
refused (pass its dense bf16 peak with `--peak_tflops`); on a CPU, the best bf16 matmul measured here
(`peak_source` says which). The measured matmul is reported either way. `--profile=MODEL` adds the ops of that model's step with
the most device time (`posenc.timing.profile_ops`) and keeps the trace beside `--out`. The last line is JSON; its
`commit` is POSENC_COMMIT where set (the GPU machine's copy, whose git is not the code's: gpu_check.sh sets it
from COMMIT), else `posenc.timing.code_version()`; its `stack` the software measured (`software_stack`: the
imported packages' versions, the jax plugins, CUDA, cuDNN and the NVIDIA driver). `--tiny` shrinks everything,
so that the path runs on a CPU in tests.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.metadata
import os
import re
import subprocess
import time

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
from absl import app, flags
from flax import nnx

from posenc import checkpoint
from posenc.attention import IMPLEMENTATIONS, implementation
from posenc.config import validate
from posenc.model import DTYPES, Transformer, activation_dtype, count_params
from posenc.timing import code_version, cpu_id, cpu_model, emit, model_flops_per_token, profile_ops
from posenc.train import load_config_file, make_optimizer, make_train_step

_MODELS = flags.DEFINE_list("models", ["reference", "gpt2_small"], "Models to time.")
_STEPS = flags.DEFINE_integer("steps", 20, "Timed steps per round.")
_ROUNDS = flags.DEFINE_integer("rounds", 3, "Rounds (median).")
_BATCH = flags.DEFINE_integer("batch_size", 16, "Batch size of gpt2_small.")
_TINY = flags.DEFINE_bool("tiny", False, "Tiny shapes (the CPU test of this script).")
_ATTN = flags.DEFINE_enum("attn_impl", "auto", list(IMPLEMENTATIONS),
                          "model.attn_impl: auto takes cuDNN's fused kernel on a GPU, posenc this package's attention.")
_PROFILE = flags.DEFINE_string("profile", None, "Also profile one model's step (a name from --models): its ops "
                               "with the most device time go into its row; the trace is kept beside --out.")
_ACT = flags.DEFINE_enum("act_dtype", "auto", ["auto", *DTYPES],
                         "model.act_dtype: the activations between products (auto: bf16 on a GPU, float32 on a CPU).")
_OUT = flags.DEFINE_string("out", None, "Also write the JSON here.")
_PEAK = flags.DEFINE_float("peak_tflops", None, "The device's dense bf16 peak in TFLOP/s, for MFU (default: the "
                           "data sheet's for a device in BF16_PEAKS; required for any other accelerator).")

# Dense bf16 tensor-core peaks (FLOP/s, without sparsity) from the vendors' data sheets, by the words of a
# device_kind that name the variant ("NVIDIA H100 PCIe" → ("h100", "pcie")). A bare model ("h100", "h200") is
# its SXM board, whose device_kind names no variant ("NVIDIA H100 80GB HBM3", "NVIDIA H200").
BF16_PEAKS = {("h100",): 989.4e12, ("h100", "pcie"): 756e12, ("h100", "nvl"): 835e12,
              ("h200",): 989.4e12, ("h200", "nvl"): 835e12, ("a100",): 312e12, ("l40s",): 362e12,
              ("l40",): 181e12, ("l4",): 121e12, ("a10g",): 70e12, ("rtx", "4090"): 165.2e12}
SHAPES = {
    "reference": dict(d_model=256, num_layers=4, num_heads=4, mlp_dim=1024, vocab_size=256, train_len=512, batch=8),
    "gpt2_small": dict(d_model=768, num_layers=12, num_heads=12, mlp_dim=3072, vocab_size=50304, train_len=1024,
                       batch=None),
}
TINY = dict(d_model=32, num_layers=2, num_heads=2, mlp_dim=64, vocab_size=256, train_len=64, batch=2)


def device_peak(kind: str) -> float | None:
    """The data sheet's dense bf16 peak (FLOP/s) of a device_kind: of the `BF16_PEAKS` entries all of whose words
    are words of `kind` (whole words: "l4" is not in "NVIDIA L40"), the one with the most words; None if none."""
    words = set(re.findall(r"[a-z0-9]+", kind.lower()))
    matches = [key for key in BF16_PEAKS if words.issuperset(key)]
    return BF16_PEAKS[max(matches, key=len)] if matches else None


def resolve_peak(kind: str, backend: str, peak_tflops: float | None, measured: float) -> tuple[float, str]:
    """The peak MFU divides by (FLOP/s) and where it comes from: `peak_tflops` (the flag) if given, else the data
    sheet's (`device_peak`), else on a CPU the `measured` bf16 matmul; an accelerator without a known peak is a
    usage error naming --peak_tflops."""
    if peak_tflops is not None:
        if peak_tflops <= 0:
            raise app.UsageError(f"--peak_tflops={peak_tflops}: must be a positive number of TFLOP/s")
        return peak_tflops * 1e12, "--peak_tflops"
    table = device_peak(kind)
    if table is not None:
        return table, f"data sheet ({kind})"
    if backend == "cpu":
        return measured, "measured bf16 matmul"
    known = ", ".join(" ".join(key).upper() for key in BF16_PEAKS)
    raise app.UsageError(f"no data-sheet bf16 peak for device {kind!r} (known: {known}); pass its dense bf16 peak "
                         "(without sparsity) in TFLOP/s, e.g. --peak_tflops=989.4")


# The imported modules whose versions a result records, by the distribution that installs each.
STACK_MODULES = {"jax": "jax", "jaxlib": "jaxlib", "flax": "flax", "optax": "optax",
                 "orbax.checkpoint": "orbax-checkpoint", "ml_collections": "ml-collections", "numpy": "numpy"}
PLUGIN = re.compile(r"jax[-_.](cuda|rocm)\d*[-_.]")  # jax-cuda12-plugin, jax-cuda12-pjrt, jax-rocm7-plugin, ...


def cuda_version_text(version: int | None) -> str | None:
    """CUDA's integer version (1000·major + 10·minor: 12080) as "12.8"."""
    return None if version is None else f"{version // 1000}.{version % 1000 // 10}"


def cudnn_version_text(version: int | None) -> str | None:
    """cuDNN's integer version as "major.minor.patch": 10000·major + 100·minor + patch from cuDNN 9 (91002:
    9.10.2), 1000·major + 100·minor + patch before it (8907: 8.9.7)."""
    if version is None:
        return None
    major, rest = divmod(version, 10000) if version >= 90000 else divmod(version, 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def software_stack() -> dict:
    """The software a run measured, for its result (a log is not rendered into the README): each module of
    `STACK_MODULES` as imported (its `__version__`, else its distribution's), every installed jax plugin
    distribution ("jax-cuda12-plugin": version), and on a CUDA backend the CUDA runtime, the CUDA driver API and
    cuDNN that jax loaded (`jax._src.lib.cuda_versions`) and the NVIDIA driver (nvidia-smi's driver_version).
    A version that cannot be read is None."""
    from jax._src import lib as jax_lib  # noqa: PLC0415  (cuda_versions: None without a CUDA plugin)

    stack = {}
    for module, dist in STACK_MODULES.items():
        try:
            stack[dist] = getattr(importlib.import_module(module), "__version__", None) or importlib.metadata.version(dist)
        except (ImportError, importlib.metadata.PackageNotFoundError):
            stack[dist] = None
    plugins = {}
    for d in importlib.metadata.distributions():  # the first found on sys.path is the one imported
        name = d.metadata["Name"] or ""
        if PLUGIN.match(name.lower()):
            plugins.setdefault(name, d.version)
    stack["plugins"] = dict(sorted(plugins.items()))
    cuda = getattr(jax_lib, "cuda_versions", None) if jax.default_backend() == "gpu" else None

    def read(fn: str) -> int | None:
        try:
            return int(getattr(cuda, fn)())
        except Exception:  # noqa: BLE001  (a plugin build without that reader, or a library it cannot load)
            return None

    stack["cuda_runtime"] = cuda_version_text(read("cuda_runtime_get_version")) if cuda else None
    stack["cuda_driver_api"] = cuda_version_text(read("cuda_driver_get_version")) if cuda else None
    stack["cudnn"] = cudnn_version_text(read("cudnn_get_version")) if cuda else None
    stack["nvidia_driver"] = None
    if jax.default_backend() == "gpu":
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20, check=True).stdout.split()
            stack["nvidia_driver"] = out[0] if out else None
        except (OSError, subprocess.SubprocessError):
            pass
    return stack


def bf16_matmul_peak(n: int, repeats: int = 10) -> float:
    a = jax.random.normal(jax.random.key(0), (n, n), jnp.float32).astype(jnp.bfloat16)
    f = jax.jit(lambda x: jnp.dot(x, x, preferred_element_type=jnp.float32))
    f(a).block_until_ready()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        f(a).block_until_ready()
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def make_config(shape: dict) -> ml_collections.ConfigDict:
    config = load_config_file("configs/default.py", "posenc=rope")
    m = config.model
    m.d_model, m.num_layers, m.num_heads, m.mlp_dim = (shape[k] for k in ("d_model", "num_layers", "num_heads", "mlp_dim"))
    m.dtype = "bfloat16"
    m.attn_impl = _ATTN.value
    m.act_dtype = _ACT.value
    config.train_len, config.batch_size, config.train_steps = shape["train_len"], shape["batch"], 1000
    return config


def time_model(name: str, shape: dict) -> dict:
    config = make_config(shape)
    cfg = dataclasses.replace(validate(config), vocab_size=shape["vocab_size"])
    tx, _ = make_optimizer(config)
    graphdef, abstract = checkpoint.abstract_model(cfg)
    params = checkpoint.init_params(cfg, 0)
    opt_state = tx.init(params)
    step = make_train_step(graphdef, tx)
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.integers(0, shape["vocab_size"], (shape["batch"], shape["train_len"])), jnp.int32)
    params, opt_state, metrics = step(params, opt_state, x, x)  # compile
    float(metrics["loss"])
    rounds = []
    for _ in range(_ROUNDS.value):
        t0 = time.perf_counter()
        for _ in range(_STEPS.value):
            params, opt_state, metrics = step(params, opt_state, x, x)
        float(metrics["loss"])
        rounds.append(_STEPS.value * shape["batch"] * shape["train_len"] / (time.perf_counter() - t0))
    n_params = count_params(nnx.eval_shape(lambda: Transformer(cfg, rngs=nnx.Rngs(0))))
    counts = model_flops_per_token(n_params, cfg.vocab_size, cfg.d_model, cfg.num_layers, shape["train_len"])
    flops = counts["palm"]
    impl = implementation(cfg.attn_impl, aligned=True, has_bias=False, plain=True, dtype=jnp.bfloat16,
                          head_dim=cfg.head_dim)
    tps = float(np.median(rounds))
    row = {"model": name, "params": n_params, "tokens_per_s": tps, "rounds_tokens_per_s": rounds,
           "model_tflops_per_s": tps * flops / 1e12, "flops_per_token": flops,
           "causal_flops_per_token": counts["causal"], "d_model": cfg.d_model, "num_layers": cfg.num_layers,
           "vocab_size": cfg.vocab_size, "batch_size": shape["batch"],
           "train_len": shape["train_len"], "attention": impl, "activations": str(activation_dtype(cfg))}
    if _PROFILE.value == name:
        trace = _OUT.value.removesuffix(".json") + f"_{name}.trace.json.gz" if _OUT.value else None
        row["profile"] = profile_ops(step, params, opt_state, x, x, top=25, keep_trace=trace)
        for op in row["profile"]:
            print(f"  {op['ms']:8.3f} ms {op['share']:6.1%}  {op['op'][:50]:50s} {op['shape'][:36]:36s} "
                  f"{op['source'][-60:]}")
    return row


def main(argv):
    del argv
    for name in _MODELS.value:
        if name not in SHAPES:
            raise app.UsageError(f"--models: unknown {name!r}; valid: {sorted(SHAPES)}")
    if _PROFILE.value is not None and _PROFILE.value not in _MODELS.value:
        raise app.UsageError(f"--profile: {_PROFILE.value!r} is not among --models {_MODELS.value}")
    dev = jax.devices()[0]
    kind = getattr(dev, "device_kind", dev.platform)
    resolve_peak(kind, jax.default_backend(), _PEAK.value, 0.0)  # a bad --peak_tflops or unknown device: before timing
    measured = bf16_matmul_peak(256 if _TINY.value else 8192)
    peak, source = resolve_peak(kind, jax.default_backend(), _PEAK.value, measured)
    rows = []
    for name in _MODELS.value:
        shape = dict(TINY) if _TINY.value else dict(SHAPES[name])
        shape["batch"] = shape["batch"] or _BATCH.value
        row = time_model(name, shape)
        row["mfu"] = row["model_tflops_per_s"] * 1e12 / peak
        row["mfu_causal"] = row["tokens_per_s"] * row["causal_flops_per_token"] / peak
        rows.append(row)
        print(f"{name}: {row['params'] / 1e6:.1f}M parameters, {row['tokens_per_s']:.0f} tokens/s, "
              f"{row['model_tflops_per_s']:.1f} TFLOP/s, MFU {row['mfu']:.1%} (PaLM's count; causal count "
              f"{row['mfu_causal']:.1%}) (attention: {row['attention']})")
    result = {"device": kind, "backend": jax.default_backend(), "peak_tflops": peak / 1e12, "peak_source": source,
              "measured_bf16_matmul_tflops": measured / 1e12, "rows": rows, "tiny": _TINY.value,
              "host_cpu": cpu_model(), "host_cpu_id": cpu_id(), "jax": jax.__version__, "attn_impl": _ATTN.value,
              "commit": os.environ.get("POSENC_COMMIT") or code_version(),
              "steps": _STEPS.value, "stack": software_stack()}
    print(f"peak: {peak / 1e12:.0f} TFLOP/s ({source}); measured bf16 matmul {measured / 1e12:.0f} TFLOP/s")
    emit(result, _OUT.value)


if __name__ == "__main__":
    app.run(main)
