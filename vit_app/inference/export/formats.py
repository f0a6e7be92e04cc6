"""What `vit export` can write: one `ExportFormat` per format (its file, runtime, quantization,
bar and advice), the `ExportOptions` every export takes, and the agreement bars.

Nothing here imports Keras or TensorFlow (the command's `--help` reads these tables); the
writers named in the table import them when they run.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

from vit_app.inference.export import writers as export_writers
from vit_app.inference.model_files import ACTIVATIONS
from vit_keras.export import bars

FLOAT_ADVICE = ("a float file must match Keras: this is a bug, please report it with the "
                "model's config.json")


@dataclasses.dataclass(frozen=True)
class ExportFormat:
    """One export format.

    Attributes:
        name: its `--formats` name and export.json key.
        file: the file (or folder) it writes into the output folder.
        title: how its progress line names it.
        runtime: what runs the file: 'tensorflow' (SavedModel), 'litert', 'onnxruntime' or
            'keras_hub' (a preset folder).
        quantization: None (float32), 'fp16', 'dynamic_int8' or 'int8' (full-integer,
            calibrated on training images).
        default: whether `vit export` writes it without `--formats`.
        advice: what to try when the file fails its agreement check.
        writer: writes the file (`export_writers.write_saved_model` documents the
            signature every writer has).
    """

    name: str
    file: str
    title: str
    runtime: str
    quantization: str | None
    default: bool
    advice: str
    writer: Callable

    @property
    def kind(self) -> str:
        """'float' (float32 or fp16 weights) or 'int8': the `--min-agreement` group."""
        return "float" if self.quantization in (None, "fp16") else "int8"

    @property
    def calibrated(self) -> bool:
        """Whether it needs calibration images (full-integer int8)."""
        return self.quantization == "int8"

    @property
    def timed(self) -> bool:
        """Whether export.json gets its batch-1 latency (the LiteRT and ONNX Runtime files)."""
        return self.runtime in ("litert", "onnxruntime")

    def default_min_agreement(self) -> float:
        """The top-1 agreement with Keras it must reach unless `--min-agreement` says."""
        return bars.default_min_agreement(self.quantization)


def _tflite(name, file, title, quantization, default, advice=FLOAT_ADVICE) -> ExportFormat:
    return ExportFormat(name, file, title, "litert", quantization, default, advice,
                        export_writers.write_tflite)


def _onnx(name, file, title, quantization, default, advice=FLOAT_ADVICE) -> ExportFormat:
    return ExportFormat(name, file, title, "onnxruntime", quantization, default, advice,
                        export_writers.write_onnx)


_CALIBRATE_MORE = "calibrate on more real training images (--data, --calibration-images), "
EXPORT_FORMATS = {entry.name: entry for entry in (
    ExportFormat("saved_model", "saved_model", "SavedModel", "tensorflow", None, True,
                 FLOAT_ADVICE, export_writers.write_saved_model),
    _tflite("tflite", "model.tflite", "TFLite fp32", None, True),
    _tflite("tflite_fp16", "model_fp16.tflite", "TFLite fp16", "fp16", True),
    _tflite("tflite_dynamic_int8", "model_dynamic_int8.tflite", "TFLite dynamic int8",
            "dynamic_int8", False,
            "ship model_fp16.tflite, or the calibrated model_int8.tflite"),
    _tflite("tflite_int8", "model_int8.tflite", "TFLite int8", "int8", True,
            _CALIBRATE_MORE + "try --int8-float-ops SOFTMAX,BATCH_MATMUL (float attention in an "
            "int8 file), or ship model_dynamic_int8.tflite (--formats tflite_dynamic_int8) or "
            "model_int8.onnx"),
    _onnx("onnx", "model.onnx", "ONNX fp32", None, True),
    _onnx("onnx_dynamic_int8", "model_dynamic_int8.onnx", "ONNX dynamic int8", "dynamic_int8",
          False, "ship model_int8.onnx (calibrated) or model.onnx"),
    _onnx("onnx_int8", "model_int8.onnx", "ONNX int8 (static QDQ)", "int8", True,
          _CALIBRATE_MORE + "or ship model_dynamic_int8.onnx (--formats onnx_dynamic_int8) or "
          "model.onnx"),
    ExportFormat("keras_hub_preset", "keras_hub_preset", "keras-hub preset", "keras_hub", None,
                 False, "keras-hub computes the exact GELU: train or fine-tune the model with "
                 "--set model.gelu_approximate=false (a keras-hub preset given to --weights "
                 "does this)", export_writers.write_keras_hub_preset),
)}
FORMATS = tuple(EXPORT_FORMATS)
DEFAULT_FORMATS = tuple(name for name, entry in EXPORT_FORMATS.items() if entry.default)
CALIBRATED_FORMATS = tuple(name for name, entry in EXPORT_FORMATS.items() if entry.calibrated)


def check_formats(formats) -> tuple:
    """Format names as a tuple, from a sequence or a comma-separated string.

    Args:
        formats: names out of `FORMATS`, or 'tflite,onnx'.

    Returns:
        The names, in the order given.

    Raises:
        ValueError: an unknown name, or none.
    """
    if isinstance(formats, str):
        formats = [name.strip() for name in formats.split(",") if name.strip()]
    formats = tuple(formats)
    unknown = [name for name in formats if name not in FORMATS]
    if unknown or not formats:
        raise ValueError(f"formats must be a non-empty subset of {FORMATS}, got {formats}")
    return formats


@dataclasses.dataclass(frozen=True)
class ExportOptions:
    """How an export writes and checks its files (the images it works on apart).

    Attributes:
        formats: names out of `FORMATS` (a comma-separated string is accepted).
        num_calibration_images: calibration set size for int8.
        latency_runs: timed batch-1 calls per TFLite / ONNX file (median reported).
        int8_float_ops: TFLite operators 'tflite_int8' keeps in float32; empty (default) =
            full-integer. ('BATCH_MATMUL', 'SOFTMAX') makes it ~3x faster on CPUs (LiteRT's
            int8 activation-by-activation matmul is slow) at the cost of full-integer-only
            targets.
        int8_per_channel: per-channel weight scales for 'tflite_int8' (False = per tensor,
            smaller by 12 bytes per channel).
        keep_tensor_names: keep tensor names in the .tflite files (dropped by default).
        image_size: (height, width) for a model taking any size (`dynamic_image_size`): the
            size of the TFLite files and of both SavedModel signatures. None: TFLite at the
            training size, and the SavedModel's `serving_default` takes any size.
        activation: what gives the SavedModel's `probabilities` from the logits: 'softmax'
            (None), 'sigmoid' (a multi-label model) or 'linear' (the logits); recorded in
            export.json, where `vit_app.inference.classifier` finds it for the .tflite and
            .onnx files, which give logits.
        min_agreement: the top-1 agreement with Keras each file must reach: one fraction for
            every format, or {format or 'float' or 'int8': fraction}; None (default): 0.999
            for float formats, 0.98 for int8 ones. On random images (no eval or
            representative images) only float files are held to it.
    """

    formats: tuple = DEFAULT_FORMATS
    num_calibration_images: int = 300
    latency_runs: int = 50
    int8_float_ops: tuple = ()
    int8_per_channel: bool = True
    keep_tensor_names: bool = False
    image_size: tuple | None = None
    activation: str | None = None
    min_agreement: float | dict | None = None

    def __post_init__(self):
        object.__setattr__(self, "formats", check_formats(self.formats))
        object.__setattr__(self, "int8_float_ops", tuple(self.int8_float_ops))
        if self.image_size is not None:
            object.__setattr__(self, "image_size", tuple(self.image_size))
        if self.activation not in (None, *ACTIVATIONS):
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got "
                             f"{self.activation!r}")

    @property
    def chosen(self) -> list[ExportFormat]:
        """The `ExportFormat`s of `formats`, in order."""
        return [EXPORT_FORMATS[name] for name in self.formats]

    def tflite_arguments(self, export_format: ExportFormat) -> dict:
        """The keyword arguments of `vit_keras.export.tflite` writing `export_format`
        (float operators and per-tensor scales apply to the full-integer file only)."""
        full_integer = export_format.calibrated
        return {"quantization": export_format.quantization,
                "num_calibration_images": self.num_calibration_images,
                "float_ops": self.int8_float_ops if full_integer else (),
                "per_channel": self.int8_per_channel or not full_integer,
                "keep_tensor_names": self.keep_tensor_names, "image_size": self.image_size}


def tflite_arguments(name: str, **settings) -> dict:
    """`vit_keras.export.tflite`'s keyword arguments writing format `name` as `vit export`
    writes it (what the benchmarks time).

    Args:
        name: a TFLite format out of `FORMATS`.
        **settings: `ExportOptions` fields (int8_float_ops, int8_per_channel, ...).

    Returns:
        {quantization, num_calibration_images, float_ops, per_channel, keep_tensor_names,
        image_size}.
    """
    if EXPORT_FORMATS.get(name) is None or EXPORT_FORMATS[name].runtime != "litert":
        tflite = [key for key, entry in EXPORT_FORMATS.items() if entry.runtime == "litert"]
        raise ValueError(f"name must be a TFLite format ({', '.join(tflite)}), got {name!r}")
    return ExportOptions(formats=(name,), **settings).tflite_arguments(EXPORT_FORMATS[name])


def tflite_precisions(**settings) -> dict:
    """{precision: `tflite_arguments`} of the TFLite formats, by precision: 'fp32', 'fp16',
    'dynamic_int8', 'int8' (the rows of the export benchmarks)."""
    return {(entry.quantization or "fp32"): tflite_arguments(name, **settings)
            for name, entry in EXPORT_FORMATS.items() if entry.runtime == "litert"}


def min_agreements(formats, min_agreement=None) -> dict:
    """The top-1 agreement each format must reach.

    Args:
        formats: format names.
        min_agreement: None (the defaults), one fraction for all, or {key: fraction} where a
            key is a format name, 'float' or 'int8' (a format's own key wins).

    Returns:
        {format: fraction}.
    """
    if isinstance(min_agreement, (int, float)):
        min_agreement = {name: min_agreement for name in formats}
    overrides = dict(min_agreement or {})
    unknown = sorted(set(overrides) - set(FORMATS) - {"float", "int8"})
    if unknown:
        raise ValueError(f"min_agreement keys must be formats ({', '.join(FORMATS)}), 'float' "
                         f"or 'int8', got {unknown}")
    thresholds = {}
    for name in formats:
        export_format = EXPORT_FORMATS[name]
        value = overrides.get(name, overrides.get(export_format.kind))
        if value is None:
            value = export_format.default_min_agreement()
        bars.check_options(value, "raise")
        thresholds[name] = float(value)
    return thresholds


def unchecked_on_random_images(thresholds: dict) -> dict:
    """`thresholds` without a bar for int8 files, for an export checked on random images (an
    int8 file's agreement on noise says nothing about the task)."""
    return {name: (value if EXPORT_FORMATS[name].kind == "float" else None)
            for name, value in thresholds.items()}


def parse_min_agreement(text: str):
    """`--min-agreement`: '0.95' for every format, or 'int8=0.95,tflite=0.999,...'.

    Args:
        text: the flag's value ('' = the default bars).

    Returns:
        None, one fraction, or {key: fraction} (see `min_agreements`).

    Raises:
        ValueError: text that is neither.
    """
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
