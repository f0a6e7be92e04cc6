"""Shared test setup: quiet TensorFlow, a fixed seed, and a clean Keras state per test."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import pytest  # noqa: E402

from vit_keras import ViTConfig  # noqa: E402


@pytest.fixture(autouse=True)
def _clean_keras_state():
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(0)
    yield
    keras.mixed_precision.set_global_policy("float32")
    keras.backend.clear_session()


@pytest.fixture
def tiny_config():
    """A 2-block ViT on 32x32 images with 8x8 patches: fast enough for any test."""
    return ViTConfig(image_size=32, patch_size=8, hidden_size=32, mlp_dim=64, num_heads=4,
                     num_layers=2, num_classes=5)
