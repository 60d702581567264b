"""Timing helpers shared by the benchmark scripts."""

from __future__ import annotations

import time
from typing import Callable

import numpy as np


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    """Median wall time of `fn()` over `repeats` calls, after one warm-up call (compilation)."""
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))
