#!/usr/bin/env bash
# The GPU check of the benchmarks, one command that ends within 5 minutes: the setup (scripts/device_env.sh) has
# ended by SETUP_SECONDS (default 90) after the start and every step by DEADLINE_SECONDS (default 260); then the
# closing nvidia-smi and provenance.json, each under a 10-second timeout. Each step runs under the smaller of its
# own timeout and the time left before the deadline (less KILL_AFTER_SECONDS, default 10, the grace between SIGTERM
# and SIGKILL for a step that hangs); a step with less than MIN_STEP_SECONDS (default 20) left is skipped. The
# steps, the most important first (nothing but the setup runs before the 124M benchmark):
#   1. benchmark: scripts/benchmark_gpu.py, the reference model and the 124M one, bf16, attention and activations
#      chosen by `auto` (cuDNN's fused kernel, bf16 activations) -> gpu.json;
#   2. accuracy: the fused attention's accuracy on the GPU (tests/test_attention.py: cuDNN against posenc's
#      attention);
#   3. posenc_attention: the 124M model again with posenc's own attention (the fused kernel's worth)
#      -> gpu_posenc_attention.json;
#   4. batch64: the 124M model at batch 64 -> gpu_gpt2_batch64.json;
#   5. profile: its step profiled, CUDA graphs off so that the trace shows each kernel -> gpu_gpt2_profile*;
# then provenance.json: the commit measured ($COMMIT if set: a copied checkout's git may not be the code's; each
# result's `commit` is it too, through POSENC_COMMIT), the deadline and each step's outcome in `steps` ("ok (N s)",
# "failed (exit N)", "timed out after N s", "skipped: N s left ..."); the log names them too.
# It runs under the GPU machine's own Python stack, with the wheels of .whl/ (scripts/device_env.sh, which says
# how to fill it). Exits non-zero if a step did not end "ok" (failed, timed out or skipped).
#   OUT=<folder> [COMMIT=<hash>] bash experiments/benchmarks/gpu_check.sh
set -uo pipefail
OUT=${OUT:?set OUT to the folder for the logs and results}
SETUP_SECONDS=${SETUP_SECONDS:-90} DEADLINE_SECONDS=${DEADLINE_SECONDS:-260}
MIN_STEP_SECONDS=${MIN_STEP_SECONDS:-20} KILL_AFTER_SECONDS=${KILL_AFTER_SECONDS:-10}
SECONDS=0  # bash's clock of this run: the deadline counts from here
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# the results this check writes, from an earlier run into the same folder, go first: a step that is skipped, times
# out or fails must leave no older file that provenance.json would label with this run's commit
rm -f "$OUT"/gpu.json "$OUT"/gpu_posenc_attention.json "$OUT"/gpu_gpt2_batch64.json "$OUT"/gpu_gpt2_profile* \
  "$OUT"/provenance.json
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/gpu_check.log") 2>&1
steps=()  # '"name": "outcome"' JSON members, in the order the steps ran
record() { steps+=("\"$1\": \"$2\""); echo "step $1: $2"; }
# step NAME OWN_TIMEOUT COMMAND...: COMMAND under min(OWN_TIMEOUT, seconds left - KILL_AFTER_SECONDS), or skipped
step() {
  local name=$1 own=$2; shift 2
  local left=$(( DEADLINE_SECONDS - SECONDS ))
  local limit=$(( own < left - KILL_AFTER_SECONDS ? own : left - KILL_AFTER_SECONDS ))
  if [ "$limit" -lt "$MIN_STEP_SECONDS" ]; then
    record "$name" "skipped: $(( left > 0 ? left : 0 )) s left before the ${DEADLINE_SECONDS} s deadline (a step needs $(( MIN_STEP_SECONDS + KILL_AFTER_SECONDS )))"
    return
  fi
  local started=$SECONDS rc
  timeout -k "$KILL_AFTER_SECONDS" "$limit" "$@"
  rc=$?
  if [ "$rc" = 0 ]; then
    record "$name" "ok ($(( SECONDS - started )) s)"
  elif [ "$rc" = 124 ] || { [ "$rc" = 137 ] && [ $(( SECONDS - started )) -ge "$limit" ]; }; then
    record "$name" "timed out after $limit s (its own limit $own s)"
  else
    record "$name" "failed (exit $rc)"
  fi
}
timeout -k 2 10 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
SETUP_DEADLINE=$SETUP_SECONDS  # device_env.sh's calls end by then
source scripts/device_env.sh  # the machine's Python stack, with .whl/
export POSENC_COMMIT=${COMMIT:-}  # the commit each result records (benchmark_gpu.py; empty: the copy's git)
echo "setup took $SECONDS s (its limit $SETUP_SECONDS s; the steps end by $DEADLINE_SECONDS s)"
step benchmark 200 python3 scripts/benchmark_gpu.py --out="$OUT/gpu.json"
step accuracy 100 python3 -m pytest -p no:cacheprovider -n 0 -q -rA tests/test_attention.py -k "fused or cudnn or chooses"
step posenc_attention 70 python3 scripts/benchmark_gpu.py --models=gpt2_small --attn_impl=posenc \
  --out="$OUT/gpu_posenc_attention.json"
step batch64 70 python3 scripts/benchmark_gpu.py --models=gpt2_small --batch_size=64 --out="$OUT/gpu_gpt2_batch64.json"
step profile 70 env XLA_FLAGS=--xla_gpu_enable_command_buffer= python3 scripts/benchmark_gpu.py \
  --models=gpt2_small --profile=gpt2_small --out="$OUT/gpu_gpt2_profile.json"
commit=${COMMIT:-$(timeout -k 2 10 python3 -c "from posenc.timing import code_version; print(code_version())")}
members=$(IFS=,; echo "${steps[*]}")
echo "{\"commit\": \"${commit:-unknown}\", \"how\": \"OUT=... bash experiments/benchmarks/gpu_check.sh\"," \
  "\"deadline_seconds\": $DEADLINE_SECONDS, \"steps\": {$members}}" > "$OUT/provenance.json"
timeout -k 2 10 nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
not_ok=()
for member in "${steps[@]}"; do [[ $member == *'": "ok ('* ]] || not_ok+=("${member//\"/}"); done
if [ ${#not_ok[@]} -gt 0 ]; then printf 'not ok: %s\n' "${not_ok[@]}"; status=1; else status=0; fi
echo "the check took $SECONDS s"
exec >&- 2>&-  # close the pipe to tee, and let it finish writing the log
wait
exit $status
