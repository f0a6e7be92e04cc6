"""The layers MobileViT adds to Keras': a feature map to its 2x2 patches' pixel sequences and
back, the exact bilinear resize a block applies to a map of odd side, and v2's separable
linear self-attention. Every projection is a Keras `Dense` (quantize and LoRA reach it).
"""

from __future__ import annotations

import keras
from keras import ops

from vit_keras.core.initializers import PACKAGE


def _patch_grid(height: int, width: int, patch: int) -> tuple[int, int]:
    if height % patch or width % patch:
        raise ValueError(f"a {height}x{width} map does not divide into {patch}x{patch} patches; "
                         "resize it to even sides first (`BilinearResize`)")
    return height // patch, width // patch


@keras.saving.register_keras_serializable(package=PACKAGE)
class UnfoldPatches(keras.layers.Layer):
    """[B, H, W, C] -> [B, P, N, C]: for each of the P = patch^2 places inside a patch, the N
    patches' pixels at that place, in row-major patch order (MobileViT's unfold).

    Args:
        patch: the patch side (default 2).
        separate_places: give [B * P, N, C] instead, each place's pixels a sequence of its
            own (v1's attention runs within each).
    """

    def __init__(self, patch: int = 2, separate_places: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.patch, self.separate_places = patch, separate_places

    def call(self, inputs):
        _, height, width, channels = inputs.shape
        rows, cols = _patch_grid(height, width, self.patch)
        grid = ops.reshape(inputs, (-1, rows, self.patch, cols, self.patch, channels))
        grid = ops.transpose(grid, (0, 2, 4, 1, 3, 5))
        if self.separate_places:
            return ops.reshape(grid, (-1, rows * cols, channels))
        return ops.reshape(grid, (-1, self.patch * self.patch, rows * cols, channels))

    def compute_output_shape(self, input_shape):
        batch, height, width, channels = input_shape
        rows, cols = _patch_grid(height, width, self.patch)
        if self.separate_places:
            return (None, rows * cols, channels)
        return (batch, self.patch * self.patch, rows * cols, channels)

    def get_config(self):
        return {**super().get_config(), "patch": self.patch,
                "separate_places": self.separate_places}


@keras.saving.register_keras_serializable(package=PACKAGE)
class FoldPatches(keras.layers.Layer):
    """[B, P, N, C] (or [B * P, N, C]) -> [B, H, W, C]: `UnfoldPatches` undone.

    Args:
        height, width: the map's sides.
        patch: the patch side (default 2).
    """

    def __init__(self, height: int, width: int, patch: int = 2, **kwargs):
        super().__init__(**kwargs)
        self.height, self.width, self.patch = height, width, patch

    def call(self, inputs):
        rows, cols = _patch_grid(self.height, self.width, self.patch)
        channels = inputs.shape[-1]
        grid = ops.reshape(inputs, (-1, self.patch, self.patch, rows, cols, channels))
        grid = ops.transpose(grid, (0, 3, 1, 4, 2, 5))
        return ops.reshape(grid, (-1, self.height, self.width, channels))

    def compute_output_shape(self, input_shape):
        batch = input_shape[0] if len(input_shape) == 4 else None
        return (batch, self.height, self.width, input_shape[-1])

    def get_config(self):
        return {**super().get_config(), "height": self.height, "width": self.width,
                "patch": self.patch}


def _source_positions(size_in: int, size_out: int, align_corners: bool):
    """(lower index, upper index, weight of the upper) of each output position, as PyTorch's
    bilinear interpolation without antialiasing samples them."""
    positions = ops.arange(size_out, dtype="float32")
    if align_corners:
        scale = (size_in - 1) / (size_out - 1) if size_out > 1 else 0.0
        source = positions * scale
    else:
        source = ops.maximum((positions + 0.5) * (size_in / size_out) - 0.5, 0.0)
    lower = ops.cast(ops.floor(source), "int32")
    upper = ops.minimum(lower + 1, size_in - 1)
    return lower, upper, source - ops.cast(lower, "float32")


@keras.saving.register_keras_serializable(package=PACKAGE)
class BilinearResize(keras.layers.Layer):
    """[B, H, W, C] -> [B, height, width, C], bilinear without antialiasing, as a MobileViT
    block resizes a map of odd side (v1 with `align_corners=False`, there and back; v2 with
    `align_corners=True`, once).

    Args:
        height, width: the output's sides.
        align_corners: PyTorch's meaning (True: the corner pixels' centres stay put).
    """

    def __init__(self, height: int, width: int, align_corners: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.height, self.width, self.align_corners = height, width, align_corners

    def call(self, inputs):
        _, height, width, _ = inputs.shape
        resized = self._along(inputs, 1, height, self.height)
        return self._along(resized, 2, width, self.width)

    def _along(self, inputs, axis: int, size_in: int, size_out: int):
        lower, upper, weight = _source_positions(size_in, size_out, self.align_corners)
        shape = [1, 1, 1, 1]
        shape[axis] = size_out
        weight = ops.cast(ops.reshape(weight, shape), inputs.dtype)
        low, high = ops.take(inputs, lower, axis=axis), ops.take(inputs, upper, axis=axis)
        return low + (high - low) * weight

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.height, self.width, input_shape[-1])

    def get_config(self):
        return {**super().get_config(), "height": self.height, "width": self.width,
                "align_corners": self.align_corners}


@keras.saving.register_keras_serializable(package=PACKAGE)
class LinearSelfAttention(keras.layers.Layer):
    """MobileViT v2's separable self-attention on [B, P, N, C] (Mehta & Rastegari, 2022).

    One projection gives each token a score, a key and a value; the scores' softmax over the N
    patches weighs the keys into one context vector per pixel place, which scales the ReLU of
    every token's value; a second projection mixes the channels. Cost linear in N.

    Args:
        dropout_rate: on the scores (default 0).
    """

    def __init__(self, dropout_rate: float = 0.0, **kwargs):
        super().__init__(**kwargs)
        self.dropout_rate = dropout_rate
        self.dropout = keras.layers.Dropout(dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape):
        width = input_shape[-1]
        self.qkv = keras.layers.Dense(1 + 2 * width, name="qkv", dtype=self.dtype_policy)
        self.qkv.build(input_shape)
        self.out = keras.layers.Dense(width, name="out", dtype=self.dtype_policy)
        self.out.build(input_shape)

    def call(self, inputs, training=None):
        width = inputs.shape[-1]
        qkv = self.qkv(inputs)
        scores, keys, values = qkv[..., :1], qkv[..., 1:1 + width], qkv[..., 1 + width:]
        if inputs.shape[2] == 1:  # one patch: its softmax is 1 (and Keras would warn)
            scores = ops.ones_like(ops.cast(scores, "float32"))
        else:
            scores = ops.softmax(ops.cast(scores, "float32"), axis=2)
        scores = self.dropout(scores, training=training)
        context = ops.sum(keys * ops.cast(scores, keys.dtype), axis=2, keepdims=True)
        return self.out(ops.relu(values) * context)

    def get_config(self):
        return {**super().get_config(), "dropout_rate": self.dropout_rate}
