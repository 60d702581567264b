#!/usr/bin/env bash
# XLA:CPU's oneDNN dot fusion against its default dot library, in one sitting: float32 training and the
# evaluation forward (twice), bf16 training (once), each against PyTorch, with and without the flags, alternating A, B, A, B so that both
# see the same machine. XLA:CPU sends every dot to YNNPACK by default; oneDNN takes the float32 dots only
# when both flags are set (--xla_cpu_use_onednn alone changes nothing). Writes
# experiments/benchmarks/cpu/<kind>/xla_flags/{default,onednn}_{train_float32,train_bfloat16,eval_throughput}_<i>.json,
# then the README. Needs PyTorch (pip install torch==2.13.0); about 20 minutes on an otherwise idle machine:
#   bash experiments/benchmarks/xla_flags_ab.sh
set -euo pipefail
# the flags alone choose the library: posenc's own choice (posenc/xla_options.py, `auto`: oneDNN dots on an Intel
# CPU, passed to jax.jit as compiler options) would send the default arm's dots to oneDNN as well
export POSENC_CPU_DOTS=xla
ONEDNN="--xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_fusion_type=dot"
kind=$(.venv/bin/python -c "from posenc.timing import cpu_slug; print(cpu_slug())")
out=experiments/benchmarks/cpu/$kind/xla_flags
mkdir -p "$out"
for i in 1 2; do
  for variant in default onednn; do
    flags=""; [ "$variant" = onednn ] && flags="$ONEDNN"
    XLA_FLAGS="$flags" .venv/bin/python scripts/benchmark_train.py --torch --rounds=3 2>/dev/null \
      | tail -n 1 > "$out/${variant}_train_float32_$i.json"
    if [ "$i" = 1 ]; then
      XLA_FLAGS="$flags" .venv/bin/python scripts/benchmark_train.py --torch --rounds=3 --dtype=bfloat16 2>/dev/null \
        | tail -n 1 > "$out/${variant}_train_bfloat16_$i.json"
    fi
    XLA_FLAGS="$flags" .venv/bin/python scripts/benchmark_eval.py --lengths=4096,16384 --rounds=3 \
      --out="$out/${variant}_eval_throughput_$i.json" 2>/dev/null | tail -n 3
  done
done
.venv/bin/python experiments/benchmarks/report.py > /dev/null
