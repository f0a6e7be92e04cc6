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

import contextlib
import json
import os
import sys

from vit import console
from vit.inference.model_files import ACTIVATIONS

FORMATS = ("saved_model", "tflite", "tflite_fp16", "tflite_dynamic_int8", "tflite_int8",
           "onnx", "onnx_dynamic_int8", "onnx_int8")
DEFAULT_FORMATS = ("saved_model", "tflite", "tflite_fp16", "tflite_int8", "onnx", "onnx_int8")
CALIBRATED_FORMATS = ("tflite_int8", "onnx_int8")
FILENAMES = {
    "saved_model": "saved_model",
    "tflite": "model.tflite",
    "tflite_fp16": "model_fp16.tflite",
    "tflite_dynamic_int8": "model_dynamic_int8.tflite",
    "tflite_int8": "model_int8.tflite",
    "onnx": "model.onnx",
    "onnx_dynamic_int8": "model_dynamic_int8.onnx",
    "onnx_int8": "model_int8.onnx",
}
STAGE_NAMES = {"saved_model": "SavedModel", "tflite": "TFLite fp32", "tflite_fp16": "TFLite fp16",
               "tflite_dynamic_int8": "TFLite dynamic int8", "tflite_int8": "TFLite int8",
               "onnx": "ONNX fp32", "onnx_dynamic_int8": "ONNX dynamic int8",
               "onnx_int8": "ONNX int8 (static QDQ)"}
QUANTIZATION = {"tflite": None, "tflite_fp16": "fp16", "tflite_dynamic_int8": "dynamic_int8",
                "tflite_int8": "int8", "onnx": None, "onnx_dynamic_int8": "dynamic_int8",
                "onnx_int8": "int8"}
REPORT_NAME = "export.json"
REJECTED_DIR = "rejected"
STAGING_PREFIX = ".export-"  # one export at a time writes into an output folder
LATENCY_THREADS = 2
EXIT_EXPORT_FAILED = 3  # every other file was written; see the FAILED rows
ADVICE = {
    "tflite_int8": "calibrate on more real training images (--data, --calibration-images), "
                   "try --int8-float-ops SOFTMAX,BATCH_MATMUL (float attention in an int8 "
                   "file), or ship model_dynamic_int8.tflite (--formats tflite_dynamic_int8) or "
                   "model_int8.onnx",
    "tflite_dynamic_int8": "ship model_fp16.tflite, or the calibrated model_int8.tflite",
    "onnx_int8": "calibrate on more real training images (--data, --calibration-images), or "
                 "ship model_dynamic_int8.onnx (--formats onnx_dynamic_int8) or model.onnx",
    "onnx_dynamic_int8": "ship model_int8.onnx (calibrated) or model.onnx",
}
FLOAT_ADVICE = ("a float file must match Keras: this is a bug, please report it with the "
                "model's config.json")


def export_model(model, output_dir: str, *, formats=DEFAULT_FORMATS, representative_images=None,
                 eval_images=None, eval_labels=None, num_calibration_images: int = 300,
                 latency_runs: int = 50, int8_float_ops=(), int8_per_channel: bool = True,
                 keep_tensor_names: bool = False, image_size=None, activation=None,
                 min_agreement=None) -> dict:
    """Exports `model` in every chosen format, checks each file against Keras, writes export.json.

    A file whose top-1 agreement with Keras is below its bar is moved to `rejected/` instead of
    its name (an older file of that name is removed) and listed in the report's 'failed'.

    Args:
        model: the trained Keras classifier (input [batch, H, W, 3] in [-1, 1]).
        output_dir: directory receiving the files (created if missing).
        formats: names out of `FORMATS`.
        representative_images: float32 [N, H, W, 3] in 0..255 from the training data; required
            for 'tflite_int8' and 'onnx_int8' (the first `num_calibration_images` calibrate).
        eval_images: float32 [N, H, W, 3] in 0..255 to measure parity and accuracy on;
            defaults to the representative images (or 8 random images).
        eval_labels: int labels [N] of `eval_images`, or multi-hot [N, classes] (then each
            format gets its exact `mAP` and a null accuracy); without them accuracy is null.
        num_calibration_images: calibration set size for int8.
        latency_runs: timed batch-1 calls per TFLite / ONNX file (median reported).
        int8_float_ops: TFLite operators 'tflite_int8' keeps in float32; empty (default) =
            full-integer. ('BATCH_MATMUL', 'SOFTMAX') makes it ~3x faster on CPUs (LiteRT's int8
            activation-by-activation matmul is slow) at the cost of full-integer-only targets.
        int8_per_channel: per-channel weight scales for 'tflite_int8' (False = per tensor,
            smaller by 12 bytes per channel).
        keep_tensor_names: keep tensor names in the .tflite files (dropped by default).
        image_size: (height, width) for a model taking any size (`dynamic_image_size`): the
            size of the TFLite files and of both SavedModel signatures. None: TFLite at the
            training size, and the SavedModel's `serving_default` takes any size.
        activation: what gives the SavedModel's `probabilities` from the logits: 'softmax'
            (None) or 'sigmoid' (a multi-label model); recorded in export.json, where
            `vit.inference.classifier` finds it for the .tflite and .onnx files, which give logits.
        min_agreement: the top-1 agreement with Keras each file must reach: one fraction for
            every format, or {format or 'float' or 'int8': fraction}; None (default): 0.999
            for float formats, 0.98 for int8 ones. On random images (no eval or
            representative images) only float files are held to it.

    Returns:
        The export.json content: {'formats': {name: {file, size_bytes, max_abs_logit_diff,
        top1_agreement, accuracy, latency_ms, min_agreement, passed, ...}}, 'keras':
        {'accuracy': ...}, 'failed': [names], ...}.
    """
    from vit_keras.export import graph

    formats = _check_formats(formats)
    thresholds = _bars(formats, min_agreement,
                       random_images=eval_images is None and representative_images is None)
    if activation not in (None, *ACTIVATIONS):
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    _require_calibration(formats, representative_images)
    fixed = graph.at_image_size(model, image_size)
    eval_images, eval_labels = _evaluation_set(fixed, eval_images, eval_labels,
                                               representative_images)
    keras_logits = _keras_logits(fixed, eval_images)
    report = _report_header(eval_images, latency_runs, _label_scores(keras_logits, eval_labels))
    report.update(_model_contract(model, image_size, activation))
    os.makedirs(output_dir, exist_ok=True)
    lite_options = dict(num_calibration_images=num_calibration_images,
                        int8_float_ops=int8_float_ops, int8_per_channel=int8_per_channel,
                        keep_tensor_names=keep_tensor_names)
    with _staging_folder(output_dir) as staging:
        runners = _write_formats(model, formats, (output_dir, staging), report,
                                 (eval_images, eval_labels, keras_logits), representative_images,
                                 image_size, dict(lite_options, activation=activation),
                                 thresholds)
    report["failed"] = [name for name, entry in report["formats"].items()
                        if not entry["passed"]]
    _add_latencies(report, runners, latency_runs)
    _write_report(report, output_dir)
    return report


def _model_contract(model, image_size, activation) -> dict:
    """export.json's account of what the runtimes must do around the files."""
    from vit_keras.export import graph
    from vit_keras.preprocessing import of_model

    # The exported graphs normalise inside; a runtime still resizes by the weights' rule.
    return {"serving_default_any_size": image_size is None and graph.takes_any_size(model),
            "activation": activation or "softmax",
            "preprocessing": of_model(model).to_dict()}


def _bars(formats, min_agreement, random_images: bool) -> dict:
    """`min_agreements`, with no bar for int8 files checked on random images (their agreement
    on noise says nothing about the task)."""
    thresholds = min_agreements(formats, min_agreement)
    if not random_images:
        return thresholds
    return {name: (value if QUANTIZATION.get(name) in (None, "fp16") else None)
            for name, value in thresholds.items()}


def _write_report(report: dict, output_dir: str) -> None:
    from vit_keras import atomic

    atomic.write_bytes(os.path.join(output_dir, REPORT_NAME),
                       (json.dumps(report, indent=2) + "\n").encode())


def min_agreements(formats, min_agreement=None) -> dict:
    """The top-1 agreement each format must reach.

    Args:
        formats: format names.
        min_agreement: None (the defaults), one fraction for all, or {key: fraction} where a
            key is a format name, 'float' or 'int8' (a format's own key wins).

    Returns:
        {format: fraction}.
    """
    from vit_keras.export import agreement

    if isinstance(min_agreement, (int, float)):
        min_agreement = {name: min_agreement for name in formats}
    overrides = dict(min_agreement or {})
    unknown = sorted(set(overrides) - set(FORMATS) - {"float", "int8"})
    if unknown:
        raise ValueError(f"min_agreement keys must be formats ({', '.join(FORMATS)}), 'float' "
                         f"or 'int8', got {unknown}")
    thresholds = {}
    for name in formats:
        quantization = QUANTIZATION.get(name)
        kind = "float" if quantization in (None, "fp16") else "int8"
        value = overrides.get(name, overrides.get(kind))
        if value is None:
            value = agreement.default_min_agreement(quantization)
        agreement.check_options(value, "raise")
        thresholds[name] = float(value)
    return thresholds


def parse_min_agreement(text: str):
    """`--min-agreement`: '0.95' for every format, or 'int8=0.95,tflite=0.999,...'."""
    if not text:
        return None
    try:
        if "=" not in text:
            return float(text)
        pairs = [item.split("=", 1) for item in text.split(",") if item.strip()]
        return {key.strip(): float(value) for key, value in pairs}
    except ValueError:
        raise ValueError(f"--min-agreement must be a fraction (0.98) or FORMAT=FRACTION pairs "
                         f"separated by commas (int8=0.95,tflite=0.999), got {text!r}") from None


@contextlib.contextmanager
def _staging_folder(output_dir: str):
    """A hidden folder inside `output_dir` (the same disk, so publishing is a rename); the
    staging folders of an export killed in this folder earlier are removed first."""
    import glob
    import shutil
    import tempfile

    for stale in glob.glob(os.path.join(output_dir, STAGING_PREFIX + "*")):
        shutil.rmtree(stale, ignore_errors=True)
    folder = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=output_dir)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _write_formats(model, formats, folders, report, evaluation, representative_images,
                   image_size, lite_options, thresholds) -> dict:
    """Writes each format into the staging folder, checks it, then publishes or rejects it;
    records its entry in `report` and returns the runners of the published files.

    `folders` is (output folder, staging folder); `evaluation` is (images, labels, Keras
    logits) for the agreement columns; `lite_options` holds the SavedModel's `activation` too.
    """
    output_dir, staging = folders
    eval_images, eval_labels, keras_logits = evaluation
    runners, written = {}, {}
    for name in formats:
        staged = os.path.join(staging, FILENAMES[name])
        with console.stage(f"export: {STAGE_NAMES[name]}"):
            logits, entry = _write_format(model, name, staged, representative_images,
                                          eval_images, image_size,
                                          dict(lite_options, written=written))
        entry = {"file": FILENAMES[name], "size_bytes": _size(staged),
                 **_agreement(logits, keras_logits, eval_labels), **entry}
        entry.update(_check(name, entry, thresholds[name]))
        written[name] = _publish(staged, output_dir, FILENAMES[name], entry["passed"])
        if entry["passed"] and name != "saved_model":
            runners[name] = _runner(name, written[name])
        elif not entry["passed"]:
            entry["rejected_file"] = os.path.join(REJECTED_DIR, FILENAMES[name])
        report["formats"][name] = entry
    return runners


def _check(name: str, entry: dict, threshold) -> dict:
    """The gate's fields of a format's entry: min_agreement, passed and (failed) advice."""
    if threshold is None:
        return {"min_agreement": None, "passed": True}
    passed = entry["top1_agreement"] >= threshold
    fields = {"min_agreement": threshold, "passed": passed}
    if not passed:
        fields["advice"] = ADVICE.get(name, FLOAT_ADVICE)
    return fields


def _publish(staged: str, output_dir: str, filename: str, passed: bool) -> str:
    """Moves a checked file to its name (passed) or to rejected/ (failed, and any older file of
    its name is removed); returns where it now is."""
    from vit_keras import atomic

    final = os.path.join(output_dir, filename)
    rejected = os.path.join(output_dir, REJECTED_DIR, filename)
    if passed:
        atomic.remove(rejected)
        atomic.publish(staged, final)
        return final
    atomic.remove(final)
    atomic.makedirs(os.path.dirname(rejected))
    atomic.publish(staged, rejected)
    return rejected


def _runner(name: str, path: str):
    """The latency runner of a published TFLite or ONNX file."""
    from vit_keras import export

    if name.startswith("onnx"):
        return export.ONNXModel(path, num_threads=LATENCY_THREADS)
    return export.TFLiteModel(path, num_threads=LATENCY_THREADS)


def failure_line(name: str, entry: dict) -> str:
    """One line saying which file failed its check, by how much, where it went, what to try."""
    return (f"export: {name} FAILED: top-1 agreement with the Keras model "
            f"{_percent(entry['top1_agreement'])} < {_percent(entry['min_agreement'])}; "
            f"not written as {entry['file']} (kept as {entry['rejected_file']} to inspect); "
            f"{entry['advice']}")


def _add_latencies(report: dict, runners: dict, latency_runs: int) -> None:
    """Times the TFLite files side by side and records each median in the report."""
    if not runners:
        return
    with console.stage(f"export: batch-1 latency of {len(runners)} TFLite/ONNX files"):
        latencies = _latencies(runners, latency_runs)
    for name, latency in latencies.items():
        report["formats"][name]["latency_ms"] = round(latency, 4)


def _require_calibration(formats, representative_images) -> None:
    calibrated = [name for name in formats if name in CALIBRATED_FORMATS]
    if calibrated and representative_images is None:
        raise ValueError(f"format(s) {', '.join(calibrated)} (full-integer) need "
                         "representative_images: a few hundred training images, float32 "
                         "[N, H, W, 3] in 0..255, to calibrate; got None. Pass them (vit export "
                         "--data ...) or drop those formats.")


def _agreement(logits, keras_logits, labels) -> dict:
    """An exported file's logits against Keras': max |difference|, top-1 agreement, accuracy
    (or mAP)."""
    from vit_keras.export.agreement import logit_agreement

    return {**logit_agreement(logits, keras_logits), **_label_scores(logits, labels)}


def _write_format(model, name, path, representative_images, eval_images, image_size,
                  lite_options):
    """Writes one format; returns (its logits on the evaluation images, its export.json entry
    so far)."""
    from vit_keras import export

    activation = lite_options.pop("activation")
    if name == "saved_model":
        export.saved_model(model, path, image_size=image_size, activation=activation)
        return _saved_model_logits(path, eval_images), {"latency_ms": None}
    written = lite_options.pop("written")
    if name.startswith("onnx"):
        entry = _write_onnx(model, name, path, representative_images, image_size,
                            lite_options["num_calibration_images"],
                            float_file=written.get("onnx"))
    else:
        entry = _write_tflite(model, name, path, representative_images, image_size=image_size,
                              **lite_options)
    return _runner(name, path)(eval_images), entry


def _report_header(eval_images, latency_runs: int, keras_scores: dict) -> dict:
    """export.json before the formats: the input contract, the evaluation and timing setup."""
    return {
        "input": {"shape": list(eval_images.shape[1:]), "dtype": "float32",
                  "range": [0, 255], "layout": "NHWC RGB"},
        "eval_examples": int(len(eval_images)),
        "latency": {"batch_size": 1, "threads": LATENCY_THREADS, "runs": latency_runs,
                    "statistic": "median of 5 interleaved rounds (each a median)"},
        "keras": keras_scores,
        "formats": {},
    }


def _write_tflite(model, name, path, representative_images, *, image_size,
                  num_calibration_images, int8_float_ops, int8_per_channel, keep_tensor_names):
    """Writes the TFLite format `name`; returns its export.json entry so far."""
    from vit_keras import export

    float_ops = tuple(int8_float_ops) if name == "tflite_int8" else ()
    lite_report = export.tflite(
        model, path, quantization=QUANTIZATION[name], representative_data=representative_images,
        num_calibration_images=num_calibration_images,
        float_ops=float_ops, per_channel=int8_per_channel or name != "tflite_int8",
        keep_tensor_names=keep_tensor_names, image_size=image_size)
    entry = {"quantization": QUANTIZATION[name] or "float32", "ops": lite_report["ops"],
             "latency_ms": None}
    if name == "tflite_int8":
        entry.update(float_ops=list(float_ops), per_channel=int8_per_channel)
    return entry


def _write_onnx(model, name, path, representative_images, image_size, num_calibration_images,
                float_file: str | None):
    """Writes the ONNX format `name`; returns its export.json entry so far.

    int8 files quantize the float file this export wrote (`float_file`, published or
    rejected), else one written to a temporary folder: never a `model.onnx` left in the
    folder by an earlier export.
    """
    import tempfile

    from vit_keras import export
    from vit_keras.export import onnx_quantize

    entry = {"quantization": QUANTIZATION[name] or "float32", "latency_ms": None}
    with tempfile.TemporaryDirectory() as scratch:
        float_path = (path if name == "onnx" else float_file
                      or os.path.join(scratch, FILENAMES["onnx"]))
        if name == "onnx" or not float_file:
            report = export.onnx(model, float_path, image_size=image_size)
            entry.update(opset=report["opset"], fused_layer_norms=report["fused_layer_norms"])
        if name != "onnx":
            entry.update(onnx_quantize.quantize(
                float_path, path, QUANTIZATION[name], representative_data=representative_images,
                num_calibration_images=num_calibration_images))
    entry["ops"] = _runner(name, path).operators()
    return entry


def _latencies(runners: dict, runs: int, rounds: int = 5) -> dict:
    """Median batch-1 latency (ms) per runner, measured in interleaved rounds so that load
    from other processes weighs on every file alike."""
    import statistics

    times = {name: [] for name in runners}
    for _ in range(rounds):
        for name, runner in runners.items():
            times[name].append(runner.latency_ms(runs=max(1, runs // rounds), warmup=2))
    return {name: statistics.median(values) for name, values in times.items()}


def _check_formats(formats) -> tuple:
    if isinstance(formats, str):
        formats = [name.strip() for name in formats.split(",") if name.strip()]
    formats = tuple(formats)
    unknown = [name for name in formats if name not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"formats must be a non-empty subset of {FORMATS}, got {formats}")
    return formats


def _evaluation_set(model, images, labels, representative_images):
    import numpy as np

    from vit_keras.export import graph

    height, width = graph.image_size(model)
    if images is None:
        images = representative_images
        labels = None
    if images is None:
        images = np.random.default_rng(0).uniform(0, 255, (8, height, width, 3))
    images = np.asarray(images, dtype=np.float32)
    if images.ndim != 4 or images.shape[1:] != (height, width, 3):
        raise ValueError(f"eval images must be [N, {height}, {width}, 3] float32 in 0..255, "
                         f"got shape {images.shape}")
    if labels is not None:
        labels = np.asarray(labels)
        labels = labels.astype(np.float32) if labels.ndim == 2 else \
            labels.astype(np.int64).reshape(-1)
        if len(labels) != len(images):
            raise ValueError(f"got {len(labels)} eval labels for {len(images)} eval images")
    return images, labels


def _keras_logits(model, images):
    import numpy as np

    from vit_keras.export import graph

    logits_model, _ = graph.split_activation(model)
    logits = graph.logits_function(logits_model)
    return np.concatenate([np.asarray(logits(images[i:i + 64]), dtype=np.float32)
                           for i in range(0, len(images), 64)])


def _saved_model_logits(path, images):
    import numpy as np
    import tensorflow as tf

    serve = tf.saved_model.load(path).signatures["serving_default"]
    return np.concatenate([serve(images=tf.constant(images[i:i + 64]))["logits"].numpy()
                           for i in range(0, len(images), 64)])


def _label_scores(logits, labels) -> dict:
    """{'accuracy': top-1} for int labels; {'accuracy': None, 'mAP': exact} for multi-hot ones."""
    if labels is None:
        return {"accuracy": None}
    if labels.ndim == 2:
        import math

        from vit.inference import multilabel_scores

        mean = multilabel_scores.mean_average_precision(labels, logits)[0]
        return {"accuracy": None, "mAP": None if math.isnan(mean) else mean}
    return {"accuracy": float((logits.argmax(-1) == labels).mean())}


def _size(path: str) -> int:
    if not os.path.isdir(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(path) for name in names)


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True, help="trained .keras model file")
    parser.add_argument("--formats", default=",".join(DEFAULT_FORMATS),
                        help=f"comma-separated, out of {','.join(FORMATS)} "
                             "(default: %(default)s)")
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
    parser.add_argument("--latency-runs", type=int, default=50,
                        help="timed batch-1 LiteRT calls per TFLite file (default: %(default)s)")


def run(args) -> int:
    from vit.inference.model_files import load_model
    from vit_keras.export import graph
    from vit_keras.preprocessing import of_model

    formats = _check_formats(args.formats)
    if not os.path.exists(args.model):
        raise ValueError(f"no model file at {args.model}: expected a .keras file written by "
                         "`vit train`")
    model = load_model(args.model)
    image_hw = graph.image_size(graph.at_image_size(model, args.image_size))
    calibration = eval_images = eval_labels = None
    trained_on = {} if args.data else _training_data(args.model)
    data_spec = args.data or trained_on.get("data")
    if data_spec:
        if not args.data:
            print(f"vit export: calibrating and evaluating on {data_spec!r}, the data the model "
                  "was trained on (from its config.json)")
        calibration, eval_images, eval_labels = _load_data(
            data_spec, image_hw, args.calibration_images, args.eval_images, trained_on,
            of_model(model))
    elif set(formats) & set(CALIBRATED_FORMATS):
        calibrated = ", ".join(name for name in formats if name in CALIBRATED_FORMATS)
        raise ValueError(f"{calibrated} needs --data to calibrate on (a few hundred training "
                         f"images); pass --data or choose --formats without {calibrated}")
    output = args.output or os.path.dirname(os.path.abspath(args.model))
    report = export_model(
        model, output, formats=formats, representative_images=calibration,
        eval_images=eval_images, eval_labels=eval_labels,
        num_calibration_images=args.calibration_images, latency_runs=args.latency_runs,
        int8_float_ops=[op.strip().upper() for op in args.int8_float_ops.split(",")
                        if op.strip()],
        int8_per_channel=not args.int8_per_tensor, keep_tensor_names=args.keep_tensor_names,
        image_size=args.image_size,
        activation=args.activation or run_config(args.model).get("activation"),
        min_agreement=parse_min_agreement(args.min_agreement))
    print(format_report(report))
    written = [FILENAMES[name] for name in formats if name not in report["failed"]]
    print(f"wrote {', '.join(written + [REPORT_NAME])} to {output}")
    return report_failures(report)


def report_failures(report: dict, command: str = "vit export") -> int:
    """Prints one line per file that failed its check; returns the exit status (0, or
    `EXIT_EXPORT_FAILED`)."""
    for name in report["failed"]:
        print(failure_line(name, report["formats"][name]), file=sys.stderr)
    if not report["failed"]:
        return 0
    print(f"{command}: {len(report['failed'])} of {len(report['formats'])} exported files "
          f"FAILED their agreement check and were not written under their names; exit status "
          f"{EXIT_EXPORT_FAILED}", file=sys.stderr, flush=True)
    return EXIT_EXPORT_FAILED


def format_report(report: dict) -> str:
    """export.json as a Markdown table: format, size, latency, accuracy, agreement, logit diff
    and the check against the format's bar."""
    lines = ["| format | size (MB) | latency (ms) | accuracy | top-1 agreement | max logit diff "
             "| check |", "|---|---|---|---|---|---|---|"]
    lines.append(f"| keras | | | {_score(report['keras'])} | | | |")
    for name, entry in report["formats"].items():
        latency = "" if entry["latency_ms"] is None else f"{entry['latency_ms']:.2f}"
        lines.append(f"| {name} | {entry['size_bytes'] / 1e6:.2f} | {latency} | "
                     f"{_score(entry)} | {_percent(entry['top1_agreement'])} | "
                     f"{entry['max_abs_logit_diff']:.2e} | {check_label(entry)} |")
    return "\n".join(lines)


def summary_rows(report: dict) -> list[tuple[str, str]]:
    """One (file, 'agreement ..., accuracy ..., check') row per exported format, for the result
    table of `vit train`."""
    rows = []
    for entry in report["formats"].values():
        score = _score(entry)
        rows.append((entry.get("rejected_file") or entry["file"],
                     f"agreement {_percent(entry['top1_agreement'])}"
                     f"{', top-1 ' + score if score else ''}, {check_label(entry)}"))
    return rows


def check_label(entry: dict) -> str:
    """'ok (>= 98.00%)', 'FAILED (< 98.00%)', or 'not checked' (int8 on random images)."""
    if entry.get("min_agreement") is None:
        return "not checked"
    if entry["passed"]:
        return f"ok (>= {_percent(entry['min_agreement'])})"
    return f"FAILED (< {_percent(entry['min_agreement'])})"


def _percent(value) -> str:
    return "" if value is None else f"{100 * value:.2f}%"


def _score(entry: dict) -> str:
    """The accuracy column: top-1, or the mAP of a multi-label model."""
    if entry.get("mAP") is not None:
        return f"{_percent(entry['mAP'])} mAP"
    return _percent(entry["accuracy"])


def run_config(model_path: str) -> dict:
    """The config.json `vit train` wrote next to the model; {} when there is none."""
    path = os.path.join(os.path.dirname(os.path.abspath(model_path)), "config.json")
    if not os.path.exists(path):
        return {}
    with open(path) as handle:
        return json.load(handle)


def _training_data(model_path: str) -> dict:
    """The data fields (data, val_data, val_split, seed) of the preset in the config.json
    `vit train` wrote next to the model; {} when there is none."""
    preset = run_config(model_path).get("preset", {})
    data = preset.get("data")
    if isinstance(data, dict):  # a preset in sections
        fields = {"data": data.get("train"), "val_data": data.get("val"),
                  "val_split": data.get("val_split"), "seed": preset.get("seed")}
    else:  # the flat preset of a run of an earlier version
        fields = {key: preset.get(key) for key in ("data", "val_data", "val_split", "seed")}
    return {key: value for key, value in fields.items() if value not in (None, "")}


def _load_data(spec: str, image_hw, calibration_count: int = 300, eval_count: int = 2000,
               trained_on: dict | None = None, rule=None):
    """(calibration images, eval images, eval labels) as float32 0..255 at `image_hw`, resized
    by the model's preprocessing `rule` (default: the official one)."""
    from vit_keras.preprocessing import OFFICIAL

    rule = rule or OFFICIAL
    import numpy as np

    if spec.endswith(".npz"):
        with np.load(spec, allow_pickle=False) as arrays:
            if "images" not in arrays:
                raise ValueError(f"{spec}: expected an array 'images' (N, H, W, 3), found "
                                 f"{sorted(arrays.files)}")
            images = arrays["images"].astype(np.float32)
            labels = arrays["labels"] if "labels" in arrays else None
        eval_labels = None if labels is None else labels[:eval_count]
        return images[:calibration_count], images[:eval_count], eval_labels
    return _load_preset_data(spec, image_hw, calibration_count, eval_count, trained_on or {},
                             rule)


def _load_preset_data(spec, image_hw, calibration_count, eval_count, trained_on, rule):
    """Calibration images from the training data, evaluation images + labels from its
    validation data as the run chose them (`--val-data`, or the held-out part), resized as
    `vit train` resizes for evaluation."""
    from vit.data import evaluation
    from vit.data import sources

    data = sources.open_training_data(spec, trained_on.get("val_data", ""),
                                      trained_on.get("val_split", 0.1), trained_on.get("seed", 0))
    calibration, _ = evaluation.take_raw_images(data.train, image_hw, calibration_count, rule)
    if data.val is None:
        return calibration, None, None
    images, labels = evaluation.take_raw_images(data.val, image_hw, eval_count, rule)
    return calibration, images, labels
