#!/usr/bin/env bash
# Runs jobs of a resumable study (experiments/lm_study, experiments/length_generalization) on the GPU machine
# (the `device` tool), in one command, and brings their results back; then adds them here.
#
# There (the command of one `run` call, with carry=[".whl"]; scripts/device_env.sh sets up the machine's stack):
#   OUT=<folder> COMMIT=<code version> bash scripts/device_jobs.sh run <study> <budget minutes> [run.py flags...]
# with COMMIT from here: python -c 'from posenc.timing import code_version; print(code_version())' (the copy's
# git may be stale). It runs `experiments/<study>/run.py --workers=8 --budget_minutes=<budget> <flags>` (its plan
# order; pick the jobs with --only=REGEX, apart from any that run here meanwhile) with
#   - float32 products computed in float32 (JAX_DEFAULT_MATMUL_PRECISION=highest; a GPU's default rounds their
#     operands to TF32), XLA's GPU kernels deterministic, GPU memory taken as needed by the workers;
#   - runs/ under /tmp (RUNS; lost with the machine), so a job unfinished when the command stops is lost too: keep
#     the budget well inside the call's limit (a job started before the budget runs to its end); run.py is stopped
#     STOP_SECONDS (default 480) after this script started in any case, so that what finished is packed within a
#     600-second call (that stop is not a failure: the exit status is run.py's otherwise).
# and writes to OUT: device_jobs.log, run_py.log.gz (run.py's output), results.tgz (the result files written, each
# recording its device: posenc.timing.device_record) and each exported parameter file (<name>.params.npz).
#
# What travels to the machine (tracked and untracked files, .whl) must stay under 64 MiB:
#   git ls-files -z | du -cb --files0-from=- | tail -n 1; du -sb .whl
#
# Here, with the folder the files came back to (files_at):
#   bash scripts/device_jobs.sh add <study> <folder>
# unpacks them into experiments/<study>/results, unless one of them is there already or is a job that a worker here
# runs now (its claim is live: then nothing is added), and
# re-renders the study's report (run.py --budget_minutes=0 starts no job); where run.py refuses a result (its
# settings, config or base differ from this study's), the unpacked files are removed again and nothing is added.
# RESULTS (an existing results folder: tests, with lm_study's --results) replaces experiments/<study>/results in
# both verbs.
set -uo pipefail
PYTHON=${PYTHON:-python3}
started=$(date +%s)
usage() { echo "usage: OUT=<folder> COMMIT=<version> $0 run <study> <budget minutes> [run.py flags] | $0 add <study> <folder>" >&2; exit 2; }
[ $# -ge 3 ] || usage
verb=$1 study=$2
case $study in lm_study|length_generalization) ;; *) echo "study must be lm_study or length_generalization, got '$study'" >&2; exit 2;; esac
if [ "$verb" = add ]; then from=$(cd "$3" && pwd) || exit 1; fi
if [ "$verb" = run ]; then
  OUT=${OUT:?set OUT to the folder for the log and the results}
  COMMIT=${COMMIT:?set COMMIT to the code version (see the usage above)}
  mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
fi
if [ -n "${RESULTS:-}" ]; then  # a folder that is not there is an error, not the study's own results
  given=$RESULTS
  RESULTS=$(cd "$given" 2>/dev/null && pwd) || { echo "RESULTS=$given: no such folder" >&2; exit 2; }
fi
cd "$(dirname "$0")/.."
results=${RESULTS:-experiments/$study/results}

if [ "$verb" = add ]; then
  [ -f "$from/results.tgz" ] || { echo "$from has no results.tgz" >&2; exit 1; }
  mapfile -t names < <(tar -tzf "$from/results.tgz"; cd "$from" && ls -- *.params.npz 2>/dev/null)
  for name in "${names[@]}"; do
    [ -e "$results/$name" ] && { echo "not added: $results/$name is here already (nothing was added)" >&2; exit 1; }
    claim="$results/${name%.json}.claim"  # a job running here now would replace the added result when it ends
    if [ "$name" != "${name%.json}" ] && [ -e "$claim" ] && "$PYTHON" -c \
        'import pathlib, sys; from posenc.jobs import claim_is_live; sys.exit(0 if claim_is_live(pathlib.Path(sys.argv[1])) else 1)' "$claim"; then
      echo "not added: ${name%.json} runs here now ($claim is live; nothing was added)" >&2; exit 1
    fi
  done
  undo() { for name in "${names[@]}"; do rm -f -- "$results/$name"; done; }  # none of them was here before
  npz=("$from"/*.params.npz)
  [ -e "${npz[0]}" ] || npz=()
  if ! tar -xzf "$from/results.tgz" -C "$results" || { [ ${#npz[@]} -gt 0 ] && ! cp -- "${npz[@]}" "$results/"; }; then
    undo; echo "not added: unpacking into $results failed (nothing was added)" >&2; exit 1
  fi
  # rendering the report runs the study's checks of every result (its settings, configs and bases)
  if ! "$PYTHON" "experiments/$study/run.py" --budget_minutes=0 "${@:4}" > /dev/null; then
    undo; echo "not added: experiments/$study/run.py refused the results (above); they were removed again" >&2; exit 1
  fi
  printf 'added %s\n' "${names[@]}"
  exit 0
fi
[ "$verb" = run ] || usage
budget=$3
exec > >(tee "$OUT/device_jobs.log") 2>&1
tee_pid=$!
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
source scripts/device_env.sh
export POSENC_COMMIT=$COMMIT JAX_DEFAULT_MATMUL_PRECISION=highest XLA_PYTHON_CLIENT_PREALLOCATE=false
if XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_deterministic_ops=true" "$PYTHON" -c "import jax.numpy as j; j.zeros(1).block_until_ready()"; then
  export XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_deterministic_ops=true"
else
  echo "this XLA does not take --xla_gpu_deterministic_ops: the kernels may not be deterministic (results record it)"
fi
marker=$(mktemp)
left=$(( ${STOP_SECONDS:-480} - ($(date +%s) - started) ))
[ "$left" -gt 0 ] || { echo "no time left for run.py after the setup (STOP_SECONDS=${STOP_SECONDS:-480})"; left=1; }
timeout -k 20 "$left" "$PYTHON" "experiments/$study/run.py" --workers="${WORKERS:-8}" --budget_minutes="$budget" \
  --runs="${RUNS:-/tmp/device_runs/$study}" "${@:4}" 2>&1 | gzip > "$OUT/run_py.log.gz"
status=${PIPESTATUS[0]}
if [ "$status" = 124 ] || [ "$status" = 137 ]; then
  echo "run.py stopped at STOP_SECONDS (${STOP_SECONDS:-480} s after the start): the jobs it had not finished are lost"
  status=0
fi
echo "run.py ended after $(( $(date +%s) - started )) s (its output: run_py.log.gz); its last lines before the report:"
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
wait "$tee_pid"
exit "$status"
