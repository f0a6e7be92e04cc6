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
from vit_keras.initializers import PACKAGE
from vit_keras.model import VisionTransformer, encode_tokens, patch_tokens

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
    """Trains `build_network(config)` with `fit` on batches of images (labels are ignored).

    Each step draws a fresh corruption, computes the colour targets and minimises the softmax
    cross-entropy over the selected patches only. Reports `loss` and `accuracy` (of the
    selected patches). TensorFlow backend.

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
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.accuracy_tracker = keras.metrics.Mean(name="accuracy")

    def call(self, inputs, training=False):
        return self.network(inputs, training=training)

    def _batch(self, data):
        images = data[0] if isinstance(data, (tuple, list)) else data
        corruption = sample_corruption(ops.shape(images)[0], self.config.num_patches,
                                       self.seed_generator, self.rate, self.mask_fraction,
                                       self.random_fraction)
        targets = patch_color_targets(images, self.config.patch_size)
        weights = ops.cast(corruption != NOT_SELECTED, "float32")
        return images, corruption, targets, weights

    def _loss(self, logits, targets, weights):
        losses = keras.losses.sparse_categorical_crossentropy(targets, logits, from_logits=True)
        loss = ops.sum(losses * weights) / ops.maximum(ops.sum(weights), 1.0)
        predicted = ops.cast(ops.argmax(logits, axis=-1), "int32")
        hits = ops.cast(predicted == ops.cast(targets, "int32"), "float32")
        accuracy = ops.sum(hits * weights) / ops.maximum(ops.sum(weights), 1.0)
        return loss, accuracy

    def train_step(self, data):
        import tensorflow as tf

        images, corruption, targets, weights = self._batch(data)
        with tf.GradientTape() as tape:
            logits = self.network([images, corruption], training=True)
            loss, accuracy = self._loss(logits, targets, weights)
            scaled = self.optimizer.scale_loss(loss)
        variables = self.network.trainable_variables
        self.optimizer.apply(tape.gradient(scaled, variables), variables)
        return self._report(loss, accuracy)

    def test_step(self, data):
        images, corruption, targets, weights = self._batch(data)
        logits = self.network([images, corruption], training=False)
        return self._report(*self._loss(logits, targets, weights))

    def _report(self, loss, accuracy):
        self.loss_tracker.update_state(loss)
        self.accuracy_tracker.update_state(accuracy)
        return {"loss": self.loss_tracker.result(), "accuracy": self.accuracy_tracker.result()}

    @property
    def metrics(self):
        return [self.loss_tracker, self.accuracy_tracker]


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
