"""`vit predict`: the top-k classes of image files by a trained model (.keras, a SavedModel
directory, .tflite or .onnx) or an architecture with pretrained weights, loaded as a
`vit.inference.classifier.Classifier`. The flags are `vit.commands.predict`'s.
"""

from __future__ import annotations

import argparse

import numpy as np

from vit import console
from vit.images import read_file
from vit.inference import classifier


def load_classifier(args: argparse.Namespace):
    """The `vit.inference.classifier.Classifier` that --model, --tflite or --onnx names."""
    exported = args.tflite or args.onnx
    if exported and args.weights:
        raise ValueError("--weights goes with --model ARCHITECTURE, not with --tflite/--onnx")
    return classifier.load(exported or args.model, args.weights, args.labels)


def run(args: argparse.Namespace) -> int:
    """Runs `vit predict`."""
    if args.top_k < 1:
        raise ValueError(f"--top-k must be >= 1, got {args.top_k}")
    model = load_classifier(args)
    scores = model.predict_encoded([read_file(path) for path in args.images])["probabilities"]
    names = model.class_names
    for path, image_scores in zip(args.images, scores):
        console.say(path)
        for index in np.argsort(-image_scores, kind="stable")[:args.top_k]:
            console.say(f"  {names[index]:<20} {image_scores[index]:.4f}")
    return 0
