"""A run's middle phases: build the objective's model with the recipe's optimizer, restore a
backup, and fit (or, for a linear probe, fit the head in closed form). `fit` and `fit_probe`
return a frozen `Fitted`, which evaluation and finishing read.
"""

from __future__ import annotations

import dataclasses
import os
import time

import keras
import tensorflow as tf

from training import callbacks, finetune, preemption, probe, recipe
from training.setup import Setup
from vit_app import console
from vit_app.data import evaluation
from vit_keras import atomic, keras_compat


@dataclasses.dataclass(frozen=True)
class Fitted:
    """What fitting produced.

    Attributes:
        model: the trained model (the objective's: a trainer for mpp and distill).
        best: the `callbacks.BestModel` tracker (best validation score and its epoch).
        train_seconds: time spent fitting.
        trained_images: images this process's fit went through (the whole run's).
        val_dataset: the validation batches (None without validation data).
        val_examples: examples in them.
        probe_l2: the linear probe's L2 penalty (None unless `finetune.mode` is 'probe').
        kept_epoch: the epoch whose weights the model holds (`loop.keep`; 1 for a probe).
    """

    model: keras.Model
    best: callbacks.BestModel
    train_seconds: float
    trained_images: int
    val_dataset: object
    val_examples: int | None
    probe_l2: float | None = None
    kept_epoch: int | None = None


@dataclasses.dataclass(frozen=True)
class FitCallbacks:
    """The callbacks of one fit: all of them in order, and the two a run reads afterwards."""

    chosen: list
    best: callbacks.BestModel
    backup: callbacks.ResumableBackup


def build(setup: Setup) -> keras.Model:
    """The objective's model, compiled with the recipe's optimizer in the strategy scope."""
    preset, plan, config = setup.preset, setup.plan, setup.config
    steps_per_execution = preset.loop.steps_per_execution
    if setup.placement.on_tpu and steps_per_execution == 1:
        steps_per_execution = min(64, plan.steps_per_epoch)
    with setup.placement.scope():
        model = setup.objective.build(config)
        finetune.prepare(setup.objective.network(model), preset)
        optimizer = recipe.make_optimizer(preset, plan.updates_per_epoch, model)
        model.compile(optimizer=optimizer, steps_per_execution=steps_per_execution,
                      **setup.objective.compile_args(config))
        model.optimizer.build(model.trainable_variables)
    strategy = setup.placement.strategy
    if strategy is not None and strategy is not tf.distribute.get_strategy():
        batch = plan.per_replica_batch
        sample = (setup.objective.sample_inputs(batch, config),
                  setup.objective.sample_targets(batch, config))
        keras_compat.build_without_peeking(model, sample)
        if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            keras_compat.vector_logs(model)
    console.say(finetune.describe(model, preset, setup.objective.probe_description))
    return model


def restore(setup: Setup, model: keras.Model) -> dict | None:
    """The backup state to continue from (`--resume`), or None for a fresh start (whose
    chief removes an older run's backup)."""
    backup_dir = setup.folders.backup_dir
    if setup.start != "resume":
        if setup.placement.chief and atomic.exists(backup_dir):
            atomic.remove(backup_dir)  # a fresh run does not inherit an old backup
        return None
    state = callbacks.restore_backup(model, backup_dir)
    if state is None:
        raise ValueError(f"--resume: {backup_dir} holds no {callbacks.STATE_FILE}")
    console.say(f"--resume: continuing at epoch {state['epoch'] + 1}, step {state['step']} "
                f"(global step {state['global_step']})")
    return state


def validation_stream(setup: Setup) -> tuple[object, int | None]:
    """The validation batches and how many examples they hold ((None, None) without data)."""
    val = setup.data.val
    if val is None:
        return None, None
    # A JAX batch splits evenly over the data-parallel devices, so up to replicas - 1
    # examples are left out of a last partial batch; several processes need full batches.
    distribution = setup.placement.distribution
    processes = distribution.num_processes if distribution is not None else 1
    whole = setup.placement.on_tpu or processes > 1
    count = val.num_examples
    usable = (count - count % setup.plan.replicas if count and setup.backend == "jax"
              else None)
    dataset = setup.objective.eval_batches(val, setup.config.image_hw, setup.plan.step_batch,
                                           setup.data.train.num_classes, drop_remainder=whole,
                                           max_examples=usable,
                                           preprocessing=setup.preprocessing)
    return dataset, usable or count


def make_callbacks(setup: Setup, state: dict | None, signals, verbose: int) -> FitCallbacks:
    """The fit's callbacks: the NaN stop, best weights, history, backups, TensorBoard, the
    quiet epoch log and the signal stop, in the order their effects need."""
    folders, steps = setup.folders, setup.plan.steps_per_epoch
    start_step = state["step"] if state else 0
    best = callbacks.BestModel(os.path.join(folders.write_dir, "best.weights.h5"),
                               monitor=setup.objective.monitor, write=folders.saves)
    best.restore(state)
    backup = callbacks.ResumableBackup(os.path.join(folders.write_dir, "backup"), steps,
                                       setup.preset.loop.backup_every, write=folders.saves,
                                       step_offset=start_step, best_model=best)
    finite = callbacks.StopOnNonFinite(
        steps, step_offset=start_step,
        backup_dir=folders.backup_dir if setup.placement.chief else "",
        check_every=setup.preset.loop.check_every)
    history = keras.callbacks.CSVLogger(os.path.join(folders.write_dir, "history.csv"),
                                        append=bool(state))
    # `finite` first: a NaN step is never backed up. The backup last: an epoch's history row
    # and best weights are on disk before its backup marks it done, so a kill in between
    # reruns the epoch on --resume instead of losing them.
    chosen = [finite, best, history, backup,
              keras.callbacks.TensorBoard(os.path.join(folders.write_dir, "logs"))]
    if verbose == 0 and setup.placement.chief:
        chosen.append(callbacks.EpochLog(setup.preset.schedule.epochs,
                                         setup.objective.epoch_line_keys))
    # Last: an epoch's end is logged and backed up before a signal stops the run there.
    chosen.append(preemption.StopOnSignal(signals, backup, setup.placement.any_process,
                                          folders.backup_dir, finite=finite))
    return FitCallbacks(chosen=chosen, best=best, backup=backup)


def fit(setup: Setup, model: keras.Model, state: dict | None, signals,
        fit_callbacks: FitCallbacks, verbose: int) -> Fitted:
    """Trains from `state` (or the start) to the last epoch: first the rest of an interrupted
    epoch, then whole epochs. A signal stops it at a step's end, with a backup."""
    preset, plan = setup.preset, setup.plan
    epochs = preset.schedule.epochs
    start_epoch, start_step = (state["epoch"], state["step"]) if state else (0, 0)
    val_dataset, val_examples = validation_stream(setup)
    common = dict(validation_data=val_dataset, verbose=verbose, shuffle=False)

    def step_callbacks(last_epoch: int, steps: int):
        return callbacks.StepLogCallbacks(fit_callbacks.chosen, model, verbose, last_epoch,
                                          steps)

    started, epoch = time.perf_counter(), start_epoch
    signals.phase = "training"
    with signals.deferred(setup.placement.any_process):
        if start_step and epoch < epochs:
            steps = plan.steps_per_epoch - start_step
            model.fit(train_stream(setup, epoch, start_step), epochs=epoch + 1,
                      initial_epoch=epoch, steps_per_epoch=steps,
                      validation_freq=validation_epochs(preset, epoch, epoch + 1),
                      callbacks=step_callbacks(epoch + 1, steps), **common)
            epoch += 1
        if epoch < epochs:
            model.fit(train_stream(setup, epoch, 0), epochs=epochs, initial_epoch=epoch,
                      steps_per_epoch=plan.steps_per_epoch,
                      validation_freq=validation_epochs(preset, epoch),
                      callbacks=step_callbacks(epochs, plan.steps_per_epoch), **common)
    train_seconds = time.perf_counter() - started
    done_before = start_epoch * plan.steps_per_epoch + start_step
    return Fitted(model=model, best=fit_callbacks.best, train_seconds=train_seconds,
                  trained_images=(epochs * plan.steps_per_epoch - done_before) * plan.step_batch,
                  val_dataset=val_dataset, val_examples=val_examples,
                  kept_epoch=keep_best(setup, model, fit_callbacks.best))


def keep_best(setup: Setup, model: keras.Model, best: callbacks.BestModel) -> int:
    """Gives `model` the best validated epoch's weights when `loop.keep` is 'best' (and the
    best is not the last epoch); returns the epoch whose weights it holds.

    A run with an EMA of the weights keeps the last: Keras validates the raw weights while
    training, so their scores do not rank the average it swaps in at the end.
    """
    preset, last = setup.preset, setup.preset.schedule.epochs
    if preset.loop.keep != "best" or preset.optim.ema_momentum or best.best_epoch is None or \
            best.best_epoch == last:
        return last
    # A TensorFlow worker does not write best weights: it reads the chief's, which the chief
    # wrote at an epoch every process has since finished.
    folder = setup.folders.write_dir if setup.folders.saves else setup.folders.output
    path = os.path.join(folder, "best.weights.h5")
    if not atomic.exists(path):
        raise FileNotFoundError(f"loop.keep=best: the best epoch's weights ({path}, epoch "
                                f"{best.best_epoch}) are missing; run with --set "
                                "loop.keep=last to keep the last epoch's")
    callbacks.BestModel.load(model, path)
    console.say(f"keep: the weights of epoch {best.best_epoch} of {last}, the best validated "
                f"({best.monitor} {best.best:.4f}); --set loop.keep=last keeps the last")
    return best.best_epoch


def fit_probe(setup: Setup, model: keras.Model, signals) -> Fitted:
    """The linear probe: features of the training images once, then each head fitted."""
    network = setup.objective.network(model)
    heads = [layer for layer in finetune.head_layers(network) if layer.name != "pre_logits"]
    features = evaluation.eval_dataset(setup.data.train, setup.config.image_hw,
                                       setup.plan.step_batch,
                                       num_classes=setup.data.train.num_classes,
                                       preprocessing=setup.preprocessing)
    started = time.perf_counter()
    signals.phase = "the linear probe"
    with console.stage(f"probe: features of {setup.num_examples} training images, then "
                       "a linear head"):
        fitted = probe.fit_probe(network, heads, features, setup.preset.finetune.probe_l2,
                                 multilabel=setup.objective.multilabel, seed=setup.preset.seed)
    val_dataset, val_examples = validation_stream(setup)
    return Fitted(model=model,
                  best=callbacks.BestModel("", monitor=setup.objective.monitor, write=False),
                  train_seconds=time.perf_counter() - started, trained_images=fitted["examples"],
                  val_dataset=val_dataset, val_examples=val_examples, probe_l2=fitted["l2"],
                  kept_epoch=1)


def train_stream(setup: Setup, first_epoch: int, first_step: int):
    """The augmented training batches from (`first_epoch`, `first_step`) on."""
    plan = setup.plan
    return setup.objective.train_batches(
        setup.data.train, setup.config.image_hw, plan.step_batch, start_epoch=first_epoch,
        start_step=first_step, steps_per_epoch=plan.steps_per_epoch,
        preprocessing=setup.preprocessing)


def validation_epochs(preset, first_epoch: int, last_epoch: int | None = None) -> list[int]:
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
