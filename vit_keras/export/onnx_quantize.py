"""int8 `.onnx` files through ONNX Runtime's quantization tools.

- 'dynamic_int8': int8 weights of every MatMul; activations quantized on the fly per call
  (`quantize_dynamic`, MatMulInteger kernels). No calibration.
- 'int8': static QDQ, calibrated on training images: int8 weights (per output channel) and
  uint8 activations for the patch embedding, every projection and MLP layer, the head and the
  attention's q.k^T, which ONNX Runtime fuses into QLinearConv / QLinearMatMul kernels. Kept in
  float32 between them (`KEPT_IN_FLOAT`): LayerNormalization (one fused op), GELU, the residual
  additions, and the attention's softmax with its probabilities x values product.

Choices measured on ViT-S/16 (2 threads, batch 1, same-run ratios to the float32 file): uint8
activations with int8 weights (ONNX Runtime's U8S8 kernels) ~0.6x, int8 activations 1.3x;
also quantizing Add and Softmax inputs 0.8x; ONNX Runtime's recommended `quant_pre_process`
first 0.9x. With the softmax quantized too, ONNX Runtime runs it as QLinearSoftmax, 16% of the
int8 file's time in its profile; keeping it and probs x values in float brings the file from
~0.6x to ~0.55x. So that is the default, and the quantizer's reminder to pre-process is
silenced. Activation ranges are calibrated by percentile (99.999%), which clips the rare
outlier activations ViTs have: on the default job's test split (360 digits) the int8 file
scores 98.89% top-1 (float32: 99.17%), against 98.33% with min/max ranges. Where a tensor's
values span fewer float32 steps than the histogram has bins (the near-uniform attention of
untrained weights: every probability 1/256 to a few ulps), numpy cannot bin it, and the file
is calibrated by min/max instead, with a warning.

ONNX Runtime's calibrator keeps every calibrated tensor of every image until it builds the
histograms: a MobileViT v2 at 256 px holds tens of megabytes per image, and 300 images ran a
24 GiB machine out of memory. Where the images' tensors exceed `CALIBRATION_BYTES_AT_ONCE`,
they are calibrated in equal groups whose histograms merge (its `CalibStridedMinMax` option;
the images past the last whole group, fewer than a group, are left out).

Both files keep their int8 weights in 7 bits (`reduce_range`). ONNX Runtime's uint8 x int8
kernels on x86 CPUs without VNNI (AVX2, AVX-512 before VNNI) add pairs of products in 16 bits,
which saturate with full-range weights: there the tiny models of tests/test_export_matrix.py
agreed with Keras on 93.5-97.5% of images (static) and 98-99% (dynamic), with 7-bit weights on
99-100%. VNNI CPUs add in 32 bits and lose next to nothing from the halved weight range.
"""

import contextlib
import io
import logging
import os
import tempfile
import warnings

import numpy as np

from vit_keras import atomic
from vit_keras.export.lite import calibration_images

QUANTIZATIONS = ("dynamic_int8", "int8")
STATIC_OPS = ("Conv", "MatMul")
KEPT_IN_FLOAT = ("LayerNormalization", "GELU", "residual Add", "Softmax",
                 "probabilities x values MatMul")
# The calibrated tensors ONNX Runtime may hold at once (it stacks a copy of them too).
CALIBRATION_BYTES_AT_ONCE = 2**30


class _Calibration:
    """ONNX Runtime's CalibrationDataReader over single images, all of them or, for a group
    at a time, those `set_range` picks."""

    def __init__(self, input_name: str, images: list):
        self._input_name = input_name
        self._all = images
        self._images = iter(images)

    def __len__(self) -> int:
        """All the images (ONNX Runtime divides them into groups)."""
        return len(self._all)

    def set_range(self, start_index: int, end_index: int) -> None:
        """The next group: images [start_index, end_index)."""
        self._images = iter(self._all[start_index:end_index])

    def get_next(self):
        image = next(self._images, None)
        return None if image is None else {self._input_name: image}


def calibrated_bytes_per_image(model) -> int:
    """The float32 bytes of one image's calibrated tensors in an ONNX model.

    Args:
        model: the float `onnx.ModelProto`.

    Returns:
        The bytes of the inputs and outputs of its `STATIC_OPS` nodes other than weights, as
        shape inference sizes them (a symbolic dimension counts as 1; a tensor inference
        leaves unshaped counts as nothing, so the figure is a lower bound).
    """
    import onnx

    inferred = onnx.shape_inference.infer_shapes(model)
    sizes = {}
    for value in (*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output):
        shape = value.type.tensor_type.shape
        sizes[value.name] = 4 * int(np.prod([dim.dim_value or 1 for dim in shape.dim]))
    calibrated = {name for node in model.graph.node if node.op_type in STATIC_OPS
                  for name in (*node.input, *node.output)}
    return max(1, sum(sizes.get(name, 0) for name in calibrated))


def calibration_group(bytes_per_image: int, count: int) -> int:
    """How many images to calibrate at a time.

    Args:
        bytes_per_image: `calibrated_bytes_per_image` of the model.
        count: the calibration images, at least 1.

    Returns:
        `count` when all their calibrated tensors fit in `CALIBRATION_BYTES_AT_ONCE`, else
        as many as fit (at least 1). ONNX Runtime takes equal groups, so the caller keeps a
        multiple of it.
    """
    if count < 1 or bytes_per_image < 1:
        raise ValueError(f"expected at least one calibration image and a positive size, got "
                         f"{count} images of {bytes_per_image} bytes")
    return min(count, max(1, CALIBRATION_BYTES_AT_ONCE // bytes_per_image))


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
        {'quantization', 'calibration_images', 'calibration' (None, 'percentile', or
        'minmax' with a warning where a tensor is too narrow for the percentile's
        histogram), 'kept_in_float'}.
    """
    from onnxruntime import quantization as ort_quantization

    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}")
    if quantization == "int8" and representative_data is None:
        raise ValueError("ONNX int8 (static QDQ) needs representative_data: a few hundred "
                         "training images, float32 [N, H, W, 3] in 0..255")
    with tempfile.TemporaryDirectory() as folder, _quiet_quantizer():
        staged = os.path.join(folder, "model.onnx")
        if quantization == "dynamic_int8":
            ort_quantization.quantize_dynamic(float_path, staged, op_types_to_quantize=["MatMul"],
                                              weight_type=ort_quantization.QuantType.QInt8,
                                              reduce_range=True)
            report = {"quantization": quantization, "calibration_images": 0,
                      "calibration": None, "kept_in_float": []}
        else:
            count, method = _quantize_static(ort_quantization, float_path, staged,
                                             representative_data, num_calibration_images)
            report = {"quantization": quantization, "calibration_images": count,
                      "calibration": method, "kept_in_float": list(KEPT_IN_FLOAT)}
        with open(staged, "rb") as file:
            atomic.write_bytes(path, file.read())
    return report


@contextlib.contextmanager
def _quiet_quantizer():
    """ONNX Runtime's quantizer logs its pre-processing reminder on the root logger and prints
    its calibration progress; neither is for our users."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(max(level, logging.ERROR))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        root.setLevel(level)


def _quantize_static(ort_quantization, float_path, staged, representative_data,
                     limit) -> tuple[int, str]:
    """Static QDQ quantization of the matrix products (not probs x values, see the module
    docstring); returns the calibration image count and method ('percentile', or 'minmax'
    where a tensor's values are too close together for the percentile's histogram)."""
    import onnx

    model = onnx.load(float_path)
    producers = {output: node for node in model.graph.node for output in node.output}
    after_softmax = [node.name for node in model.graph.node if node.op_type == "MatMul" and any(
        getattr(producers.get(name), "op_type", None) == "Softmax" for name in node.input)]
    if not all(after_softmax):
        raise ValueError(f"{float_path}: unnamed MatMul nodes; expected a file written by "
                         "vit_keras.export.onnx (tf2onnx names every node)")
    input_name = model.graph.input[0].name
    sample = tuple(dim.dim_value for dim in model.graph.input[0].type.tensor_type.shape.dim[1:])
    images = list(calibration_images(representative_data, sample, limit))
    if not images:
        raise ValueError(f"ONNX int8 (static QDQ) needs at least one calibration image, got "
                         f"none (num_calibration_images={limit})")
    group = calibration_group(calibrated_bytes_per_image(model), len(images))
    images = images[:len(images) - len(images) % group]  # equal groups; under one group lost

    def run(method):
        ort_quantization.quantize_static(
            float_path, staged, _Calibration(input_name, images),
            quant_format=ort_quantization.QuantFormat.QDQ,
            op_types_to_quantize=list(STATIC_OPS), nodes_to_exclude=after_softmax,
            per_channel=True, activation_type=ort_quantization.QuantType.QUInt8,
            weight_type=ort_quantization.QuantType.QInt8, calibrate_method=method,
            reduce_range=True,
            extra_options={"CalibStridedMinMax": group} if group < len(images) else {})

    try:
        run(ort_quantization.CalibrationMethod.Percentile)
        return len(images), "percentile"
    except ValueError as error:  # numpy's, from the calibrator's histogram of one tensor
        if "finite-sized bins" not in str(error):
            raise
    warnings.warn(f"{float_path}: a calibrated tensor spans too few float32 steps for a "
                  "percentile histogram (near-uniform attention, as untrained weights give); "
                  "its int8 ranges are calibrated by min/max instead", stacklevel=3)
    run(ort_quantization.CalibrationMethod.MinMax)
    return len(images), "minmax"
