"""LayerNorm over the last axis with a fused training path on TensorFlow (see `vit_keras.fused`),
and LayerNorm and GroupNorm forms for TFLite export (see `vit_keras.export_forms`)."""

import keras
from keras import ops

from vit_keras import export_forms, fused
from vit_keras.initializers import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
class LayerNorm(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` whose training step on TensorFlow is two XLA loops.

    Same weights (`gamma`, `beta`), config and inference graph as the Keras layer; when training
    on TensorFlow with the default last-axis, centred and scaled form, the normalisation and its
    gradient are each computed in one fused float32 pass instead of a dozen kernels.
    """

    def call(self, inputs, training=None):
        if not self._last_axis_affine(len(inputs.shape)):
            return super().call(inputs)
        if training and fused.available():
            outputs = _FUSED_LAYER_NORM(inputs, self.gamma, self.beta, epsilon=self.epsilon)
            return ops.cast(outputs, self.compute_dtype)
        if export_forms.active():
            outputs = _centred_form(ops.cast(inputs, "float32"), self.gamma, self.beta,
                                    self.epsilon)
            return ops.cast(outputs, self.compute_dtype)
        return super().call(inputs)

    def _last_axis_affine(self, rank):
        axes = [self.axis] if isinstance(self.axis, int) else list(self.axis)
        return (axes in ([-1], [rank - 1]) and self.center and self.scale
                and not self.rms_scaling)


@keras.saving.register_keras_serializable(package=PACKAGE)
class GroupNorm(keras.layers.GroupNormalization):
    """`keras.layers.GroupNormalization` (channels last) with a centred form for TFLite export.

    Same weights, config and values as the Keras layer.
    """

    def call(self, inputs):
        if not (export_forms.active() and self.axis in (-1, len(inputs.shape) - 1)):
            return super().call(inputs)
        x = ops.cast(inputs, "float32")
        channels = x.shape[-1]
        grouped = ops.reshape(x, (-1, *ops.shape(x)[1:-1], self.groups, channels // self.groups))
        axes = [axis for axis in range(1, len(grouped.shape)) if axis != len(grouped.shape) - 2]
        centred = grouped - ops.mean(grouped, axis=axes, keepdims=True)
        variance = ops.mean(centred * centred, axis=axes, keepdims=True)
        outputs = ops.reshape(centred * ops.rsqrt(variance + self.epsilon), ops.shape(x))
        if self.scale:
            outputs = outputs * self.gamma
        if self.center:
            outputs = outputs + self.beta
        return ops.cast(outputs, self.compute_dtype)


def _centred_form(x, gamma, beta, epsilon):
    """(x - mean) / std * gamma + beta over the last axis: Keras' x * s + (beta - mean * s)
    leaves a float NEG in int8 TFLite files; this form's operators all have int8 kernels, and
    the converter folds its trailing `* gamma + beta` into the next FULLY_CONNECTED's weights."""
    centred = x - ops.mean(x, axis=-1, keepdims=True)
    variance = ops.mean(centred * centred, axis=-1, keepdims=True)
    return centred * ops.rsqrt(variance + epsilon) * gamma + beta


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
