"""The writers of `vit export`'s formats, and how each written file is run: one writer per
runtime (SavedModel, LiteRT, ONNX Runtime, keras-hub), each writing one `ExportFormat` and
returning its export.json entry so far.

Keras and TensorFlow are imported when a writer runs, never at import.
"""

from __future__ import annotations

import dataclasses
import os

LATENCY_THREADS = 2
FLOAT_ONNX = "onnx"  # the format whose file the int8 ONNX formats quantize


@dataclasses.dataclass(frozen=True)
class WriteJob:
    """What every writer of one export works from.

    Attributes:
        model: the Keras classifier.
        options: the export's `ExportOptions`.
        representative_images: calibration images (float32 0..255), or None.
    """

    model: object
    options: object
    representative_images: object


def write_saved_model(export_format, path: str, job: WriteJob, written: dict) -> dict:
    """Writes the SavedModel folder.

    Args:
        export_format: its `ExportFormat`.
        path: the folder to write.
        job: the export's model, options and calibration images.
        written: {format name: where its file now is} of the formats written before.

    Returns:
        Its export.json entry so far.
    """
    from vit_keras import export

    export.saved_model(job.model, path, image_size=job.options.image_size,
                       activation=job.options.activation)
    return {"latency_ms": None}


def write_tflite(export_format, path: str, job: WriteJob, written: dict) -> dict:
    """Writes a TFLite file (arguments as `write_saved_model`'s); returns its entry so far."""
    from vit_keras import export

    arguments = job.options.tflite_arguments(export_format)
    lite_report = export.tflite(job.model, path, representative_data=job.representative_images,
                                **arguments)
    entry = {"quantization": export_format.quantization or "float32", "ops": lite_report["ops"],
             "latency_ms": None}
    if export_format.calibrated:
        entry.update(float_ops=list(arguments["float_ops"]),
                     per_channel=job.options.int8_per_channel)
    return entry


def write_onnx(export_format, path: str, job: WriteJob, written: dict) -> dict:
    """Writes an ONNX file (arguments as `write_saved_model`'s); returns its entry so far.

    int8 files quantize the float file this export wrote (`written`'s, published or
    rejected), else one written to a temporary folder: never a `model.onnx` left in the
    folder by an earlier export.
    """
    import tempfile

    from vit_keras import export
    from vit_keras.export import onnx_quantize

    quantization = export_format.quantization
    float_file = written.get(FLOAT_ONNX)
    entry = {"quantization": quantization or "float32", "latency_ms": None}
    with tempfile.TemporaryDirectory() as scratch:
        float_path = (path if quantization is None
                      else float_file or os.path.join(scratch, "model.onnx"))
        if quantization is None or not float_file:
            report = export.onnx(job.model, float_path, image_size=job.options.image_size)
            entry.update(opset=report["opset"], fused_layer_norms=report["fused_layer_norms"])
        if quantization is not None:
            entry.update(onnx_quantize.quantize(
                float_path, path, quantization, representative_data=job.representative_images,
                num_calibration_images=job.options.num_calibration_images))
    entry["ops"] = runner(export_format, path).operators()
    return entry


def write_keras_hub_preset(export_format, path: str, job: WriteJob, written: dict) -> dict:
    """Writes a keras-hub preset folder (arguments as `write_saved_model`'s). A model with the
    tanh-approximated GELU is written too: its check runs the folder as keras-hub would (exact
    GELU), so the agreement says what that costs."""
    from vit_keras import hub_presets

    hub_presets.save_preset(job.model, path, allow_gelu_mismatch=True)
    return {"latency_ms": None}


def runner(export_format, path: str):
    """The LiteRT or ONNX Runtime runner of a written file (`LATENCY_THREADS` threads)."""
    from vit_keras import export

    if export_format.runtime == "onnxruntime":
        return export.ONNXModel(path, num_threads=LATENCY_THREADS)
    return export.TFLiteModel(path, num_threads=LATENCY_THREADS)


def file_logits(export_format, path: str, images):
    """The logits of the written file at `path` on `images` (float32 0..255)."""
    if export_format.runtime == "tensorflow":
        return _saved_model_logits(path, images)
    if export_format.runtime == "keras_hub":
        return _preset_logits(path, images)
    return runner(export_format, path)(images)


def _preset_logits(path, images):
    """The preset folder rebuilt as keras-hub reads it (`vit_keras.from_preset`: its config,
    weights and image converter), on `images`."""
    import numpy as np

    from vit_keras import hub_presets, preprocess_input

    model = hub_presets.from_preset(path)
    return np.concatenate([np.asarray(model(preprocess_input(images[i:i + 64], model=model)))
                           for i in range(0, len(images), 64)])


def _saved_model_logits(path, images):
    import numpy as np
    import tensorflow as tf

    serve = tf.saved_model.load(path).signatures["serving_default"]
    return np.concatenate([serve(images=tf.constant(images[i:i + 64]))["logits"].numpy()
                           for i in range(0, len(images), 64)])
