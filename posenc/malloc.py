"""glibc malloc settings that keep XLA:CPU's step buffers mapped between steps.

XLA:CPU takes each execution's temporary buffer from malloc (hundreds of MB a step for the benchmark's
reference model) and frees it when the step ends. glibc serves a request that large with a fresh `mmap` and
returns it with `munmap`, so every step faults in and zeroes all of its pages again, in the kernel's time.
With one arena, no `mmap` for large chunks and no trimming of the heap's top, the freed buffer stays in the
heap and the next step reuses it. The price: the heap grows to its peak (the first steps and evaluations grow
it; fragmentation can grow it by a whole buffer more) and keeps it until the process exits. What it is worth
(tokens/s, page faults a step and the kernel's share of the time, against glibc's defaults in the same run,
after a warm-up): `scripts/benchmark_malloc.py`, committed as experiments/benchmarks/malloc_ab.json and in
its README.

`keep_buffers()` applies them with mallopt. It must run before JAX starts its threads (a thread's arena,
once made, stays its own), so the training scripts and the experiments' runners call it first in main();
importing posenc does not. It does nothing where the user has chosen: POSENC_MALLOC=system, any of glibc's
MALLOC_* variables or a GLIBC_TUNABLES with glibc.malloc settings; nor off Linux with glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
# glibc's own environment variables for the same settings: where the user sets one, the choice is theirs
USER_VARIABLES = ("MALLOC_ARENA_MAX", "MALLOC_MMAP_MAX_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_",
                  "MALLOC_TOP_PAD_", "MALLOC_ARENA_TEST")
CHOICES = ("keep", "system")  # POSENC_MALLOC's values; unset means "keep"


def choice() -> str:
    """POSENC_MALLOC, checked: "keep" (the default) or "system"."""
    value = os.environ.get("POSENC_MALLOC", "keep")
    if value not in CHOICES:
        raise ValueError(f"POSENC_MALLOC={value!r}: expected one of {', '.join(CHOICES)}")
    return value


def user_settings() -> list[str]:
    """The malloc settings the user made through the environment (glibc reads them at start-up)."""
    found = [k for k in USER_VARIABLES if k in os.environ]
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        found.append("GLIBC_TUNABLES")
    return found


def keep_buffers() -> bool:
    """One arena, no mmap, no trimming (mallopt); True if applied, False where they do not apply (see above)."""
    if choice() == "system" or user_settings() or platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    # a trim threshold of -1 is SIZE_MAX once glibc reads it as size_t: the top of the heap is never trimmed
    return all(libc.mallopt(param, value) == 1
               for param, value in ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, -1)))
