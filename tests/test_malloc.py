"""posenc/malloc.py: after keep_buffers(), a thread's large allocation comes from the heap, not a fresh mmap,
and is reused once freed; the user's own settings are left alone."""

import ast
import json
import os
import pathlib
import platform
import subprocess
import sys

import pytest

from posenc import malloc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"
needs_glibc = pytest.mark.skipif(not GLIBC, reason="the settings are glibc's: elsewhere keep_buffers does nothing")

# A thread (as XLA's are) allocates and frees 256 MB three times. Printed: whether keep_buffers applied, the
# chunks glibc mapped with mmap for each buffer (mallinfo2's hblks while it is held, less before), and whether every
# allocation got the same address (the freed buffer reused), and whether the heap still holds it after the
# last free (not trimmed).
PROBE = """
import ctypes, json, threading
from posenc import malloc
applied = malloc.keep_buffers()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
class Info(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                               "fsmblks", "uordblks", "fordblks", "keepcost")]
libc.mallinfo2.restype = Info
mapped, where, kept = [], [], []
def loop():
    for _ in range(3):
        before = libc.mallinfo2().hblks
        p = libc.malloc(256 << 20)
        mapped.append(libc.mallinfo2().hblks - before)
        where.append(p)
        libc.free(p)
    kept.append(libc.mallinfo2().arena >= 256 << 20)
t = threading.Thread(target=loop)
t.start()
t.join()
print(json.dumps({"applied": applied, "mapped": mapped, "reused": where[0] == where[1] == where[2],
                  "kept": kept[0]}))
"""


def _probe(**env: str) -> dict:
    base = {k: v for k, v in os.environ.items() if k not in malloc.USER_VARIABLES and k not in ("POSENC_MALLOC", "GLIBC_TUNABLES")}
    proc = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env={**base, **env}, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_glibc
def test_a_thread_s_large_buffer_comes_from_the_heap_and_is_reused():
    """glibc's defaults map each 256 MB allocation with mmap; after keep_buffers it is a heap chunk, reused."""
    system = _probe(POSENC_MALLOC="system")
    assert system["applied"] is False and system["mapped"] == [1, 1, 1]
    keep = _probe()
    assert keep["applied"] is True and keep["mapped"] == [0, 0, 0] and keep["reused"] and keep["kept"]


@needs_glibc
def test_the_user_s_own_malloc_settings_are_left_alone():
    for env in ({"MALLOC_ARENA_MAX": "4"}, {"MALLOC_MMAP_THRESHOLD_": "65536"},
                {"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=1000"}):
        result = _probe(**env)
        assert result["applied"] is False and result["mapped"] == [1, 1, 1], env
    assert _probe(GLIBC_TUNABLES="glibc.cpu.hwcaps=-AVX2")["applied"] is True  # not a malloc tunable


def test_an_unknown_posenc_malloc_is_refused(monkeypatch):
    monkeypatch.setenv("POSENC_MALLOC", "jemalloc")
    with pytest.raises(ValueError, match=r"POSENC_MALLOC='jemalloc': expected one of keep, system"):
        malloc.keep_buffers()
    monkeypatch.setenv("POSENC_MALLOC", "system")
    assert malloc.keep_buffers() is False


RUNNERS = ["scripts/train.py", "scripts/sweep.py", "scripts/eval_extrapolation.py", "scripts/eval_tasks.py",
           "scripts/prefix_gap.py", "scripts/search_longrope.py", "scripts/tune_scaling.py", "scripts/benchmark_train.py",
           "scripts/benchmark_eval.py", "scripts/benchmark_xla_options.py", *sorted(
               str(p.relative_to(ROOT)) for p in pathlib.Path(ROOT, "experiments").glob("*/run.py"))]


@pytest.mark.parametrize("path", RUNNERS)
def test_the_scripts_that_train_or_evaluate_keep_buffers_first_in_main(path):
    """keep_buffers must run before JAX starts its threads: a statement of main() itself among its first few (after
    the argument checks), so that training, evaluation and the benchmarks of them run under the same allocator."""
    tree = ast.parse(pathlib.Path(ROOT, path).read_text())
    main = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main")
    first = [s for s in main.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))][:4]
    calls = [s.value for s in first if isinstance(s, (ast.Expr, ast.Assign)) and isinstance(s.value, ast.Call)]
    assert any(ast.unparse(c.func) == "malloc.keep_buffers" for c in calls), (
        f"{path}: main() does not call malloc.keep_buffers() among its first statements: "
        + "; ".join(ast.unparse(s).splitlines()[0] for s in first))
