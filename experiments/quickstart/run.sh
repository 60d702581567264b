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
import json, platform, re, sys, jax, pathlib
from posenc.timing import cpu_slug, machine_record
out, train_s, eval_s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rows = [json.loads(l) for l in pathlib.Path("runs/quickstart/metrics.jsonl").read_text().splitlines()]
last = rows[-1]
machine = machine_record()  # cpu, cpu_id, cores; device where JAX ran on an accelerator
info = {"train_seconds": train_s, "eval_seconds": eval_s, "final_step": last["step"], "val_bpb": last.get("val_bpb"),
        "tokens_per_s": last.get("tokens_per_s"), **machine, "jax": jax.__version__, "python": platform.python_version(),
        "eval_scalings": json.loads(pathlib.Path("runs/quickstart/config.json").read_text())["eval"]["scalings"]}
pathlib.Path(out, "run_info.json").write_text(json.dumps(info, indent=1) + "\n")
# the latest run on each CPU kind (and accelerator), for the README's times
kind = cpu_slug() + ("-" + re.sub(r"[^a-z0-9]+", "-", machine["device"].lower()).strip("-") if "device" in machine else "")
pathlib.Path(out, "by_cpu").mkdir(exist_ok=True)
pathlib.Path(out, "by_cpu", kind + ".json").write_text(json.dumps(info, indent=1) + "\n")
print(info)
PY
.venv/bin/python experiments/quickstart/report.py
