"""Data specs read and checked without a framework: a mistyped spec, a missing folder or a
folder of one class is answered before TensorFlow is imported (`vit train`, `vit evaluate`
check their specs first). The sources themselves are opened by `vit_app.data.sources`.
"""

from __future__ import annotations

import glob
import os

from vit_app.paths import IMAGE_EXTENSIONS, is_image_name

KINDS = ("digits", "digit-scenes", "folder", "csv", "tfds", "tfrecord")
BUILT_IN = ("digits", "digit-scenes")  # offline sets without an argument
IMAGES_DIR, MASKS_DIR = "images", "masks"  # a segmentation folder's two parts


def parse_spec(spec: str) -> tuple[str, str]:
    """Splits a data spec into (kind, argument); raises ValueError on an unknown kind."""
    kind, _, argument = spec.partition(":")
    if kind in BUILT_IN and not argument:
        return kind, ""
    if kind in KINDS and kind not in BUILT_IN and argument:
        return kind, argument
    raise ValueError(f"data spec {spec!r} not understood: expected 'digits', 'digit-scenes', "
                     "'folder:PATH', 'csv:PATH', 'tfds:NAME[:SPLIT]' or 'tfrecord:GLOB'")


def is_segmentation_folder(path: str) -> bool:
    """Whether `path` holds `images/` and `masks/` folders (segmentation data)."""
    return all(os.path.isdir(os.path.join(path, name)) for name in (IMAGES_DIR, MASKS_DIR))


def is_segmentation_spec(spec: str) -> bool:
    """Whether `spec` names data with masks: 'digit-scenes', or a folder of `images/` and
    `masks/`."""
    kind, argument = parse_spec(spec)
    return kind == "digit-scenes" or (kind == "folder" and is_segmentation_folder(
        os.path.expanduser(argument)))


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


def check_spec(spec: str, min_classes: int = 1, segmentation: bool = False) -> None:
    """Checks what can be checked of `spec` without reading its images: the spec's form, that
    a local folder, CSV file or TFRecord pattern exists, and a folder's number of classes
    (for segmentation: that it has `images/` and `masks/`).

    Args:
        spec: a data spec (`vit_app.data.sources`, `vit_app.data.segmentation`).
        min_classes: classes a `folder:` source must have (2 to train a classifier).
        segmentation: the spec must hold masks (`digit-scenes` or a segmentation folder).

    Raises:
        ValueError: naming what was expected and what was found.
    """
    kind, argument = parse_spec(spec)
    path = os.path.expanduser(argument)
    if segmentation:
        _check_segmentation_spec(kind, argument, path)
        return
    if kind == "digit-scenes":
        raise ValueError("digit-scenes is segmentation data (masks, not class labels): train "
                         "it with --task segment")
    if "://" in argument or kind in ("digits", "tfds"):
        return  # remote or downloaded data: checked when it is opened
    if kind == "folder":
        names = class_folders(path)
        if len(names) < min_classes:
            raise ValueError(f"folder data {argument!r} has {len(names)} class sub-folder "
                             f"({', '.join(names)}): a classifier needs at least {min_classes} "
                             f"classes, one sub-folder of images each ({argument}/<class "
                             "name>/<image files>)")
    elif kind == "csv" and not os.path.isfile(path):
        raise ValueError(f"csv data {argument!r} does not exist: expected a CSV file with the "
                         "columns file,labels")
    elif kind == "tfrecord" and not glob.glob(path):
        raise ValueError(f"tfrecord:{argument} matches no files")


def _check_segmentation_spec(kind: str, argument: str, path: str) -> None:
    if kind == "digit-scenes":
        return
    if kind != "folder":
        raise ValueError(f"segmentation data {kind}:{argument}: expected 'digit-scenes' or "
                         f"'folder:DIR' with DIR/{IMAGES_DIR}/ and DIR/{MASKS_DIR}/")
    if not is_segmentation_folder(path):
        raise ValueError(f"segmentation data {argument!r}: expected the folders "
                         f"{argument}/{IMAGES_DIR}/ and {argument}/{MASKS_DIR}/ holding images "
                         "and masks of the same file stems")
