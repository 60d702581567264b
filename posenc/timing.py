"""Timing helpers shared by the benchmark scripts, and the record of the machine a result was made on."""

from __future__ import annotations

import collections
import glob
import gzip
import json
import os
import pathlib
import platform
import re
import shutil
import subprocess
import tempfile
import time
from typing import Callable

import numpy as np


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of `fn()` over `repeats` (>= 1) calls, after one warm-up call (compilation)."""
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats (timed calls, the median taken) must be an integer >= 1, got {repeats!r}")
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def lscpu_text() -> str:
    """lscpu's output with English field names whatever the locale; "" where lscpu is missing or fails."""
    try:
        return subprocess.run(["lscpu"], capture_output=True, text=True, check=True,
                              env={**os.environ, "LC_ALL": "C"}).stdout
    except (OSError, subprocess.CalledProcessError):
        return ""


def lscpu_fields(text: str) -> dict[str, str]:
    """lscpu's "Field: value" lines as a dict (the first of a repeated field)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())
    return fields


def cpu_identity(text: str) -> dict:
    """Which CPU an lscpu output describes, beyond its model name (which on cloud VMs can be just "AMD EPYC", the
    same for CPUs of different generations): vendor, family, model and stepping (integers where lscpu prints
    them so, None where it has no such field), and its bf16 instruction sets among `avx512_bf16`, `amx_bf16`."""
    fields = lscpu_fields(text)

    def number(key: str) -> int | str | None:
        value = fields.get(key)
        return int(value) if value is not None and value.isdigit() else value

    return {"vendor": fields.get("Vendor ID"), "family": number("CPU family"), "model": number("Model"),
            "stepping": number("Stepping"),
            "bf16": sorted(set(fields.get("Flags", "").split()) & {"avx512_bf16", "amx_bf16"})}


def cpu_model() -> str:
    """The CPU's model name from lscpu ("AMD EPYC"; platform.processor() where lscpu is missing)."""
    text = lscpu_text()
    if not text:
        return platform.processor() or "unknown"
    return lscpu_fields(text).get("Model name", "unknown")


def cpu_id() -> dict:
    """This machine's `cpu_identity` (family, model, stepping, bf16 instruction sets) from lscpu."""
    return cpu_identity(lscpu_text())


def cpu_record() -> dict:
    """What a benchmark result records of the CPU it ran on: "cpu", the model name, and "cpu_id", its
    `cpu_identity` (the model name alone can name CPUs of different generations alike)."""
    return {"cpu": cpu_model(), "cpu_id": cpu_id()}


def cpu_description(name: str, identity: dict | None = None, article: bool = True) -> str:
    """A CPU for a report, from its model name and `cpu_identity`: "an AMD EPYC of CPU family 26 (model 2,
    stepping 1)"; where the family is unknown (results recorded before `cpu_id`), "an AMD EPYC machine whose CPU
    family was not recorded". `article=False` drops the leading "a"/"an"."""
    family = (identity or {}).get("family")
    if family is None:
        text = f"{name} machine whose CPU family was not recorded"
    else:
        rest = ", ".join(f"{k} {identity[k]}" for k in ("model", "stepping") if identity.get(k) is not None)
        text = f"{name} of CPU family {family}" + (f" ({rest})" if rest else "")
    if not article:
        return text
    return ("an " if name[:1].lower() in "aeiou" else "a ") + text


def machine_record() -> dict:
    """What a wall time records of the machine it was measured on: `cpu_record` and "cores", the cores this process
    may run on (its affinity: taskset or a container's CPU set, not the host's count); where JAX runs on an
    accelerator, also "device", its kind ("NVIDIA H200", as `device_record`): the time is then the accelerator's,
    not its host CPU's."""
    import jax  # noqa: PLC0415

    record = {**cpu_record(), "cores": len(os.sched_getaffinity(0))}
    if jax.default_backend() != "cpu":
        record["device"] = jax.devices()[0].device_kind
    return record


def machines_text(records) -> str:
    """The machines a report's wall times were measured on, from their `machine_record`s: each distinct one as
    "2 cores of an AMD EPYC of CPU family 26 (model 2, stepping 1)" (`cpu_description`; "…, its cores not
    recorded" without "cores"), one with an accelerator as "NVIDIA H200 (host: 16 cores of …)", joined by
    " and "; a time recorded without one (None, or no "cpu") as "a machine whose CPU was not recorded"."""
    texts = []
    for record in records:
        if not record or not record.get("cpu"):
            text = "a machine whose CPU was not recorded"
        elif record.get("cores"):
            cores = record["cores"]
            text = f"{cores} core{'s' if cores != 1 else ''} of {cpu_description(record['cpu'], record.get('cpu_id'))}"
        else:
            text = f"{cpu_description(record['cpu'], record.get('cpu_id'))}, its cores not recorded"
        if record and record.get("device"):
            text = f"{record['device']} (host: {text})"
        if text not in texts:
            texts.append(text)
    return " and ".join(texts) or "a machine whose CPU was not recorded"


def device_record() -> dict:
    """What a job ran on beside its CPU, for its result: {} on a CPU; on an accelerator its kind ("NVIDIA H200"),
    the jax that drove it, the default precision of float32 products (`jax_default_matmul_precision`: "highest"
    keeps them float32, XLA's default on a GPU rounds their operands to TF32) and whether XLA's GPU kernels
    were made deterministic (`--xla_gpu_deterministic_ops`), and the code's commit (POSENC_COMMIT where the
    checkout's git is not the code's, as on the GPU machine's copy: scripts/device_jobs.sh)."""
    import jax  # noqa: PLC0415

    if jax.default_backend() == "cpu":
        return {}
    return {"device": jax.devices()[0].device_kind, "jax": jax.__version__,
            "matmul_precision": str(jax.config.jax_default_matmul_precision or "default"),
            "deterministic": "--xla_gpu_deterministic_ops=true" in os.environ.get("XLA_FLAGS", ""),
            "commit": os.environ.get("POSENC_COMMIT") or code_version()}


def machine(result: dict) -> str:
    """The machine kind a job's result was made on: its accelerator (`device_record`), else its CPU's model name
    with its family where the result recorded `cpu_id` ("AMD EPYC (family 26)"; the model name alone can name
    CPUs of different generations alike)."""
    if result.get("device"):
        return result["device"]
    if not result.get("cpu"):
        return "unrecorded"
    family = (result.get("cpu_id") or {}).get("family")
    return result["cpu"] + (f" (family {family})" if family is not None else "")


def cpu_slug(lscpu: str | None = None) -> str:
    """A folder name for a CPU kind, from lscpu's output (this machine's where None): the model name lowercased,
    "(R)"/"(TM)" dropped, the rest joined by "-", then the CPU family and model where lscpu gives them
    ("Intel(R) Xeon(R) Processor", family 6, model 207 → "intel-xeon-processor-family-6-model-207"). The family
    and model are part of it because a cloud VM's model name ("AMD EPYC") is the same for CPUs of different
    generations, with different float32 and bf16 peaks."""
    text = lscpu_text() if lscpu is None else lscpu
    fields = lscpu_fields(text)
    parts = re.findall(r"[a-z0-9]+", re.sub(r"\((r|tm)\)", "", fields.get("Model name", "").lower()))
    parts += [f"{label}-" + "-".join(re.findall(r"[a-z0-9]+", fields[key].lower()))
              for key, label in (("CPU family", "family"), ("Model", "model")) if fields.get(key)]
    return "-".join(parts) or "unknown"


# Files that hold results and documentation, not the code a benchmark measures: a benchmark writing its own
# output (lscpu.txt, a log, the README it re-renders) leaves the code it measured unchanged.
RESULT_SUFFIXES = (".json", ".jsonl", ".log", ".txt", ".md", ".png", ".svg", ".csv", ".npz")


# The checkout this package was imported from (its parent folder): what code_version describes.
CHECKOUT = pathlib.Path(__file__).resolve().parent.parent


def code_version(checkout: str | pathlib.Path | None = None) -> str:
    """The commit (short hash) of the checkout the code runs from (`checkout`; by default `CHECKOUT`, the one this
    package was imported from, whatever the working directory), with "+changes" when tracked files other than
    results (`RESULT_SUFFIXES`) differ from it; "unknown" where that folder is not the top of a git checkout (a copy
    without its .git, also one lying inside another repository, or an installed package). Benchmark results record
    it, so that a figure can be told apart from one measured before a change."""
    root = pathlib.Path(CHECKOUT if checkout is None else checkout).resolve()

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout

    try:
        if pathlib.Path(git("rev-parse", "--show-toplevel").strip()).resolve() != root:
            return "unknown"  # the git found above `root` is another checkout's, not this code's
        commit = git("rev-parse", "--short", "HEAD").strip()
        status = git("status", "--porcelain=v1", "-z", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    # -z entries: "XY path", a rename's original path following as an entry of its own
    changed = [entry[3:] if entry[2:3] == " " else entry for entry in status.split("\0") if entry]
    code = [path for path in changed if not path.endswith(RESULT_SUFFIXES)]
    return commit + ("+changes" if code else "")


def model_flops_per_token(params: int, vocab_size: int, d_model: int, num_layers: int, seq_len: int) -> dict:
    """Training FLOPs a token (forward and backward) of a decoder-only Transformer of `params` parameters whose input
    embedding is `vocab_size` × `d_model`, with N = `params` less that embedding, in two counts:
      "palm":   6·N + 12·num_layers·d_model·T (PaLM, arXiv 2204.02311, App. B; nanoGPT's MFU): attention's
                scores and weighted sum over all T×T query-key pairs;
      "causal": 6·N + 6·num_layers·d_model·T: only the pairs a causal model attends (about half, the key at or
                before the query), which is what block-causal attention and cuDNN's causal kernel compute.
    MFU is reported in PaLM's count (the convention targets are stated in); the causal count is the lower,
    stricter figure."""
    dense = 6 * (params - vocab_size * d_model)
    return {"palm": dense + 12 * num_layers * d_model * seq_len, "causal": dense + 6 * num_layers * d_model * seq_len}


def cpu_bf16_flags() -> list[str]:
    """The CPU's bf16 instruction sets (`avx512_bf16`, `amx_bf16`) from /proc/cpuinfo; [] if none (or unknown)."""
    try:
        text = pathlib.Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = set(next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), []))
    return sorted(flags & {"avx512_bf16", "amx_bf16"})


def emit(result: dict, out: str | None = None) -> None:
    """A benchmark's result, with the XLA_FLAGS it ran under: written to `out` (JSON) if given, and printed as the
    last line."""
    result = {**result, "xla_flags": os.environ.get("XLA_FLAGS", "")}
    if out:
        pathlib.Path(out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result))


def profile_ops(step, params, opt_state, x, y, repeats: int = 3, top: int = 15,
                keep_trace: str | None = None) -> list[dict]:
    """The XLA ops of a jitted train step `(params, opt_state, x, y) -> (params, opt_state, metrics)` with the
    largest total time, in ms per step (`profile_calls` over `repeats` steps, each fed the last one's state)."""
    state = [params, opt_state]

    def call():
        state[0], state[1], metrics = step(*state, x, y)
        float(metrics["loss"])

    return profile_calls(call, step.lower(params, opt_state, x, y).compile().as_text(), repeats, top, keep_trace)


def hlo_ops(hlo: str) -> tuple[dict[str, str], dict[str, str], set[str]]:
    """From an optimized HLO module's text: each instruction's result shape (a tuple's whole), its source
    (`op_name` metadata) where it has one, and the control-flow instructions (while, conditional, call)."""
    shapes = {m.group(1): m.group(2) for m in re.finditer(r"%([\w.\-]+) = (.+?) [a-z][\w\-]*\(", hlo)}
    names = {m.group(1): m.group(2) for m in re.finditer(r'%([\w.\-]+) = [^\n]*?op_name="([^"]+)"', hlo)}
    containers = {m.group(1) for m in re.finditer(r"%([\w.\-]+) = [^\n]*? (?:while|conditional|call)\(", hlo)}
    return shapes, names, containers


def profile_calls(call, hlo: str, repeats: int = 3, top: int = 15, keep_trace: str | None = None) -> list[dict]:
    """The XLA ops with the largest total time, in ms per call, from a `jax.profiler` trace of `repeats` calls of
    `call()` (which must block until its results are ready), for the compiled module whose optimized HLO text is
    `hlo`. On a GPU only the device's kernel events count (named by their HLO op where the trace says,
    `args.hlo_op`); on a CPU, the events named after the module's ops, leaving out the control-flow ops (while,
    conditional, call) whose time is their bodies' ops'. Each row: op, ms, share of the counted time, HLO shape,
    source (op_name). `keep_trace`: also copy the Perfetto trace (`.trace.json.gz`) to this path."""
    import jax

    shapes, names, containers = hlo_ops(hlo)
    with tempfile.TemporaryDirectory() as tmp:
        jax.profiler.start_trace(tmp, create_perfetto_trace=True)
        try:
            for _ in range(repeats):
                call()
        finally:
            jax.profiler.stop_trace()
        path = next(iter(glob.glob(f"{tmp}/**/*.trace.json.gz", recursive=True)), None)
        if path is None:
            raise RuntimeError(f"jax.profiler wrote no Perfetto trace under {tmp}")
        if keep_trace:
            shutil.copyfile(path, keep_trace)
        with gzip.open(path) as f:
            trace = json.load(f)
    return trace_op_times(trace, (shapes, names, containers), repeats, top)


def trace_op_times(trace: dict | list, ops: tuple[dict[str, str], dict[str, str], set[str]], repeats: int = 1,
                   top: int = 15) -> list[dict]:
    """profile_calls' rows from a Perfetto trace (`{"traceEvents": [...]}` or the list) of `repeats` calls and
    `hlo_ops`' (shapes, sources, control-flow ops): complete events ("ph": "X", "dur" in µs) summed by op, in ms per
    call. With a GPU process in the trace (a "process_name" metadata event naming "/device:GPU") only its events
    count, named by `args.hlo_op` where given; otherwise the events named after the module's ops, leaving out the
    control-flow ops."""
    shapes, names, containers = ops
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    gpu_pids = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
                and "/device:GPU" in str(e.get("args", {}).get("name", ""))}
    totals = collections.Counter()
    for event in events:
        if event.get("ph") != "X":
            continue
        if gpu_pids:
            if event.get("pid") in gpu_pids:
                totals[event.get("args", {}).get("hlo_op") or event["name"]] += event["dur"] / 1e3 / repeats
        elif event.get("name") in shapes and event["name"] not in containers:
            totals[event["name"]] += event["dur"] / 1e3 / repeats
    counted = sum(totals.values()) or 1.0
    return [{"op": op, "ms": round(ms, 3), "share": round(ms / counted, 4), "shape": shapes.get(op, ""),
             "source": names.get(op, "")} for op, ms in totals.most_common(top)]
