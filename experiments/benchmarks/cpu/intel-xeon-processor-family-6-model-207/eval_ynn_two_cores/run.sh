#!/usr/bin/env bash
# Idle 2-core A/B (Intel): evaluation forward at L=4096 vs PyTorch SDPA, YNNPACK fusions on (default) / off.
set -u
cd "$(dirname "$0")/../../../../.."  # the repository root
out=experiments/benchmarks/cpu/intel-xeon-processor-family-6-model-207/eval_ynn_two_cores
for i in 1 2; do
  for arm in default noynn; do
    flags=""; [ "$arm" = noynn ] && flags="--xla_cpu_experimental_ynn_fusion_type="
    XLA_FLAGS="$flags" timeout 300 .venv/bin/python scripts/benchmark_eval.py --lengths=4096 --rounds=3 \
      --out=$out/${arm}_$i.json > $out/${arm}_$i.log 2>&1
    grep "ratio" $out/${arm}_$i.log | tail -1
  done
done
