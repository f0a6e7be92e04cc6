"""The yardstick of the suite's time: the main job (`vit train`, the README's first command) on
this machine.

Machines differ by 2x and more, so the test budgets are ratios to the main job's wall time on
the same machine, never seconds. `.ci/run` runs the main job and passes its measured wall time
in `VIT_MAIN_JOB_SECONDS`; a plain `pytest` estimates it first: a slice of the main job (its
model on batches of its size, forward, a few rounds of a few dozen steps after warm-up: about
5 s) is timed and scaled by `MAIN_JOB_PER_STEP`, the main job's wall time over the slice's
seconds a step, measured side by side on one machine (docs/testing.md, The two tiers). The
estimate is put in the environment, so that xdist's workers and every pytest a test starts
share it instead of measuring again.
"""

import os
import time

SECONDS_VARIABLE = "VIT_MAIN_JOB_SECONDS"
SOURCE_VARIABLE = "VIT_MAIN_JOB_SOURCE"
# `vit train`'s wall time / the slice's seconds a step, on one 2-core machine: see
# docs/testing.md, The two tiers.
MAIN_JOB_PER_STEP = 11000.0
TIMED_STEPS = 40
# A round's median step swung between two speeds, 12.7 and 17.7 ms, from one round to the next
# on the same idle core (docs/testing.md): the slowest of several rounds is the steady figure,
# and an estimate too high only loosens the limits, where one too low failed a sound test.
ROUNDS = 5
WARM_UP_STEPS = 3


REFERENCE_MAIN_JOB = 208.0   # seconds: the machine where the project's figures were measured


def worker_share(workers: int | None = None) -> float:
    """How many times slower a test runs than the main job would on these cores because
    pytest's workers share them: 1 while each worker has a core, 2 for two workers on one core
    (`taskset -c 0 pytest`).

    Args:
        workers: pytest's workers (default: the count xdist gives its workers; the controller
            passes its `-n`).
    """
    if workers is None:
        workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    return max(1.0, workers / len(os.sched_getaffinity(0)))


def machine_factor() -> float:
    """How much slower than the reference machine a test runs here (never below 1): a bound a
    test measures in seconds on the reference machine is multiplied by it."""
    return max(1.0, main_job_seconds()[0] / REFERENCE_MAIN_JOB) * worker_share()


def main_job_seconds() -> tuple[float, str]:
    """(the main job's wall time on this machine in seconds, how it is known).

    Reads `VIT_MAIN_JOB_SECONDS` (and `VIT_MAIN_JOB_SOURCE`) when set; otherwise estimates it
    (`estimate`) and sets both, for the processes started after.

    Raises:
        ValueError: `VIT_MAIN_JOB_SECONDS` is set but not a positive number of seconds.
    """
    value = os.environ.get(SECONDS_VARIABLE, "").strip()
    if value:
        try:
            seconds = float(value)
        except ValueError:
            seconds = 0.0
        if not seconds > 0:
            raise ValueError(f"{SECONDS_VARIABLE} must be the main job's wall time in seconds "
                             f"(a positive number), got {value!r}")
        return seconds, os.environ.get(SOURCE_VARIABLE) or f"given in {SECONDS_VARIABLE}"
    started = time.monotonic()
    seconds = estimate()
    source = (f"estimated from {ROUNDS} rounds of {TIMED_STEPS} forward steps of its model in "
              f"{time.monotonic() - started:.1f} s")
    os.environ[SECONDS_VARIABLE], os.environ[SOURCE_VARIABLE] = f"{seconds:.1f}", source
    return seconds, source


def estimate() -> float:
    """The main job's wall time estimated from a slice of it: its preset's model run forward
    on batches of its size, `MAIN_JOB_PER_STEP` times the slowest of `ROUNDS` rounds' median
    step (a training step's first call traces for 15 s; a forward step costs a second to trace
    and computes the same layers)."""
    import keras
    import numpy as np

    from training.presets import get_preset, task_preset
    from vit_keras import VisionTransformer

    preset = get_preset(task_preset(None))
    config, batch = preset.model, preset.schedule.batch_size
    keras.utils.set_random_seed(0)
    model = VisionTransformer(config)
    height, width = config.image_size if isinstance(config.image_size, tuple) else \
        (config.image_size,) * 2
    images = np.random.default_rng(0).uniform(-1, 1, (batch, height, width, 3)).astype("float32")
    for _ in range(WARM_UP_STEPS):
        model.predict_on_batch(images)
    medians = []
    for _ in range(ROUNDS):
        steps = []
        for _ in range(TIMED_STEPS):
            begun = time.perf_counter()
            model.predict_on_batch(images)
            steps.append(time.perf_counter() - begun)
        medians.append(float(np.median(steps)))
    keras.backend.clear_session(free_memory=False)
    return MAIN_JOB_PER_STEP * max(medians)
