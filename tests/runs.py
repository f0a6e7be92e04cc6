"""Shared helpers for tests that run `vit` in another process: its environment and command, and
waiting for (or killing a run after) a resumable backup.

Every process starts in a folder the test owns (`cwd`), never in the checkout: a `vit train`
without --output then writes under that folder's saved_models/, not the project's.
"""

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The tests' XLA compiles with LLVM at -O0 (tests/conftest.py sets them for every process a run
# starts): their tiny models spend their time compiling, op by op on eager JAX, not running.
# test_attention.py's JAX pass took 45 -> 35 s, three of test_training_jax.py's runs 82 -> 48 s,
# the slow tier's 23 JAX tests about 714 -> 535 s of test time; the numbers the tests compare
# agree within their tolerances either way.
TEST_XLA_FLAGS = ("--xla_backend_optimization_level=0", "--xla_llvm_disable_expensive_passes=true")


def xla_flags(*flags: str) -> str:
    """This process's XLA_FLAGS with `flags` added (each once)."""
    current = os.environ.get("XLA_FLAGS", "").split()
    return " ".join([*current, *(flag for flag in flags if flag not in current)])


def vit_env(**changes) -> dict:
    """The environment of a `vit` subprocess: quiet TensorFlow, no GPU, no TF_CONFIG of the
    caller, this checkout importable; `changes` set (a value of None removes the variable)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO, CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CONFIG", None)
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def jax_env(devices: int = 1) -> dict:
    """`vit_env` for JAX on `devices` simulated CPU devices (--backend jax chooses the Keras
    backend)."""
    return vit_env(XLA_FLAGS=xla_flags(f"--xla_force_host_platform_device_count={devices}"),
                   JAX_PLATFORMS="cpu", KERAS_BACKEND=None)


# `vit` in a process whose CPU is split into two logical devices before TensorFlow starts
# (for --strategy mirrored).
TWO_CPU_VIT = textwrap.dedent("""
    import sys
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    from vit import cli
    sys.exit(cli.main(sys.argv[1:]))
""")


def vit_command(*args, two_cpus: bool = False) -> list[str]:
    """`vit ARGS` run by this interpreter (on two logical CPUs with `two_cpus`)."""
    if two_cpus:
        return [sys.executable, "-c", TWO_CPU_VIT, *map(str, args)]
    return [sys.executable, "-m", "vit", *map(str, args)]


def start_vit(args, cwd, env=None, two_cpus: bool = False, **popen_options) -> subprocess.Popen:
    """Starts `vit ARGS` in `cwd` (a folder of the test's own)."""
    return subprocess.Popen(vit_command(*args, two_cpus=two_cpus), cwd=cwd,
                            env=env or vit_env(), **popen_options)


def read_state(output) -> dict | None:
    """The state.json of the backup in the run folder `output`, or None (also while it is being
    replaced)."""
    try:
        with open(os.path.join(output, "backup", "state.json")) as file:
            return json.load(file)
    except (OSError, ValueError):
        return None


def wait_for_backup(process, output, min_step: int = 0, timeout: float = 180,
                    poll: float = 0.01) -> dict | None:
    """Waits until the run writing `output` has a backup at global step >= `min_step`, or has
    ended, or `timeout` seconds passed; returns the backup's state (None when there is none)."""
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None:
        state = read_state(output)
        if state is not None and state["global_step"] >= min_step:
            return state
        time.sleep(poll)
    return read_state(output)


def kill_after_backup(process, output, min_step: int, timeout: float = 180) -> dict:
    """SIGKILLs the run once it has a backup at global step >= `min_step`; returns the state of
    the backup it left.

    Raises:
        AssertionError: the run ended before it could be killed.
    """
    wait_for_backup(process, output, min_step, timeout)
    assert process.poll() is None, "the run ended before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.communicate()
    return read_state(output)


def run_vit(args, cwd, timeout: float = 300) -> tuple[subprocess.CompletedProcess, float]:
    """Runs `vit ARGS` in `cwd` to its end, as a user would; (the finished process, its wall
    time in seconds)."""
    started = time.perf_counter()
    done = subprocess.run(vit_command(*args), cwd=cwd, env=vit_env(), capture_output=True,
                          text=True, timeout=timeout)
    return done, time.perf_counter() - started


def killed_run_resumes_exactly(common: list, folder, min_step: int, total_steps: int,
                               two_cpus: bool = False) -> str:
    """Runs `vit COMMON` twice side by side: one to its end, one SIGKILLed after a backup at
    step >= `min_step` and then resumed with --resume; asserts that the resumed run says where
    it continues and ends with the uninterrupted run's weights (same batches, same updates).

    Args:
        common: the `vit train` arguments both runs share (not --output).
        folder: the test's folder; the runs write into `ref/` and `victim/` below it.
        min_step: the earliest global step whose backup the kill waits for.
        total_steps: the run's steps, for the check that the kill came mid-run.
        two_cpus: run every process on two logical CPUs (for --strategy mirrored).

    Returns:
        What the resumed run printed.
    """
    import keras
    import numpy as np

    reference = start_vit([*common, "--output", folder / "ref"], folder, two_cpus=two_cpus,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    victim_dir = folder / "victim"
    victim = start_vit([*common, "--output", victim_dir], folder, two_cpus=two_cpus,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = kill_after_backup(victim, victim_dir, min_step=min_step, timeout=120)
    assert 0 < state["global_step"] < total_steps and not (victim_dir / "model.keras").exists()
    resumed = subprocess.run(vit_command(*common, "--output", victim_dir, "--resume",
                                         two_cpus=two_cpus),
                             env=vit_env(), cwd=folder, capture_output=True, text=True,
                             timeout=240)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"continuing at epoch {state['epoch'] + 1}, step {state['step']}" in resumed.stdout
    assert reference.wait(timeout=240) == 0, reference.stderr.read()[-3000:]
    import vit_keras  # noqa: F401  (registers the layers the files hold)

    weights = [keras.saving.load_model(str(path / "model.keras"), compile=False).get_weights()
               for path in (folder / "ref", victim_dir)]
    for mine, theirs in zip(*weights):
        np.testing.assert_allclose(mine, theirs, atol=1e-5)
    return resumed.stdout


def dense_sets():
    """benchmarks/dense_sets.py as a module: the data sets shaped like a user's (membrane
    slices, photographs with VOC boxes) that both the benchmarks and the tests make."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "dense_sets", os.path.join(REPO, "benchmarks", "dense_sets.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
