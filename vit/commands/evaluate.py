"""Evaluate a trained model (.keras, SavedModel, .tflite or .onnx) on a data spec: top-1,
top-5 and per-class accuracy; for a multi-label model or data, mAP, F1 and per-class AP; for a
segmenter on data with masks, mIoU, pixel accuracy and per-class IoU.

Examples:
  vit evaluate --model saved_models/digits_tiny/model.keras --data digits
  vit evaluate --model saved_models/digits_tiny/model_int8.tflite --data digits
  vit evaluate --model saved_models/digits_tiny/model_int8.onnx --data folder:~/digits/test
  vit evaluate --model run/model.keras --data folder:~/photos/val --output eval.json
  vit evaluate --model tags/model.keras --data csv:~/photos/val.csv
  vit evaluate --model saved_models/digits_segment/model_int8.tflite --data folder:~/scans/val

A model is multi-label when the config.json next to it says `"activation": "sigmoid"` (a run
of `--set objective.kind=multilabel`), and `csv:` data is always multi-label: then the scores are
those of `vit_app.tasks.classify.multilabel_scores` (a single-label source's labels count as one
class each).

An exported file is evaluated as it will be deployed: its images are resized by the rule that
export.json beside it records, and it normalises them itself; the report is the same as for the
.keras model, so that the two can be compared line by line.

`digits` and `tfds:NAME` (no split) are evaluated on their held-out split (digits: the 20%
test split; tfds: validation, else test); `folder:`, `csv:` and `tfrecord:` on every image.

A segmenter's or a detector's data (its task's built-in set, on its validation scenes, or a
folder: `--help` lists each task's) is scored as `vit train --task NAME` scores it. For masks,
each image goes through the model at its size, the class scores are resized to the mask's own
size, and one confusion matrix over every labelled pixel (255 ignored) gives the mIoU, the
pixel accuracy and each class's IoU.
"""

from __future__ import annotations

import argparse

from vit.commands.checks import (add_preprocessing_argument, check_model,
                                 check_preprocessing_target)
from vit_app.data.specs import check_spec, spec_task
from vit_keras import tasks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Registers the `vit evaluate` options."""
    parser.add_argument("--model", required=True, help="a .keras model, SavedModel directory, "
                        ".tflite or .onnx file written by `vit train` or `vit export`, or a "
                        "keras-hub preset folder")
    parser.add_argument("--data", required=True, help="by the model's task: " +
                        tasks.data_by_task())
    parser.add_argument("--data-dir", help="tfds data_dir")
    parser.add_argument("--batch-size", type=int, default=256, help="evaluation batch size")
    parser.add_argument("--labels", help="labels.txt (default: next to the model, else the "
                        "data's class names)")
    parser.add_argument("--output", help="also write the results as JSON here")
    add_preprocessing_argument(parser)
    parser.add_argument("--image-size", type=int, nargs=2, metavar=("HEIGHT", "WIDTH"),
                        help="evaluate at this size (a model trained with "
                             "model.dynamic_image_size=true; default: its training size)")
    parser.add_argument("--few-shot", nargs="*", type=int, metavar="N", default=None,
                        help="also run the paper's few-shot linear evaluation (ridge regression "
                        "on frozen pre-logit features) with N training examples per class "
                        "(default: 1 5 10 25); shots are drawn from the data's training split")
    parser.add_argument("--block", type=int, metavar="I", default=None,
                        help="with --few-shot: probe encoder block I instead (negative counts "
                             "from the end): its final-normed class token, or its patch mean")


def check(args: argparse.Namespace) -> None:
    """Checks the model, the data spec and the options before any framework is imported."""
    check_model(args.model)
    check_preprocessing_target(args.model, args.preprocessing)
    check_spec(args.data, task=spec_task(args.data))
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    if args.block is not None and args.few_shot is None:
        raise ValueError("--block chooses the block --few-shot probes: add --few-shot")
    if args.few_shot is not None and not args.model.lower().endswith(".keras"):
        raise ValueError("--few-shot fits a linear probe on the features of a .keras model; "
                         f"{args.model} gives logits only: pass the run's model.keras")


def run(args: argparse.Namespace) -> int:
    """Runs `vit evaluate`."""
    from vit_app.inference import evaluate

    return evaluate.run(args)
