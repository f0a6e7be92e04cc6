"""Detection's data, read without a framework: the built-in digit boxes, and a folder of boxes
in COCO JSON, YOLO or Pascal VOC form (`vit_app.tasks.detect.data.box_files` reads them,
`vit_app.tasks.detect.data.sources` opens them)."""

from __future__ import annotations

import glob
import os

from vit_app.data.specs import TaskData

BUILT_IN = "digit-boxes"


def box_layout(path: str) -> str | None:
    """The box format a folder's files are in ('coco': a *.json file naming 'images' or
    'annotations'; 'yolo': a labels/ folder; 'voc': an Annotations/ or annotations/ folder), or
    None."""
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


def no_boxes(folder: str) -> str:
    """What a folder without boxes is told: the three layouts, under its own name."""
    return (f"{folder}: no boxes found. Expected one of: a COCO JSON file ({folder}/*.json with "
            f"'images', 'annotations' and 'categories'); YOLO labels ({folder}/images/ + "
            f"{folder}/labels/*.txt + classes.txt or data.yaml); Pascal VOC XML "
            f"({folder}/images/ or {folder}/JPEGImages/ + {folder}/Annotations/*.xml)")


def check(kind: str, argument: str, path: str, min_classes: int) -> None:
    """The built-in boxes, or a folder of boxes in a known form."""
    if kind == BUILT_IN:
        return
    if kind != "folder":
        raise ValueError(f"detection data {kind}:{argument}: expected {BUILT_IN!r} or "
                         "'folder:DIR' with boxes in COCO JSON, YOLO or Pascal VOC form")
    if not os.path.isdir(path):
        raise ValueError(f"detection data folder {argument!r} does not exist")
    if box_layout(path) is None:
        raise ValueError(f"detection data {no_boxes(argument)}")


DATA = TaskData(noun="detection", labels="boxes", built_in=BUILT_IN, check=check,
                recognises=lambda path: box_layout(path) is not None)
