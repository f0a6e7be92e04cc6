"""PyTorch tensors -> the Keras layouts of this model, written once for every torch reader.

torch `Linear` weights are (out, in) and Keras kernels (in, out); torch `Conv2d` weights are
OIHW and Keras kernels HWIO. The attention's `EinsumDense` projections keep a heads axis:
query/key/value kernels are (D_in, heads, head_dim) with (heads, head_dim) biases, and the
output kernel is (heads, head_dim, D_out). Fused torch projections (timm's `qkv`, `kv`) stack
their parts along the output axis, each ordered head by head.
"""

from __future__ import annotations

import numpy as np

KERAS_PARAMETER = {"weight": "kernel", "bias": "bias"}


def split_heads(array: np.ndarray, heads: int, axis: int) -> np.ndarray:
    """Splits `axis` of size heads * head_dim into (heads, head_dim), heads outermost.

    Returns `array` unchanged when the axis does not divide, so the shape check reports it.
    """
    axis = axis % array.ndim
    size = array.shape[axis]
    if size % heads:
        return array
    return array.reshape(*array.shape[:axis], heads, size // heads, *array.shape[axis + 1:])


def conv_kernel(weight: np.ndarray) -> np.ndarray:
    """A torch `Conv2d` weight (OIHW) as a Keras kernel (HWIO)."""
    return weight.transpose(2, 3, 1, 0)


def dense(prefix: str, kind: str, value: np.ndarray) -> dict:
    """A torch `Linear`'s 'weight' or 'bias' as `{prefix}kernel` (in, out) or `{prefix}bias`."""
    return {f"{prefix}{KERAS_PARAMETER[kind]}": value.T if kind == "weight" else value}


def attention_input(prefix: str, kind: str, value: np.ndarray, heads: int) -> dict:
    """A query, key or value projection's 'weight' (out, in) or 'bias' as the Keras kernel
    (in, heads, head_dim) or bias (heads, head_dim) under `prefix`."""
    ((name, array),) = dense(prefix, kind, value).items()
    return {name: split_heads(array, heads, axis=-1)}


def attention_output(prefix: str, kind: str, value: np.ndarray, heads: int) -> dict:
    """The attention output projection's 'weight' (out, in) as the Keras kernel
    (heads, head_dim, out), or its 'bias' unchanged, under `prefix`."""
    ((name, array),) = dense(prefix, kind, value).items()
    return {name: split_heads(array, heads, axis=0) if kind == "weight" else array}


def fused_attention_inputs(prefix: str, parts, kind: str, value: np.ndarray,
                           heads: int) -> dict:
    """A fused projection (timm's `qkv`: parts ('query', 'key', 'value')) split into its parts.

    Args:
        prefix: the attention layer's canonical prefix, ending in '/'.
        parts: the projections stacked along the output axis, in order.
        kind: 'weight' or 'bias'.
        value: the fused torch tensor.
        heads: the attention heads.

    Returns:
        `{prefix}{part}/kernel` (or `/bias`) for each part; empty when the output axis does not
        divide into the parts (the name is then reported as unexpected).
    """
    if value.shape[0] % len(parts):
        return {}
    result = {}
    for part, chunk in zip(parts, np.split(value, len(parts), axis=0)):
        result.update(attention_input(f"{prefix}{part}/", kind, chunk, heads))
    return result
