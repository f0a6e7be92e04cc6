"""int8 `.onnx` files through ONNX Runtime's quantization tools.

- 'dynamic_int8': int8 weights of every MatMul; activations quantized on the fly per call
  (`quantize_dynamic`, MatMulInteger kernels). No calibration.
- 'int8': static QDQ, calibrated on training images: weights per channel and activations
  int8 for the matrix products (patch embedding, projections, MLPs, and the attention's
  q.k^T and probs.v), which ONNX Runtime fuses into QLinearConv / QLinearMatMul kernels.
  `KEPT_IN_FLOAT` stay float32 between them: LayerNormalization (one fused op), Softmax,
  GELU's Tanh and the residual additions, which have no int8 kernel that pays off on CPUs.
"""

from __future__ import annotations

import os
import tempfile

from vit_keras import atomic
from vit_keras.export.lite import calibration_images

QUANTIZATIONS = ("dynamic_int8", "int8")
STATIC_OPS = ("Conv", "MatMul")
KEPT_IN_FLOAT = ("LayerNormalization", "Softmax", "Tanh", "Add", "Mul")


class _Calibration:
    """ONNX Runtime's CalibrationDataReader over single images."""

    def __init__(self, input_name: str, images):
        self._input_name = input_name
        self._images = iter(images)

    def get_next(self):
        image = next(self._images, None)
        return None if image is None else {self._input_name: image}


def quantize(float_path: str, path: str, quantization: str, *, representative_data=None,
             num_calibration_images: int = 300) -> dict:
    """Writes an int8 version of the float `.onnx` file `float_path` to `path` (atomically).

    Args:
        float_path: a file written by `vit_keras.export.onnx`.
        path: the int8 file.
        quantization: 'dynamic_int8' or 'int8' (static QDQ).
        representative_data: float32 images [N, H, W, 3] in 0..255 (or batches of them);
            required for 'int8'.
        num_calibration_images: at most this many calibrate 'int8'.

    Returns:
        {'quantization', 'calibration_images', 'kept_in_float'}.
    """
    from onnxruntime import quantization as ort_quantization

    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}")
    if quantization == "int8" and representative_data is None:
        raise ValueError("ONNX int8 (static QDQ) needs representative_data: a few hundred "
                         "training images, float32 [N, H, W, 3] in 0..255")
    with tempfile.TemporaryDirectory() as folder:
        staged = os.path.join(folder, "model.onnx")
        if quantization == "dynamic_int8":
            ort_quantization.quantize_dynamic(float_path, staged, op_types_to_quantize=["MatMul"],
                                              weight_type=ort_quantization.QuantType.QInt8)
            report = {"quantization": quantization, "calibration_images": 0, "kept_in_float": []}
        else:
            count = _quantize_static(ort_quantization, float_path, staged, representative_data,
                                     num_calibration_images)
            report = {"quantization": quantization, "calibration_images": count,
                      "kept_in_float": list(KEPT_IN_FLOAT)}
        with open(staged, "rb") as file:
            atomic.write_bytes(path, file.read())
    return report


def _quantize_static(ort_quantization, float_path, staged, representative_data, limit) -> int:
    """Static QDQ quantization of the matrix products; returns the calibration image count."""
    import onnx

    model = onnx.load(float_path)
    input_name = model.graph.input[0].name
    height, width = (dim.dim_value for dim in model.graph.input[0].type.tensor_type.shape.dim[1:3])
    images = list(calibration_images(representative_data, (height, width), limit))
    ort_quantization.quantize_static(
        float_path, staged, _Calibration(input_name, images),
        quant_format=ort_quantization.QuantFormat.QDQ, op_types_to_quantize=list(STATIC_OPS),
        per_channel=True, activation_type=ort_quantization.QuantType.QUInt8,
        weight_type=ort_quantization.QuantType.QInt8,
        calibrate_method=ort_quantization.CalibrationMethod.MinMax)
    return len(images)
