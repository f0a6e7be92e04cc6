"""LayerNorm over the last axis with a fused training path on TensorFlow (see `vit_keras.fused`)."""

import keras
from keras import ops

from vit_keras import fused
from vit_keras.initializers import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
class LayerNorm(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` whose training step on TensorFlow is two XLA loops.

    Same weights (`gamma`, `beta`), config and inference graph as the Keras layer; when training
    on TensorFlow with the default last-axis, centred and scaled form, the normalisation and its
    gradient are each computed in one fused float32 pass instead of a dozen kernels.
    """

    def call(self, inputs, training=None):
        if training and fused.available() and self._fusable(len(inputs.shape)):
            outputs = _FUSED_LAYER_NORM(inputs, self.gamma, self.beta, epsilon=self.epsilon)
            return ops.cast(outputs, self.compute_dtype)
        return super().call(inputs)

    def _fusable(self, rank):
        axes = [self.axis] if isinstance(self.axis, int) else list(self.axis)
        return (axes in ([-1], [rank - 1]) and self.center and self.scale
                and not self.rms_scaling)


def _normalize(x, epsilon):
    """(x - mean) / std over the last axis and 1/std, in float32."""
    import tensorflow as tf

    x = tf.cast(x, tf.float32)
    centred = x - tf.reduce_mean(x, axis=-1, keepdims=True)
    inverse_std = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True)
                                + epsilon)
    return centred * inverse_std, inverse_std


def _forward(x, gamma, beta, epsilon):
    import tensorflow as tf

    normalized, _ = _normalize(x, epsilon)
    return tf.cast(normalized * gamma + beta, x.dtype)


def _backward(x, gamma, beta, upstream, epsilon):
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


_FUSED_LAYER_NORM = fused.FusedOp(_forward, _backward)
