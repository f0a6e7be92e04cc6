"""Classify image files with a trained model (.keras) or an exported .tflite or .onnx file.

Examples:
  vit predict cat.jpg dog.png --model saved_models/run/model.keras --top-k 3
  vit predict digit.png --tflite saved_models/digits_tiny/model.tflite
  vit predict digit.png --onnx saved_models/digits_tiny/model_int8.onnx
  vit predict cat.jpg --weights imagenet21k+imagenet2012 --model B/16

Images are resized to the model resolution (bilinear, as in evaluation). Class names come from
--labels, else the labels.txt next to the model, else (ImageNet heads of pretrained --weights)
the ImageNet class names shipped with vit_keras. ImageNet-21k heads were pre-trained with a
sigmoid loss, so their scores are independent per-class probabilities; other heads show softmax
probabilities.
"""

from __future__ import annotations

import argparse
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Registers the `vit predict` options."""
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="JPEG/PNG/BMP/GIF files")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a .keras model saved by `vit train`; with --weights, "
                        "the architecture (B/16, S/16, R50+B/16, ...)")
    source.add_argument("--tflite", help="a .tflite file exported by `vit train`/`vit export`")
    source.add_argument("--onnx", help="an .onnx file exported by `vit train`/`vit export`, "
                        "run by ONNX Runtime on the CPU")
    parser.add_argument("--weights", help="pretrained weights for the --model architecture: a "
                        "name from `vit weights list`, an https:// URL, hf://ORG/REPO or a file")
    parser.add_argument("--top-k", type=int, default=5, help="classes shown per image")
    parser.add_argument("--labels", help="labels.txt (default: next to the model file)")


def read_images(paths: list[str], size):
    """Decodes and resizes image files to float32 [n, height, width, 3] in 0..255.

    Args:
        paths: image files.
        size: an int (square) or (height, width).
    """
    import numpy as np
    import tensorflow as tf

    from training import pipeline, sources

    images = []
    for path in paths:
        with sources.bomb_warnings_silenced():
            why = sources.check_image_file(path)
        if why:
            raise ValueError(f"{path} {why}")
        try:
            image = sources.decode_image(tf.io.read_file(path))
        except tf.errors.OpError as error:  # a file PIL accepts but TensorFlow cannot decode
            raise ValueError(f"{path} cannot be decoded ({error.message})") from None
        images.append(pipeline.resize(image, size).numpy())
    return np.stack(images).astype(np.float32)


IMAGENET21K_CLASSES = 21843  # heads pre-trained with sigmoid cross-entropy (multi-label)


def predictor(args: argparse.Namespace):
    """(function images_0_255 -> logits, model resolution (height, width), class names or
    None)."""
    import numpy as np

    exported = args.tflite or args.onnx
    if exported:
        if args.weights:
            raise ValueError("--weights goes with --model ARCHITECTURE, not with --tflite/--onnx")
        from vit_keras.export import ONNXModel, TFLiteModel

        if not os.path.exists(exported):
            raise ValueError(f"file {exported!r} does not exist")
        runner = (TFLiteModel if args.tflite else ONNXModel)(exported, num_threads=2)
        return (lambda images: np.asarray(runner(images))), runner.input_shape[:2], \
            _file_labels(exported, args.labels)
    from training import pipeline

    if args.weights:
        import vit_keras

        refuse_untrained_head(args.weights, args.model)
        model = vit_keras.create_model(args.model, weights=args.weights)
    else:
        from training.evaluate import load_model

        model = load_model(args.model)
    labels = (_imagenet_labels(model.output_shape[-1], args.labels) if args.weights else
              _file_labels(args.model, args.labels))
    from vit_keras.model import input_image_size

    return (lambda images: np.asarray(model(pipeline.scale(images), training=False))), \
        input_image_size(model), labels


def refuse_untrained_head(weights: str, architecture: str) -> None:
    """Predictions of a release whose head was zeroed for release would be meaningless."""
    from vit_keras import pretrained

    if weights in pretrained.weight_names():
        release = pretrained.find(weights, architecture)
        if not release.head_trained:
            trained = [other.name for other in pretrained.releases()
                       if other.variant == release.variant and other.head_trained]
            raise ValueError(f"the {weights!r} head of ViT-{release.variant} is all zeros (it "
                             "was released for fine-tuning); for predictions use one of "
                             f"{trained or 'the other releases'}")


def _file_labels(model_path: str, labels_path: str | None) -> list[str] | None:
    from training.evaluate import class_names_for

    return class_names_for(model_path, labels_path, None)


def _imagenet_labels(num_classes: int, labels_path: str | None) -> list[str] | None:
    from training.outputs import read_labels
    from vit_keras.pretrained import labels

    if labels_path:
        return read_labels(labels_path)
    if num_classes in labels.LABEL_FILES:
        return [name for _, name in labels.imagenet_classes(num_classes)]
    return None


def scores_from_logits(logits):
    """Probabilities: sigmoid for an ImageNet-21k head, else softmax over the classes."""
    import numpy as np

    if logits.shape[1] == IMAGENET21K_CLASSES:
        return 1.0 / (1.0 + np.exp(-logits))
    probabilities = np.exp(logits - logits.max(axis=1, keepdims=True))
    return probabilities / probabilities.sum(axis=1, keepdims=True)


def run(args: argparse.Namespace) -> int:
    """Runs `vit predict`."""
    import numpy as np

    if args.top_k < 1:
        raise ValueError(f"--top-k must be >= 1, got {args.top_k}")
    predict, size, names = predictor(args)
    logits = predict(read_images(args.images, size)).astype(np.float64)
    names = names or [str(i) for i in range(logits.shape[1])]
    for path, scores in zip(args.images, scores_from_logits(logits)):
        print(path)
        for index in np.argsort(-scores, kind="stable")[:args.top_k]:
            name = names[index] if index < len(names) else str(index)
            print(f"  {name:<20} {scores[index]:.4f}")
    return 0
