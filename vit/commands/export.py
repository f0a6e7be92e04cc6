"""Export a trained model: SavedModel, TFLite fp32/fp16/int8, ONNX fp32/int8, with a parity and
speed report.

Writes into the output directory `saved_model/`, `model.tflite`, `model_fp16.tflite`,
`model_dynamic_int8.tflite`, `model_int8.tflite`, `model.onnx`, `model_dynamic_int8.onnx`,
`model_int8.onnx` (the chosen formats) and `export.json`, which records per format: size in
bytes, max |logit difference| against the Keras model, top-1 agreement with Keras and accuracy
(the exact mAP for multi-label data) on the evaluation images, and the median batch-1 latency
through LiteRT or ONNX Runtime; and the `activation` turning the logits into scores (softmax, or
sigmoid for a multi-label model). Full-integer int8 files are calibrated on images of `--data`.

Every file is written into a staging folder and checked there: one whose top-1 agreement with the
Keras model is below its format's bar (0.999 for float files, 0.98 for int8 ones;
`--min-agreement` changes them) is not published under its name but moved to `rejected/`, marked
FAILED in the table and export.json with what to try, and the command exits with status 3 once
every other file is written.
"""

from __future__ import annotations

import argparse

from vit.commands.checks import add_preprocessing_argument, check_model
from vit_app.data.specs import check_spec, spec_task
from vit_app.inference.export.formats import (DEFAULT_FORMATS, FORMATS, check_formats,
                                          min_agreements, parse_min_agreement)
from vit_app.inference.model_files import ACTIVATIONS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Registers the `vit export` options."""
    parser.add_argument("--model", required=True, help="trained .keras model file, or a "
                        "keras-hub preset folder")
    parser.add_argument("--formats", default=",".join(DEFAULT_FORMATS),
                        help=f"comma-separated, out of {', '.join(FORMATS)} "
                             f"(default: {', '.join(DEFAULT_FORMATS)})")
    parser.add_argument("--output", default=None,
                        help="output directory (default: the model file's directory)")
    parser.add_argument("--data", default=None,
                        help="images for int8 calibration and evaluation: a data spec of "
                             "`vit train` (digits | folder:PATH | csv:PATH | tfds:NAME | "
                             "tfrecord:GLOB) "
                             "or an .npz with 'images' (N,H,W,3, 0..255) and optional "
                             "'labels' (default: the data in the config.json next to --model)")
    parser.add_argument("--calibration-images", type=int, default=300,
                        help="images calibrating int8 (default: %(default)s)")
    parser.add_argument("--eval-images", type=int, default=2000,
                        help="at most this many held-out images measure accuracy and parity "
                             "(default: %(default)s)")
    parser.add_argument("--int8-float-ops", default="",
                        help="comma-separated TFLite operators tflite_int8 keeps in float "
                             "(e.g. BATCH_MATMUL,SOFTMAX: about 3x faster on CPUs; default: "
                             "none, full-integer)")
    parser.add_argument("--int8-per-tensor", action="store_true",
                        help="one weight scale per tensor in tflite_int8 instead of one per "
                             "output channel: smaller, for small models")
    parser.add_argument("--keep-tensor-names", action="store_true",
                        help="keep tensor names in the .tflite files (for Netron/debugging)")
    parser.add_argument("--image-size", type=int, nargs=2, metavar=("HEIGHT", "WIDTH"),
                        help="for a model trained with model.dynamic_image_size=true: the input "
                             "size of the TFLite files and the SavedModel (default: TFLite at "
                             "the training size, SavedModel serving_default at any size)")
    parser.add_argument("--activation", choices=ACTIVATIONS,
                        help="how the SavedModel's probabilities come from the logits, also "
                             "recorded in export.json for the .tflite/.onnx files (default: the "
                             "`activation` in the config.json next to --model: sigmoid for a "
                             "multilabel run; else softmax)")
    parser.add_argument("--min-agreement", default="",
                        help="the top-1 agreement with the Keras model a file needs to be "
                             "written: one fraction for all, or FORMAT=FRACTION pairs where "
                             "FORMAT is a format, float or int8 (default: float=0.999,"
                             "int8=0.98); a file below it goes to rejected/, is marked FAILED "
                             "and the command exits with status 3")
    add_preprocessing_argument(parser)
    parser.add_argument("--latency-runs", type=int, default=50,
                        help="timed batch-1 LiteRT calls per TFLite file (default: %(default)s)")


def check(args: argparse.Namespace) -> None:
    """Checks the model, the formats, the agreement bars and the data spec before any
    framework is imported."""
    check_model(args.model, extensions=(".keras",))
    min_agreements(check_formats(args.formats), parse_min_agreement(args.min_agreement))
    if args.data and not args.data.endswith(".npz"):  # as the data's own task reads it
        check_spec(args.data, task=spec_task(args.data))


def run(args: argparse.Namespace) -> int:
    """Runs `vit export`."""
    from vit_app.inference.export import command as export

    return export.run(args)
