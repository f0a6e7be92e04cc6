"""Multi-label image lists: the `csv:PATH` data source of `vit train`.

The file is UTF-8 CSV (commas; a field holding a comma goes in double quotes) whose first row
names the columns `file` and `labels` (other columns are allowed and ignored):

    file,labels
    images/0001.jpg,cat dog
    images/0002.jpg,dog
    /data/extra/0003.png,

- `file`: the image (JPEG, PNG, BMP, GIF or TIFF), relative to the CSV file's folder, or absolute.
- `labels`: the classes present in the image, separated by spaces, `;` or `|` (any of them:
  `cat dog`, `cat;dog` and `cat | dog` are the same), so a class name holds none of these
  characters; a name repeated in a row counts once; an empty cell = no class present.

The classes are the lines of a `labels.txt` beside the CSV file when there is one (then a label
not in it is an error), else the sorted union of the labels in the file. Labels become multi-hot
float32 vectors. Every image is checked before training starts, as a folder's are.
"""

from __future__ import annotations

import csv
import dataclasses
import os
import re

import numpy as np

from vit_app.data.source import Source, check_files, file_list_source

COLUMNS = ("file", "labels")
LABEL_SEPARATORS = re.compile(r"[\s;|]+")
LABELS_FILE = "labels.txt"
MAX_LISTED = 20  # problems (or class names) listed in one message


@dataclasses.dataclass
class ImageList:
    """A parsed CSV image list.

    Attributes:
        class_names: the class names, index = class id.
        files: the image paths (absolute when the CSV path is), in row order.
        targets: multi-hot float32 [rows, classes].
    """

    class_names: list[str]
    files: list[str]
    targets: np.ndarray


def split_labels(cell: str) -> list[str]:
    """The class names of a `labels` cell: 'cat; dog|cat' -> ['cat', 'dog'] (repeats dropped)."""
    return list(dict.fromkeys(name for name in LABEL_SEPARATORS.split(cell) if name))


def _listing(names: list[str]) -> str:
    shown = ", ".join(repr(name) for name in names[:MAX_LISTED])
    return shown + (f", ... ({len(names)} in all)" if len(names) > MAX_LISTED else "")


def _column_indices(header: list[str], path: str) -> tuple[int, int]:
    """The positions of `file` and `labels` in the header row."""
    names = [name.strip() for name in header]
    missing = [column for column in COLUMNS if column not in names]
    if missing:
        raise ValueError(f"csv data {path}, line 1: the header row {header} lacks the "
                         f"column(s) {missing}: expected a first row naming the columns "
                         "'file' and 'labels' (e.g. file,labels)")
    return names.index("file"), names.index("labels")


def read_rows(path: str) -> list[tuple[int, str, list[str]]]:
    """The data rows of a CSV image list, checked: (line number, image path, label names).

    Args:
        path: the CSV file.

    Returns:
        One tuple per non-blank row after the header; the image path is joined to the CSV
        file's folder.

    Raises:
        ValueError: no such file, not UTF-8, no header or a header without `file`/`labels`, a
            row with another number of fields than the header, an empty file name, no rows.
    """
    if not os.path.isfile(path):
        raise ValueError(f"csv data {path!r} is not a file: expected a CSV file whose header "
                         "row names the columns file,labels")
    folder, rows = os.path.dirname(path), []
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            header = next((row for row in reader if row), None)
            if header is None:
                raise ValueError(f"csv data {path} is empty: expected a header row file,labels "
                                 "then one row per image")
            file_at, labels_at = _column_indices(header, path)
            for row in reader:
                if row:
                    where = f"csv data {path}, line {reader.line_num}"
                    rows.append((reader.line_num, *_parse_row(row, len(header),
                                                              (file_at, labels_at), folder,
                                                              where)))
    except UnicodeDecodeError as error:
        raise ValueError(f"csv data {path} is not UTF-8 text ({error.reason} at byte "
                         f"{error.start})") from None
    except csv.Error as error:
        raise ValueError(f"csv data {path} is not valid CSV: {error}") from None
    if not rows:
        raise ValueError(f"csv data {path} has a header but no rows: expected one row per "
                         "image, e.g. images/0001.jpg,cat dog")
    return rows


def _parse_row(row, width, columns, folder, where) -> tuple[str, list[str]]:
    """(image path joined to `folder`, label names) of one data row; `where` names the row."""
    if len(row) != width:
        raise ValueError(f"{where}: {len(row)} fields, expected {width} as in the header "
                         f"row; got {row} (a field holding a comma goes in double quotes)")
    file = row[columns[0]].strip()
    if not file:
        raise ValueError(f"{where}: the file name is empty: expected the path of an image, "
                         f"relative to the CSV file's folder or absolute; got {row}")
    return os.path.join(folder, os.path.expanduser(file)), split_labels(row[columns[1]])


def read_class_list(path: str) -> list[str]:
    """The class names of a labels.txt (one per line; blank lines skipped), checked.

    Raises:
        ValueError: a name repeated or holding a label separator, or no names at all.
    """
    with open(path, encoding="utf-8-sig") as handle:
        names = [line.strip() for line in handle if line.strip()]
    for number, name in enumerate(names, 1):
        if LABEL_SEPARATORS.search(name):
            raise ValueError(f"{path}: class {number} {name!r} holds a space, ';' or '|', "
                             "which separate the labels of the CSV rows: rename it")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated or not names:
        raise ValueError(f"{path}: expected distinct class names, one per line; got "
                         f"{'no names' if not names else 'repeats of ' + _listing(repeated)}")
    return names


def class_names_for(path: str, rows) -> list[str]:
    """The classes of the CSV file `path`: its labels.txt, else the sorted union of `rows`'
    labels.

    Raises:
        ValueError: a row names a class missing from labels.txt; no row has any label.
    """
    labels_file = os.path.join(os.path.dirname(path), LABELS_FILE)
    if not os.path.exists(labels_file):
        names = sorted({name for _, _, labels in rows for name in labels})
        if not names:
            raise ValueError(f"csv data {path}: no row has a label: expected class names in "
                             f"the 'labels' column (or a {LABELS_FILE} beside the file)")
        return names
    names = read_class_list(labels_file)
    known = set(names)
    for line, _, labels in rows:
        unknown = [name for name in labels if name not in known]
        if unknown:
            raise ValueError(f"csv data {path}, line {line}: label {unknown[0]!r} is not a "
                             f"class of {labels_file}; known classes: {_listing(names)}")
    return names


def _check_exist(path: str, rows) -> None:
    missing = [(line, file) for line, file, _ in rows if not os.path.isfile(file)]
    if missing:
        listing = "\n".join(f"  line {line}: {file}" for line, file in missing[:MAX_LISTED])
        more = f"\n  ... and {len(missing) - MAX_LISTED} more" if len(missing) > MAX_LISTED else ""
        raise ValueError(f"csv data {path}: {len(missing)} of {len(rows)} image files do not "
                         f"exist (paths are relative to the CSV file's folder):\n{listing}{more}")


def read_image_list(path: str) -> ImageList:
    """Reads and checks a CSV image list: rows, classes, and every image file.

    Args:
        path: the CSV file (see the module docstring for its format).

    Returns:
        An `ImageList`.

    Raises:
        ValueError: a malformed file, an unknown label, a missing or unreadable image.
    """
    rows = read_rows(path)
    class_names = class_names_for(path, rows)
    _check_exist(path, rows)
    files = [file for _, file, _ in rows]
    check_files(files)
    index = {name: position for position, name in enumerate(class_names)}
    targets = np.zeros((len(rows), len(class_names)), np.float32)
    for row, (_, _, labels) in enumerate(rows):
        targets[row, [index[name] for name in labels]] = 1.0
    return ImageList(class_names, files, targets)


def split_rows(count: int, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded random (train, held-out) split of `count` rows; at least one row trains."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"val_split must be in [0, 1), got {fraction!r}")
    order = np.random.default_rng(seed).permutation(count)
    held_out = min(int(round(fraction * count)), count - 1)
    return np.sort(order[held_out:]), np.sort(order[:held_out])


def csv_source(path: str, subset: str, val_split: float, seed: int) -> Source:
    """The `csv:PATH` source: a multi-label `Source` of the rows of `subset`.

    Args:
        path: the CSV file.
        subset: 'train' (the rows not held out) or 'val' (the held-out rows).
        val_split: fraction of the rows held out (0 = none).
        seed: seed of the hold-out.
    """
    path = os.path.expanduser(path)
    images = read_image_list(path)
    train, held_out = split_rows(len(images.files), val_split, seed)
    chosen = train if subset == "train" else held_out
    if not len(chosen):
        raise ValueError(f"csv data {path!r} has no '{subset}' rows with val_split={val_split}")
    return file_list_source(f"csv:{path}", images.class_names,
                                    np.asarray(images.files)[chosen], images.targets[chosen],
                                    multilabel=True)
