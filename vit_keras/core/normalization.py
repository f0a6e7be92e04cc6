"""LayerNorm and GroupNorm: Keras' layers, with the fast paths of `vit_keras.fast_paths`."""

import keras
from keras import ops

from vit_keras import fast_paths
from vit_keras.core.initializers import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
class LayerNorm(keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization` (same weights `gamma`, `beta`, config and values)
    whose last-axis, centred and scaled form takes the fused training kernel on TensorFlow and
    the export form while an export traces (see `vit_keras.fast_paths.layer_norm`)."""

    def call(self, inputs, training=None):
        if self._last_axis_affine(len(inputs.shape)):
            fast = fast_paths.layer_norm(inputs, self.gamma, self.beta, self.epsilon, training)
            if fast is not None:
                return ops.cast(fast, self.compute_dtype)
        return super().call(inputs)

    def _last_axis_affine(self, rank):
        axes = [self.axis] if isinstance(self.axis, int) else list(self.axis)
        return (axes in ([-1], [rank - 1]) and self.center and self.scale
                and not self.rms_scaling)


@keras.saving.register_keras_serializable(package=PACKAGE)
class GroupNorm(keras.layers.GroupNormalization):
    """`keras.layers.GroupNormalization` (channels last; same weights, config and values) with
    the export form while an export traces (see `vit_keras.fast_paths.group_norm`)."""

    def call(self, inputs):
        if self.axis in (-1, len(inputs.shape) - 1):
            fast = fast_paths.group_norm(inputs, self.groups, self.epsilon,
                                         self.gamma if self.scale else None,
                                         self.beta if self.center else None)
            if fast is not None:
                return ops.cast(fast, self.compute_dtype)
        return super().call(inputs)
