"""Data specs read and checked without a framework: a mistyped spec, a missing folder or a
folder of one class is answered before TensorFlow is imported (`vit train`, `vit evaluate`
check their specs first).

The spec grammar is shared (`folder:PATH`, `csv:PATH`, `tfds:NAME[:SPLIT]`, `tfrecord:GLOB`, a
built-in set's name); what a spec's data is belongs to a task: each registered task's
`TaskData` (`vit_app.tasks.<task>.data`) names its built-in set, recognises its folders and checks
its specs, and this module asks them. Each task's readers open the sources themselves (in
`vit_app.tasks.<task>.data`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable

from vit_app.paths import IMAGE_EXTENSIONS, is_image_name
from vit_keras import tasks

KINDS = ("folder", "csv", "tfds", "tfrecord")  # the spec kinds that take an argument


@dataclasses.dataclass(frozen=True)
class TaskData:
    """A task's data as read before any framework loads: its built-in set, the folders it
    recognises, and the checks that answer a wrong spec at once. A task's module under
    `vit_app.tasks.<task>.data` defines one as `DATA`; its `TaskParts.specs` line names that
    module.

    Attributes:
        noun: the task's data in messages ('segmentation': "segmentation data 'x': ...").
        labels: what its data labels images with ('classes', 'masks', 'boxes').
        built_in: its offline set, a spec without an argument ('digits'); its 'val' subset is
            the set's own held-out part.
        check: `check(kind, argument, path, min_classes)`: raises ValueError naming what was
            expected and what was found, for a spec of the form this task reads.
        recognises: `recognises(path)`: whether a folder is laid out as this task's data; None
            for the task whose folders are the fallback (class folders).
        expand_inputs: `vit predict`'s arguments (files, folders, glob patterns) -> the paths
            of the inputs a model of this task takes, raising ValueError for an argument that
            names none; None: image files (`vit_app.paths.expand_images`).
    """

    noun: str
    labels: str
    built_in: str
    check: Callable[[str, str, str, int], None]
    recognises: Callable[[str], bool] | None = None
    expand_inputs: Callable[[list[str]], list[str]] | None = None


def task_data(task: str) -> TaskData:
    """The `TaskData` of the registered task `task` (`vit_keras.tasks.TASKS`)."""
    return tasks.load_part(f"{tasks.parts(task).specs}:DATA")


def built_in_sets() -> dict[str, str]:
    """Every registered task's built-in set: spec -> the first task registered with it (a task
    may read another's data: its `TaskParts.specs` names the same module)."""
    sets: dict[str, str] = {}
    for name in tasks.TASKS:
        sets.setdefault(task_data(name).built_in, name)
    return sets


def parse_spec(spec: str) -> tuple[str, str]:
    """Splits a data spec into (kind, argument); raises ValueError on an unknown kind."""
    kind, _, argument = spec.partition(":")
    built_in = built_in_sets()
    if kind in built_in and not argument:
        return kind, ""
    if kind in KINDS and argument:
        return kind, argument
    named = ", ".join(repr(name) for name in built_in)
    raise ValueError(f"data spec {spec!r} not understood: expected {named}, 'folder:PATH', "
                     "'csv:PATH', 'tfds:NAME[:SPLIT]' or 'tfrecord:GLOB'")


def _claimed_by(spec: str) -> str | None:
    """The task that claims `spec` as its data: a built-in set's own, or the first registered
    task that recognises a folder's layout; None when no task does."""
    kind, argument = parse_spec(spec)
    built_in = built_in_sets()
    if kind in built_in:
        return built_in[kind]
    if kind == "folder":
        path = os.path.expanduser(argument)
        for name in tasks.TASKS:
            recognises = task_data(name).recognises
            if recognises is not None and recognises(path):
                return name
    return None


def spec_task(spec: str) -> str:
    """The task whose data `spec` names: a built-in set's own, a folder's by its layout, else
    'classify' (class folders, CSV lists, tfds and TFRecord data label images by class)."""
    return _claimed_by(spec) or tasks.CLASSIFY


def refuse_other_tasks_data(spec: str, task: str, model: str = "") -> None:
    """Raises ValueError when another task claims `spec` (its built-in set, a folder laid out
    as its data), saying whose data it is and what to do.

    Args:
        spec: a data spec.
        task: the task the data is wanted for.
        model: the model the data is wanted for ('' = a training run), named in the message.
    """
    owner = _claimed_by(spec)
    if owner is None or task_data(owner) is task_data(task):
        return
    data, wanted = task_data(owner), task_data(task)
    todo = (f"{model} is a {wanted.noun} model: evaluate it on {tasks.parts(task).data}"
            if model else f"train it with --task {owner}")
    raise ValueError(f"{spec} is {data.noun} data (images with {data.labels}, not "
                     f"{wanted.labels}): {todo}")


def class_folders(path: str) -> list[str]:
    """The sorted class sub-folder names of `folder:PATH` data.

    Raises:
        ValueError: `path` is not a directory, or has no sub-folder.
    """
    if not os.path.isdir(path):
        raise ValueError(f"folder data {path!r} is not a directory: expected one sub-folder "
                         "of images per class")
    names = sorted(entry.name for entry in os.scandir(path)
                   if entry.is_dir() and not entry.name.startswith("."))
    if not names:
        raise ValueError(f"folder data {path!r} has no class sub-folders: expected "
                         f"{path}/<class name>/<image files>")
    return names


def list_folder(path: str) -> tuple[list[str], list[str], list[int]]:
    """Lists `path/<class>/<image>`; returns (class names, file paths, labels), all sorted."""
    class_names = class_folders(path)
    files, labels = [], []
    for label, class_name in enumerate(class_names):
        class_dir = os.path.join(path, class_name)
        for name in sorted(os.listdir(class_dir)):
            if is_image_name(name):
                files.append(os.path.join(class_dir, name))
                labels.append(label)
    if not files:
        raise ValueError(f"folder data {path!r} holds no {'/'.join(IMAGE_EXTENSIONS)} files")
    return class_names, files, labels


def check_spec(spec: str, min_classes: int = 1, task: str = tasks.CLASSIFY) -> None:
    """Checks what can be checked of `spec` for `task` without reading its images: the spec's
    form, that it is the task's kind of data, and what the task's own check reads of it (a
    folder's classes, a segmentation folder's two parts, a detection folder's box files).

    Args:
        spec: a data spec (each task's data module).
        min_classes: classes a `folder:` source must have (2 to train a classifier).
        task: the registered task the data is for ('classify').

    Raises:
        ValueError: naming what was expected and what was found.
    """
    kind, argument = parse_spec(spec)
    refuse_other_tasks_data(spec, task)
    task_data(task).check(kind, argument, os.path.expanduser(argument), min_classes)
