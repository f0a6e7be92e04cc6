"""Segmentation's data, read without a framework: the built-in digit scenes, and a folder of
`images/` and `masks/` whose files pair by stem (`sources` opens them)."""

from __future__ import annotations

import os

from vit_app.data.specs import TaskData

BUILT_IN = "digit-scenes"
IMAGES_DIR, MASKS_DIR = "images", "masks"  # a segmentation folder's two parts


def is_segmentation_folder(path: str) -> bool:
    """Whether `path` holds `images/` and `masks/` folders (segmentation data)."""
    return all(os.path.isdir(os.path.join(path, name)) for name in (IMAGES_DIR, MASKS_DIR))


def check(kind: str, argument: str, path: str, min_classes: int) -> None:
    """The built-in scenes, or a folder with `images/` and `masks/`."""
    if kind == BUILT_IN:
        return
    if kind != "folder":
        raise ValueError(f"segmentation data {kind}:{argument}: expected {BUILT_IN!r} or "
                         f"'folder:DIR' with DIR/{IMAGES_DIR}/ and DIR/{MASKS_DIR}/")
    if not is_segmentation_folder(path):
        raise ValueError(f"segmentation data {argument!r}: expected the folders "
                         f"{argument}/{IMAGES_DIR}/ and {argument}/{MASKS_DIR}/ holding images "
                         "and masks of the same file stems")


DATA = TaskData(noun="segmentation", labels="masks", built_in=BUILT_IN, check=check,
                recognises=is_segmentation_folder)
