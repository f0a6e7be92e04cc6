"""Detection sources for `vit train --task detect`: a `Source` whose labels are boxes.

A detection source's labels are float32 [max_objects, 5] per image: x0, y0, x1, y1 in pixels of
the image as stored, then the class id; rows of class -1 are padding (an image may hold no
object). `Source.boxes` marks such a source.

Data specs:
    `digit-boxes`    the built-in offline set: scikit-learn's digits drawn in colour on plain
                     64x64 canvases, one to four per scene at 12-24 px, apart, each boxed
                     tightly round its ink (classes 'digit 0' ... 'digit 9'). 1,600 training
                     scenes from the digits' training split, 400 validation scenes from their
                     test split, so no digit image is shared.
    `folder:DIR`     images with COCO JSON, YOLO or Pascal VOC boxes (`box_files`);
                     the `val_split` hold-out is a seeded random fraction.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from vit_app import images
from vit_app.tasks.detect.data import box_files
from vit_app.data.evaluation import traced_as_written, with_options
from vit_app.data.source import Source
from vit_app.data.training_data import (TrainingData, digits_arrays, open_paired_data,
                                        split_indices)
from vit_app.data.specs import parse_spec

SCENE_SIZE = 64
SCENES = {"train": 1600, "test": 400}
SCENE_SEED = {"train": 0, "test": 1}
DIGIT_SIDES = (12, 24)   # each digit is drawn at a side in this range (pixels)
OBJECTS = (1, 4)         # digits per scene, both ends included
INK = 0.45               # a digit's box bounds its ink above this (of 1)
DIGIT_BOX_CLASSES = [f"digit {index}" for index in range(10)]
PAD_CLASS = -1


def _free_place(side: int, taken: list, rng) -> tuple[int, int] | None:
    """A random top-left corner where a `side` square keeps 2 px from every box in `taken`."""
    for _ in range(20):
        top, left = (int(value) for value in rng.integers(0, SCENE_SIZE - side + 1, size=2))
        if all(left + side + 2 <= x0 or x1 + 2 <= left or top + side + 2 <= y0 or y1 + 2 <= top
               for x0, y0, x1, y1, _ in taken):
            return top, left
    return None


def _paste_digit(image, digit, label, rng, taken: list) -> None:
    """Draws one digit (8x8, 0..255) in a random colour at a free place and size, and adds its
    tight box to `taken`."""
    from PIL import Image

    side = int(rng.integers(DIGIT_SIDES[0], DIGIT_SIDES[1] + 1))
    place = _free_place(side, taken, rng)
    if place is None:
        return
    top, left = place
    ink = np.asarray(Image.fromarray(digit).resize((side, side), Image.BILINEAR),
                     np.float32) / 255.0
    colour = rng.uniform(120, 255, size=3)
    window = (slice(top, top + side), slice(left, left + side))
    image[window] = image[window] * (1 - ink[..., None]) + colour * ink[..., None]
    rows, cols = np.nonzero(ink > INK)
    if rows.size:
        taken.append((left + cols.min(), top + rows.min(), left + cols.max() + 1,
                      top + rows.max() + 1, label))


def digit_box_arrays(split: str) -> tuple[np.ndarray, np.ndarray]:
    """The built-in scenes of `split` ('train' or 'test'): uint8 images [n, 64, 64, 3] and
    float32 boxes [n, 4, 5] (x0, y0, x1, y1, class; class -1 pads); the same every time."""
    digits, labels = digits_arrays(split)
    rng = np.random.default_rng(SCENE_SEED[split])
    count = SCENES[split]
    scenes = np.empty((count, SCENE_SIZE, SCENE_SIZE, 3), np.uint8)
    boxes = np.full((count, OBJECTS[1], 5), PAD_CLASS, np.float32)
    for index in range(count):
        image = np.broadcast_to(rng.uniform(0, 90, size=3), (SCENE_SIZE, SCENE_SIZE, 3)).copy()
        taken = []
        for pick in rng.choice(len(labels), size=int(rng.integers(OBJECTS[0], OBJECTS[1] + 1)),
                               replace=False):
            _paste_digit(image, digits[pick, :, :, 0], int(labels[pick]), rng, taken)
        scenes[index] = np.clip(np.round(image), 0, 255).astype(np.uint8)
        if taken:
            boxes[index, :len(taken)] = np.asarray(taken, np.float32)
    return scenes, boxes


def digit_boxes_source(split: str) -> Source:
    """The built-in scenes as an in-memory detection `Source`."""
    scenes, boxes = digit_box_arrays(split)
    return Source(spec="digit-boxes", class_names=list(DIGIT_BOX_CLASSES),
                  records=lambda: tf.data.Dataset.from_tensor_slices((scenes, boxes)),
                  decode=lambda image: image, num_examples=len(scenes),
                  arrays=(scenes, boxes), boxes=True)


def folder_detection_source(path: str, subset: str, val_split: float, seed: int) -> Source:
    """A folder of images and COCO, YOLO or VOC boxes, every file checked before training
    (`vit_app.tasks.detect.data.box_files`)."""
    files, boxes, class_names = box_files.read_folder(path)
    train, held_out = split_indices([0] * len(files), val_split, seed)
    chosen = held_out if subset == "val" else train
    paths, chosen_boxes = files[chosen], boxes[chosen]
    return Source(spec=f"folder:{path}", class_names=class_names,
                  records=lambda: tf.data.Dataset.from_tensor_slices((paths, chosen_boxes)),
                  decode=images.decode_file, num_examples=len(paths),
                  arrays=(paths, chosen_boxes), boxes=True)


def load_detection_source(spec: str, subset: str = "train", val_split: float = 0.1,
                          seed: int = 0) -> Source:
    """Opens detection data (see the module docstring).

    Args:
        spec: 'digit-boxes' or 'folder:DIR'.
        subset: 'train' or 'val' (digit-boxes: its validation scenes; a folder: the
            `val_split` hold-out).
        val_split: the fraction of a folder held out as 'val'.
        seed: the hold-out's seed.

    Raises:
        ValueError: another kind of spec, or data that cannot be used (named).
    """
    kind, argument = parse_spec(spec)
    if kind == "digit-boxes":
        return digit_boxes_source("train" if subset == "train" else "test")
    if kind == "folder":
        return folder_detection_source(argument, subset, val_split, seed)
    raise ValueError(f"detection data {spec!r}: expected 'digit-boxes' or 'folder:DIR' (COCO "
                     "JSON, YOLO or Pascal VOC boxes)")


def open_detection_data(data: str, val_data: str = "", val_split: float = 0.1,
                        seed: int = 0) -> TrainingData:
    """The training and validation detection sources, as `sources.open_training_data` opens
    classification data.

    Raises:
        ValueError: the validation data's classes differ from the training data's.
    """
    found = open_paired_data(load_detection_source, data, val_data, val_split, seed,
                             "digit-boxes", "the digit boxes' validation scenes")
    train, val = found.train, found.val
    if val is not None and val.class_names != train.class_names:
        raise ValueError(f"validation data has the classes {val.class_names}, training data "
                         f"{train.class_names}: expected the same classes in the same order (a "
                         "classes.txt in each folder fixes the list)")
    return found


def labelled_images(source: Source, count: int | None = None):
    """Up to `count` of the source's images at their own size (uint8 arrays) and their boxes
    (float32 [n, 5] pixel corners and class, padding dropped)."""
    found_images, found_boxes = [], []
    for record, boxes in source.records().take(-1 if count is None else count):
        found_images.append(source.decode(record).numpy())
        boxes = boxes.numpy()
        found_boxes.append(boxes[boxes[:, 4] >= 0])
    return found_images, found_boxes


def image_sizes(source: Source) -> np.ndarray:
    """Each image's (height, width) as stored: int [n, 2], from the arrays of an in-memory
    source or the headers of its files (nothing decoded)."""
    records = source.arrays[0]
    if isinstance(records, np.ndarray) and records.ndim == 4:
        return np.tile(np.asarray(records.shape[1:3]), (len(records), 1))
    sizes = []
    for path in records:   # files checked when the folder was read
        with open(path.decode() if isinstance(path, bytes) else str(path), "rb") as file:
            width, height = images.pixel_size(file.read())
        sizes.append((height, width))
    return np.asarray(sizes, np.int64).reshape(-1, 2)


def object_fractions(source: Source, sizes=None) -> np.ndarray:
    """Every object of an in-memory source: float64 [objects, 5] (class, cx, cy, w, h in
    fractions of its image); `sizes`: its `image_sizes`, where the caller has them."""
    boxes = np.asarray(source.arrays[1], np.float64)
    sizes = (image_sizes(source) if sizes is None else np.asarray(sizes)).astype(np.float64)
    scale = np.concatenate([sizes[:, ::-1], sizes[:, ::-1]], axis=-1)[:, None]
    corners = boxes[..., :4] / scale
    found = boxes[..., 4] >= 0
    centre = (corners[..., :2] + corners[..., 2:]) / 2
    side = corners[..., 2:] - corners[..., :2]
    return np.concatenate([boxes[..., 4:5], centre, side], axis=-1)[found]


# --- model inputs and targets ----------------------------------------------------------------

def to_model_size(image, size) -> tf.Tensor:
    """Any uint8 [h, w, 3] image -> float32 [height, width, 3] 0..255: the whole image resized
    (bilinear, antialiased), never cropped, so that its boxes keep their fractions."""
    return tf.image.resize(tf.cast(image, tf.float32), size, method="bilinear", antialias=True)


def targets(boxes, image_shape):
    """Pixel boxes [n, 5] of an image of `image_shape` -> the loss's targets [n, 5]: class,
    cx, cy, w, h in fractions of the image (zeros where the class pads)."""
    height, width = tf.cast(image_shape[0], tf.float32), tf.cast(image_shape[1], tf.float32)
    corners = boxes[:, :4] / tf.stack([width, height, width, height])
    centre_size = tf.concat([(corners[:, :2] + corners[:, 2:]) / 2,
                             corners[:, 2:] - corners[:, :2]], axis=-1)
    present = boxes[:, 4:5] >= 0
    return tf.concat([tf.where(present, boxes[:, 4:5], float(PAD_CLASS)),
                      tf.where(present, centre_size, 0.0)], axis=-1)


def examples(source: Source, image_size) -> tf.data.Dataset:
    """(float32 images 0..255 resized whole to `image_size`, targets [max_objects, 5])."""
    @traced_as_written
    def prepare(record, label):
        image = source.decode(record)
        return to_model_size(image, image_size), targets(tf.cast(label, tf.float32),
                                                         tf.shape(image))

    return with_options(source.records().map(prepare, num_parallel_calls=tf.data.AUTOTUNE))


def take_examples(source: Source, image_size, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Up to `count` examples of `examples`, as arrays."""
    found = list(examples(source, image_size).take(count).batch(64).as_numpy_iterator())
    if not found:
        raise ValueError(f"{source.spec} holds no images")
    return (np.concatenate([pair[0] for pair in found]),
            np.concatenate([pair[1] for pair in found]))
