"""TensorFlow training kernels: GELU, LayerNorm and the scaled softmax, each one XLA-compiled
loop forward and one backward in float32 (see `fused.FusedOp`). The same math as the plain
`keras.ops` forms in the model core, to float rounding (tests/test_fast_paths.py)."""

import math

from keras import ops

from vit_keras.fast_paths.fused import FusedOp

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_TANH_CUBIC = 0.044715  # the cubic coefficient of the tanh approximation
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


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


def _gelu_forward(x, approximate):
    import tensorflow as tf

    x32 = tf.cast(x, tf.float32)
    cdf, _ = _cdf_and_density(x32, approximate)
    return tf.cast(x32 * cdf, x.dtype)


def _gelu_backward(x, upstream, approximate):
    import tensorflow as tf

    x32 = tf.cast(x, tf.float32)
    cdf, density = _cdf_and_density(x32, approximate)
    return tf.cast(tf.cast(upstream, tf.float32) * (cdf + x32 * density), x.dtype)


gelu = FusedOp(_gelu_forward, _gelu_backward)
"""gelu(x, approximate=...) in the dtype of x."""


def _probabilities(logits, scale):
    import tensorflow as tf

    return tf.nn.softmax(tf.cast(logits, tf.float32) * scale, axis=-1)


def _softmax_forward(logits, scale):
    import tensorflow as tf

    return tf.cast(_probabilities(logits, scale), logits.dtype)


def _softmax_backward(logits, upstream, scale):
    import tensorflow as tf

    probs = _probabilities(logits, scale)  # recomputed rather than kept as a float32 copy
    upstream = tf.cast(upstream, tf.float32)
    inner = tf.reduce_sum(upstream * probs, axis=-1, keepdims=True)
    return tf.cast(scale * probs * (upstream - inner), logits.dtype)


scaled_softmax = FusedOp(_softmax_forward, _softmax_backward)
"""softmax(scale * logits) over the last axis, in the dtype of the logits."""


def _normalize(x, epsilon):
    """(x - mean) / std over the last axis and 1/std, in float32."""
    import tensorflow as tf

    x = tf.cast(x, tf.float32)
    centred = x - tf.reduce_mean(x, axis=-1, keepdims=True)
    inverse_std = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True)
                                + epsilon)
    return centred * inverse_std, inverse_std


def _layer_norm_forward(x, gamma, beta, epsilon):
    import tensorflow as tf

    normalized, _ = _normalize(x, epsilon)
    return tf.cast(normalized * gamma + beta, x.dtype)


def _layer_norm_backward(x, gamma, beta, upstream, epsilon):
    import tensorflow as tf

    normalized, inverse_std = _normalize(x, epsilon)
    upstream = tf.cast(upstream, tf.float32)
    leading_axes = list(range(len(x.shape) - 1))
    d_gamma = tf.reduce_sum(upstream * normalized, axis=leading_axes)
    d_beta = tf.reduce_sum(upstream, axis=leading_axes)
    d_normalized = upstream * gamma
    d_x = inverse_std * (d_normalized - tf.reduce_mean(d_normalized, axis=-1, keepdims=True)
                         - normalized * tf.reduce_mean(d_normalized * normalized, axis=-1,
                                                       keepdims=True))
    return tf.cast(d_x, x.dtype), d_gamma, d_beta


layer_norm = FusedOp(_layer_norm_forward, _layer_norm_backward)
"""layer_norm(x, gamma, beta, epsilon=...) over the last axis, in the dtype of x."""


def attention_with_fused_softmax(query, key, value, scale, dropout):
    """softmax(q.k^T * scale).v with the fused softmax, on [batch, tokens, heads, head_dim]."""
    weights = dropout(scaled_softmax(ops.einsum("btnh,bsnh->bnts", query, key), scale=scale))
    return ops.einsum("bnts,bsnh->btnh", weights, value)
