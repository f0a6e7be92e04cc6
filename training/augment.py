"""Train-time augmentation from core Keras 3 preprocessing layers, run inside tf.data.

`build_augment(preset)` returns a function `(images, one_hot_labels, seed) -> (images, labels)`
working on a whole batch of float32 0..255 images (multi-hot labels work alike: MixUp and CutMix
mix label vectors linearly, as timm does for its binary cross-entropy). Each Keras layer draws its randomness from the
per-batch `seed` (a stateless [2] int64 tensor) instead of its own stateful SeedGenerator, so the
augmentation of batch `s` of epoch `e` is the same in every run, in any tf.data parallelism, and
after a resume.
"""

from __future__ import annotations

from typing import Callable

import keras
import tensorflow as tf

from vit_keras import keras_compat


class _BatchSeed(keras.random.SeedGenerator):
    """A SeedGenerator stand-in that derives each draw from one seed tensor, statelessly.

    Keras layers call `next()` once per random draw while tracing; each call site gets its own
    fold-in counter, so draws are distinct yet fully determined by the batch seed.
    """

    def __init__(self, seed: tf.Tensor):  # no super().__init__(): no state variable wanted
        self._seed = tf.cast(seed, tf.int64)
        self._draws = 0

    def next(self, ordered=True):
        self._draws += 1
        return tf.random.experimental.stateless_fold_in(self._seed, self._draws)


def _layers_with_generators(layer: keras.layers.Layer):
    return [sub for sub in keras_compat.nested_layers(layer)
            if isinstance(getattr(sub, "generator", None), keras.random.SeedGenerator)]


def call_with_seed(layer: keras.layers.Layer, inputs, seed: tf.Tensor):
    """Calls a random Keras preprocessing layer with its randomness taken from `seed`.

    On a backend other than TensorFlow, a layer running inside tf.data draws from a second,
    stateful generator it keeps for TensorFlow (`_backend_generators`), whose draws would
    depend on tf.data's thread timing; that one is swapped for the batch seed too.
    """
    batch_seed = _BatchSeed(seed)
    swapped = []
    try:
        for sub in _layers_with_generators(layer):
            swapped.append((sub, sub.generator, sub.__dict__.get("_backend_generators")))
            object.__setattr__(sub, "generator", batch_seed)
            object.__setattr__(sub, "_backend_generators", {"tensorflow": batch_seed})
        return layer(inputs, training=True)
    finally:
        for sub, generator, backend_generators in swapped:
            object.__setattr__(sub, "generator", generator)
            if backend_generators is None:
                object.__delattr__(sub, "_backend_generators")
            else:
                object.__setattr__(sub, "_backend_generators", backend_generators)


def geometric_layers(preset) -> list[keras.layers.Layer]:
    """Per-image geometric and photometric layers selected by the preset (labels unchanged)."""
    layers = []
    if preset.augment.flip:
        layers.append(keras.layers.RandomFlip("horizontal"))
    if preset.augment.translate:
        shift = preset.augment.translate
        layers.append(keras.layers.RandomTranslation(shift, shift, fill_mode="constant"))
    if preset.augment.rotate:
        layers.append(keras.layers.RandomRotation(preset.augment.rotate, fill_mode="constant"))
    if preset.augment.zoom:
        layers.append(keras.layers.RandomZoom(preset.augment.zoom, fill_mode="constant"))
    if preset.augment.randaugment_ops:
        layers.append(keras.layers.RandAugment(value_range=(0, 255),
                                               num_ops=preset.augment.randaugment_ops,
                                               factor=preset.augment.randaugment_magnitude / 10.0))
    return layers


def mixing_layers(preset) -> list[keras.layers.Layer]:
    """MixUp / CutMix layers (they mix labels too)."""
    layers = []
    if preset.augment.mixup_alpha:
        layers.append(keras.layers.MixUp(alpha=preset.augment.mixup_alpha))
    if preset.augment.cutmix_alpha:
        layers.append(keras.layers.CutMix(factor=preset.augment.cutmix_alpha))
    return layers


def build_augment(preset) -> Callable | None:
    """The batch augmentation of `preset`, or None when it asks for none.

    Order: geometric/photometric layers, then one of MixUp/CutMix (chosen per batch with equal
    odds when both are on, as DeiT), then RandomErasing.
    """
    geometric = geometric_layers(preset)
    mixing = mixing_layers(preset)
    erasing = (keras.layers.RandomErasing(factor=preset.augment.erasing_prob, value_range=(0, 255))
               if preset.augment.erasing_prob else None)
    if not (geometric or mixing or erasing):
        return None

    def augment(images, labels, seed):
        seed = tf.cast(seed, tf.int64)
        for index, layer in enumerate(geometric):
            images = call_with_seed(layer, images, seed + [0, 1_000_000 * (index + 1)])
        if mixing:
            outputs = [call_with_seed(layer, {"images": images, "labels": labels},
                                      seed + [1, 0]) for layer in mixing]
            if len(outputs) == 1:
                images, labels = outputs[0]["images"], outputs[0]["labels"]
            else:
                pick = tf.random.stateless_uniform([], seed + [2, 0]) < 0.5
                images = tf.where(pick, outputs[0]["images"], outputs[1]["images"])
                labels = tf.where(pick, outputs[0]["labels"], outputs[1]["labels"])
        if erasing is not None:
            images = call_with_seed(erasing, images, seed + [3, 0])
        return tf.cast(images, tf.float32), tf.cast(labels, tf.float32)

    return augment


# The photometric change a dense task's pipeline makes to an image and never to its labels.
BRIGHTNESS, CONTRAST = 0.1 * 255, (0.8, 1.25)


def photometric(image, seed):
    """Random brightness and contrast of one 0..255 image."""
    image = tf.image.stateless_random_brightness(image, BRIGHTNESS, seed + [0, 3])
    image = tf.image.stateless_random_contrast(image, *CONTRAST, seed + [0, 4])
    return tf.clip_by_value(image, 0.0, 255.0)
