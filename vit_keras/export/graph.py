"""The inference graph every exported format shares: 0..255 pixels -> [-1, 1] -> model -> logits.

Also prepares the Keras model for export: a float32 copy of a mixed-precision model (TFLite and
most servers want float32 graphs), and the logits when the model ends in an activation.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from vit_keras.applications import preprocess_input
from vit_keras.core.model import input_image_size, keep_records, preprocessing_of
from vit_keras.quantization import is_quantized


def require_tensorflow(what: str) -> None:
    """Raises RuntimeError unless Keras runs on TensorFlow, which every export traces with.

    Args:
        what: the export, for the message (e.g. 'SavedModel export').
    """
    backend = keras.backend.backend()
    if backend != "tensorflow":
        raise RuntimeError(
            f"{what} traces the model as a TensorFlow graph and needs KERAS_BACKEND=tensorflow; "
            f"this process runs Keras on {backend}. Save the model (model.save('model.keras')) "
            "and export it from a TensorFlow process: .keras files load on every backend.")


def float32_model(model: keras.Model) -> keras.Model:
    """Returns `model` itself if it computes in float32, else a float32 copy with its weights.

    Args:
        model: a functional Keras model, possibly built under a mixed-precision policy.

    Returns:
        A model whose layers all compute in float32.

    Raises:
        ValueError: the model was quantized by `model.quantize`: every export starts from the
            float weights and has its own int8 forms for its runtime.
    """
    if is_quantized(model):
        raise ValueError(
            f"model {model.name!r} was quantized with model.quantize(); export takes the float "
            "model and quantizes for each runtime itself: export the model before quantize() "
            "and pick an int8 format (tflite_int8, tflite_dynamic_int8, onnx_int8, "
            "onnx_dynamic_int8 in vit export; quantization='int8' in export.tflite)")
    if all(layer.compute_dtype == "float32" for layer in model.layers):
        return model

    def clone_layer(layer):
        return layer.__class__.from_config(_float32_config(layer.get_config()))

    clone = keras.models.clone_model(model, clone_function=clone_layer)
    clone.set_weights(model.get_weights())
    return keep_records(model, clone)


def _float32_config(value):
    """A layer config with every mixed-precision dtype policy replaced by float32."""
    if isinstance(value, dict):
        if value.get("class_name") in ("DTypePolicy", "FloatDTypePolicy"):
            name = value.get("config", {}).get("name", "")
            if name.startswith("mixed_") or name in ("float16", "bfloat16"):
                return dict(value, config=dict(value["config"], name="float32"))
        return {key: _float32_config(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_float32_config(item) for item in value]
    if isinstance(value, str) and (value.startswith("mixed_") or value in ("float16", "bfloat16")):
        return "float32"
    return value


def split_activation(model: keras.Model, activation=None):
    """Splits a classifier into its logits model and its output activation.

    Args:
        model: a Keras classifier; if its last layer is an `Activation` (e.g. the `predictions`
            layer of `classifier_activation='softmax'`), its input are the logits.
        activation: what maps the logits of a model that outputs logits to its scores, e.g.
            'sigmoid' for a multi-label classifier, 'linear' for outputs that are their own
            scores; None = softmax.

    Returns:
        (logits_model, activation): `activation` maps logits to probabilities.

    Raises:
        ValueError: `activation` differs from the model's own final activation.
    """
    last = model.layers[-1]
    if isinstance(last, keras.layers.Activation) and len(model.outputs) == 1:
        if activation is not None and keras.activations.get(activation) is not last.activation:
            raise ValueError(f"model {model.name!r} ends in the activation "
                             f"{keras.activations.serialize(last.activation)!r}, but "
                             f"{activation!r} was asked for: expected a model giving logits, "
                             "or the same activation")
        logits_model = keras.Model(model.inputs[0], last.input, name=f"{model.name}_logits")
        return keep_records(model, logits_model), last.activation
    return model, keras.activations.get(activation or "softmax")


def image_size(model: keras.Model) -> tuple[int, int]:
    """(height, width) of the model's RGB images (or clips' frames); raises ValueError for
    anything else."""
    shape = _image_input_shape(model)
    if shape[-3] is None or shape[-2] is None:
        raise ValueError("expected a model input of shape [batch, height, width, 3] with a fixed "
                         f"height and width, got {shape}")
    return int(shape[-3]), int(shape[-2])


def sample_shape(model: keras.Model) -> tuple:
    """The shape of one input without the batch: (height, width, 3) of an image model's
    image, (frames, height, width, 3) of a clip model's clip; fixed sides only."""
    shape = _image_input_shape(model)
    if None in shape[1:]:
        raise ValueError(f"expected a model input of fixed sides, got {shape}")
    return tuple(int(side) for side in shape[1:])


def takes_any_size(model: keras.Model) -> bool:
    """Whether the model's image input has no fixed height and width (dynamic_image_size)."""
    shape = _image_input_shape(model)
    return shape[-3] is None or shape[-2] is None


def _image_input_shape(model: keras.Model) -> tuple:
    """[batch, height, width, 3] images, or [batch, frames, height, width, 3] clips."""
    if len(model.inputs) != 1:
        raise ValueError(f"expected a model with one image input, got {len(model.inputs)} inputs")
    shape = tuple(model.inputs[0].shape)
    if len(shape) not in (4, 5) or shape[-1] != 3:
        raise ValueError("expected a model input of shape [batch, height, width, 3] (or clips "
                         f"[batch, frames, height, width, 3]), got {shape}")
    return shape


def at_image_size(model: keras.Model, size=None) -> keras.Model:
    """The model with a fixed input size, as TFLite and other static-shape targets need.

    Args:
        model: a classifier; one taking any size (`dynamic_image_size`) gets a view with the
            same layers and weights at `size`.
        size: (height, width), or None: a fixed model's own size, or the size an any-size
            ViT's position embeddings are stored at (its training size).

    Returns:
        `model` itself when its size already is `size`, else the fixed-size view.

    Raises:
        ValueError: `size` differs from a fixed model's size.
    """
    if not takes_any_size(model):
        if size is not None and tuple(size) != image_size(model):
            raise ValueError(f"the model takes {image_size(model)} images only, got image size "
                             f"{tuple(size)}; a model built with dynamic_image_size=True "
                             "exports at any size")
        return model
    height, width = input_image_size(model) if size is None else size
    images = keras.Input((height, width, 3), name=model.inputs[0].name)
    return keep_records(model, keras.models.clone_model(
        model, input_tensors=images, clone_function=_share_weights))


def _share_weights(layer):
    """The same layer (its weights shared with the view), except weightless activations: a
    fresh copy has only the view's call, so `split_activation` finds the view's logits."""
    if isinstance(layer, keras.layers.Activation):
        return layer.__class__.from_config(layer.get_config())
    return layer


def logits_function(logits_model: keras.Model, include_preprocessing: bool = True,
                    preprocessing=None):
    """A Python function: float32 pixels in 0..255 (NHWC) -> float32 logits.

    Args:
        logits_model: the float32 model returning logits.
        include_preprocessing: normalise 0..255 as the weights expect first (False: the model
            takes 0..255 itself).
        preprocessing: the weights' `Preprocessing`; default: the model's own (see
            `vit_keras.core.model.preprocessing_of`), [-1, 1] for a model that carries none.
    """
    rule = preprocessing or preprocessing_of(logits_model)

    def logits(images):
        if include_preprocessing:
            images = preprocess_input(images, preprocessing=rule)
        return tf.cast(logits_model(images, training=False), tf.float32)

    return logits
