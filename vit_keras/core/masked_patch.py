"""Masked patch prediction (paper section 4.6 and appendix B.1.2): self-supervised pre-training.

Half of the patch embeddings of each image are selected; of those, 80% are replaced by a
learned [mask] embedding, 10% by the embedding of another random patch of the same image and
10% are left unchanged. From the encoder output of every selected patch, a linear head predicts
the patch's 3-bit mean colour: each channel's mean quantised to 8 levels, 8**3 = 512 classes.
The pre-trained encoder is then fine-tuned as a normal ViT (`to_classifier`).

The corruption of one batch is an int array [batch, patches]: NOT_SELECTED (-1) leaves a patch
alone, MASKED (-2) puts the [mask] embedding, an index j >= 0 puts patch j's embedding (j is
the patch itself for the "unchanged" 10%).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from vit_keras.config import ViTConfig
from vit_keras.core.initializers import PACKAGE
from vit_keras.core.model import VisionTransformer, encode_tokens, patch_tokens

NOT_SELECTED = -1
MASKED = -2
COLOR_BITS = 3


def patch_color_targets(images, patch_size: int, bits: int = COLOR_BITS):
    """The class of each patch's mean colour, channels quantised to `bits` bits each.

    Args:
        images: [batch, H, W, C] in [-1, 1] (see `preprocess_input`).
        patch_size: patch side P (H and W multiples of P).
        bits: bits per channel; the classes are 2 ** (bits * C) (512 for RGB, 3 bits).

    Returns:
        int32 [batch, (H/P) * (W/P)], patches row-major; the first channel is the most
        significant digit (class = r * 64 + g * 8 + b for 3 bits).
    """
    levels = 2 ** bits
    _, height, width, channels = images.shape
    rows, cols = height // patch_size, width // patch_size
    unit = (ops.cast(images, "float32") + 1.0) / 2.0
    patches = ops.reshape(unit, (-1, rows, patch_size, cols, patch_size, channels))
    means = ops.mean(patches, axis=(2, 4))
    # A non-finite pixel gets class 0 rather than an out-of-range index: its logits are not
    # finite either, so the loss is NaN and training stops on it cleanly.
    means = ops.where(ops.isfinite(means), means, 0.0)
    quantised = ops.clip(ops.floor(means * levels), 0, levels - 1)
    weights = ops.convert_to_tensor([levels ** (channels - 1 - c) for c in range(channels)],
                                    dtype="float32")
    classes = ops.sum(quantised * weights, axis=-1)
    return ops.cast(ops.reshape(classes, (-1, rows * cols)), "int32")


def sample_corruption(batch: int, num_patches: int, seed=None, rate: float = 0.5,
                      mask_fraction: float = 0.8, random_fraction: float = 0.1):
    """Draws the corruption of a batch (see the module docstring for its encoding).

    Exactly round(rate * num_patches) patches per image are selected; each selected patch is
    masked with probability `mask_fraction`, replaced by another random patch of the same
    image with probability `random_fraction`, and kept otherwise.

    Args:
        batch, num_patches: the shape.
        seed: an int or a `keras.random.SeedGenerator`.
        rate, mask_fraction, random_fraction: the paper's 0.5, 0.8, 0.1.

    Returns:
        int32 [batch, num_patches].
    """
    count = int(round(rate * num_patches))
    shape = (batch, num_patches)
    if not isinstance(seed, keras.random.SeedGenerator):  # an int seed would repeat each draw
        seed = keras.random.SeedGenerator(seed)
    # The `count` patches with the smallest random keys are the selected ones.
    keys = keras.random.uniform(shape, seed=seed)
    ranks = ops.argsort(ops.argsort(keys, axis=-1), axis=-1)
    selected = ranks < count
    choice = keras.random.uniform(shape, seed=seed)
    positions = ops.broadcast_to(ops.arange(num_patches, dtype="int32")[None], shape)
    offsets = keras.random.randint(shape, 1, max(num_patches, 2), seed=seed, dtype="int32")
    other = (positions + offsets) % num_patches  # never the patch itself
    source = ops.where(choice < mask_fraction, MASKED,
                       ops.where(choice < mask_fraction + random_fraction, other, positions))
    return ops.cast(ops.where(selected, source, NOT_SELECTED), "int32")


@keras.saving.register_keras_serializable(package=PACKAGE)
class MaskedPatchCorruption(keras.layers.Layer):
    """Applies a corruption to [batch, patches, D] embeddings; learns the [mask] embedding
    (weight `mask_token` (1, 1, D), normal(0.02))."""

    def build(self, input_shape):
        self.mask_token = self.add_weight(
            name="mask_token", shape=(1, 1, input_shape[0][-1]),
            initializer=keras.initializers.RandomNormal(stddev=0.02))

    def no_weight_decay(self):
        return [self.mask_token]

    def call(self, inputs):
        tokens, corruption = inputs
        corruption = ops.cast(corruption, "int32")
        gathered = ops.take_along_axis(tokens, ops.maximum(corruption, 0)[..., None], axis=1)
        replaced = ops.where((corruption >= 0)[..., None], gathered, tokens)
        mask = ops.cast(self.mask_token, tokens.dtype)
        return ops.where((corruption == MASKED)[..., None], mask, replaced)

    def compute_output_shape(self, input_shape):
        return input_shape[0]


def build_network(config: ViTConfig, bits: int = COLOR_BITS) -> keras.Model:
    """The pre-training network: (images, corruption) -> [batch, patches, 2**(bits*C)] logits.

    Its encoder layers carry the same names as `VisionTransformer(config)`'s, so
    `to_classifier` moves them over by name.
    """
    if config.resnet_layers is not None:
        raise ValueError("masked patch prediction corrupts patch embeddings of pixels: it needs "
                         "a plain ViT, got a hybrid (resnet_layers set)")
    if config.patch_drop_rate:
        raise ValueError("masked patch prediction predicts every patch: it needs "
                         f"patch_drop_rate=0, got {config.patch_drop_rate}")
    # The corruption input fixes the patch count: pre-training runs at the stored size (the
    # classifier made by `to_classifier` may still take any size).
    config = config.replace(dynamic_image_size=False, dynamic_image_pad=False)
    height, width = config.image_hw
    images = keras.Input((height, width, config.channels), name="images")
    corruption = keras.Input((config.num_patches,), dtype="int32", name="corruption")
    tokens = patch_tokens(config, images)
    tokens = MaskedPatchCorruption(name="mpp_corruption")([tokens, corruption])
    tokens = encode_tokens(config, tokens)
    start = config.num_prefix_tokens
    patches = PatchOutputs(start, config.num_patches, name="patch_outputs")(tokens)
    logits = keras.layers.Dense(2 ** (bits * config.channels), name="mpp_head",
                                dtype="float32")(patches)
    return keras.Model([images, corruption], logits, name="mpp")


@keras.saving.register_keras_serializable(package=PACKAGE)
class PatchOutputs(keras.layers.Layer):
    """Keeps the `count` patch tokens starting at `start` (drops class/extra tokens)."""

    def __init__(self, start, count, **kwargs):
        super().__init__(**kwargs)
        self.start = start
        self.count = count

    def call(self, tokens):
        return tokens[:, self.start:self.start + self.count]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.count, input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(start=self.start, count=self.count)
        return config


class MaskedPatchPretrainer(keras.Model):
    """Trains `build_network(config)` with `fit` on images (labels, if any, are ignored).

    Each call draws a fresh corruption; the loss is the softmax cross-entropy of the selected
    patches' colour classes (`compute_loss`), and `accuracy` is measured on the selected
    patches. Only `keras.ops`: it trains on every backend and under any distribution strategy.

    Args:
        config: the ViT to pre-train.
        rate, mask_fraction, random_fraction: see `sample_corruption`.
        seed: seed of the corruption stream.
    """

    def __init__(self, config: ViTConfig, rate=0.5, mask_fraction=0.8, random_fraction=0.1,
                 seed=None, **kwargs):
        super().__init__(**kwargs)
        self.config = config
        self.network = build_network(config)
        self.rate, self.mask_fraction, self.random_fraction = rate, mask_fraction, random_fraction
        self.seed_generator = keras.random.SeedGenerator(seed)
        # Mean over the selected patches only (scaled per replica under tf.distribute).
        self.patch_loss = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="mean_with_sample_weight")
        self.patch_accuracy = keras.metrics.SparseCategoricalAccuracy(name="accuracy")
        self.built = True  # every variable lives in `network`, built above

    def call(self, images, training=False):
        """Corrupts `images` and predicts every patch's colour class.

        Returns:
            {'logits': [batch, patches, classes], 'corruption': [batch, patches] int32}.
        """
        # Eager training steps may hand over NumPy arrays, which cannot share a call with the
        # backend tensor of the corruption.
        images = ops.convert_to_tensor(images)
        corruption = sample_corruption(ops.shape(images)[0], self.config.num_patches,
                                       self.seed_generator, self.rate, self.mask_fraction,
                                       self.random_fraction)
        logits = self.network([images, corruption], training=training)
        return {"logits": logits, "corruption": corruption}

    def _targets(self, images, outputs):
        """(colour classes, 1.0 where the patch was selected) of a batch."""
        targets = patch_color_targets(images, self.config.patch_size)
        return targets, ops.cast(outputs["corruption"] != NOT_SELECTED, "float32")

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        targets, selected = self._targets(x, y_pred)
        return self.patch_loss(targets, y_pred["logits"], sample_weight=selected)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        targets, selected = self._targets(x, y_pred)
        self.patch_accuracy.update_state(targets, y_pred["logits"], sample_weight=selected)
        return self.get_metrics_result()


def to_classifier(network: keras.Model, config: ViTConfig) -> keras.Model:
    """A `VisionTransformer(config)` starting from the pre-trained encoder of `network`.

    Every layer of the classifier that exists by name in `network` (embedding, class token,
    position embedding, blocks, final norm) gets its weights; the head stays at its
    initialisation (zeros).

    Args:
        network: from `build_network` (possibly trained).
        config: the classifier's config: same encoder, any `num_classes`.
    """
    model = VisionTransformer(config)
    source = {layer.name: layer for layer in network.layers}
    for layer in model.layers:
        if layer.name in source and layer.weights and layer.name != "head":
            layer.set_weights([np.asarray(w) for w in source[layer.name].get_weights()])
    return model
