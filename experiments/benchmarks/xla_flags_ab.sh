#!/usr/bin/env bash
# XLA:CPU's oneDNN dots against its default dot library, in one sitting: float32 training and the
# evaluation forward (twice), bf16 training (once), each against PyTorch, with and without the flags, alternating A, B, A, B so that both
# see the same machine. XLA:CPU sends every dot to YNNPACK by default; oneDNN takes the float32 dots only
# when both flags are set (--xla_cpu_use_onednn alone changes nothing). Writes
# experiments/benchmarks/cpu/<kind>/xla_flags/{default,onednn}_{train_float32,train_bfloat16,eval_throughput}_<i>.json,
# then the README. The oneDNN arm sends each dot to oneDNN on its own (fusion type individual_dot, the one
# posenc/xla_options.py chooses): the `dot` fusion kills the process at attention's batched products (that module
# says why). A run that fails (a crash, an error) does not stop the comparison: its exit status and the last lines
# of its error output go to <variant>_<what>_<i>.failed instead of its .json, and the README lists it. Exits non-zero
# if a run failed. Needs PyTorch (pip install torch==2.13.0); about 20 minutes on an otherwise idle machine:
#   bash experiments/benchmarks/xla_flags_ab.sh
# PYTHON (default .venv/bin/python) and AB_OUT (the runs' folder instead of cpu/<kind>/xla_flags; the README is then
# not re-rendered) may be set for a test.
set -uo pipefail
cd "$(dirname "$0")/../.."
# the flags alone choose the library: posenc's own choice (posenc/xla_options.py, `auto`: oneDNN dots on an Intel
# CPU, passed to jax.jit as compiler options) would send the default arm's dots to oneDNN as well
export POSENC_CPU_DOTS=xla
ONEDNN="--xla_cpu_use_onednn=true --xla_cpu_experimental_onednn_fusion_type=individual_dot"
PYTHON=${PYTHON:-.venv/bin/python}
kind=$("$PYTHON" -c "from posenc.timing import cpu_slug; print(cpu_slug())") || exit 1
out=${AB_OUT:-experiments/benchmarks/cpu/$kind/xla_flags}
mkdir -p "$out"
failed=0
# run NAME FLAGS COMMAND...: COMMAND under XLA_FLAGS=FLAGS; its last stdout line -> $out/NAME.json, or, where it
# fails, its exit status and stderr's last lines -> $out/NAME.failed
run() {
  local name=$1 flags=$2 rc; shift 2
  local stdout stderr
  stdout=$(mktemp) stderr=$(mktemp)
  XLA_FLAGS="$flags" "$@" > "$stdout" 2> "$stderr"
  rc=$?
  rm -f "$out/$name.json" "$out/$name.failed"
  if [ "$rc" = 0 ]; then
    tail -n 1 "$stdout" > "$out/$name.json"
    echo "$name: done"
  else
    { echo "exit $rc (XLA_FLAGS=$flags)"; tail -n 5 "$stderr"; } > "$out/$name.failed"
    echo "$name failed: exit $rc (the rest of the comparison goes on; $out/$name.failed)"
    failed=1
  fi
  rm -f "$stdout" "$stderr"
}
for i in 1 2; do
  for variant in default onednn; do
    flags=""; [ "$variant" = onednn ] && flags="$ONEDNN"
    run "${variant}_train_float32_$i" "$flags" "$PYTHON" scripts/benchmark_train.py --torch --rounds=3
    if [ "$i" = 1 ]; then
      run "${variant}_train_bfloat16_$i" "$flags" "$PYTHON" scripts/benchmark_train.py --torch --rounds=3 --dtype=bfloat16
    fi
    run "${variant}_eval_throughput_$i" "$flags" "$PYTHON" scripts/benchmark_eval.py --lengths=4096,16384 --rounds=3
  done
done
[ -n "${AB_OUT:-}" ] || "$PYTHON" experiments/benchmarks/report.py > /dev/null
exit $failed
