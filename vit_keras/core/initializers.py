"""Initializers with the official Flax semantics."""

import math

import keras

PACKAGE = "vit_keras"


@keras.saving.register_keras_serializable(package=PACKAGE)
class DenseGeneralGlorotUniform(keras.initializers.Initializer):
    """Xavier-uniform for a multi-axis kernel, as Flax's `DenseGeneral` computes it.

    Flax flattens a (D, heads, head_dim) attention kernel to (D, heads*head_dim) before taking
    fans; Keras' `GlorotUniform` would treat the leading axes as a receptive field instead and
    pick a different scale. The first `num_input_axes` axes are the fan-in.

    Args:
        num_input_axes: how many leading axes are contracted with the input.
        seed: optional int seed.
    """

    def __init__(self, num_input_axes=1, seed=None):
        self.num_input_axes = num_input_axes
        self.seed = seed

    def __call__(self, shape, dtype=None):
        fan_in = math.prod(shape[: self.num_input_axes])
        fan_out = math.prod(shape[self.num_input_axes:])
        limit = math.sqrt(6.0 / (fan_in + fan_out))
        # Keras' own initializer draws an integer seed when none is given, which (unlike a global
        # SeedGenerator) is allowed inside a JAX trace, where nested layers are built.
        uniform = keras.initializers.RandomUniform(-limit, limit, seed=self.seed)
        return uniform(shape, dtype=dtype)

    def get_config(self):
        return {"num_input_axes": self.num_input_axes, "seed": self.seed}
