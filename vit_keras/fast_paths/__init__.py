"""Backend and export kernels for the model core's math, chosen in one place.

The core layers compute with plain `keras.ops`; where a faster kernel for the same numbers
exists, they ask here first. Each function returns the fast result, or None when no fast path
applies (the caller then runs its plain form); `project` returns the layer's own call then.
Every path has a parity test against the plain math (tests/test_fast_paths.py,
tests/test_attention.py).

- TensorFlow, training: GELU, LayerNorm and the scaled softmax as XLA-fused loops with their own
  gradients (`tensorflow.py`); inference keeps the plain ops, which grappler fuses into oneDNN
  kernels and which convert to builtin TFLite ops.
- JAX, inference: attention as one `keras.ops.dot_product_attention` (cuDNN flash attention on
  recent NVIDIA GPUs, Splash attention on TPUs where shapes allow, XLA's own otherwise).
- JAX, opt-in (`training_forms`): one matrix product for query, key and value, the attention
  kernel in training too (cuDNN's, at padded lengths, on GPUs: `jax_kernels`), GELU and
  LayerNorm keeping only their inputs for the backward pass, and a checkpoint policy for
  `ViTConfig.remat='dots'`.
- TensorFlow, float projections: the attention's `EinsumDense` layers as one 2-D MatMul +
  BiasAdd (Keras' TensorFlow einsum makes a broadcast BatchMatMul of them, 1.1-1.5x slower
  forward + backward on CPU, and TFLite's slow int8 BATCH_MATMUL), the patch embedding as one
  strided convolution (TFLite CONV_2D). Quantized layers always run Keras' own quantized call.
- Bilinear resizing (segmentation heads): between sizes known while tracing, two products
  with [new, old] interpolation matrices (TensorFlow's resize gradient made training 2x slower
  on CPU); to a size only known at run time (a TensorFlow graph traced for any size),
  TensorFlow's own resize, the kernel Keras' TensorFlow backend calls (Keras' `resize`
  refuses a size it cannot check while tracing).
- Export tracing (`export_forms`): TFLite/ONNX-friendly norms, the exact GELU with ONNX's Erf
  (TensorFlow's own uses Erfc, which ONNX lacks) and, for full-integer TFLite, the
  attention unrolled per head.
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from vit_keras.fast_paths import export_forms, jax_kernels, training_forms
from vit_keras.fast_paths import tensorflow as tensorflow_kernels


def _tensorflow() -> bool:
    return keras.backend.backend() == "tensorflow"


def _lean_on_jax(training) -> bool:
    return bool(training) and keras.backend.backend() == "jax" and \
        training_forms.current().lean_activations


def _jax_gpu() -> bool:
    import jax

    return jax.default_backend() == "gpu"


def fused_training_available() -> bool:
    """Whether the fused training kernels can run: the TensorFlow backend."""
    return _tensorflow()


def _float_layer_on_tensorflow(layer) -> bool:
    return _tensorflow() and layer.quantization_mode is None


def project(layer, inputs):
    """`layer(inputs)`: on TensorFlow, for a float `Dense` or `EinsumDense` whose kernel
    contracts the inputs' trailing axes (the MLP and attention projections), as one 2-D MatMul
    + BiasAdd (the form grappler fuses with a following GELU); elsewhere the layer's own call.

    Args:
        layer: a built `Dense` or `EinsumDense`; its `kernel` includes any LoRA update.
        inputs: [N, K] or [batch, tokens, *contracted axes].

    Returns:
        [N or batch, (tokens,) *the kernel's other axes].
    """
    if not _float_layer_on_tensorflow(layer):
        return layer(inputs)
    import tensorflow as tf

    kernel = layer.kernel
    leading = min(2, len(inputs.shape) - 1)  # [N, K] or [batch, tokens, ...]
    contracted = len(inputs.shape) - leading
    fan_in = math.prod(kernel.shape[:contracted])
    outputs = tf.matmul(ops.reshape(inputs, (-1, fan_in)), ops.reshape(kernel, (fan_in, -1)))
    outputs = tf.nn.bias_add(outputs, ops.reshape(layer.bias, (-1,)))
    batch = -1 if inputs.shape[0] is None else inputs.shape[0]  # a static batch stays static
    return ops.reshape(outputs, (batch, *ops.shape(inputs)[1:leading],
                                 *kernel.shape[contracted:]))


def patch_projection(layer, images, patch_size):
    """The patch embedding's float `EinsumDense` as one strided VALID convolution on
    TensorFlow (kernel (P, P, C, D)); else None. Returns [batch, rows, cols, D]."""
    if not _float_layer_on_tensorflow(layer):
        return None

    return ops.conv(images, layer.kernel, strides=patch_size, padding="valid") + layer.bias


def gelu(inputs, approximate, training):
    """The fused GELU when training on TensorFlow, the lean one when training on JAX with
    `lean_activations`; the exact GELU's Erf form while an ONNX export traces; else None."""
    if training and _tensorflow():
        return tensorflow_kernels.gelu(inputs, approximate=approximate)
    if _lean_on_jax(training):
        return jax_kernels.gelu(inputs, approximate=approximate)
    if not approximate and export_forms.onnx():
        return export_forms.exact_gelu(inputs)
    return None


def layer_norm(inputs, gamma, beta, epsilon, training):
    """LayerNorm over the last axis: fused when training on TensorFlow, lean when training on
    JAX with `lean_activations`, the centred float32 form while an export traces; else None.
    Returns the float32 or input-dtype result."""
    if training and _tensorflow():
        return tensorflow_kernels.layer_norm(inputs, gamma, beta, epsilon=epsilon)
    if _lean_on_jax(training):
        return jax_kernels.layer_norm(inputs, gamma, beta, epsilon=epsilon)
    if export_forms.active():
        return export_forms.centred_layer_norm(ops.cast(inputs, "float32"), gamma, beta, epsilon)
    return None


def group_norm(inputs, groups, epsilon, gamma, beta):
    """The centred float32 GroupNorm while an export traces, else None."""
    if export_forms.active():
        return export_forms.centred_group_norm(ops.cast(inputs, "float32"), groups, epsilon,
                                               gamma, beta)
    return None


def dot_product_attention_available() -> bool:
    """Whether inference attention runs as one `keras.ops.dot_product_attention`: on JAX.

    On an H100, ViT-B/16 bf16 infers 1.20x faster through it but trained 0.93x as fast as with
    the einsum form (benchmarks/backends_gpu.py), so training keeps the einsum form unless
    `training_forms` asks for the kernel.
    TensorFlow keeps the einsum form too, which its fused softmax, grappler and TFLite expect.
    """
    return keras.backend.backend() == "jax"


def attention(query, key, value, scale, dropout, training, dropout_rate=0.0):
    """softmax(q.k^T * scale).v by a faster kernel, or None for the plain einsum form.

    Args:
        query: [batch, queries, heads, head_dim]; key, value: [batch, keys, heads, head_dim].
        scale: the Python float multiplying the logits.
        dropout: applied to the probabilities (the layer's dropout, bound to `training`).
        training: whether this is a training call.
        dropout_rate: the rate of `dropout` (the one-op kernel cannot apply it).

    Returns:
        [batch, queries, heads, head_dim], or None.
    """
    if export_forms.unroll_heads(query, key):
        return export_forms.per_head_attention(query, key, value, scale)
    kernel_in_training = training and training_forms.training_attention_kernel(dropout_rate)
    if dot_product_attention_available() and kernel_in_training and _jax_gpu():
        return jax_kernels.padded_attention(query, key, value, scale)
    if dot_product_attention_available() and (kernel_in_training or not training):
        return ops.dot_product_attention(query, key, value, scale=scale)
    # Fused only in half precision: it saves two casts there, but in float32 one XLA thread is
    # slower than TensorFlow's multi-threaded softmax (benchmarks/fused_kernels.py).
    half_precision = keras.backend.standardize_dtype(query.dtype) in ("bfloat16", "float16")
    if training and _tensorflow() and half_precision:
        return tensorflow_kernels.attention_with_fused_softmax(query, key, value, scale, dropout)
    return None


def top_k_indices(scores, k: int):
    """int32 [batch, k]: the indices of the k highest of `scores` [batch, n] (values in (0, 1],
    e.g. sigmoid probabilities), best first. `ops.top_k`, or in a full-integer TFLite export,
    which has no int8 TOPK_V2, k ARG_MAX steps (`export_forms.argmax_top_k`)."""
    if export_forms.integer():
        return export_forms.argmax_top_k(scores, k)
    return ops.cast(ops.top_k(scores, k)[1], "int32")


def _half_pixel_matrix(old: int, new: int) -> np.ndarray:
    """float32 [new, old]: linear interpolation with half-pixel centres, clamped at the edges
    (TensorFlow's bilinear resize without antialiasing, PyTorch's `align_corners=False`)."""
    positions = np.clip((np.arange(new) + 0.5) * (old / new) - 0.5, 0, old - 1)
    lower = np.floor(positions).astype(int)
    upper = np.minimum(lower + 1, old - 1)
    weight = positions - lower
    matrix = np.zeros((new, old), np.float32)
    np.add.at(matrix, (np.arange(new), lower), 1 - weight)
    np.add.at(matrix, (np.arange(new), upper), weight)
    return matrix


def resize_bilinear(maps, size):
    """Bilinear resize (half-pixel centres) of [batch, h, w, C] maps to `size` = (H, W).

    Args:
        maps: a float tensor.
        size: (height, width), ints or (in a TensorFlow graph traced for any size) scalar
            tensors.

    Returns:
        [batch, H, W, C] in `maps`' dtype.
    """
    old = tuple(maps.shape[1:3])
    if all(isinstance(side, int) for side in (*size, *old)):
        rows = ops.convert_to_tensor(_half_pixel_matrix(old[0], size[0]), maps.dtype)
        cols = ops.convert_to_tensor(_half_pixel_matrix(old[1], size[1]), maps.dtype)
        return ops.einsum("Ww,bHwc->bHWc", cols, ops.einsum("Hh,bhwc->bHwc", rows, maps))
    import tensorflow as tf  # only TensorFlow traces with sizes unknown until run time

    return tf.cast(tf.image.resize(maps, tf.stack(size), method="bilinear"), maps.dtype)
