"""The classify task's sources: digits, image folder, CSV list, tfds, TFRecord.

Data specs:
    `digits`             scikit-learn's bundled 8x8 digits (1797 images, offline); a stratified,
                         seeded 80/20 split: split 'train' or 'test'.
    `folder:PATH`        one sub-folder per class holding JPEG/PNG/BMP/GIF/TIFF files; the
                         classes are the sorted sub-folder names; `val_split` holds out a
                         stratified fraction.
    `csv:PATH`           a multi-label image list: a CSV file with the columns `file,labels`
                         (see `vit_app.tasks.classify.data.csv_source`); `val_split` holds out a seeded random
                         fraction. Its labels are multi-hot float32 vectors.
    `tfds:NAME[:SPLIT]`  a TensorFlow Datasets builder with an `image` and a `label` feature
                         (`--data-dir` is its data_dir, local or gs://).
    `tfrecord:GLOB`      TFRecord files of tf.train.Examples with `image/encoded` (JPEG/PNG/BMP/GIF
                         bytes) and `image/class/label` (int64, 0-based). Class names come from a
                         `labels.txt` (one per line) next to the files, else `class_<i>`.

Bad files: a `folder:` or `csv:` source checks every file up front (signature and a PIL verify) and
refuses to start, naming the bad files, because a run that dies hours in is the worst outcome.
Records of a `tfrecord:`/`tfds:` source cannot be checked without reading the whole data set:
a record whose image does not decode is skipped (TensorFlow logs a warning for each one).
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from vit_app import images
from vit_app.data.evaluation import traced_as_written
from vit_app.data.source import Source, check_files, file_list_source
from vit_app.data.specs import list_folder, parse_spec, refuse_other_tasks_data
from vit_app.data.training_data import (DIGITS_TEST_FRACTION, TrainingData, digits_arrays,
                                        evaluation_subset, split_indices)
from vit_app.tasks.classify.data.csv_source import csv_source
from vit_keras import tasks


def load_source(spec: str, subset: str = "train", data_dir: str | None = None,
                val_split: float = 0.1, seed: int = 0) -> Source:
    """Opens the data behind `spec`.

    Args:
        spec: a data spec (see the module docstring).
        subset: 'train' or 'val': which part of a source with a natural split to use (digits:
            the 80% / 20% split; folder, csv: the `val_split` hold-out; tfds: the default
            splits).
        data_dir: tfds data_dir (local or gs://).
        val_split: fraction of a folder or CSV list held out as 'val' (0 = none).
        seed: seed of the folder or CSV hold-out.

    Returns:
        A `Source`.
    """
    if subset not in ("train", "val"):
        raise ValueError(f"subset must be 'train' or 'val', got {subset!r}")
    kind, argument = parse_spec(spec)
    refuse_other_tasks_data(spec, tasks.CLASSIFY)
    if kind == "digits":
        return digits_source("train" if subset == "train" else "test")
    if kind == "folder":
        return folder_source(argument, subset, val_split, seed)
    if kind == "csv":
        return csv_source(argument, subset, val_split, seed)
    if kind == "tfds":
        return tfds_source(argument, subset, data_dir)
    return tfrecord_source(argument)


def has_natural_val(spec: str, val_split: float) -> bool:
    """Whether `load_source(spec, 'val')` has something to give."""
    kind, _ = parse_spec(spec)
    if kind in ("folder", "csv"):
        return val_split > 0
    return kind in ("digits", "tfds")


def open_training_data(data: str, val_data: str = "", val_split: float = 0.1, seed: int = 0,
                       data_dir: str | None = None) -> TrainingData:
    """Opens the training data and its validation data.

    Given `val_data`, the training source keeps every one of its examples and `val_split` is
    not used; otherwise a source with a natural held-out part gives it (digits: the 20% test
    split, tfds: `validation` else `test`, folder: a stratified `val_split` hold-out, csv: a
    random `val_split` hold-out).

    Args:
        data: the training data spec.
        val_data: the validation data spec ('' = the training source's held-out part). A
            digits or tfds spec without a split gives its held-out part; a folder, CSV or
            TFRecord spec gives all of its examples.
        val_split: fraction of a folder held out when no `val_data` is given.
        seed: seed of the folder hold-out.
        data_dir: tfds data_dir.

    Returns:
        A `TrainingData`.
    """
    if val_data:
        train = load_source(data, "train", data_dir, 0.0, seed)
        val = load_source(val_data, evaluation_subset(val_data), data_dir, 0.0, seed)
        origin = f"{val_data} (--val-data)"
    elif has_natural_val(data, val_split):
        train = load_source(data, "train", data_dir, val_split, seed)
        val = load_source(data, "val", data_dir, val_split, seed)
        origin = _held_out_origin(data, val_split)
    else:
        train, val = load_source(data, "train", data_dir, val_split, seed), None
        origin = "none (give --val-data, or val_split > 0 for a folder)"
    if val is not None and val.num_classes != train.num_classes:
        raise ValueError(f"validation data has {val.num_classes} classes, training data "
                         f"{train.num_classes}: expected the same classes")
    if val is not None and (train.multilabel or val.multilabel) and \
            val.class_names != train.class_names:
        raise ValueError(f"validation data has the classes {val.class_names}, training data "
                         f"{train.class_names}: expected the same classes in the same order "
                         "(a labels.txt beside each CSV file fixes the list)")
    return TrainingData(train, val, origin)


def _held_out_origin(data: str, val_split: float) -> str:
    kind, _ = parse_spec(data)
    if kind == "digits":
        return f"digits' {DIGITS_TEST_FRACTION:.0%} test split"
    if kind == "folder":
        return f"{val_split:.0%} of the training folder held out (val_split, stratified)"
    if kind == "csv":
        return f"{val_split:.0%} of the CSV rows held out (val_split, seeded random)"
    return f"{data}'s held-out split"


# --- digits -------------------------------------------------------------------------------------

def digits_source(split: str) -> Source:
    """The digits split as a `Source` of in-memory uint8 images."""
    images, labels = digits_arrays(split)
    return Source(spec="digits", class_names=[str(i) for i in range(10)],
                  records=lambda: tf.data.Dataset.from_tensor_slices((images, labels)),
                  decode=lambda image: image, num_examples=len(labels),
                  arrays=(images, labels))


# --- folder -------------------------------------------------------------------------------------

def folder_source(path: str, subset: str, val_split: float, seed: int) -> Source:
    """One sub-folder per class; every file is checked before training starts."""
    path = os.path.expanduser(path)
    class_names, files, labels = list_folder(path)
    check_files(files)
    train_idx, val_idx = split_indices(labels, val_split, seed)
    chosen = train_idx if subset == "train" else val_idx
    if not len(chosen):
        raise ValueError(f"folder {path!r} has no '{subset}' images with val_split={val_split}")
    return file_list_source(f"folder:{path}", class_names, np.asarray(files)[chosen],
                            np.asarray(labels, np.int32)[chosen])


# --- tfds ---------------------------------------------------------------------------------------

def tfds_source(argument: str, subset: str, data_dir: str | None) -> Source:
    """A tfds builder; SPLIT defaults to 'train' (train) or 'validation'/'test' (val)."""
    import tensorflow_datasets as tfds

    name, _, split = argument.partition(":")
    builder = tfds.builder(name, data_dir=data_dir)
    try:
        splits = list(builder.info.splits.keys())
    except Exception:  # an unprepared builder may not know its splits yet
        splits = []
    if not split:
        split = "train" if subset == "train" else next(
            (s for s in ("validation", "test") if s in splits), "test")
    features = builder.info.features
    if "image" not in features or "label" not in features:
        raise ValueError(f"tfds data set {name!r} has features {list(features)}: expected "
                         "'image' and 'label'")
    class_names = list(features["label"].names)
    try:
        num_examples = int(builder.info.splits[split].num_examples)
    except Exception:
        num_examples = None

    def records():
        builder.download_and_prepare()
        dataset = builder.as_dataset(split=split, shuffle_files=False,
                                     decoders={"image": tfds.decode.SkipDecoding()})
        return dataset.map(traced_as_written(
            lambda example: (example["image"], tf.cast(example["label"], tf.int32))))

    return Source(spec=f"tfds:{argument}", class_names=class_names, records=records,
                  decode=images.decode, num_examples=num_examples or None, ignore_errors=True)


# --- TFRecord -----------------------------------------------------------------------------------

TFRECORD_FEATURES = {
    "image/encoded": tf.io.FixedLenFeature([], tf.string),
    "image/class/label": tf.io.FixedLenFeature([], tf.int64),
}


def _read_label_file(files: list[str]) -> list[str] | None:
    path = os.path.join(os.path.dirname(files[0]), "labels.txt")
    if not tf.io.gfile.exists(path):
        return None
    with tf.io.gfile.GFile(path) as file:
        return [line.strip() for line in file if line.strip()]


def tfrecord_source(pattern: str) -> Source:
    """TFRecord files matching `pattern` (local or gs://); see TFRECORD_FEATURES."""
    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        raise ValueError(f"tfrecord:{pattern} matches no files")
    parse = lambda proto: tf.io.parse_single_example(proto, TFRECORD_FEATURES)  # noqa: E731
    class_names = _read_label_file(files)
    num_examples = None
    if class_names is None:  # one pass over the labels only, to learn the number of classes
        labels = tf.data.TFRecordDataset(files).map(
            traced_as_written(lambda p: parse(p)["image/class/label"]))
        labels = np.fromiter(labels.as_numpy_iterator(), dtype=np.int64)
        num_examples = len(labels)
        class_names = [f"class_{i}" for i in range(int(labels.max()) + 1 if len(labels) else 0)]
    if not class_names:
        raise ValueError(f"tfrecord:{pattern} holds no examples")

    def records():
        dataset = tf.data.TFRecordDataset(files)
        return dataset.map(traced_as_written(
            lambda proto: (parse(proto)["image/encoded"],
                           tf.cast(parse(proto)["image/class/label"], tf.int32))))

    return Source(spec=f"tfrecord:{pattern}", class_names=class_names, records=records,
                  decode=images.decode, num_examples=num_examples, ignore_errors=True)
