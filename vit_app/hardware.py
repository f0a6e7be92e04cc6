"""The hardware a run finds: the fastest correct dtype policy for it, and its memory use."""

from __future__ import annotations

import sys

CPU_BF16_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of native bfloat16 math


def cpu_has_bfloat16(cpuinfo_path: str = "/proc/cpuinfo") -> bool:
    """Whether the CPU computes bfloat16 natively (AMX-BF16 or AVX512-BF16).

    Without these, TensorFlow emulates bfloat16 on CPU and mixed precision is slower than
    float32. Non-Linux hosts (no cpuinfo file) answer False.
    """
    try:
        with open(cpuinfo_path) as file:
            for line in file:
                if line.startswith("flags"):
                    return any(flag in line.split() for flag in CPU_BF16_FLAGS)
    except OSError:
        pass
    return False


def gpu_policy(compute_capability) -> str:
    """bfloat16 from Ampere (8.0) on, float16 on Volta/Turing (7.x), float32 before."""
    if compute_capability is None:
        return "float32"
    if tuple(compute_capability) >= (8, 0):
        return "mixed_bfloat16"
    return "mixed_float16" if tuple(compute_capability) >= (7, 0) else "float32"


def fastest_policy(on_tpu: bool = False) -> str:
    """The Keras dtype policy that trains fastest here without changing the recipe's accuracy.

    TPUs: mixed_bfloat16. GPUs: by compute capability (`gpu_policy`). CPUs on TensorFlow:
    mixed_bfloat16 when the CPU has native bfloat16 (`cpu_has_bfloat16`), else float32. CPUs
    on JAX: float32, since XLA's CPU bfloat16 trains 2x slower than its float32 even with
    AVX512-BF16 (benchmarks/backends_cpu.py).

    Args:
        on_tpu: the run uses a TPUStrategy.

    Returns:
        'float32', 'mixed_bfloat16' or 'mixed_float16'.
    """
    import keras

    if on_tpu:
        return "mixed_bfloat16"
    if keras.backend.backend() == "jax":
        return _jax_policy()
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        details = tf.config.experimental.get_device_details(gpus[0])
        return gpu_policy(details.get("compute_capability"))
    return "mixed_bfloat16" if cpu_has_bfloat16() else "float32"


def _jax_policy() -> str:
    import jax

    device = jax.devices()[0]
    if device.platform == "tpu":
        return "mixed_bfloat16"
    if device.platform == "gpu":
        capability = getattr(device, "compute_capability", None)
        return gpu_policy(tuple(int(part) for part in capability.split(".")[:2])
                          if capability else None)
    return "float32"


def peak_host_memory_mb() -> float | None:
    """This process's peak resident memory in MB (None where the OS does not report it)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports kilobytes, macOS bytes.
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)
