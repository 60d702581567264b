#!/usr/bin/env bash
# The bf16 pilot of the LM study: would bf16 mixed precision (model.dtype=bfloat16) be as good and faster at the
# study's scale? RoPE's learning-rate check (config.py: posenc=rope, lr 3e-3, 1000 steps, the same seed and
# batches) trained twice at once, float32 on one core and bf16 on the other, each with one XLA thread as
# run.py's workers; writes pilot/bf16.json (final validation bits per byte and tokens/s over the timed steps of each, their
# difference against the 0.02 bpb bound of the benchmarks' quality check, the CPU). Resumable: finished runs
# are not trained again. Run from the repository root: bash experiments/lm_study/bf16_pilot.sh
set -euo pipefail
ONE_THREAD="--xla_cpu_multi_thread_eigen=false"  # posenc.jobs.ONE_THREAD
config="--config=experiments/lm_study/config.py:posenc=rope,lr=0.003,steps=1000"
XLA_FLAGS="$ONE_THREAD" taskset -c 0 .venv/bin/python scripts/train.py "$config" \
  --workdir=runs/lm_study_pilot/rope-float32 > runs/lm_study_pilot_float32.log 2>&1 &
f32=$!
XLA_FLAGS="$ONE_THREAD" taskset -c 1 .venv/bin/python scripts/train.py "$config" --config.model.dtype=bfloat16 \
  --workdir=runs/lm_study_pilot/rope-bfloat16 > runs/lm_study_pilot_bfloat16.log 2>&1 &
bf16=$!
wait $f32
wait $bf16
.venv/bin/python - <<'PY'
import json, pathlib
from posenc.timing import cpu_model
from posenc.train import run_summary as final

f32, bf16 = final("runs/lm_study_pilot/rope-float32"), final("runs/lm_study_pilot/rope-bfloat16")
out = {"config": "experiments/lm_study/config.py:posenc=rope,lr=0.003,steps=1000", "threads": 1,
       "float32": f32, "bfloat16": bf16, "bpb_difference": bf16["val_bpb"] - f32["val_bpb"], "bound": 0.02,
       "within_bound": abs(bf16["val_bpb"] - f32["val_bpb"]) <= 0.02,
       "speedup": bf16["tokens_per_s"] / f32["tokens_per_s"], "cpu": cpu_model()}
path = pathlib.Path("experiments/lm_study/pilot/bf16.json")
path.parent.mkdir(exist_ok=True)
path.write_text(json.dumps(out, indent=1) + "\n")
print(out)
PY
