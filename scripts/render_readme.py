r"""Renders the numbers of the root README.md from committed results: no number there is typed by hand.

    python scripts/render_readme.py            # rewrites the rendered regions of README.md
    python scripts/render_readme.py --check    # exits 1 (naming the regions) if README.md is not up to date

A region is the text between `<!-- rendered:NAME -->` and `<!-- /rendered -->`; NAME picks its renderer
below, each reading the files it names (experiments/*/results, experiments/benchmarks/*.json, *.log). The
test suite runs `--check`, so a changed result without a rerendered README fails.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import pathlib
import re
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
REGION = re.compile(r"(<!-- rendered:([\w-]+) -->)(.*?)(<!-- /rendered -->)", re.S)


def _json(path: str) -> dict:
    """A JSON file, or the JSON last line of a script's log."""
    text = (ROOT / path).read_text().strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return json.loads(text.splitlines()[-1])


def quickstart_time() -> str:
    """The main job's wall time from experiments/quickstart/run_info.json (the committed run), then from
    by_cpu/*.json (the latest run on each CPU kind and accelerator, run.sh's) on the other machines, each named by
    `timing.machines_text` (an accelerator's run as "NVIDIA H100 (host: …)")."""
    from posenc.timing import machines_text  # noqa: PLC0415

    def said(info: dict) -> str:
        minutes = round((info["train_seconds"] + info["eval_seconds"]) / 60)
        took = f"about {minutes} minute{'s' if minutes != 1 else ''}" if minutes else "under a minute"
        return (f"{took} on {machines_text([info])}: "
                f"{info['train_seconds']} s of training, {info['eval_seconds']} s of evaluation")

    info = _json("experiments/quickstart/run_info.json")
    out = [said(info) + ", `experiments/quickstart/run_info.json`"]
    for path in sorted((ROOT / "experiments/quickstart/by_cpu").glob("*.json")):
        other = json.loads(path.read_text())
        if (other.get("cpu_id"), other.get("device")) != (info.get("cpu_id"), info.get("device")):
            extra = [s for s in other.get("eval_scalings", "").split(",")
                     if s and s not in info.get("eval_scalings", "").split(",")]
            out.append(said(other) + (f" (its evaluation also scored {', '.join(extra)})" if extra else "")
                       + f", `{path.relative_to(ROOT)}`")
    return "; ".join(out)


def study_summary() -> str:
    """Bits per byte of the extrapolation study's runs (no scaling, mean over seeds) with the n-gram floor on
    the same bytes, and what the two say at 1×."""
    from posenc import data  # noqa: PLC0415
    from posenc.evaluate import ngram_baseline  # noqa: PLC0415

    results = [_json(str(p.relative_to(ROOT))) for p in sorted((ROOT / "experiments/extrapolation/results").glob("*-s*.json"))]
    results = [r for r in results if "-ft-" not in r["rows"][0]["run"]]
    lengths, num_bytes = results[0]["lengths"], results[0]["num_bytes"]
    if any(r["lengths"] != lengths or r["num_bytes"] != num_bytes for r in results):
        raise ValueError("experiments/extrapolation/results: the runs were scored on different lengths or bytes")
    cells: dict[str, dict[int, list[float]]] = {}
    train_len = results[0]["rows"][0]["train_len"]
    for r in results:
        for row in r["rows"]:
            if (row["scaling"] == "none" and row.get("method", "none") == "none" and row["protocol"] == "nonoverlap"
                    and row["status"] == "ok"):
                if (row["split"], row["train_len"], row.get("corpus", data.DEFAULT_CORPUS)) != (
                        "test", train_len, data.DEFAULT_CORPUS):
                    raise ValueError(f"{row['run']}: scored on split {row['split']!r} of {row.get('corpus')!r} at "
                                     f"train_len {row['train_len']}; the summary needs the test split of "
                                     f"{data.DEFAULT_CORPUS!r} at {train_len}")
                cells.setdefault(row["posenc"], {}).setdefault(row["length"], []).append(row["bpb"])
    corpus = data.load_corpus(data.DEFAULT_CORPUS)
    model, context, _ = ngram_baseline(data.DEFAULT_CORPUS)
    floor = {n: float(model.bits(*data.eval_windows(corpus.test, length=n, num_bytes=num_bytes), context).mean())
             for n in lengths}
    head = "| encoding | seeds | " + " | ".join(f"{n // train_len}× ({n})" for n in lengths) + " |"
    lines = [f"Bits per byte on the first {num_bytes} test bytes (no scaling, mean ± standard deviation over seeds; "
             "lower is better), "
             f"trained at {train_len}; the floor is the Witten–Bell byte n-gram ({context} bytes of context, chosen "
             "on validation) on the same windows:", "", head, "|---|---|" + "---|" * len(lengths)]
    for enc, by in sorted(cells.items()):
        seeds = len(by[lengths[0]]) if lengths[0] in by else 0
        lines.append(f"| {enc} | {seeds} | " + " | ".join(
            (f"{statistics.mean(by[n]):.2f}" + (f" ± {statistics.stdev(by[n]):.2f}" if len(by[n]) > 1 else ""))
            if n in by else "undefined" for n in lengths) + " |")
    lines.append("| n-gram floor | — | " + " | ".join(f"{floor[n]:.2f}" for n in lengths) + " |")
    first = {enc: statistics.mean(by[lengths[0]]) for enc, by in cells.items() if lengths[0] in by}
    beat = sorted(e for e, v in first.items() if v < floor[lengths[0]])
    anywhere = sorted({e for e, by in cells.items() for n in lengths if n in by and statistics.mean(by[n]) < floor[n]})
    lines += ["", f"At 1× {len(beat)} of {len(first)} encodings beat the n-gram floor"
              + (f": {', '.join(beat)}." if beat else ".")
              + (" At no length does any encoding beat it." if not anywhere else
                 f" At some length: {', '.join(anywhere)}.")]
    return "\n".join(lines)


def lm_study_summary() -> str:
    """The LM study's headline (experiments/lm_study/results/summary.json, written by its report): bits per
    byte of each encoding's main runs on the whole test split, mean over seeds, with the n-gram floor at 1×."""
    path = ROOT / "experiments/lm_study/results/summary.json"
    if not path.exists():
        return "No main run of the study has finished yet; its report lists what has run and what is next."
    summary = _json(str(path.relative_to(ROOT)))
    corpora = summary.get("corpora", [summary])
    lines = []
    for s in corpora:
        l0 = s["train_len"]
        lengths = sorted({int(n) for by in s["bpb"].values() for n in by})
        lines += [f"Bits per byte on {s['corpus']}'s whole test split ({s['test_bytes']:,} bytes scored by document; "
                  f"no scaling; lower is better), trained at {l0}: the mean ± standard deviation over seeds, or one "
                  "seed's value [its 95% bootstrap interval over windows]; the n-gram floor on the same windows:", "",
                  "| encoding | seeds | " + " | ".join(f"{n // l0}× ({n})" for n in lengths) + " |",
                  "|---|---|" + "---|" * len(lengths)]

        def cell(enc: str, n: int) -> str:
            v = s["bpb"][enc].get(str(n))
            if v is None:
                return "undefined"
            sd = s["bpb_sd"][enc].get(str(n))
            iv = s["bpb_interval"].get(enc, {}).get(str(n))
            return f"{v:.3f} ± {sd:.3f}" if sd is not None else f"{v:.3f} [{iv[0]:.3f}, {iv[1]:.3f}]" if iv else f"{v:.3f}"

        for enc in sorted(s["bpb"]):
            lines.append(f"| {enc} | {s['seeds'][enc]} | " + " | ".join(cell(enc, n) for n in lengths) + " |")
        lines.append("| n-gram floor | — | " + " | ".join(
            "—" if s["ngram_bpb_by_length"].get(str(n)) is None else f"{s['ngram_bpb_by_length'][str(n)]:.3f}"
            for n in lengths) + " |")
        first = {e: by.get(str(lengths[0])) for e, by in s["bpb"].items() if by.get(str(lengths[0])) is not None}
        clear = sorted(e for e, v in first.items() if s["ngram_bpb"] - v >= 0.25)

        def margin(e: str) -> str:
            sd = s["bpb_sd"][e].get(str(lengths[0]))
            return f"{e} ({s['ngram_bpb'] - first[e]:.3f}" + (f" ± {sd:.3f}" if sd is not None else "") + ")"

        lines += ["", f"At 1× {len(clear)} of {len(first)} encodings beat the floor by ≥ 0.25 bpb on the mean over "
                  "seeds (floor − model, ± its standard deviation over seeds; the study's claims rate how firmly)"
                  + (f": {', '.join(margin(e) for e in clear)}." if clear else "."), ""]
    return "\n".join(lines).rstrip()


@functools.cache
def _benchmarks_report():
    """experiments/benchmarks/report.py as a module (importing it renders, it does not write): its helpers name a
    result's CPU (`machine_of`, `folder_identity`) and compute its MFU in the causal count (`mfu_causal`)."""
    spec = importlib.util.spec_from_file_location("benchmarks_report", ROOT / "experiments/benchmarks/report.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def benchmarks() -> str:
    report = _benchmarks_report()
    cur = _json("experiments/benchmarks/current.json")
    ev = _json("experiments/benchmarks/eval_throughput.json")
    dec = {r["context"]: r for r in _json("experiments/benchmarks/decode.log")["rows"]}
    rope = _json("experiments/benchmarks/rope.log")["float32"]
    name, _, cores = open(ROOT / "experiments/benchmarks/cpu.txt").read().strip().partition(", ")
    evals = ", ".join(f"{r['ratio']:.2f}× at {r['length']}" for r in ev["rows"])
    commit = cur.get("commit", "an unrecorded commit")
    return (f"Measured with the ablations (`experiments/benchmarks/run.sh`, {cores or 'cores not recorded'} of "
            f"{report.machine_of(cur, name)}, {commit}): training the reference model at "
            f"{cur['jax_over_torch']:.2f}× PyTorch eager{old_peer(cur)} with MFU {100 * cur['mfu']:.0f}% (PaLM's 6N + 12·L·d·T count, "
            f"the target's convention; {100 * report.mfu_causal(cur, report.REFERENCE):.0f}% counting only causal "
            f"attention's pairs); the evaluation forward at {evals} of PyTorch SDPA (another run, on "
            f"{report.machine_of(ev)}); decoding with the KV cache {dec[256]['speedup']:.0f}× faster than "
            f"recomputation at a context of 256 and {dec[2048]['speedup']:.0f}× at 2048; `apply_rope` at "
            f"{rope['rope_half_vs_elementwise']:.2f} (half layout) and {rope['rope_interleaved_vs_elementwise']:.2f} "
            "(interleaved) of a jitted elementwise pass over the same bytes." + malloc_sentence() + cpu_kinds() + gpu_sentence())


def old_peer(result: dict) -> str:
    """A note after a JAX / PyTorch ratio whose PyTorch peer predates `torch_peer` (scripts/benchmark_train.py):
    that peer trained with torch's AdamW defaults and the exact GELU, not posenc's step (experiments/benchmarks)."""
    if "torch_tokens_per_s" not in result or "torch_peer" in result:
        return ""
    return " (against a PyTorch peer that predates `torch_peer`: torch's AdamW defaults and exact GELU)"


def malloc_sentence() -> str:
    """What keeping the step buffers mapped is worth (scripts/benchmark_malloc.py, posenc/malloc.py)."""
    m = _json("experiments/benchmarks/malloc_ab.json")
    system, keep = m["arms"]["system"], m["arms"]["keep"]
    return (f" Keeping XLA's freed step buffers mapped (`posenc/malloc.py`; `scripts/benchmark_malloc.py`, "
            f"{len(m['affinity'])} core{'s' if len(m['affinity']) > 1 else ''} of {_benchmarks_report().machine_of(m)}, "
            f"batch {m['batch_size']} × {m['train_len']}, commit {m['commit']}): training at "
            f"{keep['ratio_to_system']:.2f}× glibc's defaults, {keep['faults_per_step']:,.0f} page faults a step against "
            f"{system['faults_per_step']:,.0f} ({100 * system['sys_fraction']:.0f}% of the time in the kernel), a peak of "
            f"{keep['max_rss_mib']:,.0f} MiB resident against {system['max_rss_mib']:,.0f}.")


def gpu_sentence() -> str:
    """The 124M model's MFU on a GPU with the current defaults (bf16 activations, cuDNN attention; files in
    experiments/benchmarks/gpu/ from gpu_check.sh and the runs its provenance.json names), or that none was measured."""
    folder = ROOT / "experiments/benchmarks/gpu"
    runs = [json.loads(p.read_text()) for p in sorted(folder.glob("gpu*.json"))]
    rows = [r for run in runs if not run["xla_flags"] for r in run["rows"]
            if r["model"] == "gpt2_small" and r.get("activations") == "bfloat16" and r["attention"] == "cudnn"]
    report = _benchmarks_report()
    shape = report.gpu_shapes()["gpt2_small"]
    if not rows:
        return " No GPU measured with the current defaults yet."
    best = {}
    for r in rows:  # the best run at each batch size
        if r["batch_size"] not in best or r["mfu"] > best[r["batch_size"]]["mfu"]:
            best[r["batch_size"]] = r
    return (f" On one {runs[0]['device']} (`experiments/benchmarks/gpu/`): the 124M GPT-2-small-sized model trains in "
            "bf16 (bf16 activations, cuDNN's fused attention) at MFU (the best run of each batch size) "
            + " and ".join(f"{r['mfu']:.1%} at batch {b} × {r['train_len']} ({r['tokens_per_s']:,.0f} tokens/s)"
                           for b, r in sorted(best.items()))
            + " (goal ≥ 40% in PaLM's 6N + 12·L·d·T count; counting only causal attention's pairs, "
            + " and ".join(f"{report.mfu_causal(r, shape):.1%}" for _, r in sorted(best.items())) + ").")


def cpu_kinds() -> str:
    """One sentence per CPU kind measured by experiments/benchmarks/run_cpu_kind.sh (cpu/<kind>/), the kind named by
    its family, model and stepping where the folder records them (report.py's `folder_identity`)."""
    from posenc.timing import cpu_description  # noqa: PLC0415

    report = _benchmarks_report()
    out = []
    for folder in sorted((ROOT / "experiments/benchmarks/cpu").glob("*/")):
        rel = folder.relative_to(ROOT)
        f32, b16 = _json(f"{rel}/train_float32.json"), _json(f"{rel}/train_bfloat16.json")
        ab, ev = _json(f"{rel}/dtype_ab.json"), _json(f"{rel}/eval_throughput.json")
        evals = ", ".join(f"{r['ratio']:.2f}× at {r['length']}" for r in ev["rows"])
        cpu = cpu_description(f32["cpu"], report.folder_identity(folder, [f32, b16, ev]))
        out.append(f" On {cpu}, in `{rel}` (commit {f32['commit']}): float32 training at "
                   f"{f32['jax_over_torch']:.2f}× PyTorch eager{old_peer(f32)}, bf16 at {b16['jax_over_torch']:.2f}× "
                   f"PyTorch under bf16 autocast{old_peer(b16)} and {ab['bfloat16'] / ab['float32']:.2f}× posenc's own float32; the evaluation "
                   f"forward at {evals}.")
    return "".join(out)


def memory() -> str:
    """The peak-memory table of scripts/measure_eval_memory.py's log (experiments/quickstart/memory.log), after
    the machine it was measured on: its cores and CPU (`posenc.timing.cpu_description`) where the log records
    them, and whether under the evaluation's malloc settings (`posenc/malloc.py`, its `malloc_kept`; a log
    without it was measured with glibc's defaults)."""
    from posenc.timing import machines_text  # noqa: PLC0415

    m = _json("experiments/quickstart/memory.log")
    where = f"{machines_text([m])}, commit {m['commit']}" if m.get("cpu") else "a machine the log does not record"
    where += (", under the evaluation's malloc settings (`posenc/malloc.py`)" if m.get("malloc_kept") else
              ", with glibc's default malloc settings, not the evaluation's (`posenc/malloc.py` keeps freed buffers "
              "in the heap)")
    chunked = sorted((int(k[1:].split("_")[0]), v) for k, v in m.items() if k.endswith("_chunked_mib"))
    unchunked = {int(k[1:].split("_")[0]): v for k, v in m.items() if k.endswith("_unchunked_mib")}
    lines = [f"Measured on {where}:", "",
             f"| length | query chunks of {m['attn_chunk']}, key tiles of {m['attn_key_block']} | no chunking |",
             "|---|---|---|", f"| (imports only) | {m['baseline_mib']:.0f} MiB | |"]
    for n, v in chunked:
        full = f"{unchunked[n]:.0f} MiB" if n in unchunked else f"(≈ {4 * 4 * n * n / 2**30:.0f} GiB of scores per layer)"
        lines.append(f"| {n:,} | {v:.0f} MiB | {full} |")
    return "\n".join(lines)


RENDERERS = {"quickstart-time": quickstart_time, "study-summary": study_summary, "lm-study-summary": lm_study_summary,
             "benchmarks": benchmarks,
             "memory": memory}


def render(text: str) -> str:
    def one(m: re.Match) -> str:
        name = m.group(2)
        if name not in RENDERERS:
            raise ValueError(f"README region {name!r} has no renderer; known: {sorted(RENDERERS)}")
        body = RENDERERS[name]()
        sep = "\n" if "\n" in m.group(3) else ""
        return f"{m.group(1)}{sep}{body}{sep}{m.group(4)}"

    return REGION.sub(one, text)


def main(argv: list[str]) -> int:
    path = ROOT / "README.md"
    text = path.read_text()
    new = render(text)
    if "--check" in argv:
        stale = [m.group(2) for m, n in zip(REGION.finditer(text), REGION.finditer(new)) if m.group(0) != n.group(0)]
        if stale:
            print(f"README.md is not up to date (regions {stale}): run python scripts/render_readme.py")
            return 1
        return 0
    path.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
