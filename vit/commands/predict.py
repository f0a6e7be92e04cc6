"""Classify image files, folders or glob patterns with a trained model: .keras, a SavedModel
directory, .tflite or .onnx.

Examples:
  vit predict cat.jpg dog.png --model saved_models/run/model.keras --top-k 3
  vit predict ~/photos --model saved_models/run/model.keras --output predictions.csv
  vit predict 'shots/**/*.jpg' --tflite saved_models/run/model_int8.tflite --output top.json
  vit predict digit.png --tflite saved_models/digits_tiny/model.tflite
  vit predict digit.png --onnx saved_models/digits_tiny/model_int8.onnx
  vit predict digit.png --model saved_models/digits_tiny/saved_model
  vit predict cat.jpg --weights imagenet21k+imagenet2012 --model B/16

A folder gives its image files and those of its sub-folders; a pattern (quoted, so that
the shell leaves it alone; `**` spans folders) its image files. Images are checked, decoded and
resized to the model resolution as everywhere in vit (`vit_app.images`), and run in batches; a file
that is no usable image is skipped and listed at the end. Class names come from
--labels, else the labels.txt next to the model, else (ImageNet heads of pretrained --weights)
the ImageNet class names shipped with vit_keras. A multi-label model (`vit train --set
objective.kind=multilabel`, recorded as `activation` in the config.json next to its files) and the
ImageNet-21k heads, pre-trained with a sigmoid loss, give independent per-class probabilities;
other heads show softmax probabilities. A model of another task writes what its task writes,
with the options of its group below. A file it would write over is never written over without
--overwrite: the run stops before writing anything, naming the files.
"""

from __future__ import annotations

import argparse
import importlib

from vit.commands.checks import (add_preprocessing_argument, check_model,
                                 check_preprocessing_target)
from vit_app.data import specs
from vit_app.inference.model_files import task_beside
from vit_app.paths import expand_images
from vit_keras import tasks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Registers the `vit predict` options."""
    parser.add_argument("images", nargs="+", metavar="IMAGE",
                        help="JPEG/PNG/BMP/GIF/TIFF files, folders of them (searched recursively) "
                        "or glob patterns")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a .keras model or SavedModel directory written by "
                        "`vit train`/`vit export`, or a keras-hub preset folder; with --weights, the architecture (B/16, "
                        "S/16, R50+B/16, ...)")
    source.add_argument("--tflite", help="a .tflite file exported by `vit train`/`vit export`")
    source.add_argument("--onnx", help="an .onnx file exported by `vit train`/`vit export`, "
                        "run by ONNX Runtime on the CPU")
    parser.add_argument("--weights", help="pretrained weights for the --model architecture: a "
                        "name from `vit weights list`, an https:// URL, hf://ORG/REPO or a file")
    parser.add_argument("--top-k", type=int, default=5, help="classes shown per image")
    parser.add_argument("--labels", help="labels.txt (default: next to the model file)")
    add_preprocessing_argument(parser)
    parser.add_argument("--batch-size", type=int, default=32,
                        help="images per model call (default: %(default)s)")
    parser.add_argument("--output", help="also write the predictions to this .csv (file, "
                        "class_1, score_1, ...) or .json file (with the skipped files)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace files that exist where the model's task writes its "
                        "answers beside the table (without it, a run that would write over one "
                        "stops before writing anything)")
    for name, options in _task_options():
        group = parser.add_argument_group(f"{name} models ({tasks.parts(name).summary})",
                                          options.PREDICT_HELP)
        options.add_predict_arguments(group)


def _task_options() -> list:
    """(task, its options module) of each registered task that has `vit predict` options."""
    return [(name, importlib.import_module(parts.options))
            for name, parts in tasks.TASKS.items() if parts.options]


def check(args: argparse.Namespace) -> None:
    """Checks the options, the model and the images before any framework is imported; the
    folders and patterns among the images become their files."""
    if args.top_k < 1:
        raise ValueError(f"--top-k must be >= 1, got {args.top_k}")
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    for _, options in _task_options():
        options.check_predict(args)
    if args.output and not args.output.lower().endswith((".csv", ".json")):
        raise ValueError(f"--output {args.output!r}: expected a .csv or .json file name")
    if args.weights and (args.tflite or args.onnx):
        raise ValueError("--weights goes with --model ARCHITECTURE, not with --tflite/--onnx")
    if args.tflite or args.onnx:
        check_model(args.tflite or args.onnx, extensions=(".tflite",) if args.tflite else
                    (".onnx",))
    else:
        check_model(args.model, args.weights)
    model = args.tflite or args.onnx or args.model
    check_preprocessing_target(model, args.preprocessing, args.weights)
    expand = specs.task_data(task_beside(model)[0]).expand_inputs or expand_images
    args.images = expand(args.images)


def run(args: argparse.Namespace) -> int:
    """Runs `vit predict`."""
    from vit_app.inference import predict

    return predict.run(args)
