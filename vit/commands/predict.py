"""Classify image files with a trained model: .keras, a SavedModel directory, .tflite or .onnx.

Examples:
  vit predict cat.jpg dog.png --model saved_models/run/model.keras --top-k 3
  vit predict digit.png --tflite saved_models/digits_tiny/model.tflite
  vit predict digit.png --onnx saved_models/digits_tiny/model_int8.onnx
  vit predict digit.png --model saved_models/digits_tiny/saved_model
  vit predict cat.jpg --weights imagenet21k+imagenet2012 --model B/16

Images are checked, decoded and resized to the model resolution as everywhere in vit
(`vit.images`). Class names come from
--labels, else the labels.txt next to the model, else (ImageNet heads of pretrained --weights)
the ImageNet class names shipped with vit_keras. A multi-label model (`vit train --set
objective=multilabel`, recorded as `activation` in the config.json next to its files) and the
ImageNet-21k heads, pre-trained with a sigmoid loss, give independent per-class probabilities;
other heads show softmax probabilities.
"""

from __future__ import annotations

import argparse

def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Registers the `vit predict` options."""
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="JPEG/PNG/BMP/GIF files")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a .keras model or SavedModel directory written by "
                        "`vit train`/`vit export`; with --weights, the architecture (B/16, "
                        "S/16, R50+B/16, ...)")
    source.add_argument("--tflite", help="a .tflite file exported by `vit train`/`vit export`")
    source.add_argument("--onnx", help="an .onnx file exported by `vit train`/`vit export`, "
                        "run by ONNX Runtime on the CPU")
    parser.add_argument("--weights", help="pretrained weights for the --model architecture: a "
                        "name from `vit weights list`, an https:// URL, hf://ORG/REPO or a file")
    parser.add_argument("--top-k", type=int, default=5, help="classes shown per image")
    parser.add_argument("--labels", help="labels.txt (default: next to the model file)")


def run(args: argparse.Namespace) -> int:
    """Runs `vit predict`."""
    from vit.inference import predict

    return predict.run(args)
