#!/usr/bin/env bash
# The bf16 quality check: the default 400-step run in float32 (runs/quickstart, the README's main job), in bf16
# mixed precision (runs/quickstart_bf16: bf16 products, float32 activations, what `model.act_dtype=auto` gives
# on a CPU) and in bf16 with bf16 activations (runs/quickstart_bf16_act: what `auto` gives on a GPU; XLA:CPU
# rounds its emulated bf16 elementwise arithmetic as a GPU's native one does), same seed and batches. Writes
# experiments/benchmarks/cpu/<this CPU kind>/bf16_quality.json with the final validation bits per byte and
# their differences from float32. Trains what is missing (finished runs: no-op).
# Run from the repository root: bash experiments/benchmarks/bf16_quality.sh
set -euo pipefail
train() { .venv/bin/python scripts/train.py --config=configs/default.py --workdir="$@"; }
train runs/quickstart
train runs/quickstart_bf16 --config.model.dtype=bfloat16
train runs/quickstart_bf16_act --config.model.dtype=bfloat16 --config.model.act_dtype=bfloat16
.venv/bin/python - <<'PY'
import json, pathlib
from posenc.timing import cpu_model, cpu_slug
from posenc.train import timed_curve

def final(workdir):
    rows = [json.loads(l) for l in pathlib.Path(workdir, "metrics.jsonl").read_text().splitlines()]
    val = [r for r in rows if "val_bpb" in r][-1]
    config = json.loads(pathlib.Path(workdir, "config.json").read_text())
    _, tokens, seconds = timed_curve(rows, config["batch_size"] * config["train_len"])[-1]
    return {"step": val["step"], "val_bpb": val["val_bpb"], "tokens_per_s": tokens / seconds,  # over the timed steps
            "dtype": config["model"]["dtype"], "act_dtype": config["model"].get("act_dtype", "auto")}

arms = {"float32": final("runs/quickstart"), "bfloat16": final("runs/quickstart_bf16"),
        "bfloat16_activations": final("runs/quickstart_bf16_act")}
out = {**arms, "bound": 0.02, "cpu": cpu_model()}
for name in ("bfloat16", "bfloat16_activations"):
    diff = arms[name]["val_bpb"] - arms["float32"]["val_bpb"]
    out[f"{name}_bpb_difference"], out[f"{name}_within_bound"] = diff, abs(diff) <= 0.02
path = pathlib.Path("experiments/benchmarks/cpu", cpu_slug(), "bf16_quality.json")
path.parent.mkdir(parents=True, exist_ok=True)
path.write_text(json.dumps(out, indent=1) + "\n")
print(out)
PY
