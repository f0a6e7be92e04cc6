"""Keras' own weight quantization (`model.quantize`) on a `VisionTransformer`.

Every projection is a Keras `Dense` or `EinsumDense` (patch embedding, query/key/value/out,
MLP, MAP head, pre_logits, heads), and those are the layers quantized: "int8" and "int4"
(weights only; per output channel scales) and "float8" (Keras' float8 training scheme). Layers
that hold no matrix product (norms, tokens, position embeddings, pooling, dropout) are left
alone without a warning. The hybrid's ResNet convolutions stay float: Keras quantizes no
convolution (one warning says so).

A quantized model saves to `.keras` and loads back quantized: its config holds a
`DTypePolicyMap` of the quantized layers' policies (`dtype_policy_map`).
"""

from __future__ import annotations

import re
import warnings

import keras

from vit_keras import keras_compat

QUANTIZABLE = (keras.layers.Dense, keras.layers.EinsumDense)
MODES = ("int8", "int4", "float8")


def _selected_by(filters, layer) -> bool:
    """Keras' `filters` of `Model.quantize`: a regex, a list of them (on the layer name), or a
    callable taking the layer."""
    if filters is None:
        return True
    if isinstance(filters, str):
        return bool(re.search(filters, layer.name))
    if isinstance(filters, (list, tuple)):
        return any(re.search(pattern, layer.name) for pattern in filters)
    return bool(filters(layer))


def quantize(model, keras_quantize, mode, config=None, filters=None, **kwargs) -> None:
    """Quantizes every projection of `model` selected by `filters`.

    Args:
        model: a built `VisionTransformer`.
        keras_quantize: Keras' `Model.quantize` bound to `model`.
        mode: "int8", "int4" or "float8" (or a mode `config` implies).
        config: a `keras.quantizers.QuantizationConfig`, as in Keras.
        filters: as in Keras: a regex or list of regexes on layer names, or a callable.
        **kwargs: passed to Keras.
    """
    if mode is not None and mode not in MODES:
        raise ValueError(f"quantization mode must be one of {MODES}, got {mode!r}")
    convolutions = [layer.name for layer in keras_compat.nested_layers(model)
                    if type(layer).__name__ == "StdConv" and _selected_by(filters, layer)]
    if convolutions:
        warnings.warn(f"{len(convolutions)} ResNet convolutions of the hybrid stay float: "
                      "Keras quantizes Dense and EinsumDense layers, no convolution",
                      stacklevel=3)

    def selected(layer):
        return isinstance(layer, QUANTIZABLE) and _selected_by(filters, layer)

    with keras_compat.no_collection_per_variable():
        keras_quantize(mode, config=config, filters=selected, **kwargs)


def _own_policy(layer):
    policy = layer.dtype_policy
    if isinstance(policy, keras.dtype_policies.DTypePolicyMap):
        return policy[layer.path]
    return policy


def dtype_policy_map(model):
    """The model's dtype policy; for a quantized model, a `DTypePolicyMap` holding each
    quantized layer's policy by path, so that `from_config` rebuilds them quantized."""
    default = model.dtype_policy
    if isinstance(default, keras.dtype_policies.DTypePolicyMap):
        default = default.default_policy
    quantized = {layer.path: _own_policy(layer) for layer in
                 keras_compat.nested_layers(model)[1:] if layer.quantization_mode}
    if not quantized:
        return default
    policy_map = keras.dtype_policies.DTypePolicyMap(default_policy=default)
    for path, policy in quantized.items():
        policy_map[path] = policy
    return policy_map


def float32_policy(dtype, path: str):
    """The policy of a layer that computes in float32 (the heads): 'float32', or `dtype` when
    it is a `DTypePolicyMap` holding the layer's quantized policy."""
    if isinstance(dtype, keras.dtype_policies.DTypePolicyMap) and path in dtype:
        return dtype
    return "float32"


def is_quantized(model) -> bool:
    """Whether any layer of `model` is quantized."""
    return any(layer.quantization_mode for layer in keras_compat.nested_layers(model)[1:])
