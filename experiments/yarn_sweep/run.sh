#!/usr/bin/env bash
# YaRN eval sweeps on one RoPE checkpoint (issue 6, experiment 2): factor x attention factor, and
# beta_fast x beta_slow. No retraining; one compilation per length for all points. Resumable.
set -euo pipefail
run=${RUN:-runs/extrapolation/rope-s0}
root=${ROOT:-runs/yarn_sweep}
start=$(date +%s)
.venv/bin/python scripts/sweep.py --mode=eval --workdir="$run" --root="$root/temperature" --scaling=yarn \
  --axis=factor=2,4,8,16 --axis=attention_factor=0.9,1.0,1.1,1.2,1.3,1.4,1.5 \
  --lengths=512,1024,2048,4096 --num_bytes=16384 --plot_length=1024
.venv/bin/python scripts/sweep.py --mode=eval --workdir="$run" --root="$root/betas" --scaling=yarn \
  --axis=beta_fast=4,8,16,32,64 --axis=beta_slow=0.25,0.5,1,2 --lengths=1024,4096 --num_bytes=16384 --plot_length=1024
end=$(date +%s)
mkdir -p experiments/yarn_sweep/temperature experiments/yarn_sweep/betas
cp "$root"/temperature/results.csv "$root"/temperature/results.md "$root"/temperature/sweep.png experiments/yarn_sweep/temperature/
cp "$root"/betas/results.csv "$root"/betas/results.md "$root"/betas/sweep.png experiments/yarn_sweep/betas/
echo "{\"wall_seconds\": $((end - start)), \"run\": \"$run\"}" > experiments/yarn_sweep/timing.json
.venv/bin/python experiments/yarn_sweep/report.py
