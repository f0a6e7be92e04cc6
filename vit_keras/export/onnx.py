"""ONNX export through tf2onnx, checked in ONNX Runtime, and int8 through ONNX Runtime's
quantization tools.

Why tf2onnx on our own inference graph: Keras 3's `model.export(format="onnx")` also runs
tf2onnx on the TensorFlow backend (and jax2tf + tf2onnx on JAX), but it converts the bare model
call. Converting the graph every other format is made of (`export.graph.logits_function`) keeps
the contract of the other exports (RGB 0..255 float32 NHWC in, preprocessing inside, logits
out), and tracing it in `export_forms.onnx_form` gives LayerNorms that `onnx_graph` fuses into
single `LayerNormalization` nodes (opset 17).
"""

from __future__ import annotations

import contextlib
import os

import keras
import tensorflow as tf

from vit_keras.fast_paths import export_forms
from vit_keras.export import agreement, bars, graph, onnx_graph
from vit_keras.export.lite import verification_images
from vit_keras.export.onnx_runtime import ONNXModel

DEFAULT_OPSET = 17
MAX_PROTO_BYTES = 2**31  # protobuf's limit for one serialized message
INPUT_NAME, OUTPUT_NAME = "images", "logits"


def onnx(model: keras.Model, path: str, *, opset: int | None = None, dynamic_batch: bool = True,
         include_preprocessing: bool = True, image_size=None, verify_images=None,
         min_agreement: float | None = None, on_low_agreement: str = "raise") -> dict:
    """Writes `model` as an `.onnx` file and checks it in ONNX Runtime against Keras.

    Args:
        model: a Keras image classifier taking [batch, H, W, 3]; mixed-precision models are
            converted in float32; a final `Activation` layer is dropped (the file returns
            logits).
        path: destination `.onnx` file, written atomically (temporary file + rename).
        opset: ONNX opset, >= 17 (`LayerNormalization`); default 17.
        dynamic_batch: a dynamic batch dimension; False fixes it to 1.
        include_preprocessing: map 0..255 to [-1, 1] inside the graph.
        image_size: (height, width) for a model taking any size (default: its training size).
        verify_images: float32 [N, H, W, 3] in 0..255 to compare with Keras on, held-out
            images of the model's task; given, the file must reach `min_agreement`. Default: 8
            random images, whose agreement is reported but not enforced.
        min_agreement: the fraction of `verify_images` on which the file must name Keras'
            class; None: 0.999 (`vit_keras.export.agreement`).
        on_low_agreement: below `min_agreement`, 'raise' (default: `LowAgreementError`, and
            no file is left at `path`) or 'warn' (the file is written, with a `UserWarning`).

    Returns:
        A report: path, opset, size_bytes, fused_layer_norms, ops, and max_abs_logit_diff,
        top1_agreement and verified_images against Keras (and min_agreement when
        `verify_images` were given).

    Raises:
        ValueError: opset below 17.
        LowAgreementError: the file falls below `min_agreement` on `verify_images`.
        RuntimeError: Keras does not run on TensorFlow.
    """
    graph.require_tensorflow("ONNX export")
    bars.check_options(min_agreement, on_low_agreement)
    opset = DEFAULT_OPSET if opset is None else opset
    if opset < onnx_graph.LAYER_NORM_OPSET:
        raise ValueError(f"opset must be >= {onnx_graph.LAYER_NORM_OPSET} (LayerNormalization), "
                         f"got {opset}")
    model = graph.float32_model(graph.at_image_size(model, image_size))
    if model.count_params() * 4 >= MAX_PROTO_BYTES:
        raise ValueError(f"{model.count_params() / 1e6:.0f}M float32 parameters exceed the 2 GB "
                         "of a single .onnx file; ONNX external data files are not written here")
    logits_model, _ = graph.split_activation(model)
    proto, fused = _convert(logits_model, opset, dynamic_batch, include_preprocessing)
    content = proto.SerializeToString()
    report = {"path": path, "opset": opset, "size_bytes": len(content),
              "fused_layer_norms": fused,
              "ops": sorted({node.op_type for node in proto.graph.node})}
    bar = (None, min_agreement, on_low_agreement,
           "A float file should match Keras: please report the model's options.")
    if verify_images is None:  # reported, not enforced
        bar, verify_images = None, verification_images(None, graph.sample_shape(model))
    return agreement.publish_verified(path, content, report, runner=ONNXModel,
                                      logits_model=logits_model, images=verify_images,
                                      include_preprocessing=include_preprocessing, bar=bar)


def _convert(logits_model: keras.Model, opset: int, dynamic_batch: bool,
             include_preprocessing: bool):
    """tf2onnx conversion of the logits graph, then the graph rewrites; (ModelProto, fused)."""
    import onnx as onnx_lib

    signature = [tf.TensorSpec([None if dynamic_batch else 1, *graph.sample_shape(logits_model)],
                               tf.float32, name=INPUT_NAME)]
    function = tf.function(graph.logits_function(logits_model, include_preprocessing),
                           input_signature=signature)
    with export_forms.onnx_form():
        proto = _tf2onnx_proto(function, signature, opset)
    _rename_output(proto, OUTPUT_NAME)
    _declare_output_shape(proto, logits_model.output_shape[1:])
    onnx_graph.replace_erfc(proto)
    fused = onnx_graph.fuse_layer_norms(proto)
    onnx_lib.checker.check_model(proto)
    return proto, fused


def _tf2onnx_proto(function, signature, opset: int):
    """tf2onnx's conversion of `function`, its graph optimizers run on the graph itself.

    tf2onnx copies the whole ONNX graph before each of its optimizer passes (about 36 of them),
    to undo a pass that raises: half of a 1.2 M-weight detector's conversion (8.4-9.8 s against
    5.4-5.6 s without the copies, the same file). The passes run without copies first; a
    conversion that then fails runs again with tf2onnx's undo copies.
    """
    import tf2onnx

    def convert():
        return tf2onnx.convert.from_function(function, input_signature=signature,
                                             opset=opset)[0]

    try:
        with _environment(TF2ONNX_CATCH_ERRORS="FALSE"):
            return convert()
    except Exception:  # noqa: BLE001  a pass failed on this graph: tf2onnx skips it when undone
        return convert()


@contextlib.contextmanager
def _environment(**values):
    """Sets environment variables for the block, then restores them."""
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _rename_output(proto, name: str) -> None:
    """Gives the single graph output a readable name (tf2onnx keeps TF's 'Identity:0')."""
    old = proto.graph.output[0].name
    for node in proto.graph.node:
        for index, output in enumerate(node.output):
            if output == old:
                node.output[index] = name
    proto.graph.output[0].name = name


def _declare_output_shape(proto, shape) -> None:
    """Writes the Keras output's static sizes into the graph output where tf2onnx left them
    symbolic (a segmenter's [batch, H, W, classes] after its resizes)."""
    dims = proto.graph.output[0].type.tensor_type.shape.dim
    if len(dims) != len(shape) + 1:
        return
    for dim, size in zip(list(dims)[1:], shape):
        if size is not None and not dim.HasField("dim_value"):
            dim.ClearField("dim_param")
            dim.dim_value = int(size)
