"""Callbacks of `vit train`: resumable atomic backups, best-model saving and a one-line log.

A backup is the model AND optimizer state (moments, step counter, so the learning rate too) in
`backup/ckpt-<step>.weights.h5` (with LoRA, plus `ckpt-<step>.lora.npz`: the adapters and
unmerged kernels, which Keras weights files do not keep) plus `backup/state.json` naming it with the epoch, the step
inside that epoch and the random-seed states of dropout / stochastic depth. `state.json` is
replaced atomically only after its weights file is complete, so a run killed at any instant leaves a usable backup; `--resume` continues from it at the same
epoch and step (the input pipeline skips the batches already seen).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time

import keras
import numpy as np
import tensorflow as tf

from vit_app import outputs
from vit_keras import atomic, lora
from vit_keras.checkpoints import io

STATE_FILE = outputs.BACKUP_STATE_FILE


def rng_variables(model: keras.Model) -> list:
    """The model's random-seed states (dropout, stochastic depth), which weights files omit."""
    weight_ids = {id(weight) for weight in model.weights}
    return [variable for variable in model.variables if id(variable) not in weight_ids]


def read_backup(directory: str) -> dict | None:
    """The backup state `{'epoch', 'step', 'global_step', 'weights'}` in `directory`, or None."""
    path = os.path.join(directory, STATE_FILE)
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as file:
        state = json.loads(file.read())
    if not tf.io.gfile.exists(os.path.join(directory, state["weights"])):
        raise ValueError(f"backup {path} names {state['weights']}, which is missing")
    return state


def restore_backup(model: keras.Model, directory: str) -> dict | None:
    """Loads the latest backup of `directory` into a compiled model (weights + optimizer).

    Returns:
        The backup state, or None when there is no backup.
    """
    state = read_backup(directory)
    if state is None:
        return None
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    with _local_copy(os.path.join(directory, state["weights"])) as path:
        model.load_weights(path)
    if state.get("lora"):
        restore_lora_backup(model, os.path.join(directory, state["lora"]))
    for variable, value in zip(rng_variables(model), state.get("rng", [])):
        variable.assign(np.asarray(value, dtype=variable.dtype))
    return state


@contextlib.contextmanager
def _local_copy(path: str):
    """`path` itself when local; a remote file (gs://...) copied into a temporary folder that
    is removed afterwards (Keras loads weights from local files only)."""
    if "://" not in path:
        yield path
        return
    with tempfile.TemporaryDirectory() as folder:
        local = os.path.join(folder, os.path.basename(path))
        tf.io.gfile.copy(path, local, overwrite=True)
        yield local


def restore_lora_backup(model: keras.Model, path: str) -> None:
    """Puts back the adapters and unmerged kernels a LoRA backup keeps beside its weights file
    (see `vit_keras.lora.lora_state`)."""
    if not tf.io.gfile.exists(path):
        raise ValueError(f"the backup names {path}, which is missing")
    with tf.io.gfile.GFile(path, "rb") as file, np.load(file, allow_pickle=False) as archive:
        lora.restore_lora_state(model, {name: archive[name] for name in archive.files})


def _write_lora_backup(model: keras.Model, path: str) -> bool:
    """Writes the LoRA state of `model` to `path` (atomically); False when it has no LoRA."""
    if not lora.lora_layers(model):
        return False
    io.write_npz(path, lora.lora_state(model))
    return True


class ResumableBackup(keras.callbacks.Callback):
    """Backs up the training state every `every_steps` steps and at each epoch end.

    Args:
        directory: backup folder (local or gs://).
        steps_per_epoch: steps of a full epoch.
        every_steps: steps between mid-epoch backups (0 = epoch ends only).
        write: False on processes that must not write (non-chief workers).
        step_offset: steps of the current epoch already done before this `fit` (resume).
        best_model: the run's `BestModel`, whose best score the backup records so that a
            resumed run keeps comparing against it.
    """

    def __init__(self, directory: str, steps_per_epoch: int, every_steps: int = 0,
                 write: bool = True, step_offset: int = 0, best_model=None):
        super().__init__()
        self.directory = directory
        self.steps_per_epoch = steps_per_epoch
        self.every_steps = every_steps
        self.write = write
        self.step_offset = step_offset
        self.best_model = best_model
        self._epoch = 0
        self._last_saved = None

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        self.save(epoch + 1, 0)
        self.step_offset = 0

    def on_train_batch_end(self, batch, logs=None):
        if self.wants_logs(batch):
            self.save(*self.position(batch))

    def wants_logs(self, batch: int) -> bool:
        """Whether a mid-epoch backup is due after this batch (the loss is then checked
        first, so that no backup holds a non-finite step's weights)."""
        if not self.every_steps:
            return False
        epoch, step = self.position(batch)
        previous = self._last_saved or 0
        return step < self.steps_per_epoch and \
            self.global_step(epoch, step) // self.every_steps > previous // self.every_steps

    def position(self, batch: int) -> tuple[int, int]:
        """Where the run is after a batch.

        Args:
            batch: the batch index Keras passes to `on_train_batch_end` in this `fit`.

        Returns:
            (epoch index, steps done in that epoch), counting the steps a resumed run did
            before this `fit`.
        """
        return self._epoch, self.step_offset + batch + 1

    def global_step(self, epoch: int, step: int) -> int:
        """Steps done since the start of the run.

        Args:
            epoch: epoch index.
            step: steps done inside it.

        Returns:
            epoch x steps per epoch + step.
        """
        return epoch * self.steps_per_epoch + step

    @property
    def saved_any(self) -> bool:
        """Whether this callback has taken a backup (written it, on a process that writes)."""
        return self._last_saved is not None

    def save_once(self, epoch: int, step: int) -> None:
        """`save`, unless the last backup was taken at this very step.

        Args:
            epoch: epochs done before this one (0-based index of the current epoch).
            step: steps done inside it.
        """
        if self._last_saved != self.global_step(epoch, step):
            self.save(epoch, step)

    def save(self, epoch: int, step: int) -> None:
        """Writes a backup taken after `step` steps of epoch `epoch`."""
        global_step = self.global_step(epoch, step)
        self._last_saved = global_step
        if not self.write:
            return
        tf.io.gfile.makedirs(self.directory)
        name = f"ckpt-{global_step}.weights.h5"
        atomic.save_weights(self.model, os.path.join(self.directory, name))
        lora_name = f"ckpt-{global_step}.lora.npz"
        has_lora = _write_lora_backup(self.model, os.path.join(self.directory, lora_name))
        old = read_backup(self.directory) if tf.io.gfile.exists(
            os.path.join(self.directory, STATE_FILE)) else None
        state = {"epoch": epoch, "step": step, "global_step": global_step, "weights": name,
                 "rng": [np.asarray(v).tolist() for v in rng_variables(self.model)]}
        if has_lora:
            state["lora"] = lora_name
        if self.best_model is not None and self.best_model.best is not None:
            state["best"] = {"value": self.best_model.best, "epoch": self.best_model.best_epoch}
        atomic.write_bytes(os.path.join(self.directory, STATE_FILE), json.dumps(state).encode())
        if old and old["weights"] != name:
            for stale in (old["weights"], old.get("lora")):
                if stale and tf.io.gfile.exists(os.path.join(self.directory, stale)):
                    tf.io.gfile.remove(os.path.join(self.directory, stale))


class StopOnNonFinite(keras.callbacks.Callback):
    """Stops the run at the first check that sees a NaN/Inf loss, before any callback after it
    saves the weights.

    It checks every `check_every` steps, at every step a callback before a backup asks for the
    logs (`StepLogCallbacks`) and at each epoch's end: the loss Keras reports is the epoch's
    running mean, which stays non-finite once a step's loss was, so the first check after that
    step sees it. Put it FIRST in the callback list: the weights after a non-finite step are
    poisoned, so no backup after it may be written; the previous backup stays the resumable
    state. Raises `NonFiniteLossError`, naming the step checked and the last one checked finite.

    Args:
        steps_per_epoch: steps of a full epoch.
        step_offset: steps of the current epoch already done before this `fit` (resume).
        backup_dir: where the last good backup lives (named in the message).
        check_every: steps between checks (1: every step).
    """

    def __init__(self, steps_per_epoch: int, step_offset: int = 0, backup_dir: str = "",
                 check_every: int = 1):
        super().__init__()
        if check_every < 1:
            raise ValueError(f"check_every must be >= 1 step, got {check_every}")
        self.steps_per_epoch = steps_per_epoch
        self.step_offset = step_offset
        self.backup_dir = backup_dir
        self.check_every = check_every
        self._epoch = 0
        self._last_finite = None  # global step of the last check that saw a finite loss
        self._previous = 0  # global step of the last batch end seen

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self._previous = self._global_step(self.step_offset)

    def on_epoch_end(self, epoch, logs=None):
        self._check(self.steps_per_epoch, logs)
        self.step_offset = 0

    def wants_logs(self, batch: int) -> bool:
        """Whether this batch's loss is to be checked: the first batch end at or past each
        multiple of `check_every` global steps (several steps a call arrive as one)."""
        step = self._global_step(self.step_offset + batch + 1)
        return step // self.check_every > self._previous // self.check_every

    def on_train_batch_end(self, batch, logs=None):
        self._check(self.step_offset + batch + 1, logs)
        self._previous = self._global_step(self.step_offset + batch + 1)

    def check_now(self, batch: int, logs=None) -> None:
        """Checks this batch's loss whatever the cadence, reading it from the model where
        `logs` were not read: before a backup no scheduled check covers (a signal's stop).

        Raises:
            NonFiniteLossError: the loss is not finite.
        """
        if logs is None or "loss" not in logs:
            logs = self.model.get_metrics_result()  # on JAX, `model` syncs the state first
        self._check(self.step_offset + batch + 1, logs)

    def _global_step(self, step: int) -> int:
        return self._epoch * self.steps_per_epoch + step

    def _check(self, step: int, logs) -> None:
        loss = (logs or {}).get("loss")
        if loss is None:
            return
        global_step = self._global_step(step)
        if np.isfinite(float(loss)):
            self._last_finite = global_step
            return
        last = read_backup(self.backup_dir) if self.backup_dir else None
        kept = (f"the last good backup (global step {last['global_step']}) is kept in "
                f"{self.backup_dir}" if last else "no backup was written yet")
        since = (f"the loss was finite at the check of global step {self._last_finite}"
                 if self._last_finite is not None else "no earlier check")
        raise NonFiniteLossError(
            f"non-finite loss ({float(loss)}) at epoch {self._epoch + 1}, step {step} (global "
            f"step {global_step}; {since}); training stopped and these weights were not "
            f"saved; {kept}. Lower the learning rate or fix the data, then run again with "
            "--resume (--set loop.check_every=1 finds the very step)")


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or infinite."""


class BestModel(keras.callbacks.Callback):
    """Saves the weights with the best value of `monitor` (a logged metric where higher is better,
    by default the validation accuracy) seen (atomically); of equal values, the later epoch's,
    which has trained longer."""

    def __init__(self, path: str, monitor: str = "val_accuracy", write: bool = True):
        super().__init__()
        self.path = path
        self.monitor = monitor
        self.write = write
        self.best = None
        self.best_epoch = None

    def restore(self, state: dict | None) -> None:
        """Continues from the best score a `ResumableBackup` state recorded, if any."""
        if state and state.get("best"):
            self.best, self.best_epoch = float(state["best"]["value"]), state["best"]["epoch"]

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None or (self.best is not None and value < self.best):
            return
        self.best, self.best_epoch = float(value), epoch + 1
        if self.write:
            atomic.save_weights(self.model, self.path)
            _write_lora_backup(self.model, self.lora_path(self.path))

    @staticmethod
    def lora_path(path: str) -> str:
        """Where the adapters of a LoRA model's best weights live, beside `path`."""
        return path[:-len(".weights.h5")] + ".lora.npz"

    @classmethod
    def load(cls, model: keras.Model, path: str) -> None:
        """Puts the best weights written at `path` (and a LoRA model's adapters) into `model`."""
        with _local_copy(path) as local:
            model.load_weights(local)
        if tf.io.gfile.exists(cls.lora_path(path)):
            restore_lora_backup(model, cls.lora_path(path))


class EpochLog(keras.callbacks.Callback):
    """Prints one line per epoch: the objective's metrics, learning rate and seconds.

    Args:
        epochs: the run's epochs.
        keys: the logged metrics to show, in order (`Objective.epoch_line_keys`); a key an
            epoch did not log is left out.
        print_fn: prints the line.
    """

    def __init__(self, epochs: int, keys: tuple[str, ...] = ("loss", "val_loss"),
                 print_fn=print):
        super().__init__()
        self.epochs = epochs
        self.keys = keys
        self.print_fn = print_fn
        self._start = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        parts = [f"epoch {epoch + 1:>3}/{self.epochs}"]
        for key in self.keys:
            if key in logs:
                parts.append(f"{key} {logs[key]:.4f}")
        learning_rate = self.model.optimizer.learning_rate
        parts.append(f"lr {float(keras.ops.convert_to_numpy(learning_rate)):.2e}")
        parts.append(f"{time.perf_counter() - self._start:.1f}s")
        self.print_fn("  ".join(parts), flush=True)


def _wants_logs(callback, batch: int) -> bool:
    """Whether `callback` needs this batch's logs on the host (see `StepLogCallbacks`)."""
    if hasattr(callback, "wants_logs"):
        return callback.wants_logs(batch)
    if isinstance(callback, keras.callbacks.TensorBoard):
        return callback.update_freq != "epoch"  # else it logs epochs alone
    # Keras' own test for a callback that overrides a hook (its async dispatch uses it too).
    base = keras.callbacks.Callback
    return any(getattr(type(callback), hook) is not getattr(base, hook)
               for hook in ("on_train_batch_end", "on_batch_end"))


def _on_host(logs: dict) -> dict:
    return {key: float(np.asarray(value)) if np.ndim(value) == 0 else np.asarray(value)
            for key, value in logs.items()}


class StepLogCallbacks(keras.callbacks.CallbackList):
    """Keras' `CallbackList` for `fit`, reading a step's logs (loss, metrics) on the host only
    at the steps a callback asks for them.

    Keras reads every step's logs on the host, which waits for that step to finish before
    it dispatches the next, unless every callback is marked async-safe; it then runs them on
    threads, in no fixed order, which a backup after a NaN check cannot have. Here the callbacks
    run in order on the calling thread every step, and get the step's logs where one of them
    wants them (`wants_logs(batch)`, or any callback that overrides `on_train_batch_end`
    without saying, such as a progress bar), else None: only those steps wait.

    Args:
        callbacks: the callbacks, in the order they run.
        model: the model being fitted.
        verbose: `fit`'s verbosity (1 or 2 adds Keras' progress bar, which wants every step).
        epochs: `fit`'s epochs.
        steps: steps per epoch of this `fit`.
    """

    def __init__(self, callbacks, model, verbose: int, epochs: int, steps: int):
        super().__init__(callbacks, add_history=True, add_progbar=verbose != 0, model=model,
                         verbose=verbose, epochs=epochs, steps=steps)
        self._async_train = False  # run in order here; Keras' threads would not

    def on_train_batch_end(self, batch, logs=None):
        wanted = logs is not None and any(_wants_logs(callback, batch)
                                          for callback in self.callbacks)
        logs = _on_host(logs) if wanted else None
        for callback in self.callbacks:
            callback.on_train_batch_end(batch, logs)
