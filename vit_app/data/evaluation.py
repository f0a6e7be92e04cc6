"""Evaluation data: the examples of a source plain-resized (no augmentation), in source order,
for validation during training, `vit evaluate`, few-shot probes and export calibration."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from vit_app.data.source import Source
from vit_app.images import image_hw, resize, scale
from vit_keras.preprocessing import OFFICIAL


def targets(labels: tf.Tensor, depth: int, multilabel: bool) -> tf.Tensor:
    """The float32 targets of labels: one-hot of int class ids, or multi-hot labels as they are."""
    return tf.cast(labels, tf.float32) if multilabel else tf.one_hot(labels, depth)


def traced_as_written(function):
    """`function`, for tf.data to trace as it is written: without autograph's rewrite of its
    source (and of every function it calls) into graph control flow first. The pipelines'
    functions branch on Python values only, never on a tensor's, so the rewrite changed
    nothing but the start-up: about a second of every `vit` process (docs/testing.md)."""
    return tf.autograph.experimental.do_not_convert(function)


def with_options(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """Deterministic order; sharded by data under a multi-worker strategy."""
    options = tf.data.Options()
    options.deterministic = True
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def eval_images(source: Source, image_size, preprocessing=OFFICIAL) -> tf.data.Dataset:
    """Unbatched `(image float32 0..255 [height, width, 3], label)` resized to `image_size`
    (an int or (height, width)) by the weights' rule (`preprocessing`), in source order."""
    dataset = source.records().map(traced_as_written(
        lambda record, label: (resize(source.decode(record), image_size, preprocessing), label)),
        num_parallel_calls=tf.data.AUTOTUNE)
    if source.ignore_errors:
        dataset = dataset.ignore_errors(log_warning=True)
    return dataset


def eval_dataset(source: Source, image_size, batch_size: int,
                 num_classes: int | None = None, drop_remainder: bool = False,
                 max_examples: int | None = None, preprocessing=OFFICIAL) -> tf.data.Dataset:
    """Evaluation batches `(model inputs, targets)`: resized and normalised as the weights
    expect (`preprocessing`; [-1, 1] for the official ones), no shuffling; the targets are
    one-hot, or multi-hot for a multi-label source.

    Args:
        drop_remainder: drop a last partial batch (TPUs and multi-process runs need full ones).
        max_examples: evaluate only the first examples (None: all).
    """
    depth = num_classes or source.num_classes
    dataset = eval_images(source, image_size, preprocessing)
    if max_examples is not None:
        dataset = dataset.take(max_examples)
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    dataset = dataset.map(traced_as_written(
        lambda images, labels: (scale(images, preprocessing),
                                targets(labels, depth, source.multilabel))),
        num_parallel_calls=tf.data.AUTOTUNE)
    return with_options(dataset.prefetch(tf.data.AUTOTUNE))


def take_raw_images(source: Source, image_size, count: int,
                    preprocessing=OFFICIAL) -> tuple[np.ndarray, np.ndarray]:
    """Up to `count` eval-resized images as float32 NHWC 0..255 numpy + their labels (for
    export): int64 class ids, or multi-hot float32 [n, classes] for a multi-label source."""
    images, labels = [], []
    for image, label in eval_images(source, image_size,
                                    preprocessing).take(count).as_numpy_iterator():
        images.append(image)
        labels.append(label)
    dtype, label_shape = (np.float32, (source.num_classes,)) if source.multilabel else \
        (np.int64, ())
    if not images:
        return (np.zeros((0, *image_hw(image_size), 3), np.float32),
                np.zeros((0, *label_shape), dtype))
    return np.stack(images).astype(np.float32), np.asarray(labels, dtype)
