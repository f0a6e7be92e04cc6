"""Choosing the tf.distribute strategy: default, mirrored (GPUs), multi-worker (TF_CONFIG), TPU.

`auto` picks a TPU when one is configured (a `--tpu` name, Colab's COLAB_TPU_ADDR, TPU_NAME, or
the /dev/accel* devices of a Cloud TPU VM), else multi-worker when TF_CONFIG names more than one
task, else MirroredStrategy over all GPUs when there are several, else the default strategy.
`mirrored` uses every GPU, or every logical CPU when the CPU was split into several.
Strategies must be created before TensorFlow runs anything else (multi-worker and TPU
initialisation reset the runtime), so `vit train` creates it first.
"""

from __future__ import annotations

import glob
import json
import os

import tensorflow as tf

STRATEGIES = ("auto", "default", "mirrored", "multi_worker", "tpu")
_TPU_ENV = ("COLAB_TPU_ADDR", "TPU_NAME")


def tpu_configured(tpu: str | None = None) -> bool:
    """Whether there is any sign of a TPU: a name, a Colab/Cloud TPU variable or TPU devices."""
    return bool(tpu) or any(os.environ.get(name) for name in _TPU_ENV) or bool(
        glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def tf_config_tasks() -> int:
    """Number of tasks in TF_CONFIG's cluster (0 when unset)."""
    raw = os.environ.get("TF_CONFIG", "")
    if not raw:
        return 0
    try:
        cluster = json.loads(raw).get("cluster", {})
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON ({error}): {raw[:200]!r}") from None
    return sum(len(tasks) for tasks in cluster.values())


def tpu_strategy(tpu: str | None = None) -> tf.distribute.TPUStrategy:
    """Connects to a TPU (a name/grpc address, Colab, or 'local' on a TPU VM) and initialises it.

    Raises:
        RuntimeError: quickly and clearly, when no TPU can be found.
    """
    if not tpu_configured(tpu):
        raise RuntimeError(
            "--strategy tpu: no TPU found (no --tpu NAME, no COLAB_TPU_ADDR or TPU_NAME "
            "variable, no /dev/accel* devices). On Colab choose Runtime > Change runtime type > "
            "TPU; on a Cloud TPU VM run on the VM itself; otherwise pass --tpu NAME.")
    name = tpu or os.environ.get("TPU_NAME") or ("" if os.environ.get("COLAB_TPU_ADDR")
                                                 else "local")
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=name)
        if name != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as error:
        raise RuntimeError(f"--strategy tpu: could not connect to TPU {name or '(Colab)'}: "
                           f"{error}") from None
    return tf.distribute.TPUStrategy(resolver)


def get_strategy(name: str = "auto", tpu: str | None = None) -> tf.distribute.Strategy:
    """Returns the strategy called `name` (one of STRATEGIES).

    Args:
        name: 'auto', 'default', 'mirrored', 'multi_worker' or 'tpu'.
        tpu: TPU name or grpc:// address for 'tpu' (and a hint for 'auto').
    """
    if name not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {name!r}")
    if name == "auto":
        if tpu_configured(tpu):
            name = "tpu"
        elif tf_config_tasks() > 1:
            name = "multi_worker"
        elif len(tf.config.list_physical_devices("GPU")) > 1:
            name = "mirrored"
        else:
            name = "default"
    if name == "tpu":
        return tpu_strategy(tpu)
    if name == "multi_worker":
        if not tf_config_tasks():
            raise ValueError("--strategy multi_worker needs TF_CONFIG, e.g. "
                             '{"cluster": {"worker": ["host1:12345", "host2:12345"]}, '
                             '"task": {"type": "worker", "index": 0}}')
        return tf.distribute.MultiWorkerMirroredStrategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(mirrored_devices())
    return tf.distribute.get_strategy()


def mirrored_devices() -> list[str] | None:
    """Every GPU, else every logical CPU when the CPU was split into several (as tests and
    CPU-only experiments do), else None (TensorFlow's default: the CPU)."""
    gpus = tf.config.list_logical_devices("GPU")
    cpus = tf.config.list_logical_devices("CPU")
    devices = gpus or (cpus if len(cpus) > 1 else [])
    return [device.name for device in devices] or None


def is_tpu(strategy: tf.distribute.Strategy) -> bool:
    """Whether `strategy` runs on TPUs."""
    return isinstance(strategy, (tf.distribute.TPUStrategy,
                                 tf.distribute.experimental.TPUStrategy))


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run's files (always, except non-chief workers)."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return task_type in (None, "worker") and task_id == 0 and not has_chief


def strategy_name(strategy: tf.distribute.Strategy) -> str:
    """A readable name: TPUStrategy, MultiWorkerMirroredStrategy, MirroredStrategy, Default."""
    if is_tpu(strategy):
        return "TPUStrategy"
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return "MultiWorkerMirroredStrategy"
    if isinstance(strategy, tf.distribute.MirroredStrategy):
        return "MirroredStrategy"
    return "DefaultStrategy"
