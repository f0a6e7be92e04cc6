"""Segmentation sources for `vit train --task segment`: a `Source` whose labels are masks.

Data specs:
    `digit-scenes`   the built-in offline set: scikit-learn's digits drawn in colour on noisy
                     32x32 canvases, two or three per scene, each pixel labelled with its digit
                     (classes 1-10 = digits 0-9) or background (0); the soft rim of each stroke
                     is 255 (ignored). 1,200 training scenes from the digits' training split,
                     300 validation scenes from their test split, so no digit image is shared.
    `folder:DIR`     `DIR/images/` and `DIR/masks/` paired by stem (`masks`); the
                     `val_split` hold-out is a seeded random fraction.
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from vit_app import images
from vit_app.tasks.segment.data import masks
from vit_app.data.evaluation import traced_as_written, with_options
from vit_app.data.source import Source
from vit_app.data.training_data import (TrainingData, digits_arrays, open_paired_data,
                                        split_indices)
from vit_app.data.specs import parse_spec
from vit_keras.preprocessing import OFFICIAL

SCENE_SIZE = 32
SCENES = {"train": 1200, "test": 300}
SCENE_SEED = {"train": 0, "test": 1}
DIGIT_SIDES = (11, 16)        # each digit is drawn at a side in this range (pixels)
STROKE, RIM = 0.45, 0.15      # ink above STROKE is the digit; between RIM and STROKE, ignored
DIGIT_SCENE_CLASSES = ["background", *(f"digit {index}" for index in range(10))]


def _paste_digit(image, mask, digit, label, rng) -> None:
    """Draws one digit (8x8, 0..255) in a random colour at a random place and size."""
    from PIL import Image

    side = int(rng.integers(DIGIT_SIDES[0], DIGIT_SIDES[1] + 1))
    ink = np.asarray(Image.fromarray(digit).resize((side, side), Image.BILINEAR),
                     np.float32) / 255.0
    top, left = rng.integers(0, SCENE_SIZE - side + 1, size=2)
    window = (slice(top, top + side), slice(left, left + side))
    colour = rng.uniform(120, 255, size=3)
    image[window] = image[window] * (1 - ink[..., None]) + colour * ink[..., None]
    region = mask[window]
    region[ink > RIM] = masks.IGNORE
    region[ink > STROKE] = label + 1


def digit_scene_arrays(split: str) -> tuple[np.ndarray, np.ndarray]:
    """The built-in scenes of `split` ('train' or 'test'): uint8 images [n, 32, 32, 3] and
    uint8 masks [n, 32, 32]; the same every time (seeded)."""
    digits, labels = digits_arrays(split)
    rng = np.random.default_rng(SCENE_SEED[split])
    count = SCENES[split]
    scenes = np.empty((count, SCENE_SIZE, SCENE_SIZE, 3), np.uint8)
    scene_masks = np.zeros((count, SCENE_SIZE, SCENE_SIZE), np.uint8)
    for index in range(count):
        background = rng.uniform(0, 90, size=3)
        image = background + rng.normal(0, 12, size=(SCENE_SIZE, SCENE_SIZE, 3))
        for pick in rng.choice(len(labels), size=int(rng.integers(2, 4)), replace=False):
            _paste_digit(image, scene_masks[index], digits[pick, :, :, 0], labels[pick], rng)
        scenes[index] = np.clip(np.round(image), 0, 255).astype(np.uint8)
    return scenes, scene_masks


def digit_scenes_source(split: str) -> Source:
    """The built-in scenes as an in-memory segmentation `Source`."""
    scenes, scene_masks = digit_scene_arrays(split)
    return Source(spec="digit-scenes", class_names=list(DIGIT_SCENE_CLASSES),
                  records=lambda: tf.data.Dataset.from_tensor_slices((scenes, scene_masks)),
                  decode=lambda image: image, num_examples=len(scenes),
                  arrays=(scenes, scene_masks), decode_mask=lambda mask: mask)


def decode_mask_file(path: tf.Tensor, binary: bool = False) -> tf.Tensor:
    """A mask file's path -> uint8 [height, width] class ids (palette indices kept: TensorFlow's
    PNG decoder would expand a palette to colours); `binary` reads 255 as class 1
    (`masks.read_mask`)."""
    mask = tf.numpy_function(lambda name: masks.read_mask(name.decode(), binary), [path],
                             tf.uint8)
    mask.set_shape([None, None])
    return mask


def folder_segmentation_source(path: str, subset: str, val_split: float, seed: int) -> Source:
    """`DIR/images` + `DIR/masks`; every pair checked before training (`masks`)."""
    path = os.path.expanduser(path)
    image_files, mask_files = masks.pair_files(path)
    summary = masks.check_pairs(image_files, mask_files)
    class_names = masks.class_names(path, summary.largest_id, summary.binary)
    train, held_out = split_indices([0] * len(image_files), val_split, seed)
    chosen = held_out if subset == "val" else train
    paths = np.asarray(image_files)[chosen]
    mask_paths = np.asarray(mask_files)[chosen]
    return Source(spec=f"folder:{path}", class_names=class_names,
                  records=lambda: tf.data.Dataset.from_tensor_slices((paths, mask_paths)),
                  decode=images.decode_file, num_examples=len(paths),
                  arrays=(paths, mask_paths),
                  decode_mask=lambda mask: decode_mask_file(mask, summary.binary),
                  notes=(masks.binary_note(path),) if summary.binary else ())


def load_segmentation_source(spec: str, subset: str = "train", val_split: float = 0.1,
                             seed: int = 0) -> Source:
    """Opens segmentation data (see the module docstring).

    Args:
        spec: 'digit-scenes' or 'folder:DIR'.
        subset: 'train' or 'val' (digit-scenes: its validation scenes; a folder: the
            `val_split` hold-out).
        val_split: the fraction of a folder held out as 'val'.
        seed: the hold-out's seed.

    Raises:
        ValueError: another kind of spec, or data that cannot be used (named).
    """
    kind, argument = parse_spec(spec)
    if kind == "digit-scenes":
        return digit_scenes_source("train" if subset == "train" else "test")
    if kind == "folder":
        return folder_segmentation_source(argument, subset, val_split, seed)
    raise ValueError(f"segmentation data {spec!r}: expected 'digit-scenes' or 'folder:DIR' "
                     "(DIR/images/ and DIR/masks/)")


def open_segmentation_data(data: str, val_data: str = "", val_split: float = 0.1,
                           seed: int = 0) -> TrainingData:
    """The training and validation segmentation sources, as `sources.open_training_data`
    opens classification data.

    Raises:
        ValueError: the validation data's classes differ from the training data's.
    """
    found = open_paired_data(load_segmentation_source, data, val_data, val_split, seed,
                             "digit-scenes", "the digit scenes' validation set")
    train, val = found.train, found.val
    if val is not None and val.num_classes != train.num_classes:
        raise ValueError(f"validation data has {val.num_classes} classes, training data "
                         f"{train.num_classes}: expected the same classes (a classes.txt in "
                         "each folder fixes the list)")
    return found


# --- evaluation ----------------------------------------------------------------------------------

def mask_to_size(mask: tf.Tensor, size) -> tf.Tensor:
    """uint8 [h, w] class ids -> [height, width] by nearest neighbour (ids stay ids)."""
    resized = tf.image.resize(mask[..., None], size, method="nearest")
    return tf.cast(resized[..., 0], tf.uint8)


def image_to_size(image: tf.Tensor, size) -> tf.Tensor:
    """Any uint8 [h, w, 3] image -> float32 [height, width, 3] 0..255: the whole image resized
    (bilinear, antialiased), never cropped, so that its mask keeps lining up."""
    return tf.image.resize(tf.cast(image, tf.float32), size, method="bilinear", antialias=True)


def eval_pairs(source: Source, image_size) -> tf.data.Dataset:
    """Unbatched (image float32 0..255 at `image_size`, uint8 mask at its own size), in source
    order."""
    size = images.image_hw(image_size)
    return source.records().map(traced_as_written(
        lambda record, label: (image_to_size(source.decode(record), size),
                               source.decode_mask(label))),
        num_parallel_calls=tf.data.AUTOTUNE)


def take_pairs(source: Source, image_size, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Up to `count` images and masks at the model's size, for export and its checks.

    Args:
        source: a segmentation `Source`.
        image_size: the model's size, an int or (height, width).
        count: at most this many pairs, in source order.

    Returns:
        (float32 images [n, height, width, 3] in 0..255, uint8 masks [n, height, width] with
        255 where pixels are ignored).
    """
    size = images.image_hw(image_size)
    pairs = eval_pairs(source, size).map(
        traced_as_written(lambda image, mask: (image, mask_to_size(mask, size))))
    taken = list(pairs.take(count).as_numpy_iterator())
    if not taken:
        return np.zeros((0, *size, 3), np.float32), np.zeros((0, *size), np.uint8)
    return (np.stack([image for image, _ in taken]).astype(np.float32),
            np.stack([mask for _, mask in taken]))


def native_tiles(source: Source, image_size) -> tf.data.Dataset:
    """Unbatched (image float32 0..255, uint8 mask) tiles of `image_size` cut side by side
    from each image at its own resolution, in source order; an image is padded to whole tiles
    (pixels 0, mask 255 = ignored). What a model trained on native crops is validated on."""
    rows, cols = images.image_hw(image_size)

    @traced_as_written
    def tiles(record, label):
        image, mask = tf.cast(source.decode(record), tf.float32), source.decode_mask(label)
        height, width, channels = tf.unstack(tf.shape(image))
        pad_rows, pad_cols = (rows - height % rows) % rows, (cols - width % cols) % cols
        image = tf.pad(image, [[0, pad_rows], [0, pad_cols], [0, 0]])
        mask = tf.pad(mask, [[0, pad_rows], [0, pad_cols]], constant_values=masks.IGNORE)
        grid = [(height + pad_rows) // rows, rows, (width + pad_cols) // cols, cols]
        image = tf.reshape(tf.transpose(tf.reshape(image, grid + [channels]), [0, 2, 1, 3, 4]),
                           [-1, rows, cols, channels])
        mask = tf.reshape(tf.transpose(tf.reshape(mask, grid), [0, 2, 1, 3]), [-1, rows, cols])
        return tf.data.Dataset.from_tensor_slices((image, mask))

    return source.records().flat_map(tiles)


def take_tiles(source: Source, image_size, count: int) -> tuple[np.ndarray, np.ndarray]:
    """`take_pairs` for a model trained on native crops: the first `count` `native_tiles`."""
    size = images.image_hw(image_size)
    taken = list(native_tiles(source, size).take(count).as_numpy_iterator())
    if not taken:
        return np.zeros((0, *size, 3), np.float32), np.zeros((0, *size), np.uint8)
    return (np.stack([image for image, _ in taken]).astype(np.float32),
            np.stack([mask for _, mask in taken]))


def native_eval_dataset(source: Source, image_size, batch_size: int,
                        preprocessing=OFFICIAL) -> tf.data.Dataset:
    """`eval_dataset` for a model trained on native crops: batches of `native_tiles`, their
    number counted once (Keras takes a stream of unknown length for one that ran short)."""
    tiles = native_tiles(source, image_size)
    count = int(tiles.reduce(tf.constant(0, tf.int64),
                             traced_as_written(lambda total, _: total + 1)))
    dataset = tiles.apply(tf.data.experimental.assert_cardinality(count)).map(traced_as_written(
        lambda image, mask: (images.scale(image, preprocessing), tf.cast(mask, tf.int32))))
    return with_options(dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE))


def eval_dataset(source: Source, image_size, batch_size: int, drop_remainder: bool = False,
                 max_examples: int | None = None, preprocessing=OFFICIAL) -> tf.data.Dataset:
    """Validation batches `(model inputs, int32 masks at the model's size)`, no augmentation.

    Args:
        source: a segmentation `Source`.
        image_size: the model's size, an int or (height, width).
        batch_size: examples per batch.
        drop_remainder: drop a last partial batch.
        max_examples: only the first examples (None: all).
        preprocessing: what the weights expect of pixels.
    """
    size = images.image_hw(image_size)
    dataset = eval_pairs(source, size).map(traced_as_written(
        lambda image, mask: (images.scale(image, preprocessing),
                             tf.cast(mask_to_size(mask, size), tf.int32))))
    if max_examples is not None:
        dataset = dataset.take(max_examples)
    dataset = dataset.batch(batch_size, drop_remainder=drop_remainder)
    return with_options(dataset.prefetch(tf.data.AUTOTUNE))
