"""Data specs read and checked without a framework: a mistyped spec, a missing folder or a
folder of one class is answered before TensorFlow is imported (`vit train`, `vit evaluate`
check their specs first). The sources themselves are opened by `vit_app.data.sources`.
"""

from __future__ import annotations

import glob
import os

from vit_app.paths import IMAGE_EXTENSIONS, is_image_name

KINDS = ("digits", "digit-scenes", "digit-boxes", "folder", "csv", "tfds", "tfrecord")
BUILT_IN = ("digits", "digit-scenes", "digit-boxes")  # offline sets without an argument
IMAGES_DIR, MASKS_DIR = "images", "masks"  # a segmentation folder's two parts
LABEL_KINDS = ("classes", "masks", "boxes")
BUILT_IN_LABELS = {"digits": "classes", "digit-scenes": "masks", "digit-boxes": "boxes"}


def parse_spec(spec: str) -> tuple[str, str]:
    """Splits a data spec into (kind, argument); raises ValueError on an unknown kind."""
    kind, _, argument = spec.partition(":")
    if kind in BUILT_IN and not argument:
        return kind, ""
    if kind in KINDS and kind not in BUILT_IN and argument:
        return kind, argument
    raise ValueError(f"data spec {spec!r} not understood: expected 'digits', 'digit-scenes', "
                     "'digit-boxes', 'folder:PATH', 'csv:PATH', 'tfds:NAME[:SPLIT]' or "
                     "'tfrecord:GLOB'")


def is_segmentation_folder(path: str) -> bool:
    """Whether `path` holds `images/` and `masks/` folders (segmentation data)."""
    return all(os.path.isdir(os.path.join(path, name)) for name in (IMAGES_DIR, MASKS_DIR))


def is_segmentation_spec(spec: str) -> bool:
    """Whether `spec` names data with masks: 'digit-scenes', or a folder of `images/` and
    `masks/`."""
    kind, argument = parse_spec(spec)
    return kind == "digit-scenes" or (kind == "folder" and is_segmentation_folder(
        os.path.expanduser(argument)))


def box_layout(path: str) -> str | None:
    """The box format a folder's files are in ('coco': a *.json file naming 'images' or
    'annotations'; 'yolo': a labels/ folder; 'voc': an Annotations/ or annotations/ folder), or
    None (`vit_app.data.box_files` reads them)."""
    for name in sorted(glob.glob(os.path.join(path, "*.json"))):
        try:
            with open(name, encoding="utf-8") as stream:
                head = stream.read(1 << 16)
        except (OSError, UnicodeDecodeError):
            continue
        if '"annotations"' in head or '"images"' in head:
            return "coco"
    if os.path.isdir(os.path.join(path, "labels")):
        return "yolo"
    if any(os.path.isdir(os.path.join(path, name)) for name in ("annotations", "Annotations")):
        return "voc"
    return None


def spec_labels(spec: str) -> str:
    """What the data of `spec` labels its images with: 'masks' (digit-scenes, a folder of
    images/ and masks/), 'boxes' (digit-boxes, a folder of COCO, YOLO or VOC boxes) or
    'classes'."""
    kind, argument = parse_spec(spec)
    if kind in BUILT_IN_LABELS:
        return BUILT_IN_LABELS[kind]
    if kind == "folder":
        path = os.path.expanduser(argument)
        if is_segmentation_folder(path):
            return "masks"
        if box_layout(path):
            return "boxes"
    return "classes"


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


def check_spec(spec: str, min_classes: int = 1, labels: str = "classes") -> None:
    """Checks what can be checked of `spec` without reading its images: the spec's form, that
    a local folder, CSV file or TFRecord pattern exists, and a folder's number of classes
    (for segmentation: that it has `images/` and `masks/`; for detection: boxes in a known
    format).

    Args:
        spec: a data spec (`vit_app.data.sources`, `vit_app.data.segmentation`,
            `vit_app.data.detection`).
        min_classes: classes a `folder:` source must have (2 to train a classifier).
        labels: what the spec's images must be labelled with: 'classes', 'masks'
            (`digit-scenes` or a segmentation folder) or 'boxes' (`digit-boxes` or a folder
            of COCO, YOLO or VOC boxes).

    Raises:
        ValueError: naming what was expected and what was found.
    """
    kind, argument = parse_spec(spec)
    path = os.path.expanduser(argument)
    if labels == "masks":
        _check_segmentation_spec(kind, argument, path)
        return
    if labels == "boxes":
        _check_detection_spec(kind, argument, path)
        return
    if kind == "digit-scenes":
        raise ValueError("digit-scenes is segmentation data (masks, not class labels): train "
                         "it with --task segment")
    if kind == "digit-boxes":
        raise ValueError("digit-boxes is detection data (boxes, not class labels): train it "
                         "with --task detect")
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


def _check_detection_spec(kind: str, argument: str, path: str) -> None:
    if kind == "digit-boxes":
        return
    if kind != "folder":
        raise ValueError(f"detection data {kind}:{argument}: expected 'digit-boxes' or "
                         "'folder:DIR' with boxes in COCO JSON, YOLO or Pascal VOC form")
    if not os.path.isdir(path):
        raise ValueError(f"detection data folder {argument!r} does not exist")
    if box_layout(path) is None:
        raise ValueError(f"detection data {argument!r}: no boxes found. Expected one of: a COCO "
                         f"JSON file ({argument}/*.json); YOLO labels ({argument}/images/ + "
                         f"{argument}/labels/*.txt + classes.txt or data.yaml); Pascal VOC XML "
                         f"({argument}/images/ or JPEGImages/ + {argument}/Annotations/*.xml)")
