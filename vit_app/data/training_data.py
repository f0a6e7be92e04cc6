"""What every task's data readers share: the training and validation sources a run opens
(`TrainingData`), how a task whose labels are its own picks its validation data
(`open_paired_data`, `evaluation_subset`, `split_indices`), and scikit-learn's digits, the
images every built-in set is drawn from (`digits_arrays`). Each task's readers are its own
(`vit_app.tasks.<task>.data`)."""

from __future__ import annotations

import dataclasses

import numpy as np

from vit_app.data.source import Source
from vit_app.data.specs import built_in_sets, parse_spec

# digits' stratified test split: its share and seed (every run sees the same test set).
DIGITS_TEST_FRACTION = 0.2
DIGITS_SPLIT_SEED = 0


@dataclasses.dataclass
class TrainingData:
    """The training source, the validation source (or None) and where validation comes from.

    Attributes:
        train: the examples trained on.
        val: the examples validated on, or None.
        val_origin: a few words on where `val` comes from (for the run header).
    """

    train: Source
    val: Source | None
    val_origin: str


def open_paired_data(load, data: str, val_data: str, val_split: float, seed: int,
                     built_in: str, built_in_origin: str) -> TrainingData:
    """The training and validation sources of a task whose labels are its own (masks, boxes),
    chosen as `open_training_data` chooses them.

    Args:
        load: (spec, subset, val_split, seed) -> a `Source`.
        data, val_data, val_split, seed: as `open_training_data`.
        built_in: the spec kind of the task's built-in set, whose 'val' subset is its own
            validation set.
        built_in_origin: how the run header names that validation set.
    """
    if val_data:
        train = load(data, "train", 0.0, seed)
        val = load(val_data, "val" if parse_spec(val_data)[0] == built_in else "train", 0.0,
                   seed)
        return TrainingData(train, val, f"{val_data} (--val-data)")
    if parse_spec(data)[0] == built_in or val_split > 0:
        origin = built_in_origin if parse_spec(data)[0] == built_in else \
            f"{val_split:.0%} of the training folder held out (val_split, seeded)"
        return TrainingData(load(data, "train", val_split, seed),
                            load(data, "val", val_split, seed), origin)
    return TrainingData(load(data, "train", 0.0, seed), None,
                        "none (give --val-data, or val_split > 0 for a folder)")


def evaluation_subset(spec: str) -> str:
    """The subset of `spec` that evaluates: a task's built-in set and tfds without a split give
    their held-out part ('val'); a folder, CSV or TFRecord spec gives all of its examples
    ('train')."""
    kind = parse_spec(spec)[0]
    return "val" if kind in built_in_sets() or kind == "tfds" else "train"


def split_indices(labels: list[int], fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified, seeded (train, held-out) index split; each class keeps >= 1 train example."""
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"val_split must be in [0, 1), got {fraction!r}")
    rng = np.random.default_rng(seed)
    labels = np.asarray(labels)
    train, held_out = [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        count = min(int(round(fraction * len(members))), len(members) - 1)
        held_out.extend(members[:count])
        train.extend(members[count:])
    return np.sort(np.asarray(train, int)), np.sort(np.asarray(held_out, int))


def digits_arrays(split: str) -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits as uint8 RGB [n, 8, 8, 3] images (0..16 scaled to 0..255) + labels.

    The split is stratified 80/20 with a fixed seed, so every run sees the same test set.
    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    if split not in ("train", "test"):
        raise ValueError(f"digits split must be 'train' or 'test', got {split!r}")
    images, labels = load_digits(return_X_y=True)
    images = np.round(images.reshape(-1, 8, 8, 1) * (255.0 / 16.0)).astype(np.uint8)
    images = np.repeat(images, 3, axis=-1)
    train_x, test_x, train_y, test_y = train_test_split(
        images, labels, test_size=DIGITS_TEST_FRACTION, stratify=labels,
        random_state=DIGITS_SPLIT_SEED)
    if split == "train":
        return train_x, train_y.astype(np.int32)
    return test_x, test_y.astype(np.int32)


