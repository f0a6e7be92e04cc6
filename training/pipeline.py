"""The training input pipeline that feeds `fit`: decode -> crop/resize -> batch -> augment ->
normalise as the weights expect ([-1, 1] for the official ones) -> prefetch (evaluation
batches: `vit_app.data.evaluation`). The random crops resize bilinearly whatever the weights'
evaluation interpolation (a training augmentation, as the official recipes do).

Training batches are a pure function of (seed, epoch, step): each epoch is shuffled with its own
seed and each batch is augmented with its own stateless seed, so a resumed run sees exactly the
batches the uninterrupted run would have seen. Under a multi-worker strategy the dataset is
sharded by data.
"""

from __future__ import annotations

import tensorflow as tf

from vit_app.data.evaluation import targets, traced_as_written, with_options
from vit_app.data.source import Source
from vit_app.images import resize, scale
from vit_keras.preprocessing import OFFICIAL
from training.augment import build_augment


def inception_crop(image: tf.Tensor, size, area_min: float, seed: tf.Tensor) -> tf.Tensor:
    """Random crop of 5-100%-style area and 3/4..4/3 aspect, resized to `size`."""
    begin, crop_size, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.shape(image), bounding_boxes=tf.zeros([0, 0, 4], tf.float32), seed=seed,
        area_range=(area_min, 1.0), aspect_ratio_range=(3 / 4, 4 / 3),
        min_object_covered=0.0, use_image_if_no_bounding_boxes=True)
    crop = tf.slice(image, begin, crop_size)
    # The crop's size is drawn, its channels are the image's: RandAugment's colour operations
    # need them known when they are traced.
    crop.set_shape([None, None, image.shape[-1]])
    return resize(crop, size)


def pad_crop(image: tf.Tensor, pad: int, seed: tf.Tensor) -> tf.Tensor:
    """Zero-pads by `pad` pixels and randomly crops back to the input size."""
    height, width = image.shape[0], image.shape[1]
    padded = tf.pad(image, [[pad, pad], [pad, pad], [0, 0]])
    return tf.image.stateless_random_crop(padded, [height, width, 3], seed=seed)


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

    @traced_as_written
    def permute(block, batch):
        records, labels = batch
        keys = tf.random.stateless_uniform(tf.shape(labels)[:1], tf.stack([seed[0] + 1,
                                                                       seed[1] * 65_537 + block]))
        order = tf.argsort(keys)
        return tf.data.Dataset.from_tensor_slices((tf.gather(records, order),
                                                   tf.gather(labels, order)))

    return source.records().batch(max(1, buffer)).enumerate().flat_map(permute)


def _crop(image, image_size, settings, seed, preprocessing=OFFICIAL) -> tf.Tensor:
    """The training crop of one decoded image (`settings`: the preset's `augment` section);
    without a random crop, the weights' own resize rule."""
    if settings.crop == "inception":
        return inception_crop(image, image_size, settings.crop_area_min, seed)
    image = resize(image, image_size, preprocessing)
    return pad_crop(image, settings.pad, seed) if settings.crop == "pad_crop" and settings.pad \
        else image


def train_dataset(source: Source, image_size, batch_size: int, preset, *, start_epoch: int = 0,
                  start_step: int = 0, steps_per_epoch: int | None = None,
                  num_classes: int | None = None, drop_remainder: bool = True,
                  preprocessing=OFFICIAL) -> tf.data.Dataset:
    """Training batches `(model inputs, targets)` for epochs start_epoch..epochs-1; the
    targets are one-hot, or multi-hot for a multi-label source.

    Args:
        source: the training `Source`.
        image_size: model resolution, an int (square) or (height, width).
        batch_size: global batch size of one step.
        preset: the run's `Preset`: its seed (the whole stream follows from it), epochs
            (`schedule.epochs`), crop and augmentation (`augment`) and shuffle buffer
            (`data.shuffle_buffer`).
        start_epoch, start_step: where a resumed run picks up; batches before are skipped.
        steps_per_epoch: batches per epoch (default: all full batches of one pass).
        num_classes: one-hot depth (default: the source's class count).
        drop_remainder: drop a last partial batch (static shapes; needed for TPUs).
        preprocessing: what the weights expect (mean, std; resize rule without random crop);
            default: the official [-1, 1].

    Returns:
        A `tf.data.Dataset` of exactly (epochs - start_epoch) * steps_per_epoch - start_step
        batches when steps_per_epoch is given.
    """
    seed, epochs, settings = preset.seed, preset.schedule.epochs, preset.augment
    augment = build_augment(preset)
    shuffle_buffer = preset.data.shuffle_buffer
    depth = num_classes or source.num_classes
    if source.num_examples:
        shuffle_buffer = min(shuffle_buffer, source.num_examples)

    def prepare(index, record, label, epoch):
        element_seed = tf.stack([seed * 1_000_003 + epoch, 2 * index])  # even: elements
        image = _crop(source.decode(record), image_size, settings, element_seed, preprocessing)
        return image, targets(label, depth, source.multilabel)

    batches = epoch_batches(source, prepare, seed * 1_000_003 + 999_983,
                             shuffle_buffer, batch_size, drop_remainder, steps_per_epoch)
    dataset = tf.data.Dataset.range(start_epoch, epochs).flat_map(batches)
    dataset = dataset.skip(start_step)

    @traced_as_written
    def finish(epoch, step, batch):
        images, labels = batch
        if augment is not None:
            batch_seed = tf.stack([seed * 1_000_003 + epoch, 2 * step + 1])  # odd: batches
            images, labels = augment(images, labels, batch_seed)
        return scale(images, preprocessing), labels

    dataset = dataset.map(finish, num_parallel_calls=tf.data.AUTOTUNE)
    return with_options(dataset.prefetch(tf.data.AUTOTUNE))


def epoch_batches(source: Source, prepare, shuffle_seed: int, shuffle_buffer: int,
                  batch_size: int, drop_remainder: bool, steps_per_epoch, passes: int = 1):
    """The per-epoch stream both training pipelines (classes, masks) `flat_map` over.

    Args:
        source: the training `Source`.
        prepare: (index, record, label, epoch) -> one training example.
        shuffle_seed: with the epoch, seeds that epoch's order (stateless).
        shuffle_buffer, batch_size, drop_remainder, steps_per_epoch: as `train_dataset`.
        passes: shuffled passes over the source per epoch (each example's index, hence its
            random augmentation, differs between passes).

    Returns:
        epoch -> a dataset of that epoch's `(epoch, step, batch)`.
    """

    @traced_as_written
    def one_epoch(epoch):
        def one_pass(index):
            return shuffled(source, shuffle_buffer,
                            tf.stack([shuffle_seed + index * 7_919, epoch]))

        dataset = one_pass(tf.constant(0, tf.int64)) if passes == 1 else \
            tf.data.Dataset.range(passes).flat_map(one_pass)
        dataset = dataset.enumerate().map(lambda i, element: prepare(i, *element, epoch),
                                          num_parallel_calls=tf.data.AUTOTUNE)
        if source.ignore_errors:
            dataset = dataset.ignore_errors(log_warning=True)
        dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
        if steps_per_epoch:
            dataset = dataset.take(steps_per_epoch)
        return dataset.enumerate().map(lambda step, batch: (epoch, step, batch))

    return one_epoch




def paired_train_dataset(source: Source, preset, batch_size: int, prepare_pair, *,
                         start_epoch: int = 0, start_step: int = 0,
                         steps_per_epoch: int | None = None, passes: int = 1) -> tf.data.Dataset:
    """Training batches of a task whose labels move with the pixels (masks, boxes), for epochs
    start_epoch..epochs-1; a batch is a pure function of (seed, epoch, step), as in
    `train_dataset`.

    Args:
        source, preset, batch_size, start_epoch, start_step, steps_per_epoch: as
            `train_dataset`.
        prepare_pair: (record, label, element seed [2] int64) -> one training example.
        passes: shuffled passes over the source per epoch (`epoch_batches`).
    """
    seed = preset.seed
    shuffle_buffer = min(preset.data.shuffle_buffer, source.num_examples or
                         preset.data.shuffle_buffer)

    def prepare(index, record, label, epoch):
        element_seed = tf.cast(tf.stack([seed * 1_000_003 + epoch, 2 * index]), tf.int64)
        return prepare_pair(record, label, element_seed)

    batches = epoch_batches(source, prepare, seed * 1_000_003 + 999_983, shuffle_buffer,
                            batch_size, True, steps_per_epoch, passes)
    dataset = tf.data.Dataset.range(start_epoch, preset.schedule.epochs).flat_map(batches)
    dataset = dataset.skip(start_step).map(traced_as_written(lambda epoch, step, batch: batch))
    return with_options(dataset.prefetch(tf.data.AUTOTUNE))
