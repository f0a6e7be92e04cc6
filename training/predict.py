"""Classify image files with a trained model (.keras) or an exported .tflite file.

Examples:
  vit predict cat.jpg dog.png --model saved_models/run/model.keras --top-k 3
  vit predict digit.png --tflite saved_models/digits_tiny/model.tflite

Images are resized to the model resolution (bilinear, as in evaluation). Class names come from
--labels, else the labels.txt next to the model.
"""

from __future__ import annotations

import argparse
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Registers the `vit predict` options."""
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="JPEG/PNG/BMP/GIF files")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a .keras model saved by `vit train`")
    source.add_argument("--tflite", help="a .tflite file exported by `vit train`/`vit export`")
    parser.add_argument("--top-k", type=int, default=5, help="classes shown per image")
    parser.add_argument("--labels", help="labels.txt (default: next to the model file)")


def read_images(paths: list[str], size: int):
    """Decodes and resizes image files to float32 [n, size, size, 3] in 0..255."""
    import numpy as np
    import tensorflow as tf

    from training import pipeline, sources

    images = []
    for path in paths:
        why = sources.check_image_file(path)
        if why:
            raise ValueError(f"{path} {why}")
        try:
            image = sources.decode_image(tf.io.read_file(path))
        except tf.errors.OpError as error:  # a file PIL accepts but TensorFlow cannot decode
            raise ValueError(f"{path} cannot be decoded ({error.message})") from None
        images.append(pipeline.resize(image, size).numpy())
    return np.stack(images).astype(np.float32)


def predictor(args: argparse.Namespace):
    """(function images_0_255 -> logits, model resolution, model path)."""
    import numpy as np

    if args.tflite:
        try:
            from vit_keras.export import TFLiteModel
        except ImportError:
            raise ValueError("--tflite needs vit_keras.export.TFLiteModel, which this version "
                             "lacks") from None
        if not os.path.exists(args.tflite):
            raise ValueError(f"tflite file {args.tflite!r} does not exist")
        lite = TFLiteModel(args.tflite, num_threads=2)
        return (lambda images: np.asarray(lite(images))), lite.input_shape[0], args.tflite

    from training import pipeline
    from training.evaluate import load_model

    model = load_model(args.model)
    return (lambda images: np.asarray(model(pipeline.scale(images), training=False))), \
        int(model.input_shape[1]), args.model


def run(args: argparse.Namespace) -> int:
    """Runs `vit predict`."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import numpy as np

    from training.evaluate import class_names_for

    try:
        if args.top_k < 1:
            raise ValueError(f"--top-k must be >= 1, got {args.top_k}")
        predict, size, model_path = predictor(args)
        logits = predict(read_images(args.images, size)).astype(np.float64)
    except ValueError as error:
        print(f"vit predict: error: {error}", file=sys.stderr)
        return 1
    names = class_names_for(model_path, args.labels,
                            [str(i) for i in range(logits.shape[1])])
    probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
    probabilities /= probabilities.sum(axis=1, keepdims=True)
    for path, probs in zip(args.images, probabilities):
        print(path)
        for index in np.argsort(-probs)[:args.top_k]:
            name = names[index] if index < len(names) else str(index)
            print(f"  {name:<20} {probs[index]:.4f}")
    return 0
