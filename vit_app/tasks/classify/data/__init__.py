"""Classification's data, read without a framework: the built-in digits, a folder of class
folders (the layout a folder has when no other task recognises it), CSV lists, tfds and
TFRecord files (`vit_app.tasks.classify.data.readers` opens them)."""

from __future__ import annotations

import glob
import os

from vit_app.data.specs import TaskData, class_folders


def check(kind: str, argument: str, path: str, min_classes: int) -> None:
    """A folder's class sub-folders (at least `min_classes`), a CSV file's or a TFRecord
    pattern's presence; remote and downloaded data are checked when opened."""
    if "://" in argument or kind in ("digits", "tfds"):
        return
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


DATA = TaskData(noun="classification", labels="classes", built_in="digits", check=check)
