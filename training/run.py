"""The one training run behind `vit train`, for every objective, in explicit phases.

1. `training.setup.set_up` -> `Setup` (frozen): placement (first: it may reset the runtime),
   precision, seed, data, the small-data rule, batch plan, model config, folders.
2. `training.fitting.build` and `restore`: the objective's model compiled with the recipe's
   optimizer in the strategy scope; the backup state of `--resume`.
3. `training.fitting.fit` (or `fit_probe`) -> `Fitted` (frozen): the NaN stop, best weights,
   history, backups and TensorBoard around `model.fit`.
4. `training.finish.evaluate` and `finish` take both: metrics.json, the run's files, export,
   inspection and the result table.

The objective (`training.objective`, each task's own) supplies the model, its loss, its outputs
and whatever else differs between objectives; between phases every process may stop together on a
signal.
"""

from __future__ import annotations

import os
import re
import shutil

import keras

from training import callbacks, fitting, preemption, presets, report
from training.objective import get_objective
from training.finish import evaluate, finish
from training.setup import set_up
from vit_app import console, outputs
from vit_app.data.specs import built_in_sets, parse_spec
from vit_keras import atomic
from vit_keras.fast_paths import training_forms


class Run:
    """One training job end to end (see the module docstring).

    Args:
        preset: the fully resolved preset.
        options: where and how it runs (`RunOptions`); the output folder defaults to
            `default_output(preset)`.
    """

    def __init__(self, preset: presets.Preset, options: presets.RunOptions):
        self.preset, self.options = preset, options
        get_objective(preset)  # fails fast on a bad objective
        self.output = options.output or default_output(preset)

    def execute(self) -> int:
        """Runs the phases; returns 0, or `EXIT_EXPORT_FAILED` when the training succeeded
        but an exported file failed its agreement check.

        Raises:
            preemption.Preempted: a SIGTERM or Ctrl+C stopped the run (after a backup of the
                step it reached, when it was training).
        """
        forms = step_forms(self.preset.loop, keras.backend.backend())
        # Every process checks (so none goes on to wait for a chief that refused); the chief
        # alone clears, once all have joined the cluster.
        start = outputs.start_mode(self.output, self.options.resume, self.options.overwrite)
        if start == "finished":
            console.say(f"--resume auto: {self.output} holds a finished run (metrics.json); "
                        "nothing to do")
            return 0
        with preemption.SignalWatch() as signals, training_forms.using(**forms):
            setup, made = None, []  # `made`: the fit's callbacks, once made (their backup)
            try:
                setup = set_up(self.preset, self.options, self.output, start, signals)
                console.say("\n".join(report.header_lines(setup, forms)))
                if self.options.verbose:
                    console.say("\n".join(["preset resolved from its module, then:",
                                           *setup.preset.resolution()]))
                return self._train_and_finish(setup, signals, made)
            except preemption.Preempted as stop:
                stop.resumable = has_backup(start, self.output,
                                            any(each.backup.saved_any for each in made))
                raise
            finally:
                if setup is not None and setup.folders.scratch:
                    shutil.rmtree(setup.folders.write_dir, ignore_errors=True)

    def _train_and_finish(self, setup, signals, made: list) -> int:
        """Phases 2-4, with a common stop between them (see the module docstring); appends
        the fit's callbacks to `made`."""
        def may_stop():
            signals.checkpoint(setup.placement.any_process)

        may_stop()
        model = fitting.build(setup)
        state = fitting.restore(setup, model)
        may_stop()
        if setup.preset.finetune.mode == "probe" and setup.objective.closed_form_probe:
            fitted = fitting.fit_probe(setup, model, signals)
        else:
            made.append(fitting.make_callbacks(setup, state, signals, self.options.verbose))
            fitted = fitting.fit(setup, model, state, signals, made[0], self.options.verbose)
        signals.phase = "the final evaluation and export"
        metrics = evaluate(setup, fitted)
        may_stop()
        status = finish(setup, fitted, metrics, self.options)
        signals.phase = None  # done: a late signal changes nothing
        return status


def has_backup(start: str, output: str, wrote_one: bool) -> bool:
    """Whether the output folder holds this run's backup: a resumed one's, or one it wrote
    (not the backup of an earlier run that --overwrite was about to remove)."""
    return (start == "resume" or wrote_one) and atomic.exists(
        os.path.join(output, "backup", callbacks.STATE_FILE))


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
    forms = {name: getattr(loop, name)
             for name in ("fused_qkv", "attention_kernel", "lean_activations")}
    chosen = [f"loop.{name}" for name, value in forms.items() if value]
    if chosen and backend != "jax":
        raise ValueError(f"{' and '.join(chosen)} shape the JAX training step: train with "
                         f"--backend jax (this run uses {backend})")
    return forms


def train(preset: presets.Preset, options: presets.RunOptions | None = None, **fields) -> int:
    """Runs one training job end to end; returns 0 on success.

    Args:
        preset: the fully resolved preset.
        options: a `RunOptions`; or leave it out and give its fields as keywords.
    """
    if options is not None and fields:
        raise ValueError("give either a RunOptions or its fields as keywords, not both")
    return Run(preset, options or presets.RunOptions(**fields)).execute()


OUTPUT_ROOT = "saved_models"  # below the working directory


def default_output(preset: presets.Preset) -> str:
    """Where a run without --output writes: saved_models/<preset name> on the preset's built-in
    data, else saved_models/<the data's name>_<objective> (`folder:~/pets` ->
    saved_models/pets_classify), so that a model of one's own photos is not filed under the
    digits' preset."""
    kind, argument = parse_spec(preset.data.train)
    if kind in built_in_sets():
        return os.path.join(OUTPUT_ROOT, preset.name)
    return os.path.join(OUTPUT_ROOT, f"{data_name(kind, argument)}_{preset.objective.kind}")


SPLIT_NAMES = ("train", "training", "trainval", "val", "valid", "validation", "test", "images")


def data_name(kind: str, argument: str) -> str:
    """A short name of a user's data spec for a folder name: the folder's name (folder:), the
    file's stem (csv:), the data set's name (tfds:), the files' folder (tfrecord:); a split's
    name (~/boxes/train, ~/cells/train.csv) gives way to its parent's (boxes, cells)."""
    path = os.path.abspath(os.path.expanduser(argument))  # folder:. is the folder it names
    if kind == "tfds":
        return _folder_safe(argument.partition(":")[0])
    if kind == "tfrecord":
        path = os.path.dirname(path)
    elif kind == "csv":
        path = os.path.splitext(path)[0]
    if os.path.basename(path).lower() in SPLIT_NAMES:
        path = os.path.dirname(path)
    return _folder_safe(os.path.basename(path))


def _folder_safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "data"
