"""Shared fixtures: tiny configs and a per-session corpus cache."""

import pathlib

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
