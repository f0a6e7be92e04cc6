"""A trained ViT keeps its accuracy through Keras' quantization: int8 within 0.5 points of float,
int4 within 2 (the default job's figures are in benchmarks/quantization.py)."""

import keras
import numpy as np
import pytest
from helpers import to_numpy

from vit_keras import VisionTransformer, ViTConfig

BOUNDS = {"int8": 0.005, "int4": 0.02}


@pytest.fixture(scope="module")
def trained_digits():
    """A small ViT trained for a few seconds on scikit-learn's 8x8 digits, and its test split."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = (digits.images[..., None].repeat(3, axis=-1) / 8.0 - 1.0).astype("float32")  # 0..16
    labels = digits.target
    keras.utils.set_random_seed(0)
    config = ViTConfig(image_size=8, patch_size=4, hidden_size=32, mlp_dim=64, num_heads=4,
                       num_layers=2, num_classes=10, classifier="gap")
    model = VisionTransformer(config)
    model.compile(keras.optimizers.Adam(5e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(images[:1437], labels[:1437], epochs=15, batch_size=64, verbose=0)
    weights = model.get_weights()
    return config, weights, images[1437:], labels[1437:]


def _accuracy(model, images, labels):
    return float((to_numpy(model.predict(images, verbose=0)).argmax(-1) == labels).mean())


@pytest.mark.parametrize("mode", sorted(BOUNDS))
@pytest.mark.slow
def test_quantized_accuracy_stays_close_to_float(trained_digits, mode):
    config, weights, images, labels = trained_digits
    model = VisionTransformer(config)
    model.set_weights(weights)
    float_accuracy = _accuracy(model, images, labels)
    assert float_accuracy > 0.8  # a trained model, or the bound says nothing
    model.quantize(mode)
    assert float_accuracy - _accuracy(model, images, labels) <= BOUNDS[mode]
