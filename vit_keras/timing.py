"""Wall-clock timing shared by `vit bench`, the export latencies and the benchmarks.

Framework-free: the timed call must block until its work is done (`block_until_ready`, a NumPy
result, ...). One rule everywhere: untimed warm-up calls, then the median of single calls.
"""

from __future__ import annotations

import statistics
import time


def median_seconds(step, runs: int, warmup: int = 2) -> float:
    """Median wall time of `step()`, in seconds.

    Args:
        step: the call to time; it must block.
        runs: timed calls (>= 1).
        warmup: untimed calls first (compilation, weight packing, arena allocation).

    Returns:
        The median over `runs` calls.
    """
    if runs < 1:
        raise ValueError(f"runs must be >= 1, got {runs}")
    for _ in range(warmup):
        step()
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times)
