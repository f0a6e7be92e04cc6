"""TFLite (LiteRT) export in float32, float16, dynamic-range int8 and full-integer int8.

Every file uses TFLite builtin operators only (no Flex / SELECT_TF_OPS delegate), takes float32
RGB pixels in 0..255 (NHWC, the model's resolution; preprocessing is inside the graph) and
returns float32 logits, unless integer input/output is asked for. Full-integer files are
integer-only between their input and output conversions. The model is traced in its export
forms (`vit_keras.fast_paths.export_forms`). Each written file is loaded back into the LiteRT interpreter
and compared with the Keras model before `tflite` returns.

Options of an int8 file: `float_ops` keeps named operators in float32 (e.g. `("BATCH_MATMUL",
"SOFTMAX")`: LiteRT's int8 kernel for the attention's activation-by-activation matmul is not
accelerated by XNNPACK and is slower than float on x86/ARM CPUs); by default the file is
full-integer and the export fails if any operator is left in float. `per_channel=False` gives
one weight scale per tensor instead of per output channel: 12 bytes smaller per channel, which
matters only for small models, and less accurate.
"""

from __future__ import annotations

import contextlib
import itertools
import re

import keras
import numpy as np
import tensorflow as tf

from vit_keras import keras_compat
from vit_keras.fast_paths import export_forms
from vit_keras.export import agreement, bars, graph
from vit_keras.export.runtime import TFLiteModel

QUANTIZATIONS = (None, "fp16", "dynamic_int8", "int8")
IO_TYPES = ("float32", "int8", "uint8")
_NON_BUILTIN_HINTS = ("custom op", "flex", "select", "not supported", "tf op")
_UNFROZEN_OPS = {"VAR_HANDLE", "READ_VARIABLE", "ASSIGN_VARIABLE", "CALL_ONCE"}
MIN_ACTIVATION_RANGE = 1e-3  # of a full-integer file's activations (`widen_narrow_ranges`)


class NonBuiltinOpsError(ValueError):
    """The model needs operators outside the TFLite builtin set (Flex/custom ops)."""


_shared_graphs: dict | None = None  # while `graphs_shared` runs: its frozen graphs


@contextlib.contextmanager
def graphs_shared():
    """Inside the block, the `tflite` files of a model share its traced and frozen graph: the
    float32, fp16 and dynamic-range files are converted from one, the full-integer file from
    its own form. An export of every format traced and froze the model once per file. The
    models must not change inside the block (their weights are frozen into the graph)."""
    global _shared_graphs
    outer, _shared_graphs = _shared_graphs, {}
    try:
        yield
    finally:
        _shared_graphs = outer


def tflite(model: keras.Model, path: str, *, quantization: str | None = None,
           representative_data=None, io_type: str = "float32", batch_size: int = 1,
           num_calibration_images: int = 300, verify_images=None,
           include_preprocessing: bool = True, float_ops=(), per_channel: bool = True,
           keep_tensor_names: bool = False, image_size=None, min_agreement: float | None = None,
           on_low_agreement: str = "raise") -> dict:
    """Converts `model` to a `.tflite` file that runs on LiteRT with builtin operators only.

    Args:
        model: a Keras image classifier taking [batch, H, W, 3], converted in float32; a
            final `Activation` layer (e.g. softmax) is dropped: the file returns logits.
        path: destination `.tflite` file, written atomically (temporary file + rename).
        quantization: None (float32), 'fp16' (float16 weights), 'dynamic_int8' (int8 weights,
            float activations) or 'int8' (full-integer weights and activations, calibrated on
            `representative_data`).
        representative_data: float32 images [N, H, W, 3] in 0..255 (an array, or an iterable of
            such batches, e.g. a few hundred training images); required for 'int8'.
        io_type: 'float32' (default, same contract as every other format), or 'int8'/'uint8'
            input and output tensors; integer I/O needs quantization='int8'.
        batch_size: the file's fixed batch size (1, what devices run); None makes it dynamic.
        num_calibration_images: at most this many images of `representative_data` calibrate.
        verify_images: held-out float32 images [N, H, W, 3] in 0..255 on which the file must
            reach `min_agreement`. Default: up to 32 images of `representative_data`, else 8
            random images, whose agreement is reported but not enforced.
        include_preprocessing: map 0..255 to [-1, 1] inside the graph.
        float_ops: with 'int8', TFLite operator names kept in float32 (module docstring);
            empty (default): full-integer.
        per_channel: with 'int8', a weight scale per output channel (default) or per tensor.
        keep_tensor_names: keep the graph's tensor names (for Netron or debugging).
        image_size: (height, width) of the input of a model taking any size; None: its own.
        min_agreement: the fraction of `verify_images` on which the file must name Keras'
            class; None: 0.999 for float32/fp16 files, 0.98 for int8 ones
            (`vit_keras.export.agreement`).
        on_low_agreement: below `min_agreement`, 'raise' (default: `LowAgreementError`, and
            no file is left at `path`) or 'warn' (the file is written, with a `UserWarning`).

    Returns:
        A report: path, quantization, io_type, float_ops, size_bytes, ops (operator names),
        and max_abs_logit_diff, top1_agreement and verified_images against Keras (and
        min_agreement when `verify_images` were given).

    Raises:
        ValueError: bad arguments, or 'int8' without representative data.
        LowAgreementError: the file falls below `min_agreement` on `verify_images`.
        NonBuiltinOpsError: the graph needs operators outside the TFLite builtin set.
        RuntimeError: Keras does not run on TensorFlow.
    """
    graph.require_tensorflow("TFLite export")
    _check_arguments(quantization, representative_data, io_type, batch_size, float_ops,
                     per_channel)
    bars.check_options(min_agreement, on_low_agreement)
    logits_model, _ = graph.split_activation(
        graph.float32_model(graph.at_image_size(model, image_size)))
    content, report = _converted(
        model, logits_model, path, quantization, representative_data, io_type, batch_size,
        num_calibration_images, include_preprocessing, tuple(float_ops), per_channel,
        keep_tensor_names)
    return _published(path, content, report, logits_model, quantization, representative_data,
                      verify_images, include_preprocessing, min_agreement, on_low_agreement)


def _published(path, content, report, logits_model, quantization, representative_data,
               verify_images, include_preprocessing, min_agreement, on_low_agreement) -> dict:
    """The converted file checked against Keras and written (`tflite`'s arguments): held to its
    bar on `verify_images`, or only reported on calibration or random images."""
    bar = (quantization, min_agreement, on_low_agreement, _advice(quantization))
    if verify_images is None:  # reported, not enforced
        bar, verify_images = None, verification_images(representative_data,
                                                        graph.sample_shape(logits_model))
    return agreement.publish_verified(path, content, report, runner=TFLiteModel,
                                      logits_model=logits_model, images=verify_images,
                                      include_preprocessing=include_preprocessing, bar=bar)


def _converted(model, logits_model, path, quantization, representative_data, io_type,
               batch_size, num_calibration_images, include_preprocessing, float_ops,
               per_channel, keep_tensor_names) -> tuple[bytes, dict]:
    """The converted file's bytes and its report before verification (`tflite`'s arguments;
    `logits_model`: `model` as a float32 model returning logits at the file's size)."""
    frozen = _frozen_graph(model, logits_model, include_preprocessing, batch_size,
                           integer=quantization == "int8" and not float_ops)
    content = _convert(frozen, quantization, representative_data, io_type,
                       num_calibration_images, graph.sample_shape(logits_model), float_ops,
                       per_channel)
    ops = _check_operators(content, quantization, float_ops)
    if not keep_tensor_names:
        content = strip_tensor_names(content)
    report = {"path": path, "quantization": quantization, "io_type": io_type,
              "float_ops": list(float_ops), "size_bytes": len(content), "ops": ops}
    if quantization == "int8":
        report["per_channel"] = per_channel
    return content, report


def _frozen_graph(model, logits_model, include_preprocessing: bool, batch_size, integer: bool):
    """`_trace`'s function with the weights frozen into constants (converting Keras 3
    variables directly leaves VAR_HANDLE/READ_VARIABLE ops that LiteRT reads as
    uninitialised); inside `graphs_shared`, made once per model and form."""
    key = (id(model), graph.sample_shape(logits_model), include_preprocessing, batch_size,
           integer)
    if _shared_graphs is not None and key in _shared_graphs:
        return _shared_graphs[key][1]
    frozen = keras_compat.freeze_concrete_function(
        _trace(logits_model, include_preprocessing, batch_size, integer))
    if _shared_graphs is not None:
        _shared_graphs[key] = (model, frozen)  # the model kept: its id stays its own
    return frozen


def _advice(quantization) -> str:
    """What to try when a file of this quantization falls below its bar."""
    if quantization == "int8":
        return ("Try float_ops=('SOFTMAX', 'BATCH_MATMUL') or more calibration images, "
                "quantization='dynamic_int8', or vit_keras.export.onnx with ONNX Runtime's "
                "static int8.")
    if quantization == "dynamic_int8":
        return "Try quantization='fp16', or the full-integer 'int8' calibrated on real images."
    return "A float file should match Keras: please report the model's options."


def _trace(logits_model, include_preprocessing: bool, batch_size, integer: bool):
    """The concrete inference function of `logits_model`, traced in its TFLite form."""
    logits = graph.logits_function(logits_model, include_preprocessing)
    function = tf.function(logits, input_signature=[
        tf.TensorSpec([batch_size, *graph.sample_shape(logits_model)], tf.float32,
                      name="images")])
    with export_forms.tflite_form(integer=integer):
        return function.get_concrete_function()


def _check_arguments(quantization, representative_data, io_type, batch_size, float_ops,
                     per_channel):
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, got {quantization!r}")
    if io_type not in IO_TYPES:
        raise ValueError(f"io_type must be one of {IO_TYPES}, got {io_type!r}")
    if io_type != "float32" and quantization != "int8":
        raise ValueError(f"io_type={io_type!r} needs quantization='int8', got {quantization!r}")
    if quantization == "int8" and representative_data is None:
        raise ValueError("quantization='int8' (full-integer) needs representative_data: a few "
                         "hundred float32 images [N, H, W, 3] in 0..255 from the training data "
                         "to calibrate activation ranges; got None. Use "
                         "quantization='dynamic_int8' to quantize weights only.")
    if isinstance(float_ops, str):
        raise ValueError(f"float_ops must be a sequence of operator names, got {float_ops!r}")
    if float_ops and (quantization != "int8" or io_type != "float32"):
        raise ValueError("float_ops needs quantization='int8' with io_type='float32', got "
                         f"quantization={quantization!r}, io_type={io_type!r}")
    if not per_channel and quantization != "int8":
        raise ValueError(f"per_channel=False needs quantization='int8', got {quantization!r}")
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be a positive int or None, got {batch_size!r}")


def _convert(frozen, quantization, representative_data, io_type, num_calibration_images,
             sample, float_ops=(), per_channel=True) -> bytes:
    converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantization is not None:
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantization == "fp16":
        converter.target_spec.supported_types = [tf.float16]
    elif quantization == "int8":
        images = list(calibration_images(representative_data, sample, num_calibration_images))
        converter.representative_dataset = lambda: ([image] for image in images)
        keras_compat.set_per_channel(converter, per_channel)
        if not float_ops:
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            converter.inference_input_type = tf.as_dtype(io_type)
            converter.inference_output_type = tf.as_dtype(io_type)
    try:
        if float_ops:
            return _convert_selectively(converter, float_ops)
        if quantization == "int8":
            return keras_compat.quantize_calibrated(converter, widen_narrow_ranges)
        return converter.convert()
    except Exception as error:  # the converter raises ConverterError, not a public type
        message = str(error)
        if any(key in message.lower() for key in _NON_BUILTIN_HINTS):
            ops = sorted(set(re.findall(r"(?:Custom ops|Flex ops|TF Select ops): ([^\n]+)",
                                        message)))
            raise NonBuiltinOpsError(
                f"TFLite conversion ({quantization or 'float32'}) needs operators outside the "
                f"TFLite builtin set {ops or ''}, which most devices cannot run (no Flex "
                f"delegate). Converter message: {message[:2000]}") from error
        raise


def widen_narrow_ranges(calibrated: bytes) -> bytes:
    """A calibrated `.tflite` file whose activations each span at least `MIN_ACTIVATION_RANGE`.

    An activation that calibration saw (nearly) constant, such as a ReLU dead on every image,
    gets a scale so small that the next layer's requantisation falls below 2^-32, and XNNPACK,
    LiteRT's default CPU delegate, refuses the whole file. Its values lie within the narrow
    range either way, so widening it changes no output beyond a step of the wider scale.

    Args:
        calibrated: the converter's calibrated file (float, each activation's min and max).

    Returns:
        The same file with each narrower activation's max raised to min + the range.
    """
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(calibrated))
    for subgraph in model.subgraphs:
        for tensor in subgraph.tensors:
            limits = tensor.quantization
            constant = model.buffers[tensor.buffer].data is not None
            if constant or limits is None or limits.min is None or len(limits.min) != 1:
                continue
            if limits.max[0] - limits.min[0] < MIN_ACTIVATION_RANGE:
                limits.max = [limits.min[0] + MIN_ACTIVATION_RANGE]
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def _convert_selectively(converter, float_ops) -> bytes:
    """int8 everywhere except the operators named in `float_ops`, through TF's public
    selective-quantization tool (the quantization debugger's deny list)."""
    options = tf.lite.experimental.QuantizationDebugOptions(denylisted_ops=list(float_ops))
    debugger = tf.lite.experimental.QuantizationDebugger(
        converter=converter, debug_dataset=converter.representative_dataset,
        debug_options=options)
    return debugger.get_nondebug_quantized_model()


def _check_operators(content: bytes, quantization, float_ops) -> list[str]:
    """The file's operators, all builtin; full-integer unless `float_ops` names some to keep
    float, which then must be."""
    ops = check_builtin_ops(content)
    if quantization == "int8" and not float_ops:
        _check_integer_only(content)
    elif float_ops:
        _check_float_ops(content, float_ops, ops)
    return ops


def _check_float_ops(content: bytes, float_ops, ops) -> None:
    """Each operator named in `float_ops` is in the graph and computes in float there."""
    absent = sorted(set(float_ops) - set(ops))
    if absent:
        raise ValueError(f"float_ops names {absent}, which the converted graph does not have; "
                         f"its operators are {ops}")
    still_int8 = sorted(set(float_ops) - set(float_operators(content)))
    if still_int8:
        raise ValueError(f"float_ops asked for {still_int8} in float, but the converter "
                         "quantized them; the file would not be what was asked for")


def _check_integer_only(content: bytes):
    leftover = float_operators(content)
    if leftover:
        raise ValueError(
            f"quantization='int8' must give a full-integer graph, but the converter left "
            f"{leftover} in float; integer-only accelerators cannot run them. Use "
            f"float_ops={tuple(leftover)!r} to accept a mixed int8/float file.")


def strip_tensor_names(content: bytes) -> bytes:
    """The `.tflite` flatbuffer without tensor and subgraph names (signatures are kept).

    Args:
        content: the file's bytes.

    Returns:
        The smaller file's bytes; same operators, tensors and weights.
    """
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(content))
    model.description = None
    for subgraph in model.subgraphs:
        subgraph.name = None
        for tensor in subgraph.tensors:
            tensor.name = None
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def calibration_images(representative_data, sample, limit):
    """Yields single inputs [1, *sample] float32 from an array or an iterable of batches.

    Args:
        representative_data: images [N, H, W, 3] (or clips [N, frames, H, W, 3]) in 0..255,
            or an iterable of such batches.
        sample: the shape of one input: (H, W, 3), or (frames, H, W, 3) for clips.
        limit: at most this many inputs.
    """
    if isinstance(representative_data, np.ndarray) or tf.is_tensor(representative_data):
        batches = [representative_data]
    else:
        batches = representative_data
    count = 0
    for batch in batches:
        batch = np.asarray(batch, dtype=np.float32)
        if batch.shape == tuple(sample):  # one input
            batch = batch[None]
        if batch.shape[1:] != tuple(sample):
            kind = "images" if len(sample) == 3 else "clips"
            raise ValueError(f"representative_data must hold {kind} [N, "
                             f"{', '.join(map(str, sample))}] in 0..255, got a batch of shape "
                             f"{batch.shape}")
        for image in batch:
            if count >= limit:
                return
            count += 1
            yield image[None]
    if count == 0:
        raise ValueError("representative_data holds no images")


def verification_images(representative_data, sample):
    """Up to 32 inputs of `representative_data` (or 8 random ones) to compare a file on;
    `sample` is the shape of one input."""
    if representative_data is not None:
        images = list(itertools.islice(calibration_images(representative_data, sample, 32),
                                       32))
        return np.concatenate(images, axis=0)
    return np.random.default_rng(0).uniform(0, 255, (8, *sample)).astype(np.float32)


def _opcode_names(flatbuffer) -> list[str]:
    """The operator name of each entry of a parsed `.tflite`'s operator-code table."""
    from tensorflow.lite.python import schema_py_generated as schema

    names = {code: name for name, code in vars(schema.BuiltinOperator).items()
             if not name.startswith("_")}
    result = []
    for index in range(flatbuffer.OperatorCodesLength()):
        code = flatbuffer.OperatorCodes(index)
        # Codes above 127 are only in BuiltinCode; older files fill DeprecatedBuiltinCode.
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        result.append(names.get(builtin, str(builtin)))
    return result


def float_operators(content: bytes) -> list[str]:
    """Operators of a `.tflite` file that compute in floating point.

    A full-integer file with float32 I/O has none: only the QUANTIZE of its input and the
    DEQUANTIZE of its output touch float tensors.

    Args:
        content: the file's bytes.

    Returns:
        Sorted names of the operators with a float16/float32 input or output tensor, leaving
        out QUANTIZE and DEQUANTIZE (the conversions at the edges of float regions).
    """
    from tensorflow.lite.python import schema_py_generated as schema

    flatbuffer = schema.Model.GetRootAs(content, 0)
    names = _opcode_names(flatbuffer)
    float_types = {schema.TensorType.FLOAT32, schema.TensorType.FLOAT16}
    found = set()
    for subgraph in (flatbuffer.Subgraphs(i) for i in range(flatbuffer.SubgraphsLength())):
        for operator in (subgraph.Operators(i) for i in range(subgraph.OperatorsLength())):
            name = names[operator.OpcodeIndex()]
            tensors = [t for t in (*operator.InputsAsNumpy().tolist(),
                                   *operator.OutputsAsNumpy().tolist()) if t >= 0]
            if (name not in ("QUANTIZE", "DEQUANTIZE")
                    and any(subgraph.Tensors(t).Type() in float_types for t in tensors)):
                found.add(name)
    return sorted(found)


def check_builtin_ops(content: bytes) -> list[str]:
    """Lists the operators of a `.tflite` flatbuffer and checks they are all TFLite builtins.

    Args:
        content: the file's bytes.

    Returns:
        Sorted operator names.

    Raises:
        NonBuiltinOpsError: a custom or Flex (SELECT_TF_OPS) operator is present, or weights
            were left as variables.
    """
    from tensorflow.lite.python import schema_py_generated as schema

    flatbuffer = schema.Model.GetRootAs(content, 0)
    ops, custom = set(), set()
    for index, name in enumerate(_opcode_names(flatbuffer)):
        if name == "CUSTOM":
            custom.add((flatbuffer.OperatorCodes(index).CustomCode() or b"?").decode())
        else:
            ops.add(name)
    if custom:
        raise NonBuiltinOpsError(
            f"the TFLite model uses non-builtin operators {sorted(custom)} (Flex/custom ops need "
            "the TensorFlow select-ops delegate, which most devices do not have)")
    if ops & _UNFROZEN_OPS:
        raise NonBuiltinOpsError(
            f"the TFLite model keeps variables ({sorted(ops & _UNFROZEN_OPS)}); expected "
            "constant weights")
    return sorted(ops)

