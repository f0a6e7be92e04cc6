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


def scaled_softmax(logits, scale):
    """softmax(scale * logits) over the last axis, fused (training on TensorFlow only).

    Computed in float32 as one XLA loop forward and one backward (which recomputes the
    probabilities rather than keeping a float32 copy), returned in the dtype of `logits`.

    Args:
        logits: [..., keys] attention logits, any float dtype.
        scale: a Python float multiplying the logits.

    Returns:
        Probabilities of the shape and dtype of `logits`.
    """
    return _FUSED_SCALED_SOFTMAX(logits, scale=scale)


def _probabilities(logits, scale):
    import tensorflow as tf

    return tf.nn.softmax(tf.cast(logits, tf.float32) * scale, axis=-1)


def _softmax_forward(logits, scale):
    import tensorflow as tf

    return tf.cast(_probabilities(logits, scale), logits.dtype)


def _softmax_backward(logits, upstream, scale):
    import tensorflow as tf

    probs = _probabilities(logits, scale)
    upstream = tf.cast(upstream, tf.float32)
    inner = tf.reduce_sum(upstream * probs, axis=-1, keepdims=True)
    return tf.cast(scale * probs * (upstream - inner), logits.dtype)


_FUSED_SCALED_SOFTMAX = fused.FusedOp(_softmax_forward, _softmax_backward)
