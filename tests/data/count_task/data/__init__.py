"""The count task's data, read without a framework: the built-in `dot-counts` (0-3 white dots
on dark noise), and a folder of images with a `counts.csv` of `file,count` rows."""

from __future__ import annotations

import os

from vit_app.data.specs import TaskData

BUILT_IN = "dot-counts"
COUNTS_FILE = "counts.csv"


def holds_counts(path: str) -> bool:
    """Whether a folder is count data (it holds `counts.csv`)."""
    return os.path.isfile(os.path.join(path, COUNTS_FILE))


def check(kind: str, argument: str, path: str, min_classes: int) -> None:
    """The built-in dots, or a folder with `counts.csv`."""
    if kind == BUILT_IN:
        return
    if kind != "folder":
        raise ValueError(f"count data {kind}:{argument}: expected {BUILT_IN!r} or 'folder:DIR' "
                         f"with DIR/{COUNTS_FILE}")
    if not holds_counts(path):
        raise ValueError(f"count data {argument!r}: expected {argument}/{COUNTS_FILE} with a "
                         "'file,count' row per image")


DATA = TaskData(noun="count", labels="counts", built_in=BUILT_IN, check=check,
                recognises=holds_counts)
