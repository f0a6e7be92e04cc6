"""A source restricted to some of its classes (`--set data.classes=5,6,7,8,9`).

The kept classes are renumbered 0..k-1 in the source's own order, so a model trained on
digits 5-9 has five outputs named '5'..'9'. In-memory sources (digits, folders) are filtered
at once and keep their exact size; streamed sources (tfds, TFRecord) are filtered as they are
read, and their size is counted by the run.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf

from vit_app.data.evaluation import traced_as_written
from vit_app.data.source import Source


def parse_classes(text: str) -> list[str]:
    """'5, 6,7' -> ['5', '6', '7'] ('' -> [], every class)."""
    return [name.strip() for name in text.split(",") if name.strip()]


def keep_classes(source: Source, names: list[str]) -> Source:
    """`source` with only the examples of the classes `names`, relabelled 0..len(names)-1.

    Args:
        source: a single-label source.
        names: class names of `source`, each at most once.

    Returns:
        The restricted source (`source` itself when `names` is empty).

    Raises:
        ValueError: an unknown or repeated class name, or a multi-label source.
    """
    if not names:
        return source
    if getattr(source, "multilabel", False):
        raise ValueError(f"classes: {source.spec} is a multi-label source; choose classes in "
                         "its CSV instead")
    unknown = [name for name in names if name not in source.class_names]
    if unknown or len(set(names)) != len(names):
        raise ValueError(f"classes {names} must name distinct classes of {source.spec}; "
                         f"unknown: {unknown or 'none'}; known: {source.class_names}")
    kept = [index for index, name in enumerate(source.class_names) if name in names]
    new_label = np.full(len(source.class_names), -1, np.int32)
    new_label[kept] = np.arange(len(kept), dtype=np.int32)
    class_names = [source.class_names[index] for index in kept]
    if source.arrays is not None:
        return _filter_arrays(source, new_label, class_names)
    table = tf.constant(new_label)
    records = source.records

    def filtered():
        dataset = records().map(
            traced_as_written(lambda record, label: (record, tf.gather(table, label))))
        return dataset.filter(traced_as_written(lambda record, label: label >= 0))

    return dataclasses.replace(source, class_names=class_names, records=filtered,
                               num_examples=None, arrays=None)


def _filter_arrays(source: Source, new_label: np.ndarray, class_names: list[str]) -> Source:
    records, labels = source.arrays
    relabelled = new_label[np.asarray(labels)]
    chosen = relabelled >= 0
    records, labels = np.asarray(records)[chosen], relabelled[chosen]
    return dataclasses.replace(
        source, class_names=class_names, num_examples=len(labels), arrays=(records, labels),
        records=lambda: tf.data.Dataset.from_tensor_slices((records, labels)))


def restrict_training_data(data, classes: str):
    """A `sources.TrainingData` whose training and validation sources keep only `classes`
    (a comma-separated list of class names; '' keeps every class)."""
    names = parse_classes(classes)
    if not names:
        return data
    val = None if data.val is None else keep_classes(data.val, names)
    return dataclasses.replace(data, train=keep_classes(data.train, names), val=val)
