"""The files of a trained model: the `.keras` model itself, and what `vit train` and `vit export`
write beside it (labels.txt; the activation, the preprocessing and the task in config.json or
export.json).

`vit_app.inference.export.command`, still a command module that `vit.cli` imports to build its
parser, imports `ACTIVATIONS` from here before the Keras backend is chosen: so Keras and TensorFlow
(through `vit_app.outputs`) are imported inside the two functions that use them, until export's
flags move to `vit.commands` too.
"""

from __future__ import annotations

import json
import os

from vit_keras.checkpoints import keras_hub_config
from vit_keras.config import ViTConfig, split_preprocessing
from vit_keras.preprocessing import OFFICIAL, Preprocessing

# What gives a model's scores (`probabilities`) from its logits: one class per image, classes
# scored on their own (multi-label), or the outputs themselves (a task whose outputs are no
# class scores, such as a count).
ACTIVATIONS = ("softmax", "sigmoid", "linear")
# Files next to a model that record its activation: the run's, then the export's.
ACTIVATION_FILES = ("config.json", "export.json")
# How release 0.2 recorded a task beside its files, before they said `task`: export.json's
# `agreement` (each task's `InferenceTask.agreement`, `task_agreeing_on`) and config.json's
# objective.
RELEASE_0_2_OBJECTIVE_TASKS = {"classify": "classify", "distill": "classify",
                               "multilabel": "classify", "segment": "segment"}


MODEL_EXTENSIONS = (".keras", ".tflite", ".onnx")
WHAT_MODELS_ARE = ("a .keras file, a keras-hub preset folder, a SavedModel directory, a "
                   ".tflite or an .onnx file")


def check_model_path(path: str, extensions: tuple[str, ...] = MODEL_EXTENSIONS) -> None:
    """Checks, without a framework, that `path` is a model file `vit` reads.

    Args:
        path: the --model (or --tflite / --onnx) argument.
        extensions: the file kinds accepted; with all of `MODEL_EXTENSIONS`, a SavedModel
            directory too.

    Raises:
        ValueError: it does not exist, is a directory that is not a SavedModel the command
            reads, or has another extension; the message says what was expected.
    """
    any_format = tuple(extensions) == MODEL_EXTENSIONS
    expected = WHAT_MODELS_ARE if any_format else f"a {' or '.join(extensions)} file"
    if path.startswith("gs://"):
        return  # read through TensorFlow's file system when it is loaded
    if not os.path.exists(path):
        raise ValueError(f"model {path!r} does not exist: expected {expected}")
    if os.path.isdir(path):
        saved_model = any_format and os.path.exists(os.path.join(path, "saved_model.pb"))
        if not (saved_model or ".keras" in extensions and keras_hub_config.is_preset(path)):
            raise ValueError(f"{path!r} is a directory: expected {expected}, or a keras-hub "
                             "preset folder (config.json, model.weights.h5)")
        return
    extension = os.path.splitext(path)[1].lower()
    if extension not in extensions:
        raise ValueError(f"model {path!r}: expected {expected}, got a "
                         f"{extension or 'file without extension'}")


def load_model(path: str):
    """A `.keras` model written by `vit train` (safe_mode=True), or a keras-hub preset folder
    (`vit_keras.from_preset`: with its classifier head when it has task weights).

    Raises:
        ValueError: the file does not exist.
    """
    import keras

    import vit_keras  # registers the ViT layers

    if not os.path.exists(path):
        raise ValueError(f"model file {path!r} does not exist")
    if keras_hub_config.is_preset(path):
        return vit_keras.from_preset(path)
    return keras.saving.load_model(path, compile=False, safe_mode=True)


def labels_beside(model_path: str, labels_path: str | None) -> list[str] | None:
    """Class names from `labels_path`, else from labels.txt next to the model, else None."""
    from vit_app.outputs import read_labels

    path = labels_path or os.path.join(os.path.dirname(os.path.abspath(model_path)),
                                       "labels.txt")
    return read_labels(path) if os.path.exists(path) else None


def _recorded_beside(model_path: str, file_name: str, key: str):
    """(path, the value of `key`) in the JSON file `file_name` next to a model; the value is
    None when the file or the key is missing."""
    path = os.path.join(os.path.dirname(os.path.abspath(model_path)), file_name)
    if not os.path.exists(path):
        return path, None
    with open(path) as handle:
        return path, json.load(handle).get(key)


def preprocessing_beside(model_path: str):
    """The preprocessing recorded next to a TFLite/ONNX file or SavedModel (`export.json`),
    else the official one (files exported before it was recorded took [-1, 1])."""
    path, recorded = _recorded_beside(model_path, "export.json", "preprocessing")
    try:
        return OFFICIAL if recorded is None else Preprocessing.from_dict(recorded)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def activation_beside(model_path: str) -> str | None:
    """The activation recorded next to a model file or SavedModel directory: the `activation`
    of the run's config.json, else of the export's export.json; None when neither has one."""
    for name in ACTIVATION_FILES:
        path, activation = _recorded_beside(model_path, name, "activation")
        if activation is not None:
            if activation not in ACTIVATIONS:
                raise ValueError(f"{path}: activation must be one of {ACTIVATIONS}, got "
                                 f"{activation!r}")
            return activation
    return None


def task_beside(model_path: str) -> tuple[str, str]:
    """The task recorded next to an exported file and where it was read: export.json's or
    config.json's `task`; release 0.2 recorded it as export.json's `agreement` (the task's
    `InferenceTask.agreement`) and config.json's `preset.objective.kind`. A file with no record beside it
    counts as a classifier.

    Returns:
        (the task's name, the file that records it, or 'nothing beside it').
    """
    for name in ("export.json", "config.json"):
        path, task = _recorded_beside(model_path, name, "task")
        if task is not None:
            return task, path
    path, agreement = _recorded_beside(model_path, "export.json", "agreement")
    if task := task_agreeing_on(agreement):
        return task, path
    path, preset = _recorded_beside(model_path, "config.json", "preset")
    kind = (preset or {}).get("objective", {}).get("kind")
    if kind in RELEASE_0_2_OBJECTIVE_TASKS:
        return RELEASE_0_2_OBJECTIVE_TASKS[kind], path
    return "classify", "nothing beside it"


def task_agreeing_on(agreement: str | None) -> str | None:
    """The registered task whose exported files are compared with Keras on `agreement`
    (export.json's, e.g. a segmenter's 'pixels'), or None."""
    if agreement is None:
        return None
    from vit_app.inference import inference_task  # each task's part, loaded when asked
    from vit_keras import tasks

    return next((name for name in tasks.TASKS
                 if inference_task.get(name).agreement == agreement), None)


def patch_size_beside(model_path: str) -> int | None:
    """Pixels per patch side of the model `vit train` recorded in the config.json next to an
    exported file, or None when there is none."""
    _, model = _recorded_beside(model_path, "config.json", "model")
    try:
        return ViTConfig.from_dict(split_preprocessing(model)[0]).patch_step \
            if isinstance(model, dict) else None
    except ValueError:  # a config of another version: no warning rather than a failure
        return None
