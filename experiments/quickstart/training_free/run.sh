#!/usr/bin/env bash
# Regenerates experiments/quickstart/training_free/: the quickstart run (trained by the README's main job;
# trained here if runs/quickstart is missing — the same deterministic run) evaluated with every training-free
# method next to every rescaling, then the README. Run from the repository root:
#   bash experiments/quickstart/training_free/run.sh
set -euo pipefail
out=experiments/quickstart/training_free
.venv/bin/python scripts/train.py --config=configs/default.py --workdir=runs/quickstart  # a finished run: no-op
start=$(date +%s)
.venv/bin/python scripts/eval_extrapolation.py --workdir=runs/quickstart --out="$out" \
  --scalings=none,linear,ntk,dynamic_ntk,yarn \
  --method=none --method=self_extend --method=rerope --method=leaky_rerope --method=lm_infinite \
  --method=sinks --method=none,logn=256
end=$(date +%s)
.venv/bin/python - "$out" "$((end - start))" <<'PY'
import json, platform, sys, jax, pathlib
from posenc.timing import machine_record
out, eval_s = sys.argv[1], int(sys.argv[2])
# the machine the evaluation's wall time was measured on: CPU model, family and the cores it may run on
info = {"eval_seconds": eval_s, **machine_record(), "jax": jax.__version__, "python": platform.python_version()}
pathlib.Path(out, "run_info.json").write_text(json.dumps(info, indent=1) + "\n")
PY
.venv/bin/python experiments/quickstart/training_free/report.py
