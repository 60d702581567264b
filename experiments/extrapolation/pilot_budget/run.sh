#!/usr/bin/env bash
# Pilot for the language-model study (issue 15): how many steps does the Quickstart's model need to beat the
# byte n-gram by 0.25 bits per byte? The default config trained 10x longer (4000 steps, 16.4M bytes, about
# 3.4 epochs of the training split), validation every 250 steps; then the whole validation split scored by
# document at 256 and 1024, beside the n-gram floor. Selection happens on validation only; this pilot never
# reads the test split. Resumable: rerun the same command. From the repository root:
#   bash experiments/extrapolation/pilot_budget/run.sh
set -euo pipefail
here=experiments/extrapolation/pilot_budget
run=${RUN:-runs/pilot_budget}
.venv/bin/python scripts/train.py --config=configs/default.py --workdir="$run" \
  --config.train_steps=4000 --config.eval_every=250 --config.checkpoint_every=250
.venv/bin/python scripts/eval_extrapolation.py --workdir="$run" --split=validation --documents \
  --lengths=256,1024 --scalings=none --out="$here"
cp "$run/config.json" "$run/metrics.jsonl" "$here/"
# the machine the training's time was measured on (posenc.timing.machine_record: CPU model, family, cores)
.venv/bin/python -c 'import json; from posenc.timing import machine_record; print(json.dumps(machine_record()))' \
  > "$here/machine.json"
.venv/bin/python "$here/report.py" > /dev/null
