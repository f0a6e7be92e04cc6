"""The classify task's scores for `vit evaluate`: top-1, top-5 and per-class accuracy; for a
multi-label model or data, the exact mAP, F1 and per-class average precision
(`vit_app.tasks.classify.multilabel_scores`); the paper's few-shot linear evaluation.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from vit_app.data import evaluation
from vit_app.tasks.classify.data import readers
from vit_app.images import scale
from vit_app.inference import model_files
from vit_app.tasks.classify import multilabel_scores
from vit_app.inference.classifier import Classifier
from vit_keras import analysis
from vit_keras.core.model import input_image_size, preprocessing_of


def evaluate(model, source, batch_size: int = 256, image_size=None) -> dict:
    """Runs `model` over `source`; returns top-1, top-5, loss and per-class accuracy.

    Args:
        model: a Keras classifier taking [-1, 1] images and returning logits, or a
            `vit_app.inference.classifier.Classifier` (a SavedModel, .tflite or .onnx file).
        source: a `vit_app.data.source.Source`.
        batch_size: batch size.
        image_size: (height, width) the images are resized to; only for a model taking any
            size (None: the model's input size, or the size it was trained at).

    Returns:
        {'examples', 'top1', 'top5', 'loss', 'per_class': [{'class', 'examples', 'top1'}]}.
    """
    if source.multilabel:
        raise ValueError(f"{source.spec} is multi-label data: evaluate it with "
                         "evaluate_multilabel")
    logits, labels = _logits_and_labels(model, source, batch_size, image_size)
    labels = labels.astype(int)
    log_probs = tf.nn.log_softmax(logits).numpy()
    ranked = np.argsort(-logits, axis=1)
    correct1 = ranked[:, 0] == labels
    correct5 = (ranked[:, :5] == labels[:, None]).any(axis=1)
    per_class = []
    for index in range(logits.shape[1]):
        members = labels == index
        per_class.append({"class": index, "examples": int(members.sum()),
                          "top1": float(correct1[members].mean()) if members.any() else None})
    return {"examples": int(len(labels)), "top1": float(correct1.mean()),
            "top5": float(correct5.mean()),
            "loss": float(-log_probs[np.arange(len(labels)), labels].mean()),
            "per_class": per_class}


def scorer(model, image_size=None):
    """How to score images with `model`: ((height, width), the resize rule, a function from
    float32 0..255 images to float64 logits), for a Keras model or a `Classifier`."""
    if isinstance(model, Classifier):
        size = _classifier_size(model, image_size)
        return size, model.preprocessing, lambda images: np.asarray(
            model.predict(images)["logits"], np.float64)
    rule = preprocessing_of(model)
    return evaluation_size(model, image_size), rule, lambda images: np.asarray(
        model(scale(images, rule), training=False), np.float64)


def _classifier_size(model: Classifier, image_size) -> tuple[int, int]:
    """The size an exported file is evaluated at (see `evaluation_size`)."""
    if image_size is not None and model.takes_any_size:
        return tuple(image_size)
    if model.image_size is None:
        raise ValueError(f"{model.path} takes images of any size: pass --image-size HEIGHT "
                         "WIDTH")
    if image_size is not None and tuple(image_size) != tuple(model.image_size):
        raise ValueError(f"{model.path} takes {model.image_size[0]}x{model.image_size[1]} "
                         f"images only, got --image-size {image_size[0]} {image_size[1]}")
    return tuple(model.image_size)


def _logits_and_labels(model, source, batch_size: int, image_size):
    """(float64 logits, labels) of `model` on every image of `source`, in order."""
    size, rule, logits_of = scorer(model, image_size)
    logits, labels = [], []
    for images, batch_labels in evaluation.eval_images(source, size, rule).batch(batch_size):
        logits.append(logits_of(images.numpy()))
        labels.append(batch_labels.numpy())
    if not logits:
        raise ValueError(f"{source.spec} holds no images to evaluate")
    logits, labels = np.concatenate(logits), np.concatenate(labels)
    if logits.shape[1] != source.num_classes:
        raise ValueError(f"the model has {logits.shape[1]} outputs but {source.spec} has "
                         f"{source.num_classes} classes")
    return logits, labels


def evaluate_multilabel(model, source, batch_size: int = 256, image_size=None) -> dict:
    """Runs a multi-label `model` over `source`; returns its exact mAP, F1 and per-class AP.

    Args:
        model, source, batch_size, image_size: as `evaluate`; the labels of a single-label
            source count as one class per image.

    Returns:
        {'examples', 'mAP', 'f1_micro', 'f1_macro' (threshold 0.5), 'loss' (sigmoid
        cross-entropy), 'classes_scored', 'per_class': [{'class', 'examples' (positives),
        'average_precision'}]}; a score without a defined value is None.
    """
    logits, labels = _logits_and_labels(model, source, batch_size, image_size)
    targets = labels.astype(np.float32) if source.multilabel else \
        np.eye(source.num_classes, dtype=np.float32)[labels.astype(int)]
    scores = multilabel_scores.report(targets, logits)
    positives = (targets > 0.5).sum(axis=0)
    per_class = [{"class": index, "examples": int(count), "average_precision": precision}
                 for index, (count, precision) in enumerate(zip(positives,
                                                                scores["average_precision"]))]
    finite = {key: None if np.isnan(scores[key]) else scores[key]
              for key in ("mAP", "f1_micro", "f1_macro")}
    return {"examples": int(len(targets)), **finite, "loss": scores["cross_entropy"],
            "classes_scored": scores["classes_scored"], "per_class": per_class}


def is_multilabel(model_path: str, source) -> bool:
    """Whether `vit evaluate` scores as multi-label: multi-label data, or a model whose
    config.json records a sigmoid activation."""
    return source.multilabel or model_files.activation_beside(model_path) == "sigmoid"


FEW_SHOT_POOL = 5000  # training images the shots are drawn from, at most


def evaluation_size(model, image_size=None) -> tuple[int, int]:
    """The (height, width) to evaluate `model` at: `image_size` if given (a model taking any
    size), else the model's own input size or training size."""
    own = input_image_size(model)
    if image_size is None:
        return own
    image_size = tuple(image_size)
    height, width = model.inputs[0].shape[1:3]
    if height is not None and width is not None and image_size != own:
        raise ValueError(f"the model takes {own[0]}x{own[1]} images only, got --image-size "
                         f"{image_size[0]} {image_size[1]}; train with --set "
                         "model.dynamic_image_size=true to evaluate at other sizes")
    return image_size


def few_shot_report(model, spec: str, data_dir, test_source, shots, image_size=None,
                    block: int | None = None) -> dict:
    """Few-shot accuracy per shot count: shots from `spec`'s training split, tested on
    `test_source` (for folder/tfrecord data both are the same images)."""
    size = evaluation_size(model, image_size)
    rule = preprocessing_of(model)
    train_source = readers.load_source(spec, "train", data_dir, val_split=0.0)
    train_images, train_labels = evaluation.take_raw_images(train_source, size, FEW_SHOT_POOL,
                                                            rule)
    test_images, test_labels = evaluation.take_raw_images(test_source, size, FEW_SHOT_POOL, rule)
    accuracies = analysis.few_shot(model, (scale(train_images, rule), train_labels),
                                   (scale(test_images, rule), test_labels), shots=shots,
                                   block=block)
    return {str(count): float(accuracy) for count, accuracy in accuracies.items()}


def _percent(value) -> str:
    return "n/a" if value is None else f"{100 * value:.2f}%"


def lines(results: dict, where: str) -> list[str]:
    """The printed report of `evaluate` (and the few-shot accuracies)."""
    lines = [f"{where}  top-1 {100 * results['top1']:.2f}%  top-5 {100 * results['top5']:.2f}%"
             f"  cross-entropy {results['loss']:.4f}"]
    width = max(len(row["name"]) for row in results["per_class"])
    lines += [f"  {row['name']:<{width}}  {_percent(row['top1']):>8}  ({row['examples']} images)"
              for row in results["per_class"]]
    lines += [f"  few-shot {count:>3} per class: {100 * accuracy:.2f}%"
              for count, accuracy in results.get("few_shot", {}).items()]
    return lines


def multilabel_lines(results: dict, where: str) -> list[str]:
    """The printed report of `evaluate_multilabel`: the scores, then AP per class."""
    lines = [f"{where}  mAP {_percent(results['mAP'])} ({results['classes_scored']} classes "
             f"with positives)  F1 micro {_percent(results['f1_micro'])}  macro "
             f"{_percent(results['f1_macro'])}  sigmoid cross-entropy {results['loss']:.4f}"]
    width = max(len(row["name"]) for row in results["per_class"])
    lines += [f"  {row['name']:<{width}}  AP {_percent(row['average_precision']):>8}  "
              f"({row['examples']} positive images)" for row in results["per_class"]]
    return lines
