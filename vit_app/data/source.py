"""The `Source` every data spec becomes, and sources of checked image files held in memory
(a `folder:` or `csv:` list)."""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import tensorflow as tf

from vit_app import images


@dataclasses.dataclass
class Source:
    """A labelled image collection, read lazily.

    Attributes:
        spec: the data spec it was made from.
        class_names: label names, index = class id.
        records: function returning a dataset of (record, label); a label is an int32 class id,
            or for a multi-label source a multi-hot float32 [num_classes] vector; a record is an
            encoded image (bytes), a file path or already an uint8 image, as `decode` expects.
        decode: function mapping one record to a uint8 [height, width, 3] image.
        num_examples: number of examples, or None when unknown without a full read.
        ignore_errors: skip records whose decoding fails (see the module docstring).
        arrays: (records, labels) when the whole source is in memory (digits, folder paths):
            then each epoch is a full random permutation; other sources are shuffled in
            blocks of `shuffle_buffer` records.
        multilabel: labels are multi-hot vectors (an image may have several classes, or none).
        decode_mask: for segmentation data, the function mapping one label record (a mask
            file's path, or already a mask) to uint8 [height, width] class ids (255 =
            ignore); None for labels that are class ids.
        boxes: labels are boxes, float32 [max_objects, 5] per image (x0, y0, x1, y1 in pixels
            of the stored image, class id; class -1 pads): `vit_app.tasks.detect.data.sources`.
        notes: how the reader chose to read the data where it had a choice (printed by a run
            under its data line).
    """

    spec: str
    class_names: list[str]
    records: Callable[[], tf.data.Dataset]
    decode: Callable[[tf.Tensor], tf.Tensor]
    num_examples: int | None = None
    ignore_errors: bool = False
    arrays: tuple | None = None
    multilabel: bool = False
    decode_mask: Callable[[tf.Tensor], tf.Tensor] | None = None
    boxes: bool = False
    notes: tuple[str, ...] = ()

    @property
    def num_classes(self) -> int:
        return len(self.class_names)


def check_files(files: list[str]) -> None:
    """Raises ValueError naming every file that is not a readable image."""
    from concurrent.futures import ThreadPoolExecutor

    with images.bomb_warnings_silenced(), ThreadPoolExecutor(max_workers=8) as pool:
        problems = [(path, why) for path, why in zip(files, pool.map(images.file_problem, files))
                    if why]
    if problems:
        listing = "\n".join(f"  {path}: {why}" for path, why in problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise ValueError(f"{len(problems)} of {len(files)} image files cannot be used; fix or "
                         f"remove them before training:\n{listing}{more}")


def file_list_source(spec: str, class_names: list[str], paths: np.ndarray, labels: np.ndarray,
                     multilabel: bool = False) -> Source:
    """An in-memory `Source` of checked image files and their labels.

    Args:
        spec: the data spec.
        class_names: the class names.
        paths: the image files.
        labels: int32 class ids [n], or multi-hot float32 [n, classes] when `multilabel`.
        multilabel: whether the labels are multi-hot.
    """
    return Source(spec=spec, class_names=class_names,
                  records=lambda: tf.data.Dataset.from_tensor_slices((paths, labels)),
                  decode=images.decode_file, num_examples=len(labels), arrays=(paths, labels),
                  multilabel=multilabel)
