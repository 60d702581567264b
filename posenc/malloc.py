"""glibc malloc settings that keep XLA:CPU's step buffers mapped between steps.

XLA:CPU takes each execution's temporary buffer from malloc (hundreds of MB a step for the benchmark's
reference model) and frees it when the step ends. glibc serves a request that large with a fresh `mmap` and
returns it with `munmap`, so every step faults in and zeroes all of its pages again, in the kernel's time.
With one arena, no `mmap` for large chunks and no trimming of the heap's top, the freed buffer stays in the
heap and the next step reuses it. The price: a process keeps its peak heap until it exits. What it is worth
(tokens/s, page faults a step, the kernel's share of the time, against glibc's defaults in the same run):
`scripts/benchmark_malloc.py`, committed as experiments/benchmarks/malloc_ab.json and in its README.

Two ways to apply them:
- `keep_buffers()` runs at `import posenc` (posenc/__init__.py) with mallopt, inside the process. It removes
  most of the faults, not all (why some remain is not established: the arena limit set by mallopt is the
  setting that does less than its environment variable);
- `restart_with_env()`, first in the main() of the training scripts and the experiments' runners, restarts
  the process once with the same settings as environment variables (ENV), which glibc reads when a process
  starts: no faults at all. Their workers inherit the environment.
POSENC_MALLOC=system leaves glibc's defaults; a process started with any of ENV's variables set is not
restarted (they are the user's to choose). Linux with glibc only; elsewhere both do nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import sys

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
# the same settings as environment variables, read by glibc when a process starts
ENV = {"MALLOC_ARENA_MAX": "1", "MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(64 << 30)}
CHOICES = ("keep", "system")  # POSENC_MALLOC's values; unset means "keep"


def choice() -> str:
    """POSENC_MALLOC, checked: "keep" (the default) or "system"."""
    value = os.environ.get("POSENC_MALLOC", "keep")
    if value not in CHOICES:
        raise ValueError(f"POSENC_MALLOC={value!r}: expected one of {', '.join(CHOICES)}")
    return value


def applies() -> bool:
    """Whether the settings apply here: Linux with glibc, and POSENC_MALLOC not "system"."""
    return choice() != "system" and platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"


def keep_buffers() -> bool:
    """Applies the settings with mallopt; True if they were applied."""
    if not applies():
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    # a trim threshold of -1 is SIZE_MAX once glibc reads it as size_t: the top of the heap is never trimmed
    return all(libc.mallopt(param, value) == 1
               for param, value in ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1)))


def restart_with_env() -> None:
    """Replaces this process with the same command line (sys.orig_argv) run with ENV set, where the settings
    apply and none of ENV's variables is set yet; otherwise returns. Call it before any JAX computation."""
    if not applies() or any(k in os.environ for k in ENV):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, {**os.environ, **ENV})
