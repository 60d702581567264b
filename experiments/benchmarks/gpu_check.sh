#!/usr/bin/env bash
# The GPU check of the benchmarks, one command (under 10 minutes on an H200; each step has its own timeout):
#   1. the fused attention's accuracy on the GPU (tests/test_attention.py: cuDNN against posenc's attention);
#   2. scripts/benchmark_gpu.py: the reference model and the 124M one, bf16, attention and activations chosen by
#      `auto` (cuDNN's fused kernel, bf16 activations) -> gpu.json;
#   3. the 124M model again with posenc's own attention (the fused kernel's worth) -> gpu_posenc_attention.json;
#   4. the 124M model at batch 64 -> gpu_gpt2_batch64.json;
#   5. its step profiled, CUDA graphs off so that the trace shows each kernel -> gpu_gpt2_profile*;
#   6. provenance.json: the commit measured ($COMMIT if set: a copied checkout's git may not be the code's; each
#      result's `commit` is it too, through POSENC_COMMIT).
# It runs under the GPU machine's own Python stack, with the wheels of .whl/ (scripts/device_env.sh, which says
# how to fill it). Exits non-zero if a step failed.
#   OUT=<folder> [COMMIT=<hash>] bash experiments/benchmarks/gpu_check.sh
set -uo pipefail
OUT=${OUT:?set OUT to the folder for the logs and results}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cd "$(dirname "$0")/../.."
exec > >(tee "$OUT/gpu_check.log") 2>&1
failed=()
step() { local name=$1; shift; "$@" || failed+=("$name (exit $?)"); }
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
source scripts/device_env.sh  # the machine's Python stack, with .whl/
export POSENC_COMMIT=${COMMIT:-}  # the commit each result records (benchmark_gpu.py; empty: the copy's git)
bench() { timeout "$1" python3 scripts/benchmark_gpu.py "${@:2}"; }
step accuracy timeout 100 python3 -m pytest -p no:cacheprovider -n 0 -q -rA tests/test_attention.py -k "fused or cudnn or chooses"
step benchmark bench 200 --out="$OUT/gpu.json"
step posenc_attention bench 70 --models=gpt2_small --attn_impl=posenc --out="$OUT/gpu_posenc_attention.json"
step batch64 bench 70 --models=gpt2_small --batch_size=64 --out="$OUT/gpu_gpt2_batch64.json"
step profile env XLA_FLAGS=--xla_gpu_enable_command_buffer= timeout 70 python3 scripts/benchmark_gpu.py \
  --models=gpt2_small --profile=gpt2_small --out="$OUT/gpu_gpt2_profile.json"
commit=${COMMIT:-$(python3 -c "from posenc.timing import code_version; print(code_version())")}
echo "{\"commit\": \"$commit\", \"how\": \"OUT=... bash experiments/benchmarks/gpu_check.sh\"}" > "$OUT/provenance.json"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv
if [ ${#failed[@]} -gt 0 ]; then echo "failed: ${failed[*]}"; status=1; else status=0; fi
exec >&- 2>&-  # close the pipe to tee, and let it finish writing the log
wait
exit $status
