"""Evaluate a trained model: top-1, top-5 and per-class accuracy on a data spec.

Examples:
  vit evaluate --model saved_models/digits_tiny/model.keras --data digits
  vit evaluate --model run/model.keras --data folder:~/photos/val --output eval.json

`digits` and `tfds:NAME` (no split) are evaluated on their held-out split (digits: the 20%
test split; tfds: validation, else test); `folder:` and `tfrecord:` on every image.
"""

from __future__ import annotations

import argparse
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Registers the `vit evaluate` options."""
    parser.add_argument("--model", required=True, help="a .keras model saved by `vit train`")
    parser.add_argument("--data", required=True, help="digits | folder:PATH | "
                        "tfds:NAME[:SPLIT] | tfrecord:GLOB")
    parser.add_argument("--data-dir", help="tfds data_dir")
    parser.add_argument("--batch-size", type=int, default=256, help="evaluation batch size")
    parser.add_argument("--labels", help="labels.txt (default: next to the model, else the "
                        "data's class names)")
    parser.add_argument("--output", help="also write the results as JSON here")
    parser.add_argument("--image-size", type=int, nargs=2, metavar=("HEIGHT", "WIDTH"),
                        help="evaluate at this size (a model trained with "
                             "model.dynamic_image_size=true; default: its training size)")
    parser.add_argument("--few-shot", nargs="*", type=int, metavar="N", default=None,
                        help="also run the paper's few-shot linear evaluation (ridge regression "
                        "on frozen pre-logit features) with N training examples per class "
                        "(default: 1 5 10 25); shots are drawn from the data's training split")


def load_model(path: str):
    """A `.keras` model written by `vit train` (safe_mode=True)."""
    import keras

    import vit_keras  # noqa: F401  registers the ViT layers

    if not os.path.exists(path):
        raise ValueError(f"model file {path!r} does not exist")
    return keras.saving.load_model(path, compile=False, safe_mode=True)


def class_names_for(model_path: str, labels_path: str | None, fallback: list[str]) -> list[str]:
    """Class names from --labels, else labels.txt beside the model, else `fallback`."""
    from training.classifier import labels_beside

    return labels_beside(model_path, labels_path) or fallback


def evaluate(model, source, batch_size: int = 256, image_size=None) -> dict:
    """Runs `model` over `source`; returns top-1, top-5, loss and per-class accuracy.

    Args:
        model: a Keras classifier taking [-1, 1] images and returning logits.
        source: a `training.sources.Source`.
        batch_size: batch size.
        image_size: (height, width) the images are resized to; only for a model taking any
            size (None: the model's input size, or the size it was trained at).

    Returns:
        {'examples', 'top1', 'top5', 'loss', 'per_class': [{'class', 'examples', 'top1'}]}.
    """
    import numpy as np
    import tensorflow as tf

    from training import pipeline

    size = evaluation_size(model, image_size)
    logits, labels = [], []
    for images, batch_labels in pipeline.eval_images(source, size).batch(batch_size):
        logits.append(np.asarray(model(pipeline.scale(images), training=False), np.float64))
        labels.append(batch_labels.numpy())
    if not logits:
        raise ValueError(f"{source.spec} holds no images to evaluate")
    logits, labels = np.concatenate(logits), np.concatenate(labels).astype(int)
    if logits.shape[1] != source.num_classes:
        raise ValueError(f"the model has {logits.shape[1]} outputs but {source.spec} has "
                         f"{source.num_classes} classes")
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


FEW_SHOT_POOL = 5000  # training images the shots are drawn from, at most


def evaluation_size(model, image_size=None) -> tuple[int, int]:
    """The (height, width) to evaluate `model` at: `image_size` if given (a model taking any
    size), else the model's own input size or training size."""
    from vit_keras.core.model import input_image_size

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


def few_shot_report(model, spec: str, data_dir, test_source, shots, image_size=None) -> dict:
    """Few-shot accuracy per shot count: shots from `spec`'s training split, tested on
    `test_source` (for folder/tfrecord data both are the same images)."""
    from training import pipeline, sources
    from vit_keras import analysis

    size = evaluation_size(model, image_size)
    train_source = sources.load_source(spec, "train", data_dir, val_split=0.0)
    train_images, train_labels = pipeline.take_raw_images(train_source, size, FEW_SHOT_POOL)
    test_images, test_labels = pipeline.take_raw_images(test_source, size, FEW_SHOT_POOL)
    accuracies = analysis.few_shot(model, (pipeline.scale(train_images), train_labels),
                                   (pipeline.scale(test_images), test_labels), shots=shots)
    return {str(count): float(accuracy) for count, accuracy in accuracies.items()}


def run(args: argparse.Namespace) -> int:
    """Runs `vit evaluate`."""
    from training import sources
    from training.outputs import write_json

    source = sources.load_source(args.data, sources.evaluation_subset(args.data),
                                 args.data_dir, val_split=0.0)
    model = load_model(args.model)
    results = evaluate(model, source, args.batch_size, args.image_size)
    if args.few_shot is not None:
        shots = tuple(args.few_shot) or (1, 5, 10, 25)
        results["few_shot"] = few_shot_report(model, args.data, args.data_dir, source, shots,
                                              args.image_size)
    names = class_names_for(args.model, args.labels, source.class_names)
    height, width = evaluation_size(model, args.image_size)
    print(f"{args.data}: {results['examples']} images at {height}x{width}  top-1 {100 * results['top1']:.2f}%  "
          f"top-5 {100 * results['top5']:.2f}%  cross-entropy {results['loss']:.4f}")
    width = max(len(name) for name in names)
    for row in results["per_class"]:
        row["name"] = names[row["class"]] if row["class"] < len(names) else str(row["class"])
        accuracy = "n/a" if row["top1"] is None else f"{100 * row['top1']:.2f}%"
        print(f"  {row['name']:<{width}}  {accuracy:>8}  ({row['examples']} images)")
    for count, accuracy in results.get("few_shot", {}).items():
        print(f"  few-shot {count:>3} per class: {100 * accuracy:.2f}%")
    if args.output:
        write_json(args.output, {"model": args.model, "data": args.data, **results})
    return 0
