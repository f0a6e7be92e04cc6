"""Exact segmentation scores of a model on a segmentation `Source`, at the masks' own
resolution: each image goes through the model at its size, the class scores are resized
bilinearly to the image's original size, and every labelled pixel of the original mask counts
once in one confusion matrix (`vit_keras.tasks.segment.scores`). A model fed at the images' own
size (`Preprocessing.native`) segments each image there, whole or in windows
(`native_confusion`)."""

from __future__ import annotations

from typing import Callable

import numpy as np
import tensorflow as tf

from vit_app.data.evaluation import traced_as_written
from vit_app.tasks.segment.data.sources import eval_pairs
from vit_app.data.source import Source
from vit_app.images import scale
from vit_keras.tasks.segment import windows as segmentation_windows
from vit_keras.tasks.segment import scores as segmentation_scores
from vit_keras.core.model import config_from_model
from vit_keras.preprocessing import OFFICIAL


def confusion(predict: Callable, source: Source, image_size, num_classes: int,
              batch_size: int = 32, max_examples: int | None = None,
              preprocessing=OFFICIAL) -> np.ndarray:
    """The confusion matrix of `predict` over `source`.

    Args:
        predict: model inputs [batch, height, width, 3] -> class scores [batch, height, width,
            classes] (logits or probabilities) at the model's size.
        source: a segmentation `Source` (`vit_app.tasks.segment.data.sources`).
        image_size: the model's size.
        num_classes: the model's classes.
        batch_size: images per call of `predict`.
        max_examples: only the first examples (None: all).
        preprocessing: what the model expects of pixels; None: pixels in 0..255 as they are
            (an exported file normalises inside its graph).

    Returns:
        [num_classes, num_classes] int64 counts (rows: the masks' classes).
    """
    pairs = eval_pairs(source, image_size)
    if max_examples is not None:
        pairs = pairs.take(max_examples)

    @traced_as_written
    def with_size(image, mask):
        return image, mask, tf.shape(mask)

    pairs = pairs.map(with_size)
    batches = pairs.padded_batch(batch_size, padding_values=(
        0.0, tf.constant(segmentation_scores.IGNORE, tf.uint8), 0))
    total = np.zeros((num_classes, num_classes), np.int64)
    for images, masks, sizes in batches.as_numpy_iterator():
        inputs = images if preprocessing is None else scale(images, preprocessing)
        scores = np.asarray(predict(np.asarray(inputs, np.float32)))
        for item_scores, mask, (height, width) in zip(scores, masks, sizes):
            full = tf.image.resize(item_scores[None].astype(np.float32), (height, width),
                                   method="bilinear")
            predicted = np.argmax(full[0].numpy(), axis=-1)
            total += segmentation_scores.confusion_matrix(mask[:height, :width], predicted,
                                                          num_classes)
    return total


def native_confusion(segment: Callable, source: Source, num_classes: int,
                     max_examples: int | None = None) -> np.ndarray:
    """`confusion` of a model fed each image at its own size.

    Args:
        segment: float32 [height, width, 3] pixels in 0..255 -> class scores [height, width,
            classes] at that size.
        source: a segmentation `Source`.
        num_classes: the model's classes.
        max_examples: only the first examples (None: all).

    Returns:
        [num_classes, num_classes] int64 counts (rows: the masks' classes).
    """
    pairs = source.records().map(traced_as_written(
        lambda record, label: (tf.cast(source.decode(record), tf.float32),
                               source.decode_mask(label))),
        num_parallel_calls=tf.data.AUTOTUNE)
    if max_examples is not None:
        pairs = pairs.take(max_examples)
    total = np.zeros((num_classes, num_classes), np.int64)
    for image, mask in pairs.as_numpy_iterator():
        predicted = np.argmax(segment(image), axis=-1)
        total += segmentation_scores.confusion_matrix(mask, predicted, num_classes)
    return total


def keras_native(model, preprocessing=OFFICIAL) -> Callable:
    """`segment` for `native_confusion` from a Keras segmenter: whole images where the model
    takes any size (windows where they are large), else windows of its size."""
    config = config_from_model(model)
    fixed = None if config.dynamic_image_size else config.image_hw
    return lambda pixels: segmentation_windows.segment_scores(
        model.predict_on_batch, np.asarray(scale(pixels, preprocessing), np.float32), fixed,
        config.patch_step)


def keras_predict(model) -> Callable:
    """`predict` for `confusion` from a Keras segmenter (its logits)."""
    return lambda inputs: model.predict_on_batch(inputs)


def report(confusion_matrix: np.ndarray, class_names: list[str]) -> dict:
    """metrics.json's segmentation entries: mIoU, pixel accuracy, mean accuracy and the
    per-class IoU by class name (None where a class occurs in neither masks nor
    predictions)."""
    scores = segmentation_scores.scores(confusion_matrix)
    per_class = {name: None if np.isnan(value) else round(float(value), 6)
                 for name, value in zip(class_names, scores["iou"])}
    return {"val_mIoU": scores["mIoU"], "val_pixel_accuracy": scores["pixel_accuracy"],
            "val_mean_accuracy": scores["mean_accuracy"], "val_class_iou": per_class,
            "val_class_pixels": dict(zip(class_names, scores["pixels"]))}


def evaluate(model, source: Source, batch_size: int = 32, image_size=None) -> dict:
    """`vit evaluate` of a segmenter in any format on segmentation data.

    Args:
        model: a `vit_app.inference.classifier.Classifier` whose logits are per pixel.
        source: a segmentation `Source`.
        batch_size: images per call.
        image_size: (height, width) for a model taking any size (default: its own size; a
            model fed at the images' own size segments them there, 'native' in the result).

    Returns:
        {'examples', 'mIoU', 'pixel_accuracy', 'mean_accuracy', 'per_class': [{'class',
        'iou', 'accuracy', 'pixels'}]} (None where a class occurs in neither masks nor
        predictions).

    Raises:
        ValueError: the model's size is unknown.
    """
    size = tuple(image_size or model.image_size or ())
    if model.preprocessing.native and not image_size:
        size = "native"
        matrix = native_confusion(lambda pixels: model.predict_native(pixels)["logits"], source,
                                  model.num_classes)
    elif len(size) != 2:
        raise ValueError(f"{model.path} takes any size: pass --image-size HEIGHT WIDTH")
    else:
        matrix = confusion(lambda pixels: model.predict(pixels)["logits"], source, size,
                           model.num_classes, batch_size, preprocessing=None)
    found = segmentation_scores.scores(matrix)
    recall = np.diag(matrix) / np.maximum(matrix.sum(axis=1), 1)
    per_class = [{"class": index, "iou": _number(iou),
                  "accuracy": _number(recall[index]) if pixels else None, "pixels": int(pixels)}
                 for index, (iou, pixels) in enumerate(zip(found["iou"], found["pixels"]))]
    return {"examples": int(source.num_examples or 0),
            "image_size": size if size == "native" else list(size),
            "mIoU": _number(found["mIoU"]), "pixel_accuracy": _number(found["pixel_accuracy"]),
            "mean_accuracy": _number(found["mean_accuracy"]), "per_class": per_class}


def report_lines(results: dict, where: str) -> list[str]:
    """The printed report of `evaluate`: the scores, then IoU per class."""
    def percent(value):
        return "n/a" if value is None else f"{100 * value:.2f}%"

    lines = [f"{where}  mIoU {percent(results['mIoU'])}  pixel accuracy "
             f"{percent(results['pixel_accuracy'])}  mean class accuracy "
             f"{percent(results['mean_accuracy'])}"]
    width = max(len(row["name"]) for row in results["per_class"])
    lines += [f"  {row['name']:<{width}}  IoU {percent(row['iou']):>8}  accuracy "
              f"{percent(row['accuracy']):>8}  ({row['pixels']} pixels)"
              for row in results["per_class"]]
    return lines


def _number(value):
    return None if np.isnan(value) else float(value)
