"""The count task's sources: images labelled with how many dots they hold (float32 counts)."""

from __future__ import annotations

import csv
import os

import numpy as np
import tensorflow as tf

from count_task.data import BUILT_IN, COUNTS_FILE
from vit_app import images
from vit_app.data.training_data import TrainingData, open_paired_data, split_indices
from vit_app.data.source import Source, check_files
from vit_app.data.specs import parse_spec
from vit_keras.preprocessing import OFFICIAL

OUTPUT_NAMES = ["dots"]  # the model's one output: how many
SIDE, DOT, MOST_DOTS = 16, 3, 3
SET_SIZES = {"train": 320, "val": 80}


def dot_count_arrays(subset: str) -> tuple[np.ndarray, np.ndarray]:
    """The built-in set: uint8 [n, 16, 16, 3] images of 0-3 white dots, each in its own cell
    of a 4x4 grid, on dark noise; float32 [n] counts."""
    rng = np.random.default_rng({"train": 0, "val": 1}[subset])
    count = SET_SIZES[subset]
    pictures = rng.integers(0, 60, (count, SIDE, SIDE, 3)).astype(np.uint8)
    dots = rng.integers(0, MOST_DOTS + 1, count)
    for picture, number in zip(pictures, dots):
        for cell in rng.choice(16, number, replace=False):
            top, left = 4 * (cell // 4) + rng.integers(0, 2), 4 * (cell % 4) + rng.integers(0, 2)
            picture[top:top + DOT, left:left + DOT] = 255
    return pictures, dots.astype(np.float32)


def array_source(spec: str, pictures: np.ndarray, counts: np.ndarray) -> Source:
    """Images held in memory (uint8 arrays, or file paths when `pictures` holds strings)."""
    files = pictures.dtype.kind in "US"
    return Source(spec=spec, class_names=OUTPUT_NAMES,
                  records=lambda: tf.data.Dataset.from_tensor_slices((pictures, counts)),
                  decode=images.decode_file if files else (lambda record: record),
                  num_examples=len(counts), arrays=(pictures, counts))


def read_counts(folder: str) -> tuple[np.ndarray, np.ndarray]:
    """The image paths and counts of a folder's `counts.csv`.

    Raises:
        ValueError: a row that is not 'file,count' with a count >= 0, or a missing image.
    """
    path = os.path.join(folder, COUNTS_FILE)
    files, counts = [], []
    with open(path, newline="", encoding="utf-8") as stream:
        for line, row in enumerate(csv.reader(stream), start=1):
            if line == 1 and row == ["file", "count"]:
                continue
            try:
                name, number = row
                number = float(number)
            except ValueError:
                raise ValueError(f"{path}:{line}: expected 'file,count' with a number, got "
                                 f"{','.join(row)!r}") from None
            if number < 0 or not os.path.isfile(os.path.join(folder, name)):
                raise ValueError(f"{path}:{line}: expected an image of {folder} and a count "
                                 f">= 0, got {name!r} and {number:g}")
            files.append(os.path.join(folder, name))
            counts.append(number)
    if not files:
        raise ValueError(f"{path}: no 'file,count' rows")
    check_files(files)
    return np.asarray(files), np.asarray(counts, np.float32)


def load_count_source(spec: str, subset: str = "train", val_split: float = 0.0,
                      seed: int = 0) -> Source:
    """The built-in dots' `subset` ('train', or 'val'/'test': its held-out part), or a folder
    of counted images (its seeded `val_split` held out as 'val')."""
    kind, argument = parse_spec(spec)
    if kind == BUILT_IN:
        return array_source(spec, *dot_count_arrays("train" if subset == "train" else "val"))
    pictures, counts = read_counts(argument)
    train, held_out = split_indices([0] * len(counts), val_split, seed)
    picked = train if subset == "train" else held_out
    return array_source(spec, pictures[picked], counts[picked])


def open_count_data(data: str, val_data: str = "", val_split: float = 0.1,
                    seed: int = 0) -> TrainingData:
    """Training and validation sources, chosen as every task with labels of its own chooses
    them (`open_paired_data`)."""
    return open_paired_data(load_count_source, data, val_data, val_split, seed, BUILT_IN,
                            "its held-out part")


def resized(source: Source, record, size) -> tf.Tensor:
    """One record's image, float32 in 0..255, resized whole to `size`."""
    image = tf.cast(source.decode(record), tf.float32)
    return tf.image.resize(image, size, antialias=True)


def labelled_images(source: Source, size, count: int | None = None):
    """Up to `count` images (float32 0..255 at `size`) and their float32 counts."""
    pairs = source.records().take(-1 if count is None else count)
    pictures, counts = [], []
    for record, number in pairs:
        pictures.append(resized(source, record, images.image_hw(size)).numpy())
        counts.append(float(number))
    return np.stack(pictures), np.asarray(counts, np.float32)


def eval_dataset(source: Source, size, batch_size: int, drop_remainder: bool = False,
                 max_examples: int | None = None, preprocessing=OFFICIAL) -> tf.data.Dataset:
    """Validation batches (model inputs, float32 counts [batch, 1])."""
    size = images.image_hw(size)
    dataset = source.records().map(lambda record, number: (
        images.scale(resized(source, record, size), preprocessing),
        tf.reshape(tf.cast(number, tf.float32), [1])))
    if max_examples is not None:
        dataset = dataset.take(max_examples)
    return dataset.batch(batch_size, drop_remainder=drop_remainder).prefetch(2)
