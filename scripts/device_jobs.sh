#!/usr/bin/env bash
# Runs jobs of a resumable study (experiments/lm_study, experiments/length_generalization) on the GPU machine
# (the `device` tool), in one command, and brings their results back; then adds them here.
#
# There (the command of one `run` call, with carry=[".whl"]; scripts/device_env.sh sets up the machine's stack):
#   OUT=<folder> COMMIT=<hash> bash scripts/device_jobs.sh run <study> <budget minutes> [run.py flags...]
# runs `experiments/<study>/run.py --workers=8 --budget_minutes=<budget> <flags>` (its plan order; pick the jobs
# with --only=REGEX, apart from any that run here meanwhile) with
#   - float32 products computed in float32 (JAX_DEFAULT_MATMUL_PRECISION=highest; a GPU's default rounds their
#     operands to TF32), XLA's GPU kernels deterministic, GPU memory taken as needed by the workers;
#   - runs/ under /tmp (RUNS; lost with the machine), so a job unfinished when the command stops is lost too: keep the
#     budget well inside the call's limit (a job started before the budget runs to its end); run.py is stopped
#     after STOP_SECONDS (default 480) in any case, so that what finished is packed within a 600-second call.
# and writes to OUT: device_jobs.log, results.tgz (the result files written, each recording its device:
# posenc.timing.device_record; COMMIT is the code's commit, since the copy's git may be stale) and each exported
# parameter file (<name>.params.npz) as it is.
#
# What travels to the machine (tracked and untracked files, .whl) must stay under 64 MiB:
#   git ls-files -z | xargs -0 du -cb | tail -n 1; du -sb .whl
#
# Here, with the folder the files came back to (files_at):
#   bash scripts/device_jobs.sh add <study> <folder>
# unpacks them into experiments/<study>/results (never over a result already here: that is an error) and
# re-renders the study's report (run.py --budget_minutes=0 starts no job).
set -uo pipefail
PYTHON=${PYTHON:-python3}
usage() { echo "usage: OUT=<folder> COMMIT=<hash> $0 run <study> <budget minutes> [run.py flags] | $0 add <study> <folder>" >&2; exit 2; }
[ $# -ge 3 ] || usage
verb=$1 study=$2
cd "$(dirname "$0")/.."
case $study in lm_study|length_generalization) ;; *) echo "study must be lm_study or length_generalization, got '$study'" >&2; exit 2;; esac
results=${RESULTS:-experiments/$study/results}

if [ "$verb" = add ]; then
  from=$3
  [ -f "$from/results.tgz" ] || { echo "$from has no results.tgz" >&2; exit 1; }
  tar -xzf "$from/results.tgz" -C "$results" --keep-old-files || { echo "not added: a result above is here already" >&2; exit 1; }
  for f in "$from"/*.params.npz; do
    [ -e "$f" ] || continue
    [ -e "$results/$(basename "$f")" ] && { echo "not added: $results/$(basename "$f") is here already" >&2; exit 1; }
    cp "$f" "$results/"
  done
  tar -tzf "$from/results.tgz"
  exec "$PYTHON" "experiments/$study/run.py" --budget_minutes=0 "${@:4}" > /dev/null
fi
[ "$verb" = run ] || usage
OUT=${OUT:?set OUT to the folder for the log and the results}
COMMIT=${COMMIT:?set COMMIT to the commit of the code: git rev-parse --short HEAD}
budget=$3
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
exec > >(tee "$OUT/device_jobs.log") 2>&1
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
source scripts/device_env.sh
export POSENC_COMMIT=$COMMIT JAX_DEFAULT_MATMUL_PRECISION=highest XLA_PYTHON_CLIENT_PREALLOCATE=false
if XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_deterministic_ops=true" "$PYTHON" -c "import jax.numpy as j; j.zeros(1).block_until_ready()"; then
  export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_deterministic_ops=true"
else
  echo "this XLA does not take --xla_gpu_deterministic_ops: the kernels may not be deterministic (results record it)"
fi
marker=$(mktemp)
start=$(date +%s)
timeout "${STOP_SECONDS:-480}" "$PYTHON" "experiments/$study/run.py" --workers="${WORKERS:-8}" --budget_minutes="$budget" --runs="${RUNS:-/tmp/device_runs/$study}" \
  "${@:4}" 2>&1 | gzip > "$OUT/run_py.log.gz"
status=${PIPESTATUS[0]}
echo "run.py exited with $status after $(( $(date +%s) - start )) s (its output: run_py.log.gz); its last lines before the report:"
gzip -dc "$OUT/run_py.log.gz" | tr '\r' '\n' | sed '/^# /,$d' | grep -v '^\s*$' | tail -n 15
mapfile -t made < <(cd "$results" && find . -maxdepth 1 -type f -newer "$marker" -name '*.json' \
  ! -name summary.json ! -name timing.json | sed 's|^\./||' | sort)
echo "results written: ${#made[@]} ${made[*]}"
for f in "${made[@]}"; do
  "$PYTHON" -c "import json, sys; r = json.load(open(sys.argv[1])); print(sys.argv[2], r.get('device', r.get('cpu')), r.get('timing'))" "$results/$f" "$f"
done
[ ${#made[@]} -gt 0 ] && tar -czf "$OUT/results.tgz" -C "$results" "${made[@]}"
find "$results" -maxdepth 1 -type f -newer "$marker" -name '*.params.npz' -exec cp {} "$OUT/" \;
rm -f "$marker"
exec >&- 2>&-  # close the pipe to tee, and let it finish writing the log
wait
exit "$status"
