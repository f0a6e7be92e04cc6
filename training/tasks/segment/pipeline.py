"""The segmentation input pipeline: (image, mask) pairs -> the same random geometry for both ->
batches `(model inputs, int32 masks)`; photometric changes touch the image only.

Per pair: a random rescale of both to `scale_min..scale_max` times the model's size (with
`segment.native`, times the image's own size; bilinear for the image, nearest for the
mask, so class ids stay ids), padding to at least the model's size (image 0, mask 255 =
ignore), one random crop of the model's size and, with `augment.flip`, one horizontal flip,
each drawn once for the image and mask stacked together, so they cannot drift apart. Native
crops make an epoch of several passes over the images, as many as the crops that cover a
typical image once (`native_passes`).
Like `training.pipeline`, a batch is a pure function of (seed, epoch, step): a resumed run sees
the batches the uninterrupted one would have seen.
"""

from __future__ import annotations

import tensorflow as tf

from training.adapt import typical_image_size
from training.augment import photometric
from training.pipeline import paired_train_dataset
from vit_app.tasks.segment.data.sources import mask_to_size
from vit_app.data.source import Source
from vit_app.images import image_hw, scale
from vit_keras.preprocessing import OFFICIAL
from vit_keras.tasks.segment.scores import IGNORE



def paired_geometry(image, mask, size, settings, flip: bool, seed, native: bool = False):
    """The random rescale, pad, crop and flip of one pair (see the module docstring).

    Args:
        image: float32 [h, w, 3] in 0..255.
        mask: uint8 [h, w] class ids.
        size: the model's (height, width).
        settings: the preset's `segment` section (`scale_min`, `scale_max`).
        flip: random horizontal flips.
        seed: a stateless [2] seed.
        native: rescale relative to the image's own size (a crop at its resolution), not to
            the model's (the whole image shrunk to about the model's size).

    Returns:
        (float32 [height, width, 3], int32 [height, width]).
    """
    height, width = size
    factor = tf.random.stateless_uniform([], seed, settings.scale_min,
                                         settings.scale_max)
    base = tf.cast(tf.shape(image)[:2], tf.float32) if native else \
        tf.constant([height, width], tf.float32)
    scaled = tf.cast(tf.round(base * factor), tf.int32)
    scaled = tf.maximum(scaled, 1)
    image = tf.image.resize(image, scaled, method="bilinear", antialias=True)
    mask = mask_to_size(mask, scaled)
    pad_rows, pad_cols = tf.maximum(height - scaled[0], 0), tf.maximum(width - scaled[1], 0)
    paddings = [[0, pad_rows], [0, pad_cols]]
    image = tf.pad(image, paddings + [[0, 0]])
    mask = tf.pad(mask, paddings, constant_values=IGNORE)
    stacked = tf.concat([image, tf.cast(mask, tf.float32)[..., None]], axis=-1)
    stacked = tf.image.stateless_random_crop(stacked, [height, width, 4], seed + [0, 1])
    if flip:
        stacked = tf.image.stateless_random_flip_left_right(stacked, seed + [0, 2])
    return stacked[..., :3], tf.cast(tf.round(stacked[..., 3]), tf.int32)


def crops_to_cover(native_hw, size) -> int:
    """Crops of `size` (height, width) that cover an image of `native_hw` once (at least 1)."""
    return max(1, round(native_hw[0] * native_hw[1] / (size[0] * size[1])))


def native_passes(source: Source, size) -> int:
    """Native crops per image in an epoch: as many as cover a typical training image once."""
    return crops_to_cover(typical_image_size(source), size)


def train_dataset(source: Source, image_size, batch_size: int, preset, *, start_epoch: int = 0,
                  start_step: int = 0, steps_per_epoch: int | None = None,
                  preprocessing=OFFICIAL) -> tf.data.Dataset:
    """Training batches `(model inputs, int32 masks [batch, height, width])` for epochs
    start_epoch..epochs-1, as `training.pipeline.train_dataset` makes them for classifiers
    (same arguments; the preset's `segment` section and `augment.flip`)."""
    size = image_hw(image_size)
    settings, flip = preset.segment, preset.augment.flip

    def prepare(record, label, element_seed):
        image = tf.cast(source.decode(record), tf.float32)
        image, mask = paired_geometry(image, source.decode_mask(label), size, settings, flip,
                                      element_seed, settings.native)
        if settings.photometric:
            image = photometric(image, element_seed)
        return scale(image, preprocessing), mask

    passes = native_passes(source, size) if settings.native else 1
    return paired_train_dataset(source, preset, batch_size, prepare, start_epoch=start_epoch,
                                start_step=start_step, steps_per_epoch=steps_per_epoch,
                                passes=passes)
