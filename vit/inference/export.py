"""Export a trained model: SavedModel, TFLite fp32/fp16/int8, ONNX fp32/int8, with a parity and
speed report.

Writes into the output directory `saved_model/`, `model.tflite`, `model_fp16.tflite`,
`model_dynamic_int8.tflite`, `model_int8.tflite`, `model.onnx`, `model_dynamic_int8.onnx`,
`model_int8.onnx` (the chosen formats) and `export.json`, which records per format: size in
bytes, max |logit difference| against the Keras model, top-1 agreement with Keras and accuracy
(the exact mAP for multi-label data) on the evaluation images, and the median batch-1 latency
through LiteRT or ONNX Runtime; and the `activation` turning the logits into scores (softmax, or
sigmoid for a multi-label model). Full-integer int8 files are calibrated on images of `--data`.
"""

from __future__ import annotations

import json
import os

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
LATENCY_THREADS = 2


def export_model(model, output_dir: str, *, formats=DEFAULT_FORMATS, representative_images=None,
                 eval_images=None, eval_labels=None, num_calibration_images: int = 300,
                 latency_runs: int = 50, int8_float_ops=(), int8_per_channel: bool = True,
                 keep_tensor_names: bool = False, image_size=None, activation=None) -> dict:
    """Exports `model` in every chosen format, checks each file against Keras, writes export.json.

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

    Returns:
        The export.json content: {'formats': {name: {file, size_bytes, max_abs_logit_diff,
        top1_agreement, accuracy, latency_ms, ...}}, 'keras': {'accuracy': ...}, ...}.
    """
    from vit_keras.export import graph

    formats = _check_formats(formats)
    if activation not in (None, *ACTIVATIONS):
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    _require_calibration(formats, representative_images)
    fixed = graph.at_image_size(model, image_size)
    eval_images, eval_labels = _evaluation_set(fixed, eval_images, eval_labels,
                                               representative_images)
    keras_logits = _keras_logits(fixed, eval_images)
    report = _report_header(eval_images, latency_runs, _label_scores(keras_logits, eval_labels))
    report["serving_default_any_size"] = image_size is None and graph.takes_any_size(model)
    report["activation"] = activation or "softmax"
    # The exported graphs normalise inside; a runtime still resizes by the weights' rule.
    from vit_keras.preprocessing import of_model

    report["preprocessing"] = of_model(model).to_dict()
    os.makedirs(output_dir, exist_ok=True)
    lite_options = dict(num_calibration_images=num_calibration_images,
                        int8_float_ops=int8_float_ops, int8_per_channel=int8_per_channel,
                        keep_tensor_names=keep_tensor_names)
    runners = _write_formats(model, formats, output_dir, report, (eval_images, eval_labels,
                             keras_logits), representative_images, image_size,
                             dict(lite_options, activation=activation))
    _add_latencies(report, runners, latency_runs)
    from vit_keras import atomic

    atomic.write_bytes(os.path.join(output_dir, REPORT_NAME),
                       (json.dumps(report, indent=2) + "\n").encode())
    return report


def _write_formats(model, formats, output_dir, report, evaluation, representative_images,
                   image_size, lite_options) -> dict:
    """Writes each format, recording its entry in `report`; returns the timeable runners.

    `evaluation` is (images, labels, Keras logits) for the agreement columns; `lite_options`
    holds the SavedModel's `activation` too.
    """
    eval_images, eval_labels, keras_logits = evaluation
    runners = {}
    for name in formats:
        path = os.path.join(output_dir, FILENAMES[name])
        with console.stage(f"export: {STAGE_NAMES[name]}"):
            runner, logits, entry = _write_format(model, name, path, representative_images,
                                                  eval_images, image_size,
                                                  dict(lite_options, written=report["formats"]))
        if runner is not None:
            runners[name] = runner
        report["formats"][name] = {"file": FILENAMES[name], "size_bytes": _size(path),
                                   **_agreement(logits, keras_logits, eval_labels), **entry}
    return runners


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
    from vit_keras.export.lite import logit_agreement

    return {**logit_agreement(logits, keras_logits), **_label_scores(logits, labels)}


def _write_format(model, name, path, representative_images, eval_images, image_size,
                  lite_options):
    """Writes one format; returns (its LiteRT runner or None, its logits on the evaluation
    images, its export.json entry so far)."""
    from vit_keras import export

    activation = lite_options.pop("activation")
    if name == "saved_model":
        export.saved_model(model, path, image_size=image_size, activation=activation)
        return None, _saved_model_logits(path, eval_images), {"latency_ms": None}
    written = lite_options.pop("written")
    if name.startswith("onnx"):
        runner, entry = _write_onnx(model, name, path, representative_images, eval_images,
                                    image_size, lite_options["num_calibration_images"],
                                    float_written="onnx" in written)
        return runner, runner(eval_images), entry
    runner, entry = _write_tflite(model, name, path, representative_images, eval_images,
                                  image_size=image_size, **lite_options)
    return runner, runner(eval_images), entry


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


def _write_tflite(model, name, path, representative_images, eval_images, *, image_size,
                  num_calibration_images, int8_float_ops, int8_per_channel, keep_tensor_names):
    """Writes the TFLite format `name`; returns (its LiteRT runner, its export.json entry)."""
    from vit_keras import export

    float_ops = tuple(int8_float_ops) if name == "tflite_int8" else ()
    lite_report = export.tflite(
        model, path, quantization=QUANTIZATION[name], representative_data=representative_images,
        verify_images=eval_images[:32], num_calibration_images=num_calibration_images,
        float_ops=float_ops, per_channel=int8_per_channel or name != "tflite_int8",
        keep_tensor_names=keep_tensor_names, image_size=image_size)
    entry = {"quantization": QUANTIZATION[name] or "float32", "ops": lite_report["ops"],
             "latency_ms": None}
    if name == "tflite_int8":
        entry.update(float_ops=list(float_ops), per_channel=int8_per_channel)
    return export.TFLiteModel(path, num_threads=LATENCY_THREADS), entry


def _write_onnx(model, name, path, representative_images, eval_images, image_size,
                num_calibration_images, float_written: bool):
    """Writes the ONNX format `name`; returns (its ONNX Runtime runner, its export.json entry).

    int8 files quantize the float file this export wrote (`float_written`), else one written
    to a temporary folder: never a `model.onnx` left in the folder by an earlier export.
    """
    import tempfile

    from vit_keras import export
    from vit_keras.export import onnx_quantize

    entry = {"quantization": QUANTIZATION[name] or "float32", "latency_ms": None}
    with tempfile.TemporaryDirectory() as scratch:
        float_path = (path if name == "onnx" else
                      os.path.join(os.path.dirname(path), FILENAMES["onnx"]) if float_written
                      else os.path.join(scratch, FILENAMES["onnx"]))
        if name == "onnx" or not float_written:
            report = export.onnx(model, float_path, image_size=image_size,
                                 verify_images=eval_images[:32])
            entry.update(opset=report["opset"], fused_layer_norms=report["fused_layer_norms"])
        if name != "onnx":
            entry.update(onnx_quantize.quantize(
                float_path, path, QUANTIZATION[name], representative_data=representative_images,
                num_calibration_images=num_calibration_images))
    runner = export.ONNXModel(path, num_threads=LATENCY_THREADS)
    entry["ops"] = runner.operators()
    return runner, entry


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
        activation=args.activation or run_config(args.model).get("activation"))
    print(format_report(report))
    print(f"wrote {', '.join(FILENAMES[name] for name in formats)} and {REPORT_NAME} "
          f"to {output}")
    return 0


def format_report(report: dict) -> str:
    """export.json as a Markdown table: format, size, latency, accuracy, agreement, logit diff."""
    lines = ["| format | size (MB) | latency (ms) | accuracy | top-1 agreement | max logit diff |",
             "|---|---|---|---|---|---|"]
    lines.append(f"| keras | | | {_score(report['keras'])} | | |")
    for name, entry in report["formats"].items():
        latency = "" if entry["latency_ms"] is None else f"{entry['latency_ms']:.2f}"
        lines.append(f"| {name} | {entry['size_bytes'] / 1e6:.2f} | {latency} | "
                     f"{_score(entry)} | {_percent(entry['top1_agreement'])} | "
                     f"{entry['max_abs_logit_diff']:.2e} |")
    return "\n".join(lines)


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
