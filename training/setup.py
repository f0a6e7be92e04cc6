"""A run's first phase: where it computes, at what precision, on what data, in which batches,
with which model config and into which folder. `set_up` returns it all as one frozen `Setup`
that the later phases (`training.fitting`, `training.finish`) only read.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import time

import keras
import numpy as np

from training import adapt, distribute, jax_distribution, presets
from training.objective import get_objective
from vit_app import console, hardware, outputs
from vit_app.data import training_data
from vit_app.data.evaluation import traced_as_written
from vit_app.data.source import Source
from vit_keras import atomic


@dataclasses.dataclass(frozen=True)
class Plan:
    """Batch and step arithmetic of a run under a strategy."""

    replicas: int
    global_batch: int        # examples per optimizer update
    step_batch: int          # examples per training step (global, all replicas)
    per_replica_batch: int   # examples per replica per step
    accum: int               # gradient accumulation steps
    steps_per_epoch: int     # training steps (batches) per epoch
    updates_per_epoch: int   # optimizer updates per epoch


@dataclasses.dataclass(frozen=True)
class Folders:
    """Where a run writes.

    Attributes:
        output: the run's output folder (the chief writes the run's files there).
        write_dir: where this process writes: `output` on the chief; a TensorFlow worker's
            `.worker-N` inside it, or a temporary folder for another JAX process (saving is
            a collective operation, so every process saves).
        backup_dir: the output folder's `backup/`.
        saves: whether this process's callbacks call save.
        scratch: whether `write_dir` is a temporary folder to remove at the end.
    """

    output: str
    write_dir: str
    backup_dir: str
    saves: bool
    scratch: bool


@dataclasses.dataclass(frozen=True)
class Setup:
    """Everything a run decided before building its model.

    Attributes:
        preset: the preset, fitted to the data when `data.adapt` is on.
        objective: what the run trains for (`training.tasks.classify.objective`), of that preset.
        backend: the Keras backend.
        placement: `training.distribute.Placement`.
        policy: the Keras dtype policy name.
        data: the opened `vit_app.data.training_data.TrainingData`.
        num_examples: training examples.
        plan: the batch arithmetic.
        config: the model's `ViTConfig`.
        folders: where this process writes.
        adaptation: what the small-data rule changed ('' when off).
        start: `vit_app.outputs.start_mode`'s answer ('fresh', 'replace', 'resume').
        started: `time.perf_counter()` when the run began.
    """

    preset: presets.Preset
    objective: object
    backend: str
    placement: distribute.Placement
    policy: str
    data: training_data.TrainingData
    num_examples: int
    plan: Plan
    config: object
    folders: Folders
    adaptation: str
    start: str
    started: float

    @property
    def preprocessing(self):
        """How images become the model's inputs (`data.preprocessing`): the data pipelines
        prepare them so, and the trained model carries it."""
        return self.objective.model_preprocessing(self.preset.data.preprocessing)


def make_plan(preset: presets.Preset, num_examples: int, replicas: int) -> Plan:
    """Splits the global batch over accumulation steps and replicas; checks divisibility.

    Args:
        preset: the run's preset (its schedule's batch size and accumulation steps).
        num_examples: training examples.
        replicas: data-parallel replicas (`Placement.replicas`).
    """
    accum, batch = preset.schedule.grad_accum_steps, preset.schedule.batch_size
    if batch % (accum * replicas):
        raise ValueError(f"batch_size {batch} must be divisible by grad_accum_steps x replicas "
                         f"= {accum} x {replicas}")
    step_batch = batch // accum
    steps = (num_examples // step_batch) // accum * accum
    return Plan(replicas=replicas, global_batch=batch, step_batch=step_batch,
                per_replica_batch=step_batch // replicas, accum=accum, steps_per_epoch=steps,
                updates_per_epoch=steps // accum)


def fit_batch_to_data(preset: presets.Preset, num_examples: int,
                      replicas: int) -> tuple[presets.Preset, str]:
    """The preset with a global batch no larger than the training data: a data set smaller
    than the preset's batch gets the largest batch it fills (a multiple of grad_accum_steps x
    replicas), with a notice; a batch the user set (`--batch-size`) is kept, and refused.

    Returns:
        (the preset, the notice or '').
    """
    batch = preset.schedule.batch_size
    unit = preset.schedule.grad_accum_steps * replicas
    if num_examples >= batch:
        return preset, ""
    smaller = num_examples // unit * unit
    if smaller == 0:
        raise ValueError(f"the training data has {num_examples} examples, fewer than "
                         f"grad_accum_steps x replicas = {unit}: add images or lower "
                         "schedule.grad_accum_steps")
    if "schedule.batch_size" in preset.pinned:
        raise ValueError(f"the training data has {num_examples} examples, fewer than one batch "
                         f"of {batch}: pass --batch-size {smaller} or less, or add images")
    fitted = preset.with_values({"schedule.batch_size": smaller}, "batch fitting")
    return fitted, (f"batch: {num_examples} training examples fill no batch of {batch}: "
                    f"batch size {smaller} (--batch-size sets another)")


def resolve_precision(preset: presets.Preset, on_tpu: bool) -> str:
    """The Keras dtype policy name for the run."""
    wanted = preset.loop.mixed_precision
    if on_tpu:
        return "mixed_bfloat16"
    if wanted == "auto":
        return hardware.fastest_policy()
    if wanted not in ("", "float32", "mixed_bfloat16", "mixed_float16"):
        raise ValueError(f"mixed_precision must be '', 'auto', 'mixed_bfloat16' or "
                         f"'mixed_float16', got {wanted!r}")
    return wanted or "float32"


def count_examples(source: Source) -> int:
    """Examples in `source` (one pass over its records when the size is not known)."""
    if source.num_examples:
        return source.num_examples
    console.say(f"counting the examples of {source.spec} (one pass) ...")
    return int(source.records().reduce(np.int64(0),
                                       traced_as_written(lambda count, _: count + 1)))


def check_same_start(placement, start: str, output: str) -> None:
    """Every process must resume, or none (each read the output folder on its own).

    Raises:
        ValueError: on every process, when some found a backup and others did not.
    """
    if placement.processes == 1:
        return
    some = placement.any_process(start == "resume")
    every = not placement.any_process(start != "resume")
    if some != every:
        raise ValueError(f"some processes found a backup in {output} and others did not: "
                         "every process must see the same output folder (a shared file "
                         "system or gs://)")


def make_folders(output: str, placement) -> Folders:
    """This process's `Folders` (creates its write folder)."""
    write_dir, scratch = output, False
    if not placement.chief and placement.strategy is not None:
        write_dir = os.path.join(output, f".worker-{placement.worker_id}")
    elif not placement.chief:
        write_dir = tempfile.mkdtemp(prefix=f"vit-process-{placement.worker_id}-")
        scratch = True
    atomic.makedirs(write_dir)
    return Folders(output=output, write_dir=write_dir, backup_dir=os.path.join(output, "backup"),
                   saves=placement.chief or placement.strategy is None, scratch=scratch)


def set_up(preset: presets.Preset, options: presets.RunOptions, output: str, start: str,
           signals) -> Setup:
    """The run's first phase: placement (first: it may reset the runtime), precision, seed,
    data, the small-data rule, batch plan, model config and folders.

    Args:
        preset: the fully resolved preset.
        options: the run's `RunOptions`.
        output: the output folder.
        start: `vit_app.outputs.start_mode`'s answer.
        signals: the run's `preemption.SignalWatch`.
    """
    started = time.perf_counter()
    backend = keras.backend.backend()
    placement = distribute.place(backend, options)
    signals.claim()  # a cluster runtime may have taken SIGTERM (JAX's, TensorFlow's)
    signals.hold = placement.processes > 1  # all stop together, at agreed points
    check_same_start(placement, start, output)
    if placement.chief and start == "replace":  # before any data is read
        outputs.clear_run_files(output)
    policy = resolve_precision(preset, placement.on_tpu)
    keras.mixed_precision.set_global_policy(policy)
    keras.utils.set_random_seed(preset.seed)
    task_objective = get_objective(preset)
    data = task_objective.open_data(options.data_dir)
    task_objective.check_data(data)
    num_examples = count_examples(data.train)
    adaptation = ""
    if preset.data.adapt:
        shapes, crops = adapt.shapes_and_crops(task_objective.sample_images(data.train),
                                               data.train.spec)
        preset, adaptation = adapt.adapt(preset, adapt.typical_image_size(shapes),
                                         num_examples, photos=adapt.looks_like_photos(crops),
                                         task_rule=task_objective.small_data_rule)
        preset, fitted = adapt.fit_to_data(preset, get_objective(preset), data.train)
        adaptation = "\n".join(line for line in (adaptation, fitted) if line)
    epoch_examples = get_objective(preset).epoch_examples(data.train, num_examples)
    preset, batch_note = fit_batch_to_data(preset, epoch_examples, placement.replicas)
    adaptation = "\n".join(line for line in (adaptation, batch_note) if line)
    objective = get_objective(preset)
    config = objective.model_config(data.train.num_classes)
    if options.model_parallel > 1:
        jax_distribution.check_model_parallel(config, options.model_parallel)
    return Setup(preset=preset, objective=objective, backend=backend, placement=placement,
                 policy=policy, data=data, num_examples=num_examples,
                 plan=make_plan(preset, epoch_examples, placement.replicas), config=config,
                 folders=make_folders(output, placement), adaptation=adaptation or "",
                 start=start, started=started)
