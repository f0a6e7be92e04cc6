"""Where a run computes: a `Placement` for either backend.

On TensorFlow it wraps a tf.distribute strategy: default, mirrored (GPUs), multi-worker
(TF_CONFIG) or TPU. On JAX it wraps a `keras.distribution` (`training.jax_distribution`).

Choosing the tf.distribute strategy: default, mirrored (GPUs), multi-worker (TF_CONFIG), TPU.

`auto` picks a TPU when one is configured (a `--tpu` name, Colab's COLAB_TPU_ADDR, TPU_NAME, or
the /dev/accel* devices of a Cloud TPU VM), else multi-worker when TF_CONFIG names more than one
task, else MirroredStrategy over all GPUs when there are several, else the default strategy.
`mirrored` uses every GPU, or every logical CPU when the CPU was split into several.
Strategies must be created before TensorFlow runs anything else (multi-worker and TPU
initialisation reset the runtime), so `vit train` creates it first.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os

import keras
import tensorflow as tf

from training import jax_distribution
from training.jax_distribution import any_process
from vit_app.backend import tpu_configured

STRATEGIES = ("auto", "default", "mirrored", "multi_worker", "tpu")


@dataclasses.dataclass
class Placement:
    """Where and how a run computes, whatever the backend.

    Attributes:
        name: what the run prints (e.g. 'MirroredStrategy', 'DataParallel').
        replicas: data-parallel replicas; each step's batch is split over them.
        chief: whether this process writes the run's files.
        worker_id: this process's index (0 on a single process).
        on_tpu: the run computes on TPUs.
        strategy: the tf.distribute strategy (TensorFlow backend), else None.
        distribution: the keras.distribution in effect (JAX backend), else None.
        processes: processes in the run (JAX processes, TensorFlow workers).
    """

    name: str
    replicas: int
    chief: bool = True
    worker_id: int = 0
    on_tpu: bool = False
    strategy: tf.distribute.Strategy | None = None
    distribution: object = None
    processes: int = 1
    _any_worker: object = dataclasses.field(default=None, repr=False)

    def scope(self):
        """The context that model and optimizer variables are created in."""
        return self.strategy.scope() if self.strategy is not None else contextlib.nullcontext()

    def any_process(self, flag: bool) -> bool:
        """Whether a flag is set on any process of the run.

        With several processes this is a collective (a tiny all-gather or all-reduce): every
        process must call it at the same point of the run, as callbacks at a step's end do.

        Args:
            flag: this process's value.

        Returns:
            True when `flag` is True on at least one process.
        """
        if self.processes == 1:
            return flag
        if self.distribution is not None:
            return any_process(flag)
        if self._any_worker is None:
            self._any_worker = _any_worker_function(self.strategy)
        return bool(self._any_worker(tf.constant(int(flag))) > 0)


def _any_worker_function(strategy: tf.distribute.Strategy):
    """A tf.function summing an int flag over every replica of every worker."""
    @tf.function
    def any_worker(flag):
        per_replica = strategy.run(lambda: tf.identity(flag))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

    return any_worker


def place(backend: str, options) -> Placement:
    """The placement of a run on `backend` (create it before anything else computes).

    Args:
        backend: 'tensorflow' or 'jax' (the Keras backend in use).
        options: the run's `RunOptions`: its strategy and tpu (see `get_strategy`; on JAX
            only 'auto'), model_parallel (devices each model is sharded over, JAX) and
            coordinator, num_processes, process_id (a multi-process JAX run, see
            `training.jax_distribution.initialize_processes`).
    """
    strategy, model_parallel = options.strategy, options.model_parallel
    coordinator, num_processes = options.coordinator, options.num_processes
    if backend == "jax":
        if strategy not in ("auto", "default"):
            raise ValueError(f"--strategy {strategy} is a tf.distribute strategy; on the JAX "
                             "backend devices are used through keras.distribution: data "
                             "parallel by default, --model-parallel N, --coordinator for "
                             "several hosts")
        return _place_on_jax(model_parallel, coordinator, num_processes, options.process_id)
    if model_parallel > 1 or coordinator or num_processes:
        raise ValueError("--model-parallel, --coordinator and --num-processes need the JAX "
                         "backend (--backend jax); TensorFlow uses --strategy and TF_CONFIG")
    chosen = get_strategy(strategy, options.tpu)
    resolver = getattr(chosen, "cluster_resolver", None)
    worker_id = (resolver.task_id or 0) if isinstance(
        chosen, tf.distribute.MultiWorkerMirroredStrategy) else 0
    workers = max(tf_config_tasks(), 1) if isinstance(
        chosen, tf.distribute.MultiWorkerMirroredStrategy) else 1
    return Placement(strategy_name(chosen), chosen.num_replicas_in_sync, is_chief(chosen),
                     worker_id, is_tpu(chosen), strategy=chosen, processes=workers)


def _place_on_jax(model_parallel, coordinator, num_processes, process_id) -> Placement:
    import jax


    jax_distribution.hide_accelerators_from_tensorflow()
    if jax_distribution.multihost_requested(coordinator, num_processes):
        jax_distribution.initialize_processes(coordinator, num_processes, process_id)
    devices = jax.devices()
    platform = devices[0].platform
    if len(devices) == 1 and model_parallel <= 1:
        return Placement(f"JAX on 1 {platform} device", 1, on_tpu=platform == "tpu")
    distribution = jax_distribution.make_distribution(model_parallel)
    keras.distribution.set_distribution(distribution)
    return Placement(f"{jax_distribution.describe(distribution)} on {len(devices)} {platform} "
                     "devices", distribution.device_mesh.shape[0],
                     chief=jax.process_index() == 0, worker_id=jax.process_index(),
                     on_tpu=platform == "tpu", distribution=distribution,
                     processes=jax.process_count())


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
