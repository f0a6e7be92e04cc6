"""Data sources (digits, folder, tfds mock, TFRecord), corrupt files, seeded pipeline, augment."""

import os

import numpy as np
import pytest
import tensorflow as tf
from helpers import record_calls
from PIL import Image

from vit_app.data import evaluation, specs, training_data
from vit_app.tasks.classify.data import readers
from training import augment, pipeline
from training.presets import Preset


def _write_folder(root, per_class=3, classes=("cat", "dog"), size=(12, 10)):
    rng = np.random.default_rng(0)
    for index, name in enumerate(classes):
        os.makedirs(root / name, exist_ok=True)
        for i in range(per_class):
            pixels = rng.integers(0, 256, (*size, 3), dtype=np.uint8)
            ext = ("png", "jpg", "bmp")[i % 3]
            Image.fromarray(pixels).save(root / name / f"{index}_{i}.{ext}")
    return root


def test_digits_split_is_stratified_and_fixed():
    train_x, train_y = training_data.digits_arrays("train")
    test_x, test_y = training_data.digits_arrays("test")
    assert train_x.shape == (1437, 8, 8, 3) and test_x.shape == (360, 8, 8, 3)
    assert train_x.dtype == np.uint8 and train_x.max() == 255
    assert np.bincount(test_y).min() >= 35            # every class held out ~20%
    np.testing.assert_array_equal(training_data.digits_arrays("test")[1], test_y)


def test_folder_source_lists_classes_and_holds_out_a_stratified_split(tmp_path):
    root = _write_folder(tmp_path / "images", per_class=5)
    train = readers.load_source(f"folder:{root}", "train", val_split=0.2)
    val = readers.load_source(f"folder:{root}", "val", val_split=0.2)
    assert train.class_names == ["cat", "dog"]
    assert (train.num_examples, val.num_examples) == (8, 2)
    batches = list(evaluation.eval_dataset(val, 16, batch_size=4))
    images, labels = batches[0]
    assert images.shape == (2, 16, 16, 3)
    assert float(tf.reduce_min(images)) >= -1.0 and float(tf.reduce_max(images)) <= 1.0
    assert sorted(np.argmax(labels, axis=1).tolist()) == [0, 1]


def test_folder_source_rejects_corrupt_files_up_front_naming_them(tmp_path):
    root = _write_folder(tmp_path / "images")
    (root / "cat" / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 not really a jpeg")
    (root / "dog" / "notes.png").write_text("hello")
    with pytest.raises(ValueError) as error:
        readers.load_source(f"folder:{root}")
    message = str(error.value)
    assert "2 of 8 image files" in message
    assert "broken.jpg" in message and "notes.png" in message


def _write_tfrecord(path, count=6, classes=3, corrupt=()):
    rng = np.random.default_rng(1)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(count):
            pixels = rng.integers(0, 256, (9, 9, 3), dtype=np.uint8)
            encoded = b"garbage" if i in corrupt else tf.io.encode_png(pixels).numpy()
            feature = {
                "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(
                    value=[encoded])),
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(
                    value=[i % classes])),
            }
            writer.write(tf.train.Example(features=tf.train.Features(
                feature=feature)).SerializeToString())


def test_tfrecord_source_reads_features_and_skips_undecodable_records(tmp_path):
    _write_tfrecord(tmp_path / "train-0.tfrecord", count=6, corrupt=(2,))
    source = readers.load_source(f"tfrecord:{tmp_path}/train-*.tfrecord")
    assert source.num_classes == 3 and source.num_examples == 6
    labels = [int(label) for _, label in evaluation.eval_images(source, 8)]
    assert labels == [0, 1, 0, 1, 2]                   # record 2 skipped, the run goes on
    (tmp_path / "labels.txt").write_text("a\nb\nc\nd\n")
    assert readers.load_source(f"tfrecord:{tmp_path}/*.tfrecord").class_names == list("abcd")
    with pytest.raises(ValueError, match="matches no files"):
        readers.load_source(f"tfrecord:{tmp_path}/none-*")


def test_tfds_source_with_mock_data():
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=12):
        train = readers.load_source("tfds:mnist", "train")
        val = readers.load_source("tfds:mnist", "val")
        assert train.num_classes == 10
        images, labels = next(iter(evaluation.eval_dataset(val, 16, batch_size=5)))
        assert images.shape == (5, 16, 16, 3) and labels.shape == (5, 10)
        one_epoch = Preset().replace(schedule={"epochs": 1})
        batches = list(pipeline.train_dataset(train, 16, 4, one_epoch,
                                              steps_per_epoch=3))
        assert len(batches) == 3


def test_train_stream_is_seeded_and_resumable():
    source = readers.digits_source("train")
    preset = Preset(seed=3).replace(augment={"translate": 0.1, "rotate": 0.05, "mixup_alpha": 0.2,
                                             "crop": "pad_crop", "pad": 2},
                                    schedule={"epochs": 2})
    full = [b for b in pipeline.train_dataset(source, 16, 8, preset, steps_per_epoch=4)]
    again = [b for b in pipeline.train_dataset(source, 16, 8, preset, steps_per_epoch=4)]
    resumed = [b for b in pipeline.train_dataset(source, 16, 8, preset, start_epoch=1,
                                                 start_step=1, steps_per_epoch=4)]
    other_seed = next(iter(pipeline.train_dataset(source, 16, 8, preset.replace(seed=4),
                                                  steps_per_epoch=4)))
    assert len(full) == 8 and len(resumed) == 3
    for (x1, y1), (x2, y2) in zip(full, again):
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(y1, y2)
    for (x1, y1), (x2, y2) in zip(full[5:], resumed):
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(y1, y2)
    assert not np.array_equal(full[0][0], full[4][0])      # epochs differ
    assert not np.array_equal(full[0][0], other_seed[0])
    assert full[0][0].shape == (8, 16, 16, 3)


def test_the_pipelines_are_traced_as_written_without_autograph(monkeypatch):
    """tf.data traces the training and evaluation pipelines' functions (decode, crop,
    augmentation, scaling, targets) as they are written: autograph rewrites none of them (its
    rewrite took about a second of each `vit` process and changed nothing)."""
    from tensorflow.python.autograph.impl import api

    rewritten = record_calls(monkeypatch, api._TRANSPILER, "transform",
                             lambda function, context: function.__qualname__)
    source = readers.digits_source("train")
    preset = Preset(seed=3).replace(augment={"flip": True, "randaugment_ops": 1,
                                             "mixup_alpha": 0.2, "cutmix_alpha": 1.0,
                                             "erasing_prob": 0.5, "crop": "inception"})
    images, labels = next(iter(pipeline.train_dataset(source, 16, 8, preset, steps_per_epoch=2)))
    assert images.shape == (8, 16, 16, 3) and labels.shape == (8, 10)
    images, labels = next(iter(evaluation.eval_dataset(source, 16, batch_size=4)))
    assert images.shape == (4, 16, 16, 3) and labels.shape == (4, 10)
    assert rewritten == []


def test_augment_layers_run_in_tf_data_with_per_batch_seeds():
    preset = Preset().replace(augment={"flip": True, "randaugment_ops": 2,
                                       "randaugment_magnitude": 9, "mixup_alpha": 0.8,
"cutmix_alpha": 1.0, "erasing_prob": 0.5})
    fn = augment.build_augment(preset)
    images = tf.random.stateless_uniform((4, 16, 16, 3), (0, 1), 0, 255)
    labels = tf.one_hot([0, 1, 2, 3], 4)
    outputs = list(tf.data.Dataset.range(2).map(
        lambda step: fn(images, labels, tf.stack([tf.constant(7, tf.int64), step]))))
    (x0, y0), (x1, _) = outputs
    assert x0.shape == images.shape and not np.array_equal(x0, x1)
    np.testing.assert_allclose(tf.reduce_sum(y0, axis=1), 1.0, atol=1e-5)   # mixed labels
    assert augment.build_augment(Preset()) is None


def test_bad_specs_are_rejected():
    with pytest.raises(ValueError, match="data spec"):
        specs.parse_spec("imagenet")
    with pytest.raises(ValueError, match="not a directory"):
        readers.load_source("folder:/does/not/exist")


def test_val_data_keeps_every_training_example(tmp_path):
    """Given --val-data, the training folder is not split: val_split applies only without it."""
    train_root = _write_folder(tmp_path / "train", per_class=5)
    test_root = _write_folder(tmp_path / "test", per_class=3)
    given = readers.open_training_data(f"folder:{train_root}", f"folder:{test_root}",
                                       val_split=0.2)
    assert given.train.num_examples == 10 and given.val.num_examples == 6
    assert "--val-data" in given.val_origin
    held_out = readers.open_training_data(f"folder:{train_root}", val_split=0.2)
    assert (held_out.train.num_examples, held_out.val.num_examples) == (8, 2)
    assert "held out" in held_out.val_origin
    none = readers.open_training_data(f"folder:{train_root}", val_split=0.0)
    assert none.val is None and none.train.num_examples == 10


def test_validation_with_other_classes_is_refused(tmp_path):
    train_root = _write_folder(tmp_path / "train", per_class=2)
    with pytest.raises(ValueError, match="validation data has 10 classes, training data 2"):
        readers.open_training_data(f"folder:{train_root}", "digits")
