"""GELU with a fused training path on TensorFlow (see `vit_keras.fused`)."""

import math

from keras import ops

from vit_keras import fused

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_TANH_CUBIC = 0.044715  # the cubic coefficient of the tanh approximation
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def gelu(inputs, approximate=True, training=None):
    """GELU of `inputs`, the same numbers on every path to float rounding.

    Training on TensorFlow runs the activation and its derivative each as one XLA loop in
    float32; everywhere else this is `keras.ops.gelu`, which grappler fuses with a preceding
    MatMul + BiasAdd into one oneDNN kernel.

    Args:
        inputs: a tensor of any float dtype.
        approximate: the tanh approximation (official ViT) or the exact erf form.
        training: True selects the fused path when available.

    Returns:
        A tensor of the dtype and shape of `inputs`.
    """
    if training and fused.available():
        return _FUSED_GELU(inputs, approximate=approximate)
    return ops.gelu(inputs, approximate=approximate)


def _cdf_and_density(x, approximate):
    """Phi(x) and dPhi/dx, where gelu(x) = x * Phi(x); float32 tensors in and out."""
    import tensorflow as tf

    if approximate:
        # 0.5 * (1 + tanh(z)) = sigmoid(2z): one transcendental instead of tanh plus rescaling.
        squared = tf.square(x)
        cdf = tf.sigmoid(2.0 * _SQRT_2_OVER_PI * x * (1.0 + _TANH_CUBIC * squared))
        slope = 2.0 * _SQRT_2_OVER_PI * (1.0 + 3.0 * _TANH_CUBIC * squared)
        return cdf, cdf * (1.0 - cdf) * slope
    cdf = 0.5 * (1.0 + tf.math.erf(x * _INV_SQRT_2))
    return cdf, _INV_SQRT_2PI * tf.exp(-0.5 * tf.square(x))


def _forward(x, approximate):
    import tensorflow as tf

    x32 = tf.cast(x, tf.float32)
    cdf, _ = _cdf_and_density(x32, approximate)
    return tf.cast(x32 * cdf, x.dtype)


def _backward(x, upstream, approximate):
    import tensorflow as tf

    x32 = tf.cast(x, tf.float32)
    cdf, density = _cdf_and_density(x32, approximate)
    return tf.cast(tf.cast(upstream, tf.float32) * (cdf + x32 * density), x.dtype)


_FUSED_GELU = fused.FusedOp(_forward, _backward)
