"""Choosing the Keras backend `vit train` runs on, before Keras is imported.

Keras reads `KERAS_BACKEND` once, at its first import, so the choice is made by `vit.cli`
before any command module loads. `auto` keeps an explicit `KERAS_BACKEND` from the
environment; otherwise it takes JAX on TPUs (Cloud TPU's newest runtimes and Colab's TPU
runtimes have no TensorFlow) and on NVIDIA GPUs, and on CPUs the backend that trains faster
here (`CPU_BACKEND`, measured by `benchmarks/backends_cpu.py`).
"""

from __future__ import annotations

import glob
import os
import sys

BACKENDS = ("auto", "tensorflow", "jax")
CPU_BACKEND = "tensorflow"  # benchmarks/backends_cpu.py: TF trains Ti/16 and B/16 faster on CPU
_TPU_ENV = ("COLAB_TPU_ADDR", "TPU_NAME", "TPU_ACCELERATOR_TYPE")


def tpu_configured(tpu: str | None = None) -> bool:
    """Whether there is any sign of a TPU: a name, a Colab/Cloud TPU variable or TPU devices."""
    return bool(tpu) or any(os.environ.get(name) for name in _TPU_ENV) or bool(
        glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def nvidia_gpu_present() -> bool:
    """Whether the NVIDIA driver exposes a GPU (checked without loading any framework)."""
    return bool(glob.glob("/dev/nvidia[0-9]*"))


def choose(requested: str = "auto", tpu: str | None = None) -> str:
    """The backend for `--backend requested`.

    Args:
        requested: 'auto', 'tensorflow' or 'jax'.
        tpu: the `--tpu` flag, a hint that the run is on a TPU.

    Returns:
        'tensorflow' or 'jax'.
    """
    if requested not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {requested!r}")
    if requested != "auto":
        return requested
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    if tpu_configured(tpu) or nvidia_gpu_present():
        return "jax"
    return CPU_BACKEND


def activate(name: str) -> None:
    """Makes `name` the Keras backend of this process.

    Raises:
        RuntimeError: Keras was already imported with another backend.
    """
    if "keras" in sys.modules:
        current = sys.modules["keras"].backend.backend()
        if current != name:
            raise RuntimeError(f"Keras was already imported with the {current} backend; "
                               f"set KERAS_BACKEND={name} before importing it")
        return
    os.environ["KERAS_BACKEND"] = name

