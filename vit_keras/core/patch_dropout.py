"""Patch dropout: train on a random subset of each image's patch tokens.

"Patch Dropout: Economizing Vision Transformers Using Patch Dropout" (Liu et al., 2023) and
FLIP (Li et al., 2023): dropping half the patches roughly halves the cost of every encoder
block in training, with little or no loss of accuracy. The semantics are timm's
`PatchDropout`; at inference the layer is the identity.
"""

import numbers

import keras
from keras import ops

from vit_keras.core.initializers import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
class PatchDropout(keras.layers.Layer):
    """Keeps a random subset of the patch tokens of each example during training.

    Of the L patch tokens after the first `num_prefix_tokens` (the class and distillation
    tokens, always kept), each example keeps `max(1, int(L * (1 - rate)))`, drawn at random
    and independently per example. The kept tokens come in a random order, as timm's
    default (the encoder blocks treat tokens alike wherever they stand, and the heads read the
    prefix tokens or pool over all); `ordered=True` keeps them in their original order. At
    inference the layer returns its input unchanged.

    The static output shape is the inference one (the input shape): in training the sequence
    is shorter than the graph's symbolic shape says.

    Args:
        rate: fraction of the patch tokens dropped, in [0, 1).
        num_prefix_tokens: leading tokens that are never dropped.
        ordered: keep the kept patches in their original order.
        seed: optional int seed.
    """

    def __init__(self, rate, num_prefix_tokens=1, ordered=False, seed=None, **kwargs):
        super().__init__(**kwargs)
        if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or not 0 <= rate < 1:
            raise ValueError(f"PatchDropout rate must be a number in [0, 1), got {rate!r}")
        if isinstance(num_prefix_tokens, bool) or not isinstance(num_prefix_tokens, int) \
                or num_prefix_tokens < 0:
            raise ValueError(f"PatchDropout num_prefix_tokens must be an int >= 0, got "
                             f"{num_prefix_tokens!r}")
        self.rate = rate
        self.num_prefix_tokens = num_prefix_tokens
        self.ordered = ordered
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, tokens, training=None):
        if not training or not self.rate:
            return tokens
        prefix = self.num_prefix_tokens
        patches = tokens[:, prefix:]
        kept = ops.take_along_axis(patches, self._kept_indices(patches)[..., None], axis=1)
        return ops.concatenate([tokens[:, :prefix], kept], axis=1) if prefix else kept

    def _kept_indices(self, patches):
        """[batch, kept] int32 indices into the patch axis, a random subset per example."""
        batch, length = ops.shape(patches)[0], ops.shape(patches)[1]
        # The top k of uniform noise is a uniformly random k-subset, in random order.
        noise = keras.random.uniform((batch, length), seed=self.seed_generator)
        _, indices = ops.top_k(noise, self.kept_count(length))
        return ops.sort(indices, axis=-1) if self.ordered else indices

    def kept_count(self, num_patches):
        """How many of `num_patches` patch tokens an example keeps in training.

        Args:
            num_patches: an int, or a scalar tensor where the patch count is known only at run
                time (a TensorFlow graph of a model taking any image size).

        Returns:
            `max(1, int(num_patches * (1 - rate)))`, an int or an int32 scalar tensor.
        """
        if isinstance(num_patches, int):
            return max(1, int(num_patches * (1.0 - self.rate)))
        # float64, as Python computes the int case, so the count is the same at every size.
        kept = ops.floor(ops.cast(num_patches, "float64") * (1.0 - self.rate))
        return ops.maximum(ops.cast(kept, "int32"), 1)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(rate=self.rate, num_prefix_tokens=self.num_prefix_tokens,
                      ordered=self.ordered, seed=self.seed)
        return config
