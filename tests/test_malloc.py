"""posenc/malloc.py: a large buffer freed by a thread stays mapped for its next allocation, and the restart
that sets the environment happens once, never against the user's own settings."""

import os
import platform
import subprocess
import sys

import pytest

from posenc import malloc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
needs_glibc = pytest.mark.skipif(not GLIBC, reason="the settings are glibc's: elsewhere posenc.malloc does nothing")

# A thread (as XLA's are) allocates, fills and frees 256 MB four times; printed: the share of the buffer's pages
# faulted in again by each allocation after the first (1.0: every page is new each time).
PROBE = """
import ctypes, resource, sys, threading
if sys.argv[1] == "posenc":
    import posenc  # keep_buffers() at import
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
n, out = 256 << 20, {}
def loop():
    for i in range(4):
        if i == 1:
            out["before"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        p = libc.malloc(n)
        ctypes.memset(p, 1, n)
        libc.free(p)
    out["after"] = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
t = threading.Thread(target=loop)
t.start()
t.join()
print((out["after"] - out["before"]) / 3 / (n // 4096))
"""


def _run(code: str, *args: str, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if k not in malloc.ENV and k != "POSENC_MALLOC"}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, env={**base, **env}, check=True,
                          capture_output=True, text=True).stdout


@needs_glibc
def test_a_freed_large_buffer_stays_mapped():
    """glibc's defaults map each 256 MB allocation afresh (every page faults again); after `import posenc`, and
    with the environment variables, the next allocation reuses the pages."""
    assert float(_run(PROBE, "none", POSENC_MALLOC="system")) > 0.9
    assert float(_run(PROBE, "posenc")) < 0.01
    assert float(_run(PROBE, "none", **malloc.ENV)) < 0.01


RESTART = """
import os
from posenc import malloc
print("started", flush=True)
malloc.restart_with_env()
print(sorted((k, os.environ.get(k)) for k in malloc.ENV))
"""


@needs_glibc
def test_the_restart_sets_the_environment_once_and_respects_the_user_s():
    out = _run(RESTART).splitlines()
    assert out.count("started") == 2 and out[-1] == str(sorted(malloc.ENV.items()))  # restarted once, then set
    out = _run(RESTART, POSENC_MALLOC="system").splitlines()
    assert out.count("started") == 1 and out[-1] == str(sorted((k, None) for k in malloc.ENV))
    out = _run(RESTART, MALLOC_ARENA_MAX="4").splitlines()  # the user's own setting: no restart, nothing added
    assert out.count("started") == 1 and out[-1] == str(sorted((k, "4" if k == "MALLOC_ARENA_MAX" else None)
                                                             for k in malloc.ENV))


def test_an_unknown_posenc_malloc_is_refused(monkeypatch):
    monkeypatch.setenv("POSENC_MALLOC", "jemalloc")
    with pytest.raises(ValueError, match=r"POSENC_MALLOC='jemalloc': expected one of keep, system"):
        malloc.keep_buffers()
    monkeypatch.setenv("POSENC_MALLOC", "system")
    assert malloc.keep_buffers() is False
