"""The input pipeline that feeds `fit`: decode -> crop/resize -> batch -> augment -> scale to
[-1, 1] -> prefetch, for training (`train_dataset`) and evaluation (`eval_dataset`).

Training batches are a pure function of (seed, epoch, step): each epoch is shuffled with its own
seed and each batch is augmented with its own stateless seed, so a resumed run sees exactly the
batches the uninterrupted run would have seen. Under a multi-worker strategy the dataset is
sharded by data.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf

from training.sources import Source


def image_hw(size) -> tuple[int, int]:
    """An image size given as an int (square) or (height, width), as (height, width)."""
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


def resize(image: tf.Tensor, size) -> tf.Tensor:
    """Any uint8/float image -> float32 [height, width, 3] in 0..255 (bilinear, half-pixel).

    Args:
        image: [h, w, 3].
        size: the output size, an int (square) or (height, width).
    """
    image = tf.image.resize(tf.cast(image, tf.float32), image_hw(size), method="bilinear",
                            antialias=True)
    return tf.clip_by_value(image, 0.0, 255.0)


def inception_crop(image: tf.Tensor, size, area_min: float, seed: tf.Tensor) -> tf.Tensor:
    """Random crop of 5-100%-style area and 3/4..4/3 aspect, resized to `size`."""
    begin, crop_size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image), bounding_boxes=tf.zeros([0, 0, 4], tf.float32), seed=seed,
        area_range=(area_min, 1.0), aspect_ratio_range=(3 / 4, 4 / 3),
        min_object_covered=0.0, use_image_if_no_bounding_boxes=True)
    return resize(tf.slice(image, begin, crop_size), size)


def pad_crop(image: tf.Tensor, pad: int, seed: tf.Tensor) -> tf.Tensor:
    """Zero-pads by `pad` pixels and randomly crops back to the input size."""
    height, width = image.shape[0], image.shape[1]
    padded = tf.pad(image, [[pad, pad], [pad, pad], [0, 0]])
    return tf.image.stateless_random_crop(padded, [height, width, 3], seed=seed)


def scale(images: tf.Tensor) -> tf.Tensor:
    """0..255 -> [-1, 1], the ViT input range."""
    return images / 127.5 - 1.0


def targets(labels: tf.Tensor, depth: int, multilabel: bool) -> tf.Tensor:
    """The float32 targets of labels: one-hot of int class ids, or multi-hot labels as they are."""
    return tf.cast(labels, tf.float32) if multilabel else tf.one_hot(labels, depth)


def shuffled(source: Source, buffer: int, seed: tf.Tensor) -> tf.data.Dataset:
    """The source's records in a random order that depends only on `seed` (stateless).

    In-memory sources get a full permutation; streaming ones are shuffled within consecutive
    blocks of `buffer` records (tfds and TFRecord shards are usually shuffled on disk already).
    """
    seed = tf.cast(seed, tf.int64)
    if source.arrays is not None:
        records, labels = source.arrays
        order = tf.argsort(tf.random.stateless_uniform([len(labels)], seed))
        return tf.data.Dataset.from_tensor_slices((tf.gather(records, order),
                                                   tf.gather(labels, order)))

    def permute(block, batch):
        records, labels = batch
        keys = tf.random.stateless_uniform(tf.shape(labels)[:1], tf.stack([seed[0] + 1,
                                                                       seed[1] * 65_537 + block]))
        order = tf.argsort(keys)
        return tf.data.Dataset.from_tensor_slices((tf.gather(records, order),
                                                   tf.gather(labels, order)))

    return source.records().batch(max(1, buffer)).enumerate().flat_map(permute)


def _with_options(dataset: tf.data.Dataset) -> tf.data.Dataset:
    options = tf.data.Options()
    options.deterministic = True
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)


def _crop(image, image_size, crop: str, crop_area_min: float, pad: int, seed) -> tf.Tensor:
    """The training crop of one decoded image (see `train_dataset`)."""
    if crop == "inception":
        return inception_crop(image, image_size, crop_area_min, seed)
    image = resize(image, image_size)
    return pad_crop(image, pad, seed) if crop == "pad_crop" and pad > 0 else image


def train_dataset(source: Source, image_size, batch_size: int, *, epochs: int,
                  seed: int = 0, crop: str = "resize", crop_area_min: float = 0.05,
                  pad: int = 0, augment: Callable | None = None, num_classes: int | None = None,
                  start_epoch: int = 0, start_step: int = 0, steps_per_epoch: int | None = None,
                  shuffle_buffer: int = 10_000, drop_remainder: bool = True) -> tf.data.Dataset:
    """Training batches `(images in [-1, 1], targets)` for epochs start_epoch..epochs-1; the
    targets are one-hot, or multi-hot for a multi-label source.

    Args:
        source: the training `Source`.
        image_size: model resolution, an int (square) or (height, width).
        batch_size: global batch size.
        epochs: last epoch (exclusive).
        seed: makes the whole stream reproducible.
        crop: 'resize', 'inception' or 'pad_crop' (see `Preset.train_crop`).
        crop_area_min, pad: parameters of the crops.
        augment: batch-level augmentation `(images 0..255, targets, seed) -> same`
            (see `training.augment`); None = none.
        num_classes: one-hot depth (default: the source's class count).
        start_epoch, start_step: where a resumed run picks up; batches before are skipped.
        steps_per_epoch: batches per epoch (default: all full batches of one pass).
        shuffle_buffer: shuffle buffer size in elements.
        drop_remainder: drop a last partial batch (static shapes; needed for TPUs).

    Returns:
        A `tf.data.Dataset` of exactly (epochs - start_epoch) * steps_per_epoch - start_step
        batches when steps_per_epoch is given.
    """
    if crop not in ("resize", "inception", "pad_crop"):
        raise ValueError(f"train_crop must be 'resize', 'inception' or 'pad_crop', got {crop!r}")
    depth = num_classes or source.num_classes
    if source.num_examples:
        shuffle_buffer = min(shuffle_buffer, source.num_examples)

    def prepare(index, record, label, epoch):
        element_seed = tf.stack([seed * 1_000_003 + epoch, 2 * index])  # even: elements
        image = _crop(source.decode(record), image_size, crop, crop_area_min, pad, element_seed)
        return image, targets(label, depth, source.multilabel)

    def one_epoch(epoch):
        dataset = shuffled(source, shuffle_buffer, tf.stack([seed * 1_000_003 + 999_983, epoch]))
        dataset = dataset.enumerate().map(lambda i, element: prepare(i, *element, epoch),
                                          num_parallel_calls=tf.data.AUTOTUNE)
        if source.ignore_errors:
            dataset = dataset.ignore_errors(log_warning=True)
        dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
        if steps_per_epoch:
            dataset = dataset.take(steps_per_epoch)
        dataset = dataset.enumerate()
        return dataset.map(lambda step, batch: (epoch, step, batch))

    dataset = tf.data.Dataset.range(start_epoch, epochs).flat_map(one_epoch)
    dataset = dataset.skip(start_step)

    def finish(epoch, step, batch):
        images, labels = batch
        if augment is not None:
            batch_seed = tf.stack([seed * 1_000_003 + epoch, 2 * step + 1])  # odd: batches
            images, labels = augment(images, labels, batch_seed)
        return scale(images), labels

    dataset = dataset.map(finish, num_parallel_calls=tf.data.AUTOTUNE)
    return _with_options(dataset.prefetch(tf.data.AUTOTUNE))


def eval_images(source: Source, image_size) -> tf.data.Dataset:
    """Unbatched `(image float32 0..255 [height, width, 3], label)` plain-resized to
    `image_size` (an int or (height, width)), in source order."""
    dataset = source.records().map(lambda record, label: (resize(source.decode(record),
                                                                 image_size), label),
                                   num_parallel_calls=tf.data.AUTOTUNE)
    if source.ignore_errors:
        dataset = dataset.ignore_errors(log_warning=True)
    return dataset


def eval_dataset(source: Source, image_size, batch_size: int,
                 num_classes: int | None = None, drop_remainder: bool = False,
                 max_examples: int | None = None) -> tf.data.Dataset:
    """Evaluation batches `(images in [-1, 1], targets)`: plain resize, no shuffling; the
    targets are one-hot, or multi-hot for a multi-label source.

    Args:
        drop_remainder: drop a last partial batch (TPUs and multi-process runs need full ones).
        max_examples: evaluate only the first examples (None: all).
    """
    depth = num_classes or source.num_classes
    dataset = eval_images(source, image_size)
    if max_examples is not None:
        dataset = dataset.take(max_examples)
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    dataset = dataset.map(lambda images, labels: (scale(images),
                                                  targets(labels, depth, source.multilabel)),
                          num_parallel_calls=tf.data.AUTOTUNE)
    return _with_options(dataset.prefetch(tf.data.AUTOTUNE))


def take_raw_images(source: Source, image_size, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Up to `count` eval-resized images as float32 NHWC 0..255 numpy + their labels (for
    export): int64 class ids, or multi-hot float32 [n, classes] for a multi-label source."""
    images, labels = [], []
    for image, label in eval_images(source, image_size).take(count).as_numpy_iterator():
        images.append(image)
        labels.append(label)
    dtype, label_shape = (np.float32, (source.num_classes,)) if source.multilabel else \
        (np.int64, ())
    if not images:
        return (np.zeros((0, *image_hw(image_size), 3), np.float32),
                np.zeros((0, *label_shape), dtype))
    return np.stack(images).astype(np.float32), np.asarray(labels, dtype)

