#!/usr/bin/env bash
# The comparisons issue 16 asks for on each CPU kind these machines come in (AMD EPYC, Intel Xeon Emerald
# Rapids): float32 and bf16 training against PyTorch eager (bf16: torch.autocast), posenc bf16 against
# posenc float32, and the evaluation forward against PyTorch SDPA. Writes experiments/benchmarks/cpu/<kind>/
# (<kind> from lscpu's model name, CPU family and model: posenc.timing.cpu_slug), then the README.
# Needs PyTorch: .venv/bin/pip install torch==2.13.0. About 15 minutes; run it on an otherwise idle machine:
#   bash experiments/benchmarks/run_cpu_kind.sh
set -euo pipefail
kind=$(.venv/bin/python -c "from posenc.timing import cpu_slug; print(cpu_slug())")
out=experiments/benchmarks/cpu/$kind
mkdir -p "$out"
lscpu > "$out/lscpu.txt"
for dtype in float32 bfloat16; do
  .venv/bin/python scripts/benchmark_train.py --torch --rounds=5 --profile --dtype=$dtype 2>/dev/null \
    | tee "$out/train_$dtype.log" | tail -n 1 > "$out/train_$dtype.json"
done
.venv/bin/python experiments/benchmarks/dtype_ab.py "$out/dtype_ab.json" 2>/dev/null
.venv/bin/python scripts/benchmark_eval.py --rounds=5 --out="$out/eval_throughput.json" 2>/dev/null | tee "$out/eval_throughput.log"
.venv/bin/python scripts/benchmark_matmul.py --out="$out/matmul.json" 2>/dev/null | tee "$out/matmul.log"
.venv/bin/python experiments/benchmarks/report.py > /dev/null
