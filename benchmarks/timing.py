"""Timing shared by the backend benchmarks (framework-free: the step itself must block)."""

import time


def median_seconds(step, steps: int, warmup: int = 2) -> float:
    """Median wall time of `step()` over `steps` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return sorted(times)[len(times) // 2]
