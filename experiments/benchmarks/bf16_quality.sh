#!/usr/bin/env bash
# The bf16 quality check: the default 400-step run in float32 (runs/quickstart, the README's main job), in bf16
# mixed precision (runs/quickstart_bf16: bf16 products, float32 activations, what `model.act_dtype=auto` gives
# on a CPU) and in bf16 with bf16 activations (runs/quickstart_bf16_act: what `auto` gives on a GPU; on a CPU
# XLA emulates bf16 elementwise arithmetic, rounding after each operation, so this arm is a proxy for the GPU's
# numerics, not a measurement of them), each at every seed of SEEDS (default 0; seed s > 0 adds "-s<s>" to the
# workdirs). Writes experiments/benchmarks/cpu/<this CPU kind>/bf16_quality.json: each arm's final validation
# bits per byte and training rate by seed (train.run_summary), each bf16 arm's differences from float32, the CPU
# (lscpu's model name and its family, model and stepping: posenc.timing.cpu_record) and the commit.
# Trains what is missing (finished runs: no-op). The rates are only comparable if nothing else ran meanwhile.
# Run from the repository root: [SEEDS="0 1"] bash experiments/benchmarks/bf16_quality.sh
set -euo pipefail
SEEDS=${SEEDS:-0}
train() { .venv/bin/python scripts/train.py --config=configs/default.py --workdir="$@"; }
for seed in $SEEDS; do
  suffix=$([ "$seed" = 0 ] && echo "" || echo "-s$seed")
  train "runs/quickstart$suffix" --config.seed="$seed"
  train "runs/quickstart_bf16$suffix" --config.seed="$seed" --config.model.dtype=bfloat16
  train "runs/quickstart_bf16_act$suffix" --config.seed="$seed" --config.model.dtype=bfloat16 \
    --config.model.act_dtype=bfloat16
done
SEEDS="$SEEDS" .venv/bin/python - <<'PY'
import json, os, pathlib
from posenc.timing import code_version, cpu_record, cpu_slug
from posenc.train import run_summary

seeds = [int(s) for s in os.environ["SEEDS"].split()]
workdirs = {"float32": "runs/quickstart", "bfloat16": "runs/quickstart_bf16",
            "bfloat16_activations": "runs/quickstart_bf16_act"}
arms = {arm: {str(s): run_summary(path + (f"-s{s}" if s else "")) for s in seeds} for arm, path in workdirs.items()}
out = {"seeds": seeds, "arms": arms, "bound": 0.02, **cpu_record(), "commit": code_version(),
       "differences": {arm: {s: arms[arm][s]["val_bpb"] - arms["float32"][s]["val_bpb"] for s in arms[arm]}
                       for arm in ("bfloat16", "bfloat16_activations")}}
path = pathlib.Path("experiments/benchmarks/cpu", cpu_slug(), "bf16_quality.json")
path.parent.mkdir(parents=True, exist_ok=True)
path.write_text(json.dumps(out, indent=1) + "\n")
print(json.dumps(out["differences"]))
PY
