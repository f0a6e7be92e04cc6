"""`vit export`'s implementation and the export API: `export_model` writes every chosen format
into a staging folder, checks each file against the Keras model and publishes it or moves it to
`rejected/` (the command's flags and help: `vit.commands.export`).
"""

from __future__ import annotations

import dataclasses
import os

from vit_app import console
from vit_app.inference import run_config
from vit_app.inference.export import pipeline as export_pipeline
from vit_app.inference.export import data as export_data
from vit_app.inference import inference_task as tasks
from vit_app.inference.export.formats import (CALIBRATED_FORMATS, DEFAULT_FORMATS, EXPORT_FORMATS,
                                          FORMATS, ExportFormat, ExportOptions, min_agreements,
                                          parse_min_agreement, unchecked_on_random_images)
from vit_app.inference.export.report import (EXIT_EXPORT_FAILED, REPORT_NAME, check_label,
                                         failure_line, format_report, report_failures,
                                         summary_rows)
from vit_app.inference.model_files import load_model
from vit_keras.core.model import preprocessing_of
from vit_keras.export import graph
from vit_keras import tasks as library_tasks

__all__ = ["CALIBRATED_FORMATS", "DEFAULT_FORMATS", "EXIT_EXPORT_FAILED", "EXPORT_FORMATS",
           "FORMATS", "REPORT_NAME", "ExportFormat", "ExportOptions", "check_label",
           "export_model", "failure_line", "format_report", "min_agreements",
           "options_from_arguments", "parse_min_agreement", "report_failures", "run",
           "summary_rows"]

# The API: what `vit train` and the tests call.


def export_model(model, output_dir: str, *, options: ExportOptions | None = None,
                 representative_images=None, eval_images=None, eval_labels=None,
                 **settings) -> dict:
    """Exports `model` in every chosen format, checks each file against Keras, writes export.json.

    A file whose top-1 agreement with Keras is below its bar is moved to `rejected/` instead of
    its name (an older file of that name is removed) and listed in the report's 'failed'.

    Args:
        model: the trained Keras classifier (input [batch, H, W, 3] in [-1, 1]).
        output_dir: directory receiving the files (created if missing).
        options: the `ExportOptions` (default: `ExportOptions()`: the default formats and bars).
        representative_images: float32 [N, H, W, 3] in 0..255 from the training data; required
            for 'tflite_int8' and 'onnx_int8' (the first `num_calibration_images` calibrate).
        eval_images: float32 [N, H, W, 3] in 0..255 to measure parity and accuracy on;
            defaults to the representative images (or 8 random images).
        eval_labels: int labels [N] of `eval_images`, or multi-hot [N, classes] (then each
            format gets its exact `mAP` and a null accuracy); without them accuracy is null.
        **settings: `ExportOptions` fields (formats, num_calibration_images, latency_runs,
            int8_float_ops, int8_per_channel, keep_tensor_names, image_size, activation,
            min_agreement) replacing those of `options`.

    Returns:
        The export.json content: {'formats': {name: {file, size_bytes, max_abs_logit_diff,
        top1_agreement, accuracy, latency_ms, min_agreement, passed, ...}}, 'keras':
        {'accuracy': ...}, 'failed': [names], ...}.
    """
    options = dataclasses.replace(options or ExportOptions(), **settings)
    bars = min_agreements(options.formats, options.min_agreement)
    if eval_images is None and representative_images is None:
        bars = unchecked_on_random_images(bars)
    return export_pipeline.export(model, output_dir, options, bars,
                                  representative_images=representative_images,
                                  eval_images=eval_images, eval_labels=eval_labels)


# The command: `vit export` (its flags: vit.commands.export).


def run(args) -> int:
    """`vit export`: exports the model file, prints the report; returns the exit status."""
    options = options_from_arguments(args)
    if not os.path.exists(args.model):
        raise ValueError(f"no model file at {args.model}: expected a .keras file written by "
                         "`vit train`")
    model = load_model(args.model)
    if args.preprocessing is not None:  # recorded in export.json, and in the exported graphs
        model.set_preprocessing(args.preprocessing)
    images = _command_images(args, model, options)
    output = args.output or os.path.dirname(os.path.abspath(args.model))
    report = export_model(model, output, options=options,
                          representative_images=images.calibration,
                          eval_images=images.eval_images, eval_labels=images.eval_labels)
    console.say(format_report(report))
    written = [entry.file for entry in options.chosen if entry.name not in report["failed"]]
    console.say(f"wrote {', '.join(written + [REPORT_NAME])} to {output}")
    return report_failures(report)


def options_from_arguments(args) -> ExportOptions:
    """The `ExportOptions` of `vit export`'s command line (the activation, unless given, from
    the config.json next to --model)."""
    return ExportOptions(
        formats=args.formats, num_calibration_images=args.calibration_images,
        latency_runs=args.latency_runs,
        int8_float_ops=[op.strip().upper() for op in args.int8_float_ops.split(",")
                        if op.strip()],
        int8_per_channel=not args.int8_per_tensor, keep_tensor_names=args.keep_tensor_names,
        image_size=args.image_size,
        activation=args.activation or run_config.read(args.model).get("activation"),
        min_agreement=parse_min_agreement(args.min_agreement))


def _inference_task(model) -> tasks.InferenceTask:
    """The inference part of the model's task, which reads its data."""
    return tasks.get(library_tasks.task_of(model))


def _command_images(args, model, options: ExportOptions) -> export_data.ExportImages:
    """The images of --data, else of the data the model was trained on (its config.json);
    none when neither is known and no format needs calibration."""
    input_size = graph.sample_shape(graph.at_image_size(model, options.image_size))[:-1]
    trained_on = {} if args.data else run_config.training_data(args.model)
    data_spec = args.data or trained_on.get("data")
    if data_spec:
        if not args.data:
            console.say(f"vit export: calibrating and evaluating on {data_spec!r}, the data the "
                        "model was trained on (from its config.json)")
        return export_data.load(data_spec, input_size, args.calibration_images, args.eval_images,
                                trained_on, preprocessing_of(model),
                                task=_inference_task(model))
    calibrated = ", ".join(name for name in options.formats if name in CALIBRATED_FORMATS)
    if calibrated:
        raise ValueError(f"{calibrated} needs --data to calibrate on (a few hundred training "
                         f"images); pass --data or choose --formats without {calibrated}")
    return export_data.ExportImages(None)
