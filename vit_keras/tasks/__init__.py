"""What a model is for (its task): the one registry of tasks, each model's record of its task,
and each task's library contract.

Every model of this library records its task: `VisionTransformer.vit_task` is 'classify',
`ViTSegmenter.vit_task` is 'segment', `ViTDetector.vit_task` is 'detect', and a view or copy
made for export carries the task of the model it was made from
(`vit_keras.core.model.keep_records`). Export, evaluation, prediction and serving read the
record (`task_of`); nothing infers a task from the shape of a model's outputs. A Keras model of
another library records nothing and counts as a classifier.

A task is a folder in each layer: `vit_keras/tasks/<task>/` (its model, layers and loss),
`training/tasks/<task>/` (its objective, pipeline and preset) and `vit_app/tasks/<task>/` (its
data, and what `vit predict`, `evaluate`, `serve` and `export` do with its models). It is
registered by one line of `TASKS`, which names its part in each layer by module: its head and
export contract (`TaskContract`), its inference part (`vit_app.tasks.<task>.inference`), its
training objective, its data (`vit_app.tasks.<task>.data`: its built-in set, the folders it
recognises, the checks `vit train` makes before any framework loads) and its preset. Each layer
imports only its own part, when a model of that task is used; this module names them and
imports none of them.

This module imports no framework.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Callable

CLASSIFY = "classify"


@dataclasses.dataclass(frozen=True)
class TaskParts:
    """Where a task's parts live, and what `vit train` knows of it before any framework.

    Attributes:
        head: the library module whose `TASK` is its `TaskContract` (it holds the task's
            model, or imports it).
        inference: the `vit_app.inference` module whose `TASK` is its `InferenceTask`.
        objective: 'module:Class' of its training objective (`training.objective.Objective`).
        specs: the `vit_app.tasks.<task>.data` module whose `DATA` describes its data before any
            framework: its built-in set, the folders it recognises, its checks.
        fewest_classes: the fewest classes its training data may have.
        preset: the name of the preset `vit train --task NAME` starts from.
        preset_module: the module (no framework) whose `PRESET` it is; ''
            (default): `training.tasks.<task>.preset`.
        summary: what its model learns, in a few words (`vit train --help`).
        data: the data specs it trains and is evaluated on, its built-in set first
            (`vit train --help`, `vit evaluate --help`).
        exports: the names of `head` that `vit_keras` exports (its model class), imported
            on first use.
        section: 'module:Class' (no framework) of its own preset section (`vit train --set
            NAME.FIELD=...`, `training.presets.sections.Section`), or ''.
        options: the module (no framework) whose `add_predict_arguments(group)`,
            `check_predict(args)` and `PREDICT_HELP` give its own `vit predict` options, or ''.
    """

    head: str
    inference: str
    objective: str
    specs: str = "vit_app.tasks.classify.data"
    fewest_classes: int = 2
    preset: str = "digits_tiny"
    summary: str = "a class per image"
    data: str = "digits | folder:DIR of class folders | csv:PATH | tfds:NAME[:SPLIT] | " \
        "tfrecord:GLOB"
    exports: tuple[str, ...] = ()
    section: str = ""
    options: str = ""
    preset_module: str = ""


TASKS = {
    "classify": TaskParts("vit_keras.core.model", "vit_app.tasks.classify.inference",
                          "training.tasks.classify.objective:Classification"),
    "segment": TaskParts("vit_keras.tasks.segment.model", "vit_app.tasks.segment.inference",
                         "training.tasks.segment.objective:Segmentation",
                         specs="vit_app.tasks.segment.data", fewest_classes=1,
                         preset="digits_segment", summary="a class per pixel",
                         data="digit-scenes | folder:DIR with DIR/images/ and DIR/masks/",
                         exports=("ViTSegmenter",), options="vit_app.tasks.segment.options",
                         section="training.tasks.segment.section:Segment"),
    "detect": TaskParts("vit_keras.tasks.detect.model", "vit_app.tasks.detect.inference",
                        "training.tasks.detect.objective:Detection",
                        specs="vit_app.tasks.detect.data",
                        fewest_classes=1, preset="digits_detect",
                        summary="boxes and their classes",
                        data="digit-boxes | folder:DIR of COCO JSON, YOLO or Pascal VOC "
                             "boxes", exports=("ViTDetector",),
                        options="vit_app.tasks.detect.options",
                        section="training.tasks.detect.section:Detect"),
    "clip": TaskParts("vit_keras.tasks.clip.model", "vit_app.tasks.clip.inference",
                      "training.tasks.clip.objective:ClipClassification",
                      specs="vit_app.tasks.clip.data", preset="sprites_clip",
                      summary="a class per clip or volume",
                      data="moving-sprites | folder:DIR of class folders of videos, frame "
                           "folders or volumes", exports=("SpaceTimeViT",),
                      section="training.tasks.clip.section:Clip"),
}


def data_by_task() -> str:
    """Each registered task's data specs, one clause a task (the CLI's help texts)."""
    return "; ".join(f"{name}: {parts.data}" for name, parts in TASKS.items())


@dataclasses.dataclass(frozen=True)
class TaskContract:
    """What the library's export does differently for a task.

    Attributes:
        name: the task's name, as models record it.
        whole_image: encoded images are resized whole for it, never centre-cropped (a
            segmenter's mask must cover all of the image); False: the weights' crop rule.
        derived_outputs: logits -> {name: tensor} outputs a SavedModel gives beside
            `probabilities` and `logits` (a segmenter's `class_ids`), or None; `keras.ops`,
            traced by TensorFlow at export.
        derived_endpoint: the name of a SavedModel signature that gives only the derived
            outputs (the small answer over REST), or None.
        class_per_image: its logits give one class per image ([batch, classes]), which the
            attention analysis names beside each image.
        native_scores: how a model of the task fed images at their own size
            (`preprocessing.native`) runs one: (a function from float32 pixels [batch, h, w,
            3] to logits, one float32 [height, width, 3] image, the (height, width) a file
            takes or None for any size, the patch size) -> the image's logits at its size; or
            None, where the task's models are never fed so.
    """

    name: str
    class_per_image: bool = True
    whole_image: bool = False
    derived_outputs: Callable | None = None
    derived_endpoint: str | None = None
    native_scores: Callable | None = None


def task_of(model) -> str:
    """The task `model` records ('classify' for a Keras model that records none)."""
    return getattr(model, "vit_task", None) or CLASSIFY


def parts(name: str) -> TaskParts:
    """The registered `TaskParts` of the task `name`.

    Raises:
        ValueError: no task of that name is registered.
    """
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; expected one of {sorted(TASKS)} (a line of "
                         "vit_keras.tasks.TASKS registers a task)")
    return TASKS[name]


def load_part(reference: str):
    """The object a 'module' (its `TASK`) or 'module:Name' reference of `TaskParts` names."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name or "TASK")


def contract(name: str) -> TaskContract:
    """The `TaskContract` of the task `name` (raises ValueError for an unknown one)."""
    return load_part(parts(name).head)
