#!/usr/bin/env bash
# Regenerates experiments/benchmarks/: training throughput of the reference model (issue 3's target:
# >= 1.0x PyTorch eager, MFU >= 40%), with ablations that undo each optimisation; apply_rope against an
# elementwise pass; KV-cache decoding against recomputation; the training-free methods'
# evaluation time against plain attention; then the README.
# Needs PyTorch for the comparison: .venv/bin/pip install torch==2.13.0
# Run from the repository root on an otherwise idle machine: bash experiments/benchmarks/run.sh
set -euo pipefail
out=experiments/benchmarks
rounds=${ROUNDS:-5}
run() {  # name, flags...
  local name=$1; shift
  .venv/bin/python scripts/benchmark_train.py --torch --rounds="$rounds" "$@" 2>/dev/null | tee "$out/$name.log" | tail -n 1 > "$out/$name.json"
}
run current --profile
run without_dense_vjp --without=dense_vjp --profile
run without_attention_vjp --without=attention_vjp
run without_block_causal --attn_block=0
run baseline --without=dense_vjp,attention_vjp --attn_block=0
.venv/bin/python scripts/benchmark_rope.py 2>/dev/null | tee "$out/rope.log"
.venv/bin/python scripts/benchmark_decode.py 2>/dev/null | tee "$out/decode.log"
.venv/bin/python scripts/benchmark_methods.py --out="$out/training_free_eval.json" 2>/dev/null
# bf16 against PyTorch autocast (PyTorch's CPU bf16 can be very slow without AVX512-BF16/AMX: few steps)
.venv/bin/python scripts/benchmark_train.py --torch --rounds=2 --steps=1 --dtype=bfloat16 2>/dev/null | tee "$out/bf16.log" | tail -n 1 > "$out/bf16.json"
# posenc float32 against posenc bf16, alternating
.venv/bin/python experiments/benchmarks/dtype_ab.py "$out/dtype_ab.json" 2>/dev/null
.venv/bin/python scripts/benchmark_eval.py --rounds=7 --out="$out/eval_throughput.json" 2>/dev/null | tee "$out/eval_throughput.log"
.venv/bin/python scripts/benchmark_eval.py --rounds=3 --head_groups=1 --out="$out/eval_throughput_one_head_group.json" 2>/dev/null | tee "$out/eval_throughput_one_head_group.log"
echo "$(lscpu | grep 'Model name' | cut -d: -f2 | xargs), $(nproc) cores" > "$out/cpu.txt"
.venv/bin/python experiments/benchmarks/report.py
