"""Shared fixtures: tiny configs, a per-session corpus cache, a trained tiny run.

Tests compile many small programs: XLA's heavy optimisations are switched off and compiled programs are
cached for the session (both set through the environment, so the scripts the tests start in subprocesses
compile the same way; the numbers compared across processes stay comparable).
"""

import atexit
import os
import pathlib
import shutil
import tempfile

os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="posenc-test-jax-cache-")
    atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")

import pytest

from posenc.train import load_config_file

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("corpus_cache"))


@pytest.fixture
def tiny_config(cache_dir):
    def make(arg="tiny", **overrides):
        config = load_config_file(str(ROOT / "configs" / "default.py"), arg)
        config.data.cache_dir = cache_dir
        for key, value in overrides.items():
            node = config
            *parents, leaf = key.split(".")
            for p in parents:
                node = node[p]
            node[leaf] = value
        return config

    return make


@pytest.fixture(scope="session")
def trained_run(tmp_path_factory, cache_dir):
    """A finished tiny RoPE run (8 steps, checkpoints 4 and 8); copy it before changing it (`copy_run`)."""
    from posenc import train  # noqa: PLC0415

    config = load_config_file(str(ROOT / "configs" / "default.py"), "tiny")
    config.data.cache_dir = cache_dir
    workdir = tmp_path_factory.mktemp("trained") / "rope"
    train.train_and_evaluate(config, str(workdir))
    return workdir


@pytest.fixture
def copy_run(trained_run, tmp_path):
    """`copy_run(name)`: a private copy of `trained_run` under tmp_path."""
    import shutil  # noqa: PLC0415

    def make(name="run"):
        return pathlib.Path(shutil.copytree(trained_run, tmp_path / name))

    return make


def assert_same_figure(drawn, committed, tol: float = 1.0) -> None:
    """A figure rendered again against its committed file: the same size in pixels and an RMS difference of at most
    `tol` on the 0–255 scale (antialiasing of the last float digits moves a few pixels by one level, RMS ~0.01; a
    line added, moved or given another colour moves thousands, RMS ≥ 5), so a committed figure is the one its code
    draws from the committed results."""
    import matplotlib.image  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    a, b = matplotlib.image.imread(drawn), matplotlib.image.imread(committed)
    assert a.shape == b.shape, (f"{committed} is {b.shape[1]}×{b.shape[0]} pixels; rendered again: "
                                f"{a.shape[1]}×{a.shape[0]}")
    rms = 255 * float(np.sqrt(np.mean((a - b) ** 2)))
    assert rms <= tol, f"{committed} differs from the figure rendered again (RMS {rms:.2f} > {tol}): render it again"
