"""The detection input pipeline: (image, boxes) -> the same random geometry for both -> batches
`(model inputs, targets [batch, max_objects, 5])`; photometric changes touch the image only.

Per image: one random crop (its area `detect.scale_min`..1 of the image's, its aspect ratio
3/4..4/3, DETR's RandomSizeCrop), the boxes cut to the crop and dropped when less than
`MIN_VISIBLE` of their area stays in it; with `augment.flip`, a horizontal flip of both; the
crop resized whole to the model's size; random brightness and contrast. Boxes become the
loss's targets: (class id, cx, cy, w, h) in fractions of the model's input, class -1 padding
(`vit_keras.tasks.detect.loss`).
Like `training.pipeline`, a batch is a pure function of (seed, epoch, step): a resumed run sees
the batches the uninterrupted one would have seen.
"""

from __future__ import annotations

import tensorflow as tf

from training.pipeline import paired_train_dataset
from training.augment import photometric
from vit_app.tasks.detect.data.sources import PAD_CLASS, examples, targets, to_model_size
from vit_app.data.evaluation import traced_as_written, with_options
from vit_app.data.source import Source
from vit_app.images import image_hw, scale
from vit_keras.preprocessing import OFFICIAL

MIN_VISIBLE = 0.5   # of a box's area that must stay inside a crop for it to stay an object
ASPECT = (3 / 4, 4 / 3)


def random_crop(image, boxes, scale_min: float, seed):
    """A random crop of `image` and the boxes cut to it.

    Args:
        image: [h, w, 3], of any dtype (a photograph stays uint8 until resized).
        boxes: float32 [n, 5] pixel corners and class (class -1 pads).
        scale_min: the crop's least area, as a fraction of the image's.
        seed: a stateless [2] seed.

    Returns:
        (the crop, its boxes in its own pixels, those less than `MIN_VISIBLE` inside padded).
    """
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    area = tf.random.stateless_uniform([], seed, scale_min, 1.0)
    aspect = tf.exp(tf.random.stateless_uniform([], seed + [0, 5], tf.math.log(ASPECT[0]),
                                                tf.math.log(ASPECT[1])))
    height = tf.minimum(shape[0], tf.round(shape[0] * tf.sqrt(area / aspect)))
    width = tf.minimum(shape[1], tf.round(shape[1] * tf.sqrt(area * aspect)))
    corner = tf.random.stateless_uniform([2], seed + [0, 6]) * (shape - [height, width])
    top, left = tf.floor(corner[0]), tf.floor(corner[1])
    image = tf.image.crop_to_bounding_box(image, tf.cast(top, tf.int32), tf.cast(left, tf.int32),
                                          tf.cast(height, tf.int32), tf.cast(width, tf.int32))
    shifted = boxes[:, :4] - tf.stack([left, top, left, top])
    clipped = tf.clip_by_value(shifted, 0.0, tf.stack([width, height, width, height]))
    size = lambda corners: tf.maximum(corners[:, 2] - corners[:, 0], 0.0) * tf.maximum(
        corners[:, 3] - corners[:, 1], 0.0)
    kept = (boxes[:, 4] >= 0) & (size(clipped) >= MIN_VISIBLE * tf.maximum(size(shifted), 1e-6))
    classes = tf.where(kept, boxes[:, 4], float(PAD_CLASS))
    return image, tf.concat([clipped, classes[:, None]], axis=-1)


def flip_boxes(image, boxes, seed):
    """A horizontal flip of the image and its pixel boxes, or neither (a coin from `seed`)."""
    width = tf.cast(tf.shape(image)[1], tf.float32)
    flipped = tf.random.stateless_uniform([], seed + [0, 2]) < 0.5
    mirrored = tf.stack([width - boxes[:, 2], boxes[:, 1], width - boxes[:, 0], boxes[:, 3],
                         boxes[:, 4]], axis=-1)
    return (tf.where(flipped, tf.reverse(image, [1]), image),
            tf.where(flipped, mirrored, boxes))


def example(image, boxes, size, preprocessing, recolour=None):
    """A decoded image and its pixel boxes -> (model input at `size`, targets); `recolour`
    (image -> image, 0..255) changes the resized image, where a photograph's pixels are few."""
    found = targets(boxes, tf.shape(image))
    resized = to_model_size(image, size)
    return scale(resized if recolour is None else recolour(resized), preprocessing), found


def train_dataset(source: Source, image_size, batch_size: int, preset, *, start_epoch: int = 0,
                  start_step: int = 0, steps_per_epoch: int | None = None,
                  preprocessing=OFFICIAL) -> tf.data.Dataset:
    """Training batches `(model inputs, targets [batch, max_objects, 5])` for epochs
    start_epoch..epochs-1, as `training.pipeline.train_dataset` makes them for classifiers
    (same arguments; the preset's `detect` section and `augment.flip`)."""
    size = image_hw(image_size)
    settings, flip = preset.detect, preset.augment.flip

    def prepare(record, label, element_seed):
        image = source.decode(record)   # uint8 until resized: a photograph has many pixels
        boxes = tf.cast(label, tf.float32)
        if settings.scale_min < 1:
            image, boxes = random_crop(image, boxes, settings.scale_min, element_seed)
        if flip:
            image, boxes = flip_boxes(image, boxes, element_seed)
        recolour = (lambda resized: photometric(resized, element_seed)) \
            if settings.photometric else None
        return example(image, boxes, size, preprocessing, recolour)

    return paired_train_dataset(source, preset, batch_size, prepare, start_epoch=start_epoch,
                                start_step=start_step, steps_per_epoch=steps_per_epoch)


def eval_dataset(source: Source, image_size, batch_size: int,
                 preprocessing=OFFICIAL) -> tf.data.Dataset:
    """Validation batches `(model inputs, targets)`: each image resized whole."""
    dataset = examples(source, image_hw(image_size)).map(traced_as_written(
        lambda image, found: (scale(image, preprocessing or OFFICIAL), found)))
    return with_options(dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE))
