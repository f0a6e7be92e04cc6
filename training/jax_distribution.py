"""Placing a `vit train` run on JAX devices with `keras.distribution`.

Data parallel over every device by default (`DataParallel`); `--model-parallel N` additionally
shards each attention and MLP block over N devices (`ModelParallel` with a `LayoutMap` over a
(batch, model) mesh): the attention kernels and biases by head, the MLP by its hidden units,
so an L/H model whose weights and optimizer state do not fit one device still trains.
Several hosts (or processes) join through `jax.distributed.initialize`: from the coordinator,
process count and process id flags, or by itself on a multi-host Cloud TPU VM.
"""

from __future__ import annotations

import os

import keras
import numpy as np

from vit_app.backend import nvidia_gpu_present, tpu_configured

# Variable paths of the sharded weights (see vit_keras.core.attention / MLPBlock): the attention
# EinsumDense kernels are (D, heads, head_dim) and (heads, head_dim, D), MLP kernels (D, mlp) and
# (mlp, D); LoRA adapters and quantized kernels keep the replicated default. Every other weight
# is replicated. Keras matches a pattern against the whole path.
MODEL_AXIS, BATCH_AXIS = "model", "batch"
SHARDED_WEIGHTS = {
    r".*MultiHeadDotProductAttention_\d+/(query|key|value)/kernel": (None, MODEL_AXIS, None),
    r".*MultiHeadDotProductAttention_\d+/(query|key|value)/bias": (MODEL_AXIS, None),
    r".*MultiHeadDotProductAttention_\d+/out/kernel": (MODEL_AXIS, None, None),
    r".*MlpBlock_\d+/Dense_0/kernel": (None, MODEL_AXIS),
    r".*MlpBlock_\d+/Dense_0/bias": (MODEL_AXIS,),
    r".*MlpBlock_\d+/Dense_1/kernel": (MODEL_AXIS, None),
}


def multihost_requested(coordinator: str | None, num_processes: int | None) -> bool:
    """Whether this process is one of several: flags, Keras' variables or a multi-host TPU."""
    if coordinator or (num_processes or 0) > 1:
        return True
    if int(os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1")) > 1:
        return True
    return "," in os.environ.get("TPU_WORKER_HOSTNAMES", "")  # a Cloud TPU pod slice


def initialize_processes(coordinator: str | None = None, num_processes: int | None = None,
                         process_id: int | None = None) -> None:
    """Joins the multi-process run (before any JAX computation).

    Args:
        coordinator: 'HOST:PORT' of process 0; None on a Cloud TPU VM, where JAX finds it.
        num_processes: number of processes in the run.
        process_id: this process's index, 0 for the coordinator.
    """
    if coordinator and (num_processes is None or process_id is None):
        raise ValueError("--coordinator needs --num-processes and --process-id")
    if process_id is not None and num_processes and not 0 <= process_id < num_processes:
        raise ValueError(f"--process-id must be in [0, {num_processes}), got {process_id}")
    import jax

    # `vit train` stops on SIGTERM itself (training.preemption), all processes at the same
    # step; JAX's preemption service would install its own SIGTERM handler in its place.
    jax.config.update("jax_enable_preemption_service", False)
    keras.distribution.initialize(coordinator, num_processes, process_id)


def any_process(flag: bool) -> bool:
    """Whether a flag is set on any JAX process (a collective: all processes call it).

    Args:
        flag: this process's value.

    Returns:
        True when `flag` is True on at least one process.
    """
    from jax.experimental import multihost_utils

    return bool(np.any(multihost_utils.process_allgather(np.int32(flag))))


def hide_accelerators_from_tensorflow() -> None:
    """TensorFlow only runs tf.data on JAX runs: keep it from claiming GPU memory or TPUs."""
    if not (nvidia_gpu_present() or tpu_configured()):
        return  # asking TensorFlow would only probe for CUDA
    import tensorflow as tf

    for kind in ("GPU", "TPU"):
        try:
            tf.config.set_visible_devices([], kind)
        except (RuntimeError, ValueError):  # already initialised, or no such device type
            pass


def layout_map(mesh: keras.distribution.DeviceMesh) -> keras.distribution.LayoutMap:
    """The `LayoutMap` sharding attention heads and MLP units over the mesh's model axis."""
    layouts = keras.distribution.LayoutMap(mesh)
    for pattern, axes in SHARDED_WEIGHTS.items():
        layouts[pattern] = axes
    return layouts


def check_model_parallel(config, model_parallel: int) -> None:
    """Raises ValueError unless heads and MLP units split evenly over `model_parallel`."""
    for what, size in (("num_heads", config.num_heads), ("mlp_dim", config.mlp_dim)):
        if size % model_parallel:
            raise ValueError(f"--model-parallel {model_parallel} must divide the model's "
                             f"{what}, which is {size}")


def make_distribution(model_parallel: int = 1) -> keras.distribution.Distribution:
    """DataParallel over all devices, or ModelParallel with `model_parallel` devices per model.

    Raises:
        ValueError: the device count is not a multiple of `model_parallel`.
    """
    devices = keras.distribution.list_devices()
    if model_parallel <= 1:
        return keras.distribution.DataParallel(devices=devices)
    if len(devices) % model_parallel:
        raise ValueError(f"--model-parallel {model_parallel} must divide the number of "
                         f"devices, {len(devices)}")
    mesh = keras.distribution.DeviceMesh((len(devices) // model_parallel, model_parallel),
                                         (BATCH_AXIS, MODEL_AXIS), devices)
    return keras.distribution.ModelParallel(layout_map=layout_map(mesh),
                                            batch_dim_name=BATCH_AXIS)


def describe(distribution: keras.distribution.Distribution) -> str:
    """'DataParallel' or 'ModelParallel 2x2 (batch x model)', with the process count."""
    mesh = distribution.device_mesh
    name = type(distribution).__name__
    if isinstance(distribution, keras.distribution.ModelParallel):
        name += f" {mesh.shape[0]}x{mesh.shape[1]} (batch x model)"
    processes = distribution.num_processes if hasattr(distribution, "num_processes") else 1
    return name + (f" over {processes} processes" if processes > 1 else "")
