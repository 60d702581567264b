#!/usr/bin/env bash
# RoPE base sweep (issue 6, experiment 1): does a larger base extrapolate better without scaling?
# Trains one run per base with the extrapolation study's budget (experiments/extrapolation/config.py),
# evaluates each on test at 1x-16x its training length without scaling (a description: no base is chosen), and
# writes the report here. Resumable.
set -euo pipefail
root=${ROOT:-runs/rope_base_sweep}
mkdir -p "$root"
marker=$(mktemp "$root/.sitting.XXXXXX")  # the points this sitting writes are newer than it
trap 'rm -f "$marker"' EXIT
start=$(date +%s)
.venv/bin/python scripts/sweep.py --mode=train --config=experiments/extrapolation/config.py --root="$root" \
  --axis=model.rope.base=100,1000,10000,100000,1000000 --lengths=256,512,1024,2048,4096 --num_bytes=16384 --split=test
end=$(date +%s)
cp "$root"/results.csv "$root"/results.md "$root"/sweep.png experiments/rope_base_sweep/
# the wall time of a sitting that trained points and the machine it was measured on (posenc.timing.machine_record),
# which the report names; a rerun that only gathered finished points keeps the timing of the sitting that trained
if [ -n "$(find "$root" -name sweep_point.json -newer "$marker" -print -quit)" ] \
    || [ ! -f experiments/rope_base_sweep/timing.json ]; then
  .venv/bin/python -c 'import json, sys; from posenc.timing import machine_record
print(json.dumps({"wall_seconds": int(sys.argv[1]), "machine": machine_record()}))' "$((end - start))" \
    > experiments/rope_base_sweep/timing.json
fi
.venv/bin/python experiments/rope_base_sweep/report.py
