#!/usr/bin/env bash
# Regenerates experiments/quickstart/: the README's main job (default config, bundled corpus), timed,
# with its evaluation written here. Run from the repository root: bash experiments/quickstart/run.sh
set -euo pipefail
out=experiments/quickstart
rm -rf runs/quickstart  # a timed run from scratch (the main job itself resumes; a resumed run would time nothing)
start=$(date +%s)
.venv/bin/python scripts/train.py --config=configs/default.py --workdir=runs/quickstart
trained=$(date +%s)
.venv/bin/python scripts/eval_extrapolation.py --workdir=runs/quickstart --out="$out"
end=$(date +%s)
.venv/bin/python - "$out" "$((trained - start))" "$((end - trained))" <<'PY'
import json, platform, subprocess, sys, jax, pathlib
from posenc.timing import cpu_id
out, train_s, eval_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [json.loads(l) for l in pathlib.Path("runs/quickstart/metrics.jsonl").read_text().splitlines()]
last = rows[-1]
cpu = subprocess.run(["sh", "-c", "lscpu | grep 'Model name' | cut -d: -f2"], capture_output=True, text=True).stdout.strip()
info = {"train_seconds": train_s, "eval_seconds": eval_s, "final_step": last["step"], "val_bpb": last.get("val_bpb"),
        "tokens_per_s": last.get("tokens_per_s"), "cpu": cpu, "cpu_id": cpu_id(), "cores": len(__import__("os").sched_getaffinity(0)),
        "jax": jax.__version__, "python": platform.python_version(),
        "eval_scalings": json.loads(pathlib.Path("runs/quickstart/config.json").read_text())["eval"]["scalings"]}
pathlib.Path(out, "run_info.json").write_text(json.dumps(info, indent=1) + "\n")
from posenc.timing import cpu_slug
pathlib.Path(out, "by_cpu").mkdir(exist_ok=True)  # the latest run on each CPU kind, for the README's times
pathlib.Path(out, "by_cpu", cpu_slug() + ".json").write_text(json.dumps(info, indent=1) + "\n")
print(info)
PY
.venv/bin/python experiments/quickstart/report.py
