#!/usr/bin/env bash
# The bf16 quality check: the default 400-step run in float32 (runs/quickstart, the README's main job) and
# in bf16 mixed precision (runs/quickstart_bf16), same seed and batches; writes bf16_quality.json with both
# final validation losses (bits per byte) and their difference. Trains what is missing (finished runs: no-op).
# Run from the repository root: bash experiments/benchmarks/bf16_quality.sh
set -euo pipefail
.venv/bin/python scripts/train.py --config=configs/default.py --workdir=runs/quickstart
.venv/bin/python scripts/train.py --config=configs/default.py --workdir=runs/quickstart_bf16 --config.model.dtype=bfloat16
.venv/bin/python - <<'PY'
import json, pathlib
from posenc.timing import cpu_model
from posenc.train import timed_curve

def final(workdir):
    rows = [json.loads(l) for l in pathlib.Path(workdir, "metrics.jsonl").read_text().splitlines()]
    val = [r for r in rows if "val_bpb" in r][-1]
    config = json.loads(pathlib.Path(workdir, "config.json").read_text())
    _, tokens, seconds = timed_curve(rows, config["batch_size"] * config["train_len"])[-1]
    return {"step": val["step"], "val_bpb": val["val_bpb"], "tokens_per_s": tokens / seconds}  # over the timed steps

f32, bf16 = final("runs/quickstart"), final("runs/quickstart_bf16")
out = {"float32": f32, "bfloat16": bf16, "bpb_difference": bf16["val_bpb"] - f32["val_bpb"], "bound": 0.02,
       "within_bound": abs(bf16["val_bpb"] - f32["val_bpb"]) <= 0.02, "cpu": cpu_model()}
pathlib.Path("experiments/benchmarks/bf16_quality.json").write_text(json.dumps(out, indent=1) + "\n")
print(out)
PY
