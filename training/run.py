"""The one training run behind `vit train`, for every objective: setup, build, fit, finish.

`Run` does, in order: choose the strategy (first: it may reset the runtime), the precision and
the seed; open the training and validation data; plan the batches; let the objective build its
model inside the strategy scope and compile it with the recipe's optimizer; restore a backup
(`--resume`); fit with the NaN stop, best weights, history, backups and TensorBoard; evaluate;
write model.keras, labels, config, metrics and curves; export and inspect. The objective
(`training.objectives`) supplies only the model, its loss and its outputs.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time

import shutil
import subprocess
import sys
import tempfile

import keras
import numpy as np
import tensorflow as tf

from vit import console, hardware, outputs
from vit.data import evaluation, sources, subsets
from vit.data.source import Source
from vit.inference.export import (EXIT_EXPORT_FAILED, REPORT_NAME, export_model,
                                  parse_min_agreement)
from vit.inference.export import report_failures as report_export_failures
from vit.inference.export import summary_rows as export_summary_rows
from training import (adapt, callbacks, distribute, finetune, objectives, pipeline,
                          preemption, presets, recipe)
from vit_keras import atomic, keras_compat, lora
from vit_keras.fast_paths import training_forms

EVAL_SAMPLES = 2000  # export.json accuracy: the whole validation split, up to this many
CALIBRATION_SAMPLES = 300  # int8 calibration images from the training split
INSPECT_SAMPLES = 4


def log(*parts, **kwargs) -> None:
    """Prints a line and flushes (progress must show up when piped)."""
    print(*parts, flush=True, **kwargs)


@dataclasses.dataclass
class Plan:
    """Batch and step arithmetic of a run under a strategy."""

    replicas: int
    global_batch: int        # examples per optimizer update
    step_batch: int          # examples per training step (global, all replicas)
    per_replica_batch: int   # examples per replica per step
    accum: int               # gradient accumulation steps
    steps_per_epoch: int     # training steps (batches) per epoch
    updates_per_epoch: int   # optimizer updates per epoch


def make_plan(preset: presets.Preset, num_examples: int, replicas: int) -> Plan:
    """Splits the global batch over accumulation steps and replicas; checks divisibility.

    Args:
        replicas: data-parallel replicas (`Placement.replicas`).
    """
    accum, batch = preset.schedule.grad_accum_steps, preset.schedule.batch_size
    if batch % (accum * replicas):
        raise ValueError(f"batch_size {batch} must be divisible by grad_accum_steps x replicas "
                         f"= {accum} x {replicas}")
    step_batch = batch // accum
    if num_examples < batch:
        raise ValueError(f"the training data has {num_examples} examples, fewer than one "
                         f"batch of {batch}: pass --batch-size {num_examples} or less")
    steps = (num_examples // step_batch) // accum * accum
    return Plan(replicas=replicas, global_batch=batch, step_batch=step_batch,
                per_replica_batch=step_batch // replicas, accum=accum, steps_per_epoch=steps,
                updates_per_epoch=steps // accum)


def resolve_precision(preset: presets.Preset, on_tpu: bool) -> str:
    """The Keras dtype policy name for the run."""
    from vit.hardware import fastest_policy

    wanted = preset.loop.mixed_precision
    if on_tpu:
        return "mixed_bfloat16"
    if wanted == "auto":
        return fastest_policy()
    if wanted not in ("", "float32", "mixed_bfloat16", "mixed_float16"):
        raise ValueError(f"mixed_precision must be '', 'auto', 'mixed_bfloat16' or "
                         f"'mixed_float16', got {wanted!r}")
    return wanted or "float32"


def count_examples(source: Source) -> int:
    """Examples in `source` (one pass over its records when the size is not known)."""
    if source.num_examples:
        return source.num_examples
    log(f"counting the examples of {source.spec} (one pass) ...")
    return int(source.records().reduce(np.int64(0), lambda count, _: count + 1))


def describe_model(config) -> str:
    """'S/16 224x224px' for a named variant's shape, else the custom shape, and the options."""
    from vit_keras.config import variant_of

    name = variant_of(config) or (f"custom patch {config.patch_size} D={config.hidden_size} "
                                  f"L={config.num_layers} heads={config.num_heads}")
    height, width = config.image_hw
    locality = [f"{config.stem} stem"] if config.stem != "patchify" else []
    locality += ["locality attention"] if config.locality_attention else []
    return ", ".join([f"{name} {height}x{width}px", *locality, f"{config.classifier} pooling",
                      f"posemb {config.posemb}"])


class Run:
    """One training job end to end (see the module docstring).

    Args:
        preset: the fully resolved preset.
        options: where and how it runs (`RunOptions`); the output folder defaults to
            saved_models/<preset.name>.
    """

    def __init__(self, preset: presets.Preset, options: presets.RunOptions):
        self.preset, self.options = preset, options
        self.objective = objectives.get_objective(preset)  # fails fast on a bad objective
        self.output = options.output or os.path.join("saved_models", preset.name)
        self.backup_dir = os.path.join(self.output, "backup")
        self.backup_callback = None

    def execute(self) -> int:
        """Runs setup, build, fit and finish; returns 0, or `EXIT_EXPORT_FAILED` when the
        training succeeded but an exported file failed its agreement check.

        Raises:
            preemption.Preempted: a SIGTERM or Ctrl+C stopped the run (after a backup of the
                step it reached, when it was training).
        """
        forms = step_forms(self.preset.loop, keras.backend.backend())
        # Every process checks (so none goes on to wait for a chief that refused); the chief
        # alone clears, once all have joined the cluster.
        self.start = outputs.start_mode(self.output, self.options.resume, self.options.overwrite)
        if self.start == "finished":
            log(f"--resume auto: {self.output} holds a finished run (metrics.json); nothing to do")
            return 0
        with preemption.SignalWatch() as self.signals, training_forms.using(**forms):
            try:
                self.setup()
                self._may_stop()
                self.build()
                state = self.restore()
                self._may_stop()
                self.fit(state)
                self.signals.phase = "the final evaluation and export"
                metrics = self.evaluate()
                self._may_stop()
                status = self.finish(metrics)
                self.signals.phase = None  # done: a late signal changes nothing
            except preemption.Preempted as stop:
                stop.resumable = self._has_backup()
                raise
            finally:
                self._remove_scratch()
        return status

    def _may_stop(self) -> None:
        """Where every process stops together when one of them received a signal."""
        self.signals.checkpoint(self.placement.any_process)

    def _has_backup(self) -> bool:
        """Whether the output folder holds this run's backup (a resumed one's, or one it wrote;
        not the backup of an earlier run that --overwrite was about to remove)."""
        wrote = self.backup_callback is not None and self.backup_callback.saved_any
        return (self.start == "resume" or wrote) and atomic.exists(
            os.path.join(self.backup_dir, callbacks.STATE_FILE))

    def _remove_scratch(self) -> None:
        """A non-chief JAX process's temporary folder (its copies of the collective saves)."""
        write_dir = getattr(self, "write_dir", self.output)
        if write_dir != self.output and getattr(self, "strategy", None) is None:
            shutil.rmtree(write_dir, ignore_errors=True)

    # --- setup ----------------------------------------------------------------------------

    def setup(self) -> None:
        """Placement, precision, seed, folders, data, batch plan and model config."""
        self.started = time.perf_counter()
        self.backend = keras.backend.backend()
        self.placement = distribute.place(self.backend, self.options)
        self.signals.claim()  # a cluster runtime may have taken SIGTERM (JAX's, TensorFlow's)
        self.signals.hold = self.placement.processes > 1  # all stop together, at agreed points
        self._check_same_start()
        self.strategy = self.placement.strategy
        self.on_tpu, self.chief = self.placement.on_tpu, self.placement.chief
        if self.chief and self.start == "replace":  # before any data is read
            outputs.clear_run_files(self.output)
        self.policy = resolve_precision(self.preset, self.on_tpu)
        keras.mixed_precision.set_global_policy(self.policy)
        keras.utils.set_random_seed(self.preset.seed)
        # Saving is a collective operation on several processes, so the other processes save
        # too: TensorFlow workers into the output's .worker-N, JAX processes into a temporary
        # folder removed at the end (only the chief writes the run's files).
        self.write_dir = self.output
        if not self.chief and self.strategy is not None:
            self.write_dir = os.path.join(self.output, f".worker-{self.placement.worker_id}")
        elif not self.chief:
            self.write_dir = tempfile.mkdtemp(prefix=f"vit-process-{self.placement.worker_id}-")
        atomic.makedirs(self.write_dir)
        self.saves = self.chief or self.strategy is None  # whether callbacks call save
        preset = self.preset
        self.data = subsets.restrict_training_data(
            sources.open_training_data(preset.data.train, preset.data.val, preset.data.val_split,
                                       preset.seed, self.options.data_dir), preset.data.classes)
        self.objective.check_data(self.data)
        self.num_examples = count_examples(self.data.train)
        self._adapt_to_data()
        preset = self.preset
        self.plan = make_plan(preset, self.num_examples, self.placement.replicas)
        self.config = self.objective.model_config(self.data.train.num_classes)
        if self.options.model_parallel > 1:
            from training.jax_distribution import check_model_parallel

            check_model_parallel(self.config, self.options.model_parallel)
        self._log_header()

    def _adapt_to_data(self) -> None:
        """The small-data rule (`data.adapt` presets): the recipe fitted to the data."""
        self.adaptation = None
        if self.preset.data.adapt:
            native_hw = adapt.typical_image_size(self.data.train)
            self.preset, self.adaptation = adapt.adapt(self.preset, native_hw,
                                                       self.num_examples)
            self.objective = objectives.get_objective(self.preset)

    def _check_same_start(self) -> None:
        """Every process must resume, or none (each read the output folder on its own).

        Raises:
            ValueError: on every process, when some found a backup and others did not.
        """
        if self.placement.processes == 1:
            return
        some = self.placement.any_process(self.start == "resume")
        every = not self.placement.any_process(self.start != "resume")
        if some != every:
            raise ValueError(f"some processes found a backup in {self.output} and others did "
                             "not: every process must see the same output folder (a shared "
                             "file system or gs://)")

    def _log_header(self) -> None:
        preset, plan, data = self.preset, self.plan, self.data
        accumulated = f" (accumulated {plan.accum}x{plan.step_batch})" if plan.accum > 1 else ""
        log(f"vit train: preset {preset.name}, objective {self.objective.name}, model "
            f"{describe_model(self.config)}, {self.backend}: {self.placement.name} "
            f"x{plan.replicas}, batch {plan.global_batch}{accumulated}, "
            f"{preset.schedule.epochs} epochs x {plan.steps_per_epoch} steps, {self.policy}")
        if self.adaptation:
            log(self.adaptation)
        described = describe_step_forms(step_forms(preset.loop, self.backend), self.config,
                                        self.backend)
        if described:
            log(f"step forms: {described} (vit_keras.fast_paths.training_forms)")
        validation = "none" if data.val is None else (
            f"{data.val.num_examples or 'uncounted'} examples")
        log(f"data: train {self.num_examples} examples of {preset.data.train} "
            f"({data.train.num_classes} classes); validation {validation} from "
            f"{data.val_origin}")
        if preset.objective.label_smoothing and self.objective.name == "classify":
            log(f"loss: the epoch lines' loss is the training objective, cross-entropy with "
                f"label smoothing {preset.objective.label_smoothing}; the result table reports "
                "plain cross-entropy, as `vit evaluate` does")

    # --- build ----------------------------------------------------------------------------

    def build(self) -> None:
        """The objective's model and the recipe's optimizer, built in the strategy scope."""
        steps_per_execution = self.preset.loop.steps_per_execution
        if self.on_tpu and steps_per_execution == 1:
            steps_per_execution = min(64, self.plan.steps_per_epoch)
        with self.placement.scope():
            model = self.objective.build(self.config)
            finetune.prepare(self.objective.network(model), self.preset)
            optimizer = recipe.make_optimizer(self.preset, self.plan.updates_per_epoch, model)
            model.compile(optimizer=optimizer, steps_per_execution=steps_per_execution,
                          **self.objective.compile_args(self.config))
            model.optimizer.build(model.trainable_variables)
        if self.strategy is not None and self.strategy is not tf.distribute.get_strategy():
            batch = self.plan.per_replica_batch
            sample = (np.zeros((batch, *self.config.image_hw, self.config.channels), np.float32),
                      np.zeros((batch, self.config.num_classes), np.float32))
            keras_compat.build_without_peeking(model, sample)
            if isinstance(self.strategy, tf.distribute.MultiWorkerMirroredStrategy):
                keras_compat.vector_logs(model)
        self.model = model
        self.trainable_weights, self.total_weights = finetune.count_weights(model)
        log(finetune.describe(model, self.preset))

    def restore(self) -> dict | None:
        """The backup state to continue from (`--resume`), or None for a fresh start."""
        if self.start != "resume":
            if self.chief and atomic.exists(self.backup_dir):
                atomic.remove(self.backup_dir)  # a fresh run does not inherit an old backup
            return None
        state = callbacks.restore_backup(self.model, self.backup_dir)
        if state is None:
            raise ValueError(f"--resume: {self.backup_dir} holds no {callbacks.STATE_FILE}")
        log(f"--resume: continuing at epoch {state['epoch'] + 1}, step {state['step']} "
            f"(global step {state['global_step']})")
        return state

    # --- fit ------------------------------------------------------------------------------

    def _train_stream(self, first_epoch: int, first_step: int):
        preset, plan = self.preset, self.plan
        return pipeline.train_dataset(
            self.data.train, self.config.image_hw, plan.step_batch, preset,
            start_epoch=first_epoch, start_step=first_step, steps_per_epoch=plan.steps_per_epoch,
            preprocessing=self.config.preprocessing)

    def _val_stream(self):
        if self.data.val is None:
            return None
        # A JAX batch splits evenly over the data-parallel devices, so up to replicas - 1
        # examples are left out of a last partial batch; several processes need full batches.
        whole = self.on_tpu or self._processes() > 1
        count = self.data.val.num_examples
        usable = count - count % self.plan.replicas if count and self.backend == "jax" else None
        self.val_examples = usable or count
        return evaluation.eval_dataset(self.data.val, self.config.image_hw, self.plan.step_batch,
                                     num_classes=self.data.train.num_classes,
                                     drop_remainder=whole, max_examples=usable,
                                     preprocessing=self.config.preprocessing)

    def _processes(self) -> int:
        distribution = self.placement.distribution
        return distribution.num_processes if distribution is not None else 1

    def _callbacks(self, state: dict | None) -> list:
        start_step = state["step"] if state else 0
        steps = self.plan.steps_per_epoch
        self.best = callbacks.BestModel(os.path.join(self.write_dir, "best.weights.h5"),
                                        monitor=self.objective.monitor, write=self.saves)
        self.best.restore(state)
        backup = callbacks.ResumableBackup(os.path.join(self.write_dir, "backup"), steps,
                                           self.preset.loop.backup_every, write=self.saves,
                                           step_offset=start_step,
                                           best_model=self.best)
        finite = callbacks.StopOnNonFinite(steps, step_offset=start_step,
                                           backup_dir=self.backup_dir if self.chief else "")
        history = keras.callbacks.CSVLogger(os.path.join(self.write_dir, "history.csv"),
                                            append=bool(state))
        # `finite` first: a NaN step is never backed up. The backup last: an epoch's history row
        # and best weights are on disk before its backup marks it done, so a kill in between
        # reruns the epoch on --resume instead of losing them.
        chosen = [finite, self.best, history, backup,
                  keras.callbacks.TensorBoard(os.path.join(self.write_dir, "logs"))]
        if self.options.verbose == 0 and self.chief:
            chosen.append(callbacks.EpochLog(self.preset.schedule.epochs))
        # Last: an epoch's end is logged and backed up before a signal stops the run there.
        chosen.append(preemption.StopOnSignal(self.signals, backup, self.placement.any_process,
                                              self.backup_dir))
        self.backup_callback = backup
        return chosen

    def fit(self, state: dict | None) -> None:
        """Trains from `state` (or the start) to the last epoch; a probe fits its head."""
        if self.preset.finetune.mode == "probe":
            return self._fit_probe()
        preset, plan = self.preset, self.plan
        start_epoch, start_step = (state["epoch"], state["step"]) if state else (0, 0)
        self.val_dataset = self._val_stream()
        fit_callbacks = self._callbacks(state)
        common = dict(validation_data=self.val_dataset, callbacks=fit_callbacks,
                      verbose=self.options.verbose, shuffle=False)
        started = time.perf_counter()
        epoch = start_epoch
        self.signals.phase = "training"
        # A signal stops fit at a step's end, with a backup.
        with self.signals.deferred(self.placement.any_process):
            if start_step and epoch < preset.schedule.epochs:  # finish the interrupted epoch
                self.model.fit(self._train_stream(epoch, start_step), epochs=epoch + 1,
                               initial_epoch=epoch,
                               steps_per_epoch=plan.steps_per_epoch - start_step,
                               validation_freq=validation_epochs(preset, epoch, epoch + 1),
                               **common)
                epoch += 1
            if epoch < preset.schedule.epochs:
                self.model.fit(self._train_stream(epoch, 0), epochs=preset.schedule.epochs,
                               initial_epoch=epoch, steps_per_epoch=plan.steps_per_epoch,
                               validation_freq=validation_epochs(preset, epoch), **common)
        self.train_seconds = time.perf_counter() - started
        done_before = start_epoch * plan.steps_per_epoch + start_step
        self.trained_images = (preset.schedule.epochs * plan.steps_per_epoch - done_before) * \
            plan.step_batch

    def _fit_probe(self) -> None:
        """The linear probe: features of the training images once, then each head fitted."""
        from training import probe

        network = self.objective.network(self.model)
        heads = [layer for layer in finetune.head_layers(network) if layer.name != "pre_logits"]
        features = evaluation.eval_dataset(self.data.train, self.config.image_hw,
                                         self.plan.step_batch,
                                         num_classes=self.data.train.num_classes,
                                         preprocessing=self.config.preprocessing)
        started = time.perf_counter()
        self.signals.phase = "the linear probe"
        with console.stage(f"probe: features of {self.num_examples} training images, then "
                           "a linear head"):
            self.probe = probe.fit_probe(network, heads, features, self.preset.finetune.probe_l2,
                                         multilabel=self.objective.name == "multilabel",
                                         seed=self.preset.seed)
        self.train_seconds = time.perf_counter() - started
        self.trained_images = self.probe["examples"]
        self.val_dataset = self._val_stream()
        self.best = callbacks.BestModel("", monitor=getattr(self.objective, "monitor",
                                                           "val_accuracy"), write=False)

    # --- finish ---------------------------------------------------------------------------

    def evaluate(self) -> dict:
        """The run's metrics.json: what was trained, how fast, and the validation scores."""
        preset, plan = self.preset, self.plan
        metrics = {"preset": preset.name, "objective": self.objective.name,
                   "data": preset.data.train, "val_data": self.data.val_origin,
                   "num_train_examples": self.num_examples, "epochs": preset.schedule.epochs,
                   "global_batch": plan.global_batch, "replicas": plan.replicas,
                   "backend": self.backend, "placement": self.placement.name,
                   "precision": self.policy, "train_seconds": round(self.train_seconds, 2),
                   "train_images_per_second": round(
                       self.trained_images / max(self.train_seconds, 1e-9), 1),
                   "best_val_accuracy": self.best.best, "best_epoch": self.best.best_epoch,
                   "finetune": preset.finetune.mode, "trainable_weights": self.trainable_weights,
                   "total_weights": self.total_weights,
                   "peak_host_memory_mb": hardware.peak_host_memory_mb()}
        if preset.finetune.mode == "probe":
            metrics["probe_l2"] = self.probe["l2"]
        if self.val_dataset is not None:
            results = self.model.evaluate(self.val_dataset, verbose=0, return_dict=True)
            metrics.update(self.objective.report(results))
            if preset.finetune.mode == "probe":  # one fit: its score is the best
                metrics["best_val_accuracy"] = results.get(self.best.monitor[len("val_"):])
                metrics["best_epoch"] = 1
            metrics.update(self.objective.evaluate_extras(self.model, self.val_dataset))
            metrics["val_examples"] = self.val_examples
        return metrics

    def finish(self, metrics: dict) -> int:
        """Writes the run's files (the chief; the other processes into their scratch folder),
        exports, inspects; returns the exit status (`EXIT_EXPORT_FAILED` when an exported file
        failed its agreement check, else 0)."""
        classifier = self.objective.classifier(self.model, self.config)
        if not self.chief and self.strategy is not None:  # TF workers: final weights only
            atomic.save_weights(classifier, os.path.join(self.write_dir, "final.weights.h5"))
            return 0
        output = self.write_dir
        atomic.save_model(classifier, os.path.join(output, "model.keras"))
        self.objective.write_extras(classifier, output)
        if self.preset.finetune.mode == "lora":
            lora.save_lora_weights(self.objective.network(self.model),
                                   os.path.join(output, "lora.npz"))
        outputs.write_labels(output, self.data.train.class_names)
        # `activation` tells `vit export`, predict, serve and evaluate how scores come from the
        # logits (sigmoid for a multi-label model) in every format.
        outputs.write_json(os.path.join(output, "config.json"),
                           {"preset": self.preset.to_dict(), "model": self.config.to_dict(),
                            "activation": self.objective.activation})
        outputs.plot_curves(outputs.read_history(os.path.join(output, "history.csv")),
                            os.path.join(output, "curves.png"))
        # Written before the export (a failed export leaves a finished run), then again with
        # the whole command's time: start-up, data, training, evaluation, export, analysis.
        metrics["wall_seconds"] = round(console.elapsed(self.started), 2)
        outputs.write_json(os.path.join(output, "metrics.json"), metrics)
        exported = self._export_and_inspect(classifier)
        metrics["wall_seconds"] = round(console.elapsed(self.started), 2)
        outputs.write_json(os.path.join(output, "metrics.json"), metrics)
        if not self.chief:  # the other JAX processes' scratch folders go in `execute`
            return 0
        rows = summary_rows(metrics, output, self.objective)
        log(outputs.summary_table(rows + (export_summary_rows(exported) if exported else [])))
        if atomic.exists(self.backup_dir):
            atomic.remove(self.backup_dir)
        if not exported or not exported["failed"]:
            return 0
        log(f"the training succeeded: {os.path.join(output, 'model.keras')} and the run's "
            "files are written; only the export failed its check (below)")
        return report_export_failures(exported, "vit train")

    def _export_and_inspect(self, classifier) -> dict | None:
        """SavedModel/TFLite export and the attention/embedding analysis, on raw images;
        returns the export's report (None without an export)."""
        export = self.options.export and self.objective.exports
        if self.options.export and not self.objective.exports:
            log(f"export: skipped for objective {self.objective.name} (its head is untrained; "
                "fine-tune the encoder, then export)")
        if not (export or self.options.inspect):
            return None
        report = None
        size, rule = self.config.image_hw, self.config.preprocessing
        images, labels = evaluation.take_raw_images(self.data.val or self.data.train, size,
                                                  EVAL_SAMPLES, rule)
        if export and self.backend != "tensorflow":
            if self.chief:
                report = export_in_tensorflow(os.path.join(self.output, "model.keras"),
                                              self.options.min_agreement)
        elif export:
            calibration, _ = evaluation.take_raw_images(self.data.train, size,
                                                        CALIBRATION_SAMPLES, rule)
            report = export_model(classifier, self.output, representative_images=calibration,
                                  eval_images=images, eval_labels=labels,
                                  activation=self.objective.activation,
                                  min_agreement=parse_min_agreement(self.options.min_agreement))
        if self.options.inspect:
            from vit.inference.inspect import inspect_model

            with console.stage("analysis: attention maps, distances, embeddings (inspect/)"):
                inspect_model(classifier, images[:INSPECT_SAMPLES],
                              os.path.join(self.write_dir, "inspect"))
        return report


def step_forms(loop, backend: str) -> dict:
    """The opt-in forms of the JAX step that the preset's loop section turns on.

    Args:
        loop: the preset's `Loop` section.
        backend: the Keras backend of the run.

    Returns:
        `training_forms.using` keywords.

    Raises:
        ValueError: forms asked for on a backend other than JAX.
    """
    forms = {name: getattr(loop, name) for name in ("fused_qkv", "attention_kernel")}
    chosen = [f"loop.{name}" for name, value in forms.items() if value]
    if chosen and backend != "jax":
        raise ValueError(f"{' and '.join(chosen)} shape the JAX training step: train with "
                         f"--backend jax (this run uses {backend})")
    return forms


def describe_step_forms(forms: dict, config, backend: str) -> str:
    """The header's account of the step's opt-in forms and remat policy ('' when none), with
    what each does in this run.

    Args:
        forms: `step_forms`' keywords.
        config: the run's `ViTConfig`.
        backend: the Keras backend of the run.

    Returns:
        e.g. 'fused_qkv, attention_kernel, remat=dots'.
    """
    parts = [name for name, on in forms.items() if on]
    if forms.get("attention_kernel") and config.attention_dropout_rate:
        parts[parts.index("attention_kernel")] += (
            f" (not taken: attention_dropout_rate {config.attention_dropout_rate})")
    if config.remat == "dots":
        parts.append("remat=dots" if backend == "jax" else
                     f"remat=dots (a JAX policy: {backend} rematerialises whole blocks)")
    return ", ".join(parts)


def export_in_tensorflow(model_path: str, min_agreement: str = "") -> dict:
    """Runs `vit export` on a saved model in a TensorFlow-backend process.

    SavedModel and TFLite are TensorFlow graphs, so a run on another backend exports its
    trained weights from `model.keras` there (on the CPU, leaving the accelerators alone).

    Returns:
        The export's report (export.json), failed files included.

    Raises:
        RuntimeError: the export failed (other than a file failing its agreement check).
    """
    command = [sys.executable, "-m", "vit.cli", "export", "--model", model_path,
               *(["--min-agreement", min_agreement] if min_agreement else []),
               *(["--verbose"] if console.is_verbose() else [])]
    environment = {**os.environ, "KERAS_BACKEND": "tensorflow", "CUDA_VISIBLE_DEVICES": ""}
    log("export: SavedModel and TFLite are TensorFlow formats; exporting model.keras in a "
        "TensorFlow process")
    finished = subprocess.run(command, env=environment, check=False)
    if finished.returncode not in (0, EXIT_EXPORT_FAILED):
        raise RuntimeError(f"the export failed (exit status {finished.returncode}); rerun it "
                           f"with: vit export --model {model_path}")
    with open(os.path.join(os.path.dirname(model_path), REPORT_NAME)) as handle:
        return json.load(handle)


def train(preset: presets.Preset, options: presets.RunOptions | None = None, **fields) -> int:
    """Runs one training job end to end; returns 0 on success.

    Args:
        preset: the fully resolved preset.
        options: a `RunOptions`; or leave it out and give its fields as keywords.
    """
    if options is not None and fields:
        raise ValueError("give either a RunOptions or its fields as keywords, not both")
    return Run(preset, options or presets.RunOptions(**fields)).execute()


def validation_epochs(preset: presets.Preset, first_epoch: int,
                      last_epoch: int | None = None) -> list[int]:
    """1-based epochs after `first_epoch` (up to `last_epoch`) that validate: every
    `eval_every` and always the run's last."""
    every = preset.loop.eval_every
    last = preset.schedule.epochs if last_epoch is None else last_epoch
    chosen = [e for e in range(first_epoch + 1, last + 1) if e % every == 0]
    if last < preset.schedule.epochs:
        return chosen
    if preset.schedule.epochs not in chosen:
        chosen.append(preset.schedule.epochs)
    return chosen


def loss_row(metrics: dict) -> tuple[str, str]:
    """The table's loss: plain cross-entropy (as `vit evaluate` reports it) for classifiers,
    else the objective's own loss, named."""
    if metrics.get("val_cross_entropy") is not None:
        return ("cross-entropy (val/test)", f"{metrics['val_cross_entropy']:.4f}")
    key = next((key for key in metrics if key.startswith("val_") and key.endswith("loss")),
               None)
    name = "loss" if key is None else key[len("val_"):].replace("_", " ")
    return (f"{name} (val/test)", "n/a" if key is None else f"{metrics[key]:.4f}")


def summary_rows(metrics: dict, output: str, objective) -> list[tuple[str, str]]:
    """The result table printed at the end of a run."""
    def percent(key):
        value = metrics.get(key)
        return "n/a" if value is None else f"{100 * value:.2f}%"

    label = objective.metric_label
    rows = [(f"{label} (val/test)", percent(objective.metric_key))]
    if "val_top5" in metrics:
        rows.append(("top-5 (val/test)", percent("val_top5")))
    if "val_f1_micro" in metrics:
        rows.append(("F1 micro / macro (val/test)",
                     f"{percent('val_f1_micro')} / {percent('val_f1_macro')}"))
    rows.append(loss_row(metrics))
    rows += [(f"best val {objective.monitor_label}",
              f"{percent('best_val_accuracy')} (epoch {metrics['best_epoch']})"),
             ("train time", f"{metrics['train_seconds']:.1f} s"),
             ("wall time", f"{metrics['wall_seconds']:.1f} s"),
             ("train img/s", f"{metrics['train_images_per_second']:.0f}"),
             ("output", output)]
    return rows
