"""Writes experiments/benchmarks/README.md from the JSON lines that run.sh saved.

    python experiments/benchmarks/report.py

Importing it renders the text (`text`) without writing it; running it writes README.md and prints it.
"""

import ast
import collections
import gzip
import json
import pathlib
import re
import statistics

from posenc.timing import cpu_description, cpu_identity, model_flops_per_token
from posenc.xla_options import ONEDNN_DOTS

HERE = pathlib.Path(__file__).resolve().parent
# The shape of scripts/benchmark_train.py's reference model (reference_config), for results that do not record it
REFERENCE = {"vocab_size": 256, "d_model": 256, "num_layers": 4, "num_heads": 4, "mlp_dim": 1024}  # results that record no shape
ROWS = [
    ("current", "current (all of the below)", "(none)"),
    ("without_dense_vjp", "without the dense layers' backward", "--without=dense_vjp"),
    ("without_attention_vjp", "without attention's hand-written backward", "--without=attention_vjp"),
    ("without_block_causal", "without block-causal attention", "--attn_block=0"),
    ("baseline", "none of the three (the first version)", "--without=dense_vjp,attention_vjp --attn_block=0"),
]
res = {name: json.loads((HERE / f"{name}.json").read_text()) for name, _, _ in ROWS if (HERE / f"{name}.json").exists()}
cur = res["current"]
cpu = (HERE / "cpu.txt").read_text().strip() if (HERE / "cpu.txt").exists() else "?"


def flop_counts(r: dict, shape: dict) -> dict:
    """A result's training FLOPs a token in PaLM's count and the causal one (`posenc.timing.model_flops_per_token`),
    from its parameter count and length and its model's shape (the result's own fields where it records them,
    else `shape`, its script's config); an error if they do not reproduce the PaLM count the result stored."""
    dims = {k: r.get(k, v) for k, v in shape.items() if k in ("vocab_size", "d_model", "num_layers")}
    counts = model_flops_per_token(r["params"], dims["vocab_size"], dims["d_model"], dims["num_layers"], r["train_len"])
    if counts["palm"] != r["flops_per_token"]:
        raise ValueError(f"the shape {dims} gives {counts['palm']} FLOPs a token, the result stored "
                         f"{r['flops_per_token']}: not the model it measured")
    return counts


def mfu_causal(r: dict, shape: dict) -> float:
    """A result's MFU in the causal count (6·N + 6·layers·d_model·T): stored, or its PaLM-count MFU rescaled."""
    counts = flop_counts(r, shape)
    return r.get("mfu_causal", r["mfu"] * counts["causal"] / counts["palm"])


def machine_of(result: dict | None, fallback: str = "?", article: bool = True) -> str:
    """The CPU a result names (`posenc.timing.cpu_description`): its family, model and stepping where it recorded
    them (`cpu_id`), else that its CPU family was not recorded."""
    result = result or {}
    return cpu_description(result.get("cpu") or fallback, result.get("cpu_id"), article)


def folder_identity(folder: pathlib.Path, results: list) -> dict | None:
    """A per-kind folder's CPU identity (`posenc.timing.cpu_identity`): its results' `cpu_id`, else that of the
    lscpu.txt run_cpu_kind.sh wrote beside them; None where neither names a family."""
    recorded = next((r["cpu_id"] for r in results if r and r.get("cpu_id")), None)
    if recorded:
        return recorded
    lscpu = folder / "lscpu.txt"
    identity = cpu_identity(lscpu.read_text()) if lscpu.exists() else {}
    return identity if identity.get("family") is not None else None


def same_kind(a: dict | None, b: dict | None) -> bool:
    """Whether two CPU identities are one kind: both recorded, with the same vendor, family and model."""
    return bool(a and b) and all(a.get(k) == b.get(k) for k in ("vendor", "family", "model"))


top_cpu = cur.get("cpu") or cpu.split(",")[0]  # the oldest files predate the "cpu" field: cpu.txt names it
cores = cpu.split(",", 1)[1].strip() if "," in cpu else "cores not recorded"
table = ["| configuration | flags | JAX tokens/s | MFU (PaLM's count) | MFU (causal count) | PyTorch eager tokens/s "
         "| JAX / PyTorch |", "|---|---|---|---|---|---|---|"]
for name, label, flags in ROWS:
    if name in res:
        r = res[name]
        table.append(f"| {label} | `{flags}` | {r['tokens_per_s']:.0f} | {r['mfu']:.1%} | {mfu_causal(r, REFERENCE):.1%} | "
                     f"{r['torch_tokens_per_s']:.0f} | {r['jax_over_torch']:.2f} |")


def profile_table(rows, n=10):
    out = ["| ms per step | op | shape | source |", "|---|---|---|---|"]
    for row in rows[:n]:
        out.append(f"| {row['ms']:.1f} | `{row['op']}` | `{row['shape']}` | `{row['source'][:60]}` |")
    return "\n".join(out)


def each(results, value) -> str:
    """`value(result)` of every result, as the README states it: the one value where they agree, else each
    distinct value in order, joined by "/"."""
    seen = []
    for r in results:
        if r and value(r) not in seen:
            seen.append(value(r))
    return "/".join(map(str, seen)) or "not recorded"


def predates_peer(result) -> bool:
    """Whether a result's PyTorch peer predates `torch_peer` (scripts/benchmark_train.py, which records the peer's
    GELU and AdamW settings): then the peer ran torch's defaults, not posenc's."""
    return bool(result) and "torch_tokens_per_s" in result and "torch_peer" not in result


def peer_note(results, which: str = "these runs") -> str:
    """A note for PyTorch-peer results that predate `torch_peer` (`predates_peer`), naming `which`."""
    if not any(predates_peer(r) for r in results):
        return ""
    return (f" The PyTorch peer of {which} predates `torch_peer` (`scripts/benchmark_train.py`): it trained with "
            "the exact GELU (posenc's is the tanh approximation) and torch's AdamW defaults (β₂ 0.999, weight decay "
            "0.01 on every parameter, no gradient clipping) where posenc clips the gradient's norm and decays the "
            "matrices only: not quite the step posenc takes. Rerun them for a like-for-like ratio.")


def compare_runs(a: list[float], b: list[float]) -> str:
    """Where runs `a` stand against runs `b`: "above" when every one of `a` exceeds every one of `b`, "below" when
    every one is under every one of `b`, else "overlap" (no difference beyond the run-to-run spread)."""
    return "above" if min(a) > max(b) else "below" if max(a) < min(b) else "overlap"


def spread(values):
    return max(values) / min(values) - 1


def step_ms(r):
    return 1e3 * r["batch_size"] * r["train_len"] / r["tokens_per_s"]


prof = profile_table(cur.get("profile", []))
old = res.get("without_dense_vjp", {})
copies = [row for row in old.get("profile", []) if row["op"].startswith("copy") and "add_any" in row["source"]]
copy_ms = sum(row["ms"] for row in copies)
mfu_ok, ratio_ok = cur["mfu"] >= 0.40, cur["jax_over_torch"] >= 1.0
verdict = ("Both targets are met" if mfu_ok and ratio_ok else "Not met: " + ", ".join(
    t for t, ok in (("MFU < 40%", mfu_ok), ("JAX slower than PyTorch eager", ratio_ok)) if not ok))
cur_counts = flop_counts(cur, REFERENCE)
gain = {name: step_ms(res[name]) - step_ms(cur) for name in res if name != "current"}


def last_json(name):
    path = HERE / name
    return json.loads(path.read_text().strip().splitlines()[-1]) if path.exists() else None


rope, decode = last_json("rope.log"), last_json("decode.log")


def optional(name):
    """A result file: one JSON document, or the JSON last line of a script's output (None if absent)."""
    path = HERE / name
    text = path.read_text().strip() if path.exists() else ""
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(text.splitlines()[-1])


bf16, evalbench = optional("bf16.json"), optional("eval_throughput.json")
evalbench_untiled = optional("eval_throughput_without_key_tiles.json")
evalbench_one_group = optional("eval_throughput_one_head_group.json")


def round_ratios(row) -> list[float]:
    """A benchmark row's per-round ratios (posenc / PyTorch tokens/s of the same round)."""
    return [a / b for a, b in zip(row["rounds_jax"], row["rounds_torch"])]


def round_range(row) -> str:
    ratios = round_ratios(row)
    return f"{min(ratios):.2f}–{max(ratios):.2f}"


def eval_verdict(bench) -> str:
    """Whether the evaluation forward reaches 1.0x PyTorch SDPA at 4k, 16k and 32k, from the benchmark's rows."""
    wanted = {4096, 16384, 32768}
    met = sorted(r["length"] for r in bench["rows"] if r["ratio"] >= 1.0)
    below = sorted(r["length"] for r in bench["rows"] if r["ratio"] < 1.0)
    missing = sorted(wanted - {r["length"] for r in bench["rows"]})
    parts = []
    n = bench.get("head_groups", 1)
    groups = f"the {n} head groups are" if n > 1 else "the one loop over the heads is"
    if below:
        parts.append(f"Below the target of 1.0 at L = {', '.join(map(str, below))}: not closed, and not profiled at "
                     "that length. What a profile at 16384 showed is left in attention: the tile products contract over "
                     f"head_dim only ({bench.get('d_model', REFERENCE['d_model']) // bench.get('num_heads', REFERENCE['num_heads'])}), "
                     "and besides each product's own "
                     f"threads {groups} posenc's only parallelism, where "
                     "PyTorch's CPU flash kernel spreads its blocks over the threads.")
    if met:
        parts.append(f"The target of 1.0 is met by the median ratio at L = {', '.join(map(str, met))}.")
    noisy = sorted(r["length"] for r in bench["rows"] if r["ratio"] >= 1.0 and min(round_ratios(r)) < 1.0)
    if noisy:
        parts.append(f"At L = {', '.join(map(str, noisy))} some rounds fall below 1.0: that is parity within this "
                     "machine's noise, not a margin.")
    if missing:
        parts.append(f"Not in this log: L = {', '.join(map(str, missing))}.")
    return " ".join(parts) + "\n"
methods = optional("training_free_eval.json")
method_rows = ["| method | resolved parameters | ms | ratio to plain | bound (2× per pass) | within |", "|---|---|---|---|---|---|"]
for r in methods["rows"] if methods else []:
    method_rows.append(f"| {r['method']} | {r['resolved']} | {r['seconds'] * 1e3:.0f} | {r['ratio_to_plain']:.2f} | "
                       f"{r['bound']:.0f}× | {'yes' if r['within_bound'] else 'no'} |")
rope_rows = ["| dtype | layout | apply_rope ms | jitted elementwise pass ms | ratio | NumPy copy ms | ratio |",
             "|---|---|---|---|---|---|---|"]
for dtype in ("float32", "bfloat16"):
    for layout in ("half", "interleaved"):
        if rope:
            r = rope[dtype]
            rope_rows.append(f"| {dtype} | {layout} | {r[f'rope_{layout}_ms']:.1f} | {r['elementwise_ms']:.1f} | "
                             f"{r[f'rope_{layout}_vs_elementwise']:.2f} | {r['numpy_copy_ms']:.1f} | "
                             f"{r[f'rope_{layout}_vs_memcopy']:.2f} |")
decode_rows = ["| context | cached ms/token | recompute ms/token | speedup |", "|---|---|---|---|"]
for r in decode["rows"] if decode else []:
    if r.get("speedup") is None:  # generating n tokens took no longer than 1: the cached time is below the noise
        decode_rows.append(f"| {r['context']} | unresolved | {r['recompute_ms_per_token']:.1f} | unresolved |")
    else:
        decode_rows.append(f"| {r['context']} | {r['cached_ms_per_token']:.2f} | {r['recompute_ms_per_token']:.1f} | "
                           f"{r['speedup']:.0f}× |")
def top_level_machines() -> str:
    """What the top-level files say of their machines: whether they record the CPU's family (`cpu_id`), and
    whether their float32 2048² matmul peaks (the training table's runs; dtype_ab.json's float32 runs) differ by
    more than 1.5×, beyond run-to-run noise: then they did not all run on one machine."""
    ab = optional("dtype_ab.json")
    runs = {"the training table's runs": [r for r in res.values()],
            "`dtype_ab.json`'s float32 runs": [r for r in (ab or {}).get("runs", []) if r.get("dtype") == "float32"]}
    results = [r for rs in runs.values() for r in rs] + [r for r in (bf16, evalbench) if r]
    if all(r.get("cpu_id") for r in results):
        return ""
    peaks = {where: [r["matmul_peak_gflops"] for r in rs] for where, rs in runs.items() if rs}
    every = [p for ps in peaks.values() for p in ps]
    namesakes = []  # per-kind folders whose CPU has the same model name, and the family their lscpu.txt records
    for folder in sorted((HERE / "cpu").glob("*/")):
        f32 = optional(str((folder / "train_float32.json").relative_to(HERE))) or {}
        identity = folder_identity(folder, [f32])
        if f32.get("cpu") == top_cpu and identity:
            namesakes.append(f"the {top_cpu} of CPU family {identity['family']} in `cpu/{folder.name}/`")
    text = (f"The files at this folder's top level record lscpu's model name ({top_cpu}) but not the CPU's family, "
            "model or stepping, which tell apart CPUs that these VMs name alike: each is from "
            f"{cpu_description(top_cpu)}" + (f", not necessarily {' or '.join(namesakes)}" if namesakes else ""))
    if max(every) > 1.5 * min(every):
        text += (". Nor are they all from one machine: the float32 2048² matmul peaks they measured differ by more "
                 "than the runs' noise, " + " against ".join(f"{min(ps):.0f}–{max(ps):.0f} GFLOP/s in {where}"
                                                            for where, ps in peaks.items())
                 + ". Read each section's numbers against its own runs, not across sections")
    return text + ".\n"


text = f"""# Benchmarks: training throughput, RoPE, decoding

Regenerate (needs `.venv/bin/pip install torch==2.13.0`; run it on an otherwise idle machine; no seeds matter
beyond the fixed ones in the scripts):

```bash
bash experiments/benchmarks/run.sh
```

Reference model (issue 3): bytes, d_model {each(res.values(), lambda r: r.get('d_model', REFERENCE['d_model']))}, \
{each(res.values(), lambda r: r.get('num_layers', REFERENCE['num_layers']))} layers, \
{each(res.values(), lambda r: r.get('num_heads', REFERENCE['num_heads']))} heads, \
MLP {each(res.values(), lambda r: r.get('mlp_dim', REFERENCE['mlp_dim']))}, RoPE, \
train_len {each(res.values(), lambda r: r['train_len'])}, batch {each(res.values(), lambda r: r['batch_size'])},
{each(res.values(), lambda r: r.get('dtype', 'float32'))}, AdamW. Each row is one `scripts/benchmark_train.py --torch \
--rounds={each(res.values(), lambda r: len(r['rounds_tokens_per_s']))}` run
({each(res.values(), lambda r: r['steps'])} timed steps per round, JAX and PyTorch eager alternating, medians of rounds; MFU against the
best float32 2048² matmul of the same run, {cur['matmul_peak_gflops']:.0f} GFLOP/s in the first row). Model FLOPs
a token, two counts: PaLM's 6N + 12·L·d·T ({cur_counts['palm'] / 1e6:.1f} M; PaLM's and nanoGPT's convention,
attention over all T×T query-key pairs) and the causal count 6N + 6·L·d·T ({cur_counts['causal'] / 1e6:.1f} M;
only the pairs a causal model attends, what block-causal attention computes). Machine:
{machine_of(cur, top_cpu)} ({cores}), jax {cur['jax']}, torch {cur.get('torch', '?')}
({cur.get('torch_threads', '?')} threads). Raw output: `*.log`, `*.json`.{peer_note(res.values())}

{top_level_machines()}
{chr(10).join(table)}

**{verdict}** (≥ 1.0× PyTorch eager and MFU ≥ 40 %, the MFU target judged in PaLM's count):
{cur['tokens_per_s']:.0f} tokens/s, MFU {cur['mfu']:.1%} (in the causal count {mfu_causal(cur, REFERENCE):.1%}),
{cur['jax_over_torch']:.2f}× PyTorch eager. The machine is shared and noisy: the JAX rounds of the first row
span {spread(cur['rounds_tokens_per_s']):.0%} (min to max), and the peak moves as much between runs, so read MFU
to a few points.

## Why JAX was slower, and what closed it

Found with `scripts/benchmark_train.py --profile` (a `jax.profiler` trace of the step, op by op):

1. **The dense layers' weight gradients** (`posenc/model.py`, `dense`; worth {gain.get('without_dense_vjp', float('nan')):.0f} ms
   of a {step_ms(cur):.0f} ms step). XLA:CPU fused the elementwise backward that produces dy (GELU's derivative,
   in the MLP) with a copy of dy transposed to `[d_out, tokens]`, the layout its YNNPACK dot wants for
   dW = xᵀ dy, and that strided write is slow: in the profile of the run without the fix, the
   {len(copies)} such fusions (`copy_*`, one per layer, `{each(copies, lambda row: row['shape'].split('{')[0])}`) take {copy_ms:.0f} ms per step (their
   times overlap with other ops). An `optimization_barrier` on dy before the weight-gradient product (a custom
   VJP that is otherwise autodiff's) keeps dy in its natural layout and the product contracts over the tokens
   directly. The matmuls themselves were not the problem (the profile below: the dense products take most of
   the step, and the 2048² float32 peak XLA reaches here is {cur['matmul_peak_gflops']:.0f} GFLOP/s).
2. **Attention** (`posenc/attention.py`; worth {gain.get('without_attention_vjp', float('nan')):.0f} ms). q, k and v are
   transposed once to head-major `[B, N, T, H]` instead of per block, and the softmax-attention has
   FlashAttention's backward (dS = P ∘ (dP − rowsum(dO ∘ O))), one pass over the scores fewer than autodiff
   of the softmax.
3. **Block-causal attention** (`model.attn_block=128`, the previous session; worth
   {gain.get('without_block_causal', float('nan')):.0f} ms): the key blocks entirely in a query block's future are skipped.

The profile of the run without the dense fix (`without_dense_vjp.log`):

{profile_table(old.get("profile", []), 8)}

XLA flags did not help (`--xla_cpu_experimental_ynn_fusion_type` variants, with YNNPACK dots on or off, all
within noise), as FINDINGS.md had found for the older flags.

## Where the time goes now

The ops with the most time in one step of the current version (they overlap: XLA runs independent ops
concurrently on the {cores}, so they add up to more than the step):

{prof}

The dense products (`ynn_fusion` with `[4096, ·]` shapes) dominate, as they should.

## RoPE on its own (`scripts/benchmark_rope.py`, `rope.log`)

`apply_rope` on `[{', '.join(map(str, rope['shape'])) if rope else '?'}]`, jitted, on {machine_of(rope, top_cpu)}, against a jitted elementwise pass over the same bytes (the same
reads and writes, no trigonometry) and NumPy's in-place copy (the memory bound; a jitted pass allocates a fresh
output, which is part of why it is far from it):

{chr(10).join(rope_rows)}

## Decoding with the KV cache (`scripts/benchmark_decode.py`, `decode.log`)

Default model, batch 1, RoPE, on {machine_of(decode, top_cpu)}: per-token time with the cache against one full forward pass over the context
(what each token costs without a cache). The cached time grows with the context, as attention over it must.

{chr(10).join(decode_rows)}

## Training-free methods at evaluation (`scripts/benchmark_methods.py`, `training_free_eval.json`)

""" + (f"""The reference model (RoPE, trained length 256, random weights) scoring one window of {methods['length']} tokens
through the evaluation's jitted forward (query chunks of {methods['attn_chunk']}), each method with its defaults,
{methods['rounds']} alternating rounds (median), on {methods['cores']} cores of {machine_of(methods)}: plain attention takes
{methods['plain_seconds'] * 1e3:.0f} ms. The two-branch methods compute a second q·kᵀ at the far positions (two passes).

{chr(10).join(method_rows)}
""" if methods else "Not measured yet: `python scripts/benchmark_methods.py --out=experiments/benchmarks/training_free_eval.json`.\n")

ab = optional("dtype_ab.json")


def bf16_peak_note(bf16: dict, ab: dict | None) -> str:
    """What the bf16 run's MFU is measured against: its own bf16 matmul peak, and whether that is below the float32
    peak of the machine, from dtype_ab.json's alternating runs where their bf16 peaks match this run's (within
    1.5×, the runs' noise)."""
    peak = bf16["matmul_peak_gflops"]
    note = (f"The MFU of {bf16['mfu']:.1%} (PaLM's count) is against this run's bf16 matmul peak, {peak:.0f} GFLOP/s, "
            "not the float32 one")
    runs = (ab or {}).get("runs", [])
    f32 = [r["matmul_peak_gflops"] for r in runs if r.get("dtype") == "float32"]
    b16 = [r["matmul_peak_gflops"] for r in runs if r.get("dtype") == "bfloat16"]
    if not f32 or not b16 or not max(b16) / 1.5 <= peak <= 1.5 * min(b16):
        return note + ".\n"
    if peak >= min(f32):
        return note + f" (`dtype_ab.json`'s float32 runs measured {min(f32):.0f}–{max(f32):.0f} GFLOP/s).\n"
    return (note + f", and on this machine it is below the float32 peak: `dtype_ab.json`'s alternating runs, whose "
            f"bf16 peaks ({min(b16):.0f}–{max(b16):.0f} GFLOP/s) match this run's, measured float32 peaks of "
            f"{min(f32):.0f}–{max(f32):.0f} GFLOP/s. So this MFU, above the float32 rows', does not mean more of the "
            "machine was used: bf16 products run at a lower rate here than float32 ones.\n")


text += "\n## bf16 mixed precision (`scripts/benchmark_train.py --torch --dtype=bfloat16`, `bf16.log`)\n\n" + (
    f"""posenc with `model.dtype=bfloat16` (float32 parameters and AdamW state, products on bf16 operands with
float32 results, float32 activations, softmax, norms and loss: `posenc/model.py`, `dense`) against PyTorch eager under `torch.autocast("cpu", dtype=torch.bfloat16)`, the
reference model, {len(bf16['rounds_tokens_per_s'])} alternating rounds, on {machine_of(bf16)}:

| | tokens/s | MFU (PaLM's count, against this run's bf16 matmul peak, {bf16['matmul_peak_gflops']:.0f} GFLOP/s) |
|---|---|---|
| posenc bf16 | {bf16['tokens_per_s']:.0f} | {bf16['mfu']:.1%} |
| PyTorch eager + autocast bf16 | {bf16['torch_tokens_per_s']:.0f} | |
| ratio (median of rounds) | {bf16['jax_over_torch']:.2f} | |

{len(bf16['rounds_tokens_per_s'])} round(s) of {bf16['steps']} step(s) (PyTorch's bf16 can be very slow on a CPU without bf16
instructions; this log's CPU bf16 flags: {', '.join(bf16['cpu_bf16']) if bf16.get('cpu_bf16') else 'none' if 'cpu_bf16' in bf16 else 'not recorded'}).
The ratio compares with PyTorch on the same machine; whether bf16 beats float32 for posenc is the A/B below.
{bf16_peak_note(bf16, ab)}""" if bf16 else "Not measured yet.\n")
text += ("" if not ab else f"""
posenc float32 against posenc bf16, alternating `scripts/benchmark_train.py` runs on one machine
(`dtype_ab.json`, {machine_of(ab['runs'][0], ab['cpu'])}): float32
{ab['float32']:.0f} tokens/s, bf16 {ab['bfloat16']:.0f} tokens/s (bf16 / float32 = {ab['bfloat16'] / ab['float32']:.2f});
so on that machine the default stays float32.
""")


def quality_lines() -> str:
    """The bf16 quality check of each CPU kind (`bf16_quality.sh` → cpu/<kind>/bf16_quality.json): the default
    400-step run's final validation bits per byte in float32 and in each bf16 arm by seed, each bf16 arm's
    difference from float32 at the same seed against the ±bound, and two yardsticks of run-to-run variation:
    float32 between seeds, and float32 at seed 0 between CPU kinds."""
    labels = {"bfloat16": "bf16 products, float32 activations (a CPU's auto)",
              "bfloat16_activations": "bf16 activations too (a GPU's auto; on a CPU its emulation)"}
    out, bounds, seed0 = [], set(), {}
    for path in sorted((HERE / "cpu").glob("*/bf16_quality.json")):
        q = json.loads(path.read_text())
        bounds.add(q["bound"])
        arms = ({arm: {s: r["val_bpb"] for s, r in by_seed.items()} for arm, by_seed in q["arms"].items()}
                if "arms" in q else {arm: {"0": q[arm]["val_bpb"]} for arm in ("float32", *labels) if arm in q})
        base = arms["float32"]
        seed0[path.parent.name] = base.get("0")
        parts = [f"float32 {', '.join(f'{v:.4f}' for v in base.values())} (seed{'s' if len(base) > 1 else ''} "
                 f"{', '.join(base)})"]
        for arm, label in labels.items():
            if arm in arms:
                diffs = [arms[arm][s] - base[s] for s in arms[arm]]
                within = sum(abs(d) <= q["bound"] for d in diffs)
                side = ("; lower than float32 at every seed" if all(d < 0 for d in diffs) else
                        "; higher than float32 at every seed" if all(d > 0 for d in diffs) else "")
                parts.append(f"{label}: " + ", ".join(f"{d:+.4f}" for d in diffs)
                             + (" (within" if within == len(diffs) else f" (**within at {within} of {len(diffs)} "
                                f"seed{'s' if len(diffs) > 1 else ''}**") + (side if len(diffs) > 1 else "") + ")")
        if len(base) > 1:
            parts.append(f"float32 itself from seed to seed: {max(base.values()) - min(base.values()):.4f}")
        out.append(f"- {machine_of(q, article=False)} (`{path.relative_to(HERE)}`): " + "; ".join(parts) + ".")
    if not out:
        return ""
    kinds = {k: v for k, v in seed0.items() if v is not None}
    across = (f"- Float32 at seed 0 differs between the CPU kinds by {max(kinds.values()) - min(kinds.values()):.4f} "
              "(the same run, other kernels).\n" if len(kinds) > 1 else "")
    return ("\nQuality (`bash experiments/benchmarks/bf16_quality.sh`): the default 400-step run's final validation "
            f"bits per byte, and each bf16 arm's difference from float32 at the same seed against the bound of "
            f"±{'/'.join(map(str, sorted(bounds)))}:\n\n" + "\n".join(out) + "\n" + across + "\n")


text += quality_lines()

def activations_ab_lines() -> str:
    """bf16 activations against float32 activations under bf16 products, timed on a CPU (`dtype_ab.py` pinned to
    one core: cpu/<kind>/dtype_ab_one_core.json): why `model.act_dtype=auto` keeps float32 activations there."""
    out = []
    for path in sorted((HERE / "cpu").glob("*/dtype_ab_one_core.json")):
        ab = json.loads(path.read_text())
        by = {arm: [r["tokens_per_s"] for r in ab["runs"] if r["arm"] == arm] for arm in ab if arm in (
            "float32", "bfloat16", "bfloat16_activations")}
        spans = {arm: f"{min(v):,.0f}–{max(v):,.0f}" for arm, v in by.items()}
        side = compare_runs(by["bfloat16_activations"], by["bfloat16"])
        out.append(f"- {machine_of(ab['runs'][0], ab['cpu'], article=False)} (`{path.relative_to(HERE)}`, one core, one XLA thread, {len(by['float32'])} "
                   f"alternating runs an arm, commit {ab['commit']}): float32 {spans['float32']} tokens/s, bf16 products "
                   f"{spans['bfloat16']}, bf16 activations too {spans['bfloat16_activations']}: bf16 activations "
                   f"{ab['bfloat16_activations'] / ab['bfloat16']:.2f}× float32 activations (medians; "
                   + {"overlap": "the ranges overlap", "below": "every run slower", "above": "every run faster"}[side]
                   + ").")
    if not out:
        return ""
    return ("\nbf16 activations on a CPU (`python experiments/benchmarks/dtype_ab.py OUT.json 3` under `taskset -c 1` "
            "with one XLA thread):\n\n" + "\n".join(out) + "\n")


text += activations_ab_lines()

text += "\n## Evaluation forward against PyTorch SDPA (`scripts/benchmark_eval.py`, `eval_throughput.json`)\n\n" + (
    f"""The reference model (random weights) scoring one window of L tokens: posenc's evaluation forward
(queries in chunks of {evalbench['attn_chunk']}, each over the keys in tiles of {evalbench.get('attn_key_block', 0)} with the
online softmax, the tiles wholly in a chunk's future skipped; the heads in {evalbench.get('head_groups', 1)} independent
loops: `posenc/attention.py`) against the same weights in
PyTorch with `scaled_dot_product_attention(is_causal=True)`, {evalbench['rounds']} alternating rounds, on
{machine_of(evalbench)} (torch {evalbench['torch']}, {evalbench['torch_threads']} threads). The ratio is the median of the
rounds' ratios; the next column is their range. "One head group" is the same benchmark with `--head_groups=1`
(every head in one loop; `eval_throughput_one_head_group.json`, measured in the same sitting), and "without key
tiles" with `--attn_chunk={(evalbench_untiled or {}).get('attn_chunk', '?')} --attn_key_block={(evalbench_untiled or {}).get('attn_key_block', '?')}` (each chunk of queries against every key, the future
masked, the softmax over whole rows; `eval_throughput_without_key_tiles.json`, an older sitting):

| configuration | L | posenc tokens/s | PyTorch SDPA tokens/s | ratio | rounds' ratios | NLLs agree to |
|---|---|---|---|---|---|---|
""" + "\n".join(f"| {name} | {r['length']} | {r['jax_tokens_per_s']:.0f} | {r['torch_tokens_per_s']:.0f} | {r['ratio']:.2f} | "
                f"{round_range(r)} | {r['max_abs_nll_diff']:.1e} |"
                for name, bench in (("current", evalbench), ("one head group", evalbench_one_group),
                                    ("without key tiles", evalbench_untiled))
                if bench for r in bench["rows"]) + "\n\n" + eval_verdict(evalbench)
    if evalbench else "Not measured yet.\n")



def shown(path: pathlib.Path) -> pathlib.Path:
    """A path as the README names it: relative to this folder where it is inside it."""
    return path.relative_to(HERE) if path.is_relative_to(HERE) else path


def spread_verdict(default: list[float], onednn: list[float]) -> str:
    """oneDNN's ratios against the default's, run by run: faster (or slower) in every run where the two ranges do
    not overlap; no verdict with fewer than two runs an arm."""
    if not default or not onednn:
        return "not measured"
    if len(default) < 2 or len(onednn) < 2:
        return "too few runs for a spread (no verdict)"
    if min(onednn) > max(default):
        return "oneDNN faster in every run"
    if max(onednn) < min(default):
        return "oneDNN slower in every run"
    return "the ranges overlap (no difference beyond the run-to-run spread)"


def xla_flags_ab(folder: pathlib.Path) -> str | None:
    """The oneDNN-against-default A/B of xla_flags_ab.sh on one CPU kind (None where it has not run there): the
    runs' JAX / PyTorch ratios, a verdict for each training dtype and each evaluation length (`spread_verdict`),
    and the arm pairs (default_<what>_<i>, onednn_<what>_<i>) whose commits differ, whose difference is then not
    the flags' alone; the runs that failed (xla_flags_ab.sh's <variant>_<what>_<i>.failed: exit status, error
    output), which are in none of the ratios."""
    ab = folder / "xla_flags"
    if not ab.is_dir():
        return None
    whats = ("train_float32", "train_bfloat16", "eval_throughput")
    files = {v: {what: sorted(ab.glob(f"{v}_{what}_*.json")) for what in whats} for v in ("default", "onednn")}
    runs = {v: {what: [json.loads(f.read_text()) for f in fs] for what, fs in by.items()} for v, by in files.items()}
    for f in [f for by in files.values() for fs in by.values() for f in fs]:
        options = json.loads(f.read_text()).get("compiler_options")
        if options:  # posenc's own choice (posenc/xla_options.py) overrode the arm's flags
            raise ValueError(f"{f}: compiler_options {options}; the XLA_FLAGS A/B's arms run under XLA's default "
                             "options (xla_flags_ab.sh sets POSENC_CPU_DOTS=xla): run it again")
    flags = {r.get("xla_flags", "") for by in runs["onednn"].values() for r in by} or {"(no oneDNN run succeeded)"}
    failed = [f"`{f.name}` ({(f.read_text().splitlines() or ['no exit status'])[0]})" for f in sorted(ab.glob("*.failed"))]
    train = {(v, d): ", ".join(f"{r['jax_over_torch']:.2f}" for r in runs[v][f"train_{d}"]) or "—"
             for v in runs for d in ("float32", "bfloat16")}
    lengths = sorted({row["length"] for v in runs for r in runs[v]["eval_throughput"] for row in r["rows"]})

    def ratios(v, what, length=None):
        return [r["jax_over_torch"] for r in runs[v][what]] if what.startswith("train") else [
            row["ratio"] for r in runs[v][what] for row in r["rows"] if row["length"] == length]

    evals = "; ".join(f"{n}: " + " / ".join(", ".join(f"{x:.2f}" for x in ratios(v, "eval_throughput", n)) for v in runs)
                      for n in lengths)
    verdict = "; ".join([f"{w}: {spread_verdict(ratios('default', w), ratios('onednn', w))}" for w in whats[:2]]
                        + [f"evaluation at L = {n}: {spread_verdict(ratios('default', 'eval_throughput', n), ratios('onednn', 'eval_throughput', n))}"
                           for n in lengths])
    mixed = []
    for what in whats:
        for path in files["default"][what]:
            other = ab / path.name.replace("default_", "onednn_", 1)
            if other.exists():
                commits = [json.loads(f.read_text()).get("commit", "not recorded") for f in (path, other)]
                if commits[0] != commits[1]:
                    mixed.append(f"`{path.name}` ({commits[0]}) against `{other.name}` ({commits[1]})")
    rounds = each([r for v in runs for what in whats for r in runs[v][what]],
                  lambda r: len(r["rounds_tokens_per_s"]) if "rounds_tokens_per_s" in r else r.get("rounds", "?"))
    return (f"\n  XLA:CPU's dot library (`xla_flags_ab.sh`, `{shown(ab)}/`: the default (YNNPACK) and oneDNN "
            f"(`XLA_FLAGS=\"{' '.join(sorted(flags))}\"`) alternated in one sitting, {rounds} rounds a run), "
            f"JAX / PyTorch: float32 training default {train['default', 'float32']} against oneDNN "
            f"{train['onednn', 'float32']}; bf16 training {train['default', 'bfloat16']} against "
            f"{train['onednn', 'bfloat16']}; "
            f"evaluation (default / oneDNN) {evals}. Verdict, run by run: {verdict}."
            + (f" **Arm pairs measured at different commits** (the code changed between the two arms, so their "
               f"difference is not the flags' alone): {'; '.join(mixed)}." if mixed else "")
            + (f" **Runs that failed** (in none of the ratios above): {'; '.join(failed)}." if failed else "") + "\n")


def options_text(options: dict | None) -> str:
    """XLA compiler options as a README shows them: `key=value, ...`, or XLA's defaults where there are none."""
    if not options:
        return "XLA's defaults"
    return "`" + ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in options.items()) + "`"


def xla_options_ab(folder: pathlib.Path) -> str | None:
    """The in-process A/Bs of XLA compiler options on one CPU kind (`scripts/benchmark_xla_options.py` →
    xla_options/train_*.json) and the evaluation forward under POSENC_CPU_DOTS=xla and =onednn, alternating
    processes (xla_options/eval_{xla,onednn}_<i>.json), each with the compiler options it recorded (a train row's
    `options`, an evaluation's `compiler_options`); None where none ran."""
    ab = folder / "xla_options"
    if not ab.is_dir():
        return None
    lines = []
    variants: dict[str, dict[str, list[str]]] = {}  # variant -> its options as shown -> the files with them
    for path in sorted(ab.glob("train_*.json")):
        for row in json.loads(path.read_text())["rows"]:
            shown_options = options_text(row["options"]) if "options" in row else "not recorded"
            variants.setdefault(row["variant"], {}).setdefault(shown_options, []).append(f"`{path.name}`")
    if variants:
        lines.append("  - The variants' compiler options, as their rows record them: " + "; ".join(
            f"{name} " + " / ".join(opts + (f" (in {', '.join(files)})" if len(by) > 1 else "")
                                    for opts, files in by.items()) for name, by in variants.items()) + ".")
    for path in sorted(ab.glob("train_*.json")):
        run = json.loads(path.read_text())
        base = run["rows"][0]
        threads = "one core, one XLA thread" if "one_core" in path.stem else f"{run.get('torch_threads', 2)} threads"
        parts = []
        for row in run["rows"][1:]:
            wins = sum(a > b for a, b in zip(row["rounds_tokens_per_s"], base["rounds_tokens_per_s"]))
            parts.append(f"{row['variant']} {row['over_first']:.3f}× {base['variant']} (faster in {wins} of "
                         f"{len(row['rounds_tokens_per_s'])} rounds)")
        vs_torch = ("; against PyTorch eager " + ", ".join(f"{row['variant']} {row['over_torch']:.2f}" for row in run["rows"])
                    if "over_torch" in base else "")
        lines.append(f"  - `{path.name}` ({run['dtype']}, {threads}, {run['rounds']} rounds): " + "; ".join(parts) + vs_torch + ".")
    evals = {v: [json.loads(f.read_text()) for f in sorted(ab.glob(f"eval_{v}_*.json"))] for v in ("xla", "onednn")}
    if evals["xla"] and evals["onednn"]:
        lengths = [row["length"] for row in evals["xla"][0]["rows"]]
        per = {n: {v: [row["ratio"] for r in evals[v] for row in r["rows"] if row["length"] == n] for v in evals}
               for n in lengths}
        opts = {v: " / ".join(sorted({options_text(r.get("compiler_options")) for r in evals[v]})) for v in evals}
        lines.append("  - Evaluation forward against PyTorch SDPA (`eval_{xla,onednn}_<i>.json`, "
                     f"{len(evals['xla'])} alternating processes each; compiler options: POSENC_CPU_DOTS=xla "
                     f"{opts['xla']}, =onednn {opts['onednn']}): "
                     + "; ".join(f"L = {n}: XLA's defaults {', '.join(f'{x:.2f}' for x in r['xla'])}, oneDNN "
                                 f"{', '.join(f'{x:.2f}' for x in r['onednn'])}"
                                 + {"above": " (oneDNN higher in every run)", "below": " (oneDNN lower in every run)",
                                    "overlap": " (the ranges overlap)"}[compare_runs(r["onednn"], r["xla"])]
                                 for n, r in per.items()) + ".")
    whole = ab / "run_cpu_kind_onednn"
    if whole.is_dir():
        f32, b16, ev = (json.loads((whole / name).read_text()) for name in
                        ("train_float32.json", "train_bfloat16.json", "eval_throughput.json"))
        lines.append(f"  - `run_cpu_kind.sh` with oneDNN dots (`run_cpu_kind_onednn/`, commit {f32['commit']}, compiler "
                     f"options {options_text(f32.get('compiler_options'))}), against "
                     f"PyTorch: float32 {f32['tokens_per_s']:.0f} / {f32['torch_tokens_per_s']:.0f} = "
                     f"{f32['jax_over_torch']:.2f}; bf16 {b16['tokens_per_s']:.0f} / {b16['torch_tokens_per_s']:.0f} = "
                     f"{b16['jax_over_torch']:.2f}; evaluation "
                     + ", ".join(f"{r['length']}: {r['ratio']:.2f}" for r in ev["rows"]) + ".")
    return (f"\n  XLA compiler options on this machine (`{shown(ab)}/`; `POSENC_CPU_DOTS=auto|onednn|xla` "
            f"chooses, `auto` sending the dots to oneDNN on an Intel CPU with {options_text(ONEDNN_DOTS)}: "
            "`posenc/xla_options.py` says why; the runs below name the options each measured):\n\n"
            + "\n".join(lines) + "\n")


def eval_profile(folder: pathlib.Path) -> str | None:
    """Where the evaluation forward's time goes on this CPU kind (`benchmark_eval.py --profile`, eval_profile.json):
    per length, its top XLA ops by kind (the op name without its number) and the ops themselves."""
    path = folder / "eval_profile.json"
    if not path.exists():
        return None
    res = json.loads(path.read_text())
    where = path.relative_to(HERE)
    out = [f"\n  Where the evaluation forward's time goes (`scripts/benchmark_eval.py --profile`, `{where}`, commit "
           f"{res.get('commit', 'not recorded')}, with {options_text(res.get('compiler_options'))}; ms per "
           "forward of one window, the ops of the chunk loops counted, the loops not; ops run concurrently on the cores, "
           "so their sum can exceed the forward's time):"]
    for row in res["rows"]:
        prof = row.get("profile") or []
        kinds: dict[str, float] = {}
        for op in prof:  # an op's kind: its name without the number, batched where its result has 3 axes or more
            kind = "`" + re.sub(r"[.]\d+$", "", op["op"]) + "`" + (" (batched)" if op["shape"].split("]")[0].count(",") >= 2 else "")
            kinds[kind] = kinds.get(kind, 0.0) + op["share"]
        major = sorted(((k, v) for k, v in kinds.items() if v >= 0.01), key=lambda kv: -kv[1])
        summary = ", ".join(f"{k} {v:.0%}" for k, v in major)
        out.append(f"\n  L = {row['length']} (posenc / PyTorch SDPA {row['ratio']:.2f} in that sitting), "
                   f"{sum(op['ms'] for op in prof):.0f} ms in the {len(prof)} ops with the most time, by kind (1% or more): {summary}.\n\n  "
                   + profile_table(prof, 8).replace("ms per step", "ms per forward").replace("\n", "\n  "))
    return "\n".join(out) + "\n"


def by_cpu_kind() -> str:
    """Issue 16's comparisons on each CPU kind measured: the folders of run_cpu_kind.sh, each named by its CPU's
    family, model and stepping (`folder_identity`), and the top-level files of run.sh where they record a CPU
    identity (`cpu_id`) that no folder has. Top-level files without one are left out: their kind is unknown."""
    kinds = {}
    for folder in sorted((HERE / "cpu").glob("*/")):
        def load(name, folder=folder):
            return optional(str((folder / name).relative_to(HERE)))
        k = {"f32": load("train_float32.json"), "bf16": load("train_bfloat16.json"), "ab": load("dtype_ab.json"),
             "eval": load("eval_throughput.json"), "gemm": load("matmul.json"), "flags": xla_flags_ab(folder),
             "options": xla_options_ab(folder), "profile": eval_profile(folder)}
        k["identity"] = folder_identity(folder, [k["f32"], k["bf16"], k["eval"]])
        kinds[f"cpu/{folder.name}/"] = k
    top_id = cur.get("cpu_id")
    if top_id and top_id.get("family") is not None and not any(same_kind(top_id, k["identity"]) for k in kinds.values()):
        kinds["(top level, run.sh)"] = {"f32": cur, "bf16": bf16, "ab": optional("dtype_ab.json"), "eval": evalbench,
                                        "gemm": None, "cpu": top_cpu, "identity": top_id, "flags": None}
    rows = ["| CPU | results | commit | float32 posenc / PyTorch eager tokens/s | ratio | bf16 posenc / PyTorch autocast "
            "tokens/s | ratio | posenc bf16 / float32 | evaluation ratio (L: ratio) |", "|---|---|---|---|---|---|---|---|---|"]
    verdicts, old_peer = [], []
    for where, k in kinds.items():
        f32, b16, ab, ev = k["f32"], k["bf16"], k["ab"], k["eval"]
        cpu_name = cpu_description(k.get("cpu") or next((r["cpu"] for r in (f32, b16, ev) if r and "cpu" in r), "?"),
                                   k["identity"], article=False)
        commits = sorted({r.get("commit", "not recorded") for r in (f32, b16, ev) if r})
        rows.append(f"| {cpu_name} | `{where}` | {', '.join(commits)} | "
                    + (f"{f32['tokens_per_s']:.0f} / {f32['torch_tokens_per_s']:.0f} | {f32['jax_over_torch']:.2f} | " if f32 else "— | — | ")
                    + (f"{b16['tokens_per_s']:.0f} / {b16['torch_tokens_per_s']:.0f} | {b16['jax_over_torch']:.2f} | " if b16 else "— | — | ")
                    + (f"{ab['bfloat16'] / ab['float32']:.2f}" + (f" (bf16 activations: {ab['bfloat16_activations'] / ab['float32']:.2f})"
                                                                   if "bfloat16_activations" in ab else "") + " | " if ab else "— | ")
                    + (", ".join(f"{r['length']}: {r['ratio']:.2f}" for r in ev["rows"]) if ev else "—") + " |")
        met = [name for name, r in (("float32", f32), ("bf16", b16)) if r and r["jax_over_torch"] >= 1.0]
        unmet = [name for name, r in (("float32", f32), ("bf16", b16)) if r and r["jax_over_torch"] < 1.0]
        stale = "not recorded" in commits
        if predates_peer(f32) or predates_peer(b16):
            old_peer.append(cpu_name)
        verdicts.append(f"- {cpu_name}: ≥ 1.0× PyTorch {'met for ' + ' and '.join(met) if met else 'met for neither'}"
                        + (f"; **not met** for {' and '.join(unmet)}" if unmet else "") + "."
                        + (" Results without a recorded commit predate commit e4c1a7b, which changed the bf16 path "
                           "(products with float32 results, float32 activations): rerun `run_cpu_kind.sh` on this kind."
                           if stale else ""))
        gemm = k["gemm"]
        if gemm:
            table = ["| dtype | product | shape | JAX GFLOP/s | PyTorch GFLOP/s | JAX / PyTorch |", "|---|---|---|---|---|---|"]
            table += [f"| {r['dtype']} | {r['product']} | [{r['m']}×{r['k']}]·[{r['k']}×{r['n']}] | {r['jax_gflops']:.0f} | "
                      f"{r['torch_gflops']:.0f} | {r['ratio']:.2f} |" for r in gemm["rows"]]
            f32_rows = [r["ratio"] for r in gemm["rows"] if r["dtype"] == "float32" and r["product"] != "2048²"]
            verdicts.append(f"\n  The model's products on their own (`scripts/benchmark_matmul.py`, `{where}matmul.json`, "
                            f"best of {gemm['rounds']} alternating rounds; float32 JAX / PyTorch "
                            f"{min(f32_rows):.2f}–{max(f32_rows):.2f} over the layer's products; JAX with "
                            f"{options_text(gemm.get('compiler_options'))}, PyTorch with "
                            f"{gemm.get('torch_threads', 'a number of')} threads; in the bf16 rows JAX's products have float32 "
                            "results, as posenc's layers, and PyTorch's bf16 results, as under autocast, its CPU "
                            "matmul having no float32 output for bf16 operands):\n\n  "
                            + "\n  ".join(table) + "\n")
        if k["flags"]:
            verdicts.append(k["flags"])
        if k.get("options"):
            verdicts.append(k["options"])
        if k.get("profile"):
            verdicts.append(k["profile"])
    left_out = "(top level, run.sh)" not in kinds and not (top_id and any(same_kind(top_id, k["identity"])
                                                                           for k in kinds.values()))
    trains = [k[dtype] for k in kinds.values() for dtype in ("f32", "bf16") if k[dtype]]
    rounds = (f"{each(trains, lambda r: len(r['rounds_tokens_per_s']))} alternating rounds a training run, "
              f"{each([k['eval'] for k in kinds.values()], lambda r: r['rounds'])} an evaluation run")
    return ("\n## By CPU kind (`bash experiments/benchmarks/run_cpu_kind.sh`, issue 16)\n\n"
            f"Reference model, {rounds}; \"evaluation ratio\" is posenc's evaluation forward "
            "against PyTorch SDPA (the section below); `commit` is the code measured (\"+changes\": with "
            "uncommitted changes). \"CPU\" is lscpu's model name with the family, model and stepping from the "
            "folder's results or, where they predate recording them, from the `lscpu.txt` run_cpu_kind.sh wrote "
            "beside them. Raw output: the `*.log` and `*.json` files of each folder, `lscpu.txt`."
            + (" The top-level files (the sections above) are not in this table: they record no CPU family, so "
               "which kind they ran on is unknown." if left_out else "") + peer_note(trains, f"the training runs of {' and '.join(old_peer)}") + "\n\n"
            + "\n".join(rows) + "\n\n" + "\n".join(verdicts) + "\n")


text += by_cpu_kind()
PINS_FALLBACK = "installing the pinned ones from .whl/pins"  # scripts/device_env.sh's line when it replaced the stack's


def gpu_section() -> str:
    """The GPU check's results (`gpu_check.sh` → gpu/): every timed run as a row, the 124M model's MFU against
    issue 16's goal (≥ 40%), bf16 against float32 activations, the fused kernel's worth (cuDNN against posenc's
    attention, same batch and activations), the cuDNN accuracy test's outcome from the check's log, and the
    profile. Each part is rendered only from the files it needs."""
    head = "\n## GPU (`experiments/benchmarks/gpu_check.sh`, `scripts/benchmark_gpu.py`, `gpu/`)\n\n"
    folder = HERE / "gpu"
    runs = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json")) if p.stem != "provenance"}
    if not runs:
        return head + ("Not measured: no GPU has been lent to this project's sessions so far. The path is tested on "
                       "CPU; `OUT=experiments/benchmarks/gpu bash experiments/benchmarks/gpu_check.sh` on a GPU "
                       "machine measures it.\n")
    prov = json.loads((folder / "provenance.json").read_text()) if (folder / "provenance.json").exists() else {}
    log = (folder / "gpu_check.log").read_text() if (folder / "gpu_check.log").exists() else ""
    rows = [(name, run, r) for name, run in runs.items() for r in run["rows"]]
    for _, _, r in rows:  # rows from before model.act_dtype ran with float32 activations (provenance.json)
        r.setdefault("activations", "float32")
    shapes = gpu_shapes()
    table = ["| file | model | parameters | batch × T | attention | activations | XLA_FLAGS | tokens/s | model TFLOP/s "
             "| MFU (PaLM's count) | MFU (causal count) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, run, r in rows:
        table.append(f"| `{name}.json` | {r['model']} | {r['params'] / 1e6:.1f}M | {r['batch_size']} × {r['train_len']} "
                     f"| {r['attention']} | {r['activations']} | `{run['xla_flags'] or '(none)'}` | "
                     f"{r['tokens_per_s']:,.0f} | {r['model_tflops_per_s']:.0f} | {r['mfu']:.1%} | "
                     f"{mfu_causal(r, shapes[r['model']]):.1%} |")
    run0 = next(iter(runs.values()))
    stacks = [line.split(":", 1)[1].split(" devices")[0].strip() for line in log.splitlines()
              if line.startswith("python stack:")]  # the last: after the pinned-wheel fallback, if it ran
    logged = stacks[-1] if stacks else f"jax {run0['jax']}"
    by_stack = collections.defaultdict(list)  # the stack each result recorded (None: not recorded) -> its files
    for name, run in runs.items():
        by_stack[stack_text(run["stack"]) if run.get("stack") else None].append(f"`{name}.json`")
    named = (logged if list(by_stack) == [None] else next(iter(by_stack)) if len(by_stack) == 1 else "; ".join(
        f"{stack or logged + ' (the check log; not recorded in these results)'} in {', '.join(files)}"
        for stack, files in by_stack.items()))
    steps = sorted({str(run.get("steps", 20)) for run in runs.values()})  # 20: the default before it was recorded
    gpt2_params = each([r for _, _, r in rows if r["model"] == "gpt2_small"], lambda r: f"{r['params'] / 1e6:.0f}M")
    text = head + (
        f"On one {run0['device']} (host CPU {run0['host_cpu']}; "
        + ("the machine's jax with this project's pinned flax / optax / orbax (scripts/device_env.sh: posenc failed "
           "under the machine's), " + named if PINS_FALLBACK in log and stacks else
           "the machine's own Python stack, " + named + ", not this project's pins")
        + (f"; commit {prov['commit']}" if prov else "; commits: each result's `commit`") + "). Peak: "
        f"{run0['peak_tflops']:.0f} TFLOP/s dense bf16 ({run0['peak_source'].replace(' (', ', ').rstrip(')')}); a bf16 "
        f"matmul of 8192² measured {min(r['measured_bf16_matmul_tflops'] for r in runs.values()):.0f}–"
        f"{max(r['measured_bf16_matmul_tflops'] for r in runs.values()):.0f} TFLOP/s in the same runs. MFU counts "
        "6·N + 12·layers·d_model·T FLOPs a token (PaLM's count, nanoGPT's convention, in which issue 16's goal is "
        "judged: attention over all T×T query-key pairs; N without the input embedding; the output head is untied, "
        f"so the 124M-sized model has {gpt2_params} parameters in all); the causal count, 6·N + 6·layers·d_model·T, counts only "
        "the pairs the causal model attends, which is what cuDNN's causal kernel computes. Each row: the median of "
        f"{'–'.join(sorted({str(len(r['rounds_tokens_per_s'])) for _, _, r in rows}))} rounds of {'/'.join(steps)} "
        "steps, compilation excluded.\n\n" + "\n".join(table) + "\n\n")
    gpt2 = [(name, run, r) for name, run, r in rows if r["model"] == "gpt2_small" and r["attention"] == "cudnn"]
    if gpt2:
        best_name, best_run, best = max(gpt2, key=lambda x: x[2]["mfu"])
        batch = gpu_flag_default("batch_size")
        at = [r for _, run, r in gpt2 if r["batch_size"] == batch and not run["xla_flags"]]
        top = max(at, key=lambda r: r["mfu"]) if at else None
        text += (f"- Goal (issue 16): MFU ≥ 40% on the 124M model in PaLM's count — "
                 f"**{'met' if best['mfu'] >= 0.40 else 'not met'}** at best: {best['mfu']:.1%} (in the causal count "
                 f"{mfu_causal(best, shapes['gpt2_small']):.1%}; `{best_name}.json`: batch {best['batch_size']}, "
                 f"{best['activations']} activations"
                 + (f", XLA_FLAGS `{best_run['xla_flags']}`" if best_run["xla_flags"] else "") + ")"
                 + (f"; at the benchmark's default batch of {batch}, at most {top['mfu']:.1%} ({top['activations']} "
                    "activations)" + (" — below the goal there" if top["mfu"] < 0.40 else "") if top else "") + ".\n")
    ab = {act: [r for n, _, r in rows if n.startswith(f"gpu_gpt2_{act}_activations_")] for act in ("f32", "bf16")}
    if ab["f32"] and ab["bf16"]:
        ratio = statistics.mean(r["tokens_per_s"] for r in ab["bf16"]) / statistics.mean(r["tokens_per_s"] for r in ab["f32"])
        side = compare_runs([r["mfu"] for r in ab["bf16"]], [r["mfu"] for r in ab["f32"]])
        text += (f"- Activations (`model.act_dtype`; `auto` is bf16 on a GPU): float32 and bf16 alternated in one "
                 f"sitting, {len(ab['f32'])} and {len(ab['bf16'])} runs at batch {ab['f32'][0]['batch_size']}: MFU "
                 + ", ".join(f"{r['mfu']:.1%}" for r in ab["f32"]) + " against "
                 + ", ".join(f"{r['mfu']:.1%}" for r in ab["bf16"]) + f"; bf16 activations train {ratio:.3f}× as fast "
                 + {"above": "(every bf16 run above every float32 run)",
                    "below": "(every bf16 run below every float32 run)",
                    "overlap": "(the runs overlap: no difference beyond the run-to-run spread)"}[side] + ".\n")
    plain = [(r, run) for _, run, r in rows if not run["xla_flags"] and r["model"] == "gpt2_small"]
    pairs = [(r, p) for r, _ in plain for p, _ in plain if r["attention"] == "cudnn" and p["attention"] == "posenc"
             and r["batch_size"] == p["batch_size"] and r["activations"] == p["activations"]]
    if pairs:
        r, p = pairs[0]
        text += (f"- The fused kernel: cuDNN attention trains the 124M model at {r['tokens_per_s'] / p['tokens_per_s']:.2f}× "
                 f"posenc's own attention (batch {r['batch_size']}, {r['activations']} activations; {r['mfu']:.1%} "
                 f"against {p['mfu']:.1%} MFU).\n")
    outcomes = [line.split()[0] for line in log.splitlines()
                if line.startswith(("PASSED", "FAILED", "ERROR")) and "_on_gpu" in line]
    if outcomes:
        passed = outcomes.count("PASSED")
        text += (f"- Accuracy on the GPU (`tests/test_attention.py`, in the check's log): {passed} of {len(outcomes)} "
                 "cuDNN tests passed" + (" — the fused kernel's logits and gradients are as close to float32 as "
                                          "posenc's own bf16 attention (plain, grouped heads, sliding window)"
                                          if passed == len(outcomes) else ": **the fused kernel is not as accurate**")
                 + ".\n")
    missed = {name: outcome for name, outcome in prov.get("steps", {}).items() if not outcome.startswith("ok")}
    if missed:
        text += ("- **Steps of the check's last run that did not measure** (`provenance.json`, deadline "
                 f"{prov.get('deadline_seconds', '?')} s): " + "; ".join(f"{k}: {v}" for k, v in missed.items())
                 + ".\n")
    return text + gpu_profile(runs)


def stack_text(stack: dict) -> str:
    """A GPU result's `stack` (scripts/benchmark_gpu.py's `software_stack`) as the README names it: jax with its
    jaxlib and plugins, flax, optax, orbax-checkpoint, then CUDA, cuDNN and the NVIDIA driver ("not read" where
    the run could not read one)."""
    def v(key):
        return stack.get(key) or "not read"

    jaxlib = ", ".join([f"jaxlib {v('jaxlib')}", *(f"{k} {x}" for k, x in stack.get("plugins", {}).items())])
    return (f"jax {v('jax')} ({jaxlib}), flax {v('flax')}, optax {v('optax')}, orbax-checkpoint "
            f"{v('orbax-checkpoint')}; CUDA runtime {v('cuda_runtime')}, cuDNN {v('cudnn')}, NVIDIA driver "
            f"{v('nvidia_driver')}" + (f" (CUDA {stack['cuda_driver_api']})" if stack.get("cuda_driver_api") else ""))


def gpu_flag_default(name: str):
    """The default of one of scripts/benchmark_gpu.py's flags (read from its source: the report needs no jax)."""
    tree = ast.parse((HERE.parent.parent / "scripts" / "benchmark_gpu.py").read_text())
    return next(ast.literal_eval(n.args[1]) for n in ast.walk(tree) if isinstance(n, ast.Call)
                and getattr(n.func, "attr", "").startswith("DEFINE_") and n.args
                and isinstance(n.args[0], ast.Constant) and n.args[0].value == name)


def gpu_shapes() -> dict:
    """scripts/benchmark_gpu.py's SHAPES (read from its source: the report needs no jax)."""
    tree = ast.parse((HERE.parent.parent / "scripts" / "benchmark_gpu.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "SHAPES")
    return {ast.literal_eval(key): {k.arg: ast.literal_eval(k.value) for k in call.keywords}
            for key, call in zip(node.value.keys, node.value.values)}


def gpu_profile(runs: dict) -> str:
    """Where a profiled step's device time goes (`benchmark_gpu.py --profile`, its kept Perfetto trace): matrix
    products (cuBLAS custom-calls and Triton GEMM fusions), cuDNN attention, and every other kernel (elementwise, reductions, converts,
    the optimizer), then the profile's top ops."""
    name = next((n for n, run in runs.items() if any("profile" in r for r in run["rows"])), None)
    if name is None:
        return ""
    run = runs[name]
    row = next(r for r in run["rows"] if "profile" in r)
    path = HERE / "gpu" / f"{name}_{row['model']}.trace.json.gz"
    if not path.exists():
        return ""
    trace = json.load(gzip.open(path))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    gpu = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
           and "/device:GPU" in e["args"]["name"]}
    kernels = [e for e in events if e.get("ph") == "X" and e.get("pid") in gpu]
    share = collections.Counter()
    for e in kernels:
        op = e["args"].get("hlo_op", e["name"])
        share["cuDNN attention" if "attention" in op else "matrix products"
              if op.startswith(("custom-call", "gemm_fusion")) else "everything else"] += e["dur"]
    busy, span = sum(share.values()), max(e["ts"] + e["dur"] for e in kernels) - min(e["ts"] for e in kernels)
    step_ms = 1e3 * row["batch_size"] * row["train_len"] / row["tokens_per_s"]
    steps = statistics.mode(collections.Counter(e["args"].get("hlo_op", e["name"]) for e in kernels).values())
    shape = gpu_shapes()[row["model"]]  # 6·N = FLOPs a token less attention's 12·layers·d_model·T
    dense_flops = row["flops_per_token"] - 12 * shape["num_layers"] * shape["d_model"] * row["train_len"]
    product_rate = dense_flops * row["batch_size"] * row["train_len"] / (share["matrix products"] / steps / 1e6) / 1e12
    top = ["| ms per step | share | op | shape | source |", "|---|---|---|---|---|"]
    top += [f"| {op['ms']:.2f} | {op['share']:.1%} | `{op['op']}` | `{op['shape'].strip('(,')}` | `{op['source']}` |"
            for op in row["profile"][:10]]
    return (f"- Where the time goes ({row['activations']} activations; `{name}.json`, `--profile={row['model']}` with `XLA_FLAGS={run['xla_flags']}` so "
            f"that the trace shows each kernel; {row['mfu']:.1%} MFU in that run): the GPU is busy "
            f"{busy / span:.0%} of the traced span ({span / steps / 1e3:.1f} ms a step of {steps}; timed step "
            f"{step_ms:.1f} ms). "
            "Of its kernel time: " + ", ".join(f"{k} {v / busy:.0%}" for k, v in share.most_common())
            + f". The products' FLOPs (6 FLOPs a parameter a token, the input embedding excluded) over their kernel "
            f"time: {product_rate:.0f} TFLOP/s, against {run['measured_bf16_matmul_tflops']:.0f} for the 8192² "
            "matmul of the same run; the other kernels ("
            + ("casts between the float32 activations and the bf16 operands, " if row["activations"] == "float32" else "")
            + "norms, elementwise activations, the float32 loss over the logits, the optimizer) are what holds MFU "
            "down.\n\n  " + "\n  ".join(top) + "\n")


text += gpu_section()
malloc_ab = optional("malloc_ab.json")
if malloc_ab:
    text += ("\n## glibc malloc (`scripts/benchmark_malloc.py`, `malloc_ab.json`)\n\n"
             "XLA:CPU takes each step's temporary buffer from malloc and frees it at the step's end; with glibc's "
             "defaults a buffer that large is a fresh `mmap` every step, whose pages all fault in again "
             "(`posenc/malloc.py`). The reference model's training step, one fresh process per arm and round, the "
             f"arms' order alternating ({machine_of(malloc_ab, article=False)}, cores {malloc_ab['affinity']}, XLA_FLAGS "
             f"`{malloc_ab['xla_flags'] or '(none)'}`, batch {malloc_ab['batch_size']} × {malloc_ab['train_len']}, "
             f"{malloc_ab['steps']} timed steps after {malloc_ab['warmup']} untimed, {len(malloc_ab['rounds']['system'])} "
             f"rounds, medians; commit {malloc_ab['commit']}; "
             + ("every arm trained to the same parameters, hash for hash" if malloc_ab["same_parameters"] else
                "**the arms trained to different parameters**") + "):\n\n"
             "| arm | tokens/s | × glibc's defaults | page faults a step | time in the kernel | peak resident MiB "
             "(ru_maxrss) |\n"
             "|---|---|---|---|---|---|\n"
             + "".join(f"| {arm} | {a['tokens_per_s']:.0f} | {a['ratio_to_system']:.2f} | {a['faults_per_step']:,.0f} | "
                       f"{a['sys_fraction']:.1%} | {a['max_rss_mib']:,.0f} |\n" for arm, a in malloc_ab["arms"].items())
             + "\n`system`: glibc's defaults (POSENC_MALLOC=system); `keep`: the settings, applied first in main() as "
             "the training scripts and the experiments' runners do.\n")
if __name__ == "__main__":
    (HERE / "README.md").write_text(text)
    print(text)
