"""Exports and evaluation of a model taking any image size (`dynamic_image_size`).

The SavedModel's `serving_default` takes any size (`serve_bytes` resizes to the training size);
`image_size` fixes both, and TFLite files, which devices run with static shapes, are written at
one size. A fixed-size model refuses other sizes with a clear error.
"""

import io
import json

import numpy as np
import pytest
import tensorflow as tf
from helpers import randomize_weights
from PIL import Image

from vit_keras import VisionTransformer, export, preprocess_input
from vit_keras.export import graph
from vit_keras.core.model import input_image_size


@pytest.fixture(scope="module")
def dynamic_model():
    """A random any-size classifier stored at 32x32."""
    from vit_keras import ViTConfig

    config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, mlp_dim=64, num_heads=4,
                       num_layers=2, num_classes=5, posemb="learn2d",
                       dynamic_image_size=True)
    return randomize_weights(VisionTransformer(config), stddev=0.3)


@pytest.fixture(scope="module")
def dynamic(dynamic_model, tmp_path_factory):
    """`dynamic_model` and its default SavedModel (the slow tests': the default-tier ones
    take the model alone)."""
    path = str(tmp_path_factory.mktemp("export") / "saved_model")
    export.saved_model(dynamic_model, path)
    return dynamic_model, path


def _pixels(height, width, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (2, height, width, 3)).astype("float32")


def _keras_logits(model, pixels):
    return model(preprocess_input(pixels)).numpy()


@pytest.mark.slow
def test_serving_default_takes_any_size(dynamic):
    model, path = dynamic
    serve = tf.saved_model.load(path).signatures["serving_default"]
    assert serve.structured_input_signature[1]["images"].shape.as_list() == [None, None, None, 3]
    for height, width in ((32, 32), (48, 24), (16, 40)):
        pixels = _pixels(height, width)
        logits = serve(images=tf.constant(pixels))["logits"].numpy()
        np.testing.assert_allclose(logits, _keras_logits(model, pixels), atol=1e-5)


@pytest.mark.slow
def test_serve_bytes_resizes_to_the_training_size(dynamic):
    model, path = dynamic
    serve_bytes = tf.saved_model.load(path).signatures["serve_bytes"]
    pixels = _pixels(32, 32)
    encoded = []
    for image in pixels:
        buffer = io.BytesIO()
        Image.fromarray(image.astype("uint8")).save(buffer, format="PNG")
        encoded.append(buffer.getvalue())
    logits = serve_bytes(image_bytes=tf.constant(encoded))["logits"].numpy()
    np.testing.assert_allclose(logits, _keras_logits(model, pixels), atol=1e-5)


def test_image_size_fixes_the_saved_model_and_the_tflite_file(dynamic_model, tmp_path):
    model = dynamic_model
    path = str(tmp_path / "fixed")
    export.saved_model(model, path, image_size=(24, 40))
    serve = tf.saved_model.load(path).signatures["serving_default"]
    assert serve.structured_input_signature[1]["images"].shape.as_list() == [None, 24, 40, 3]
    pixels = _pixels(24, 40, seed=1)
    report = export.tflite(model, str(tmp_path / "model.tflite"), image_size=(24, 40),
                           verify_images=pixels)
    lite = export.TFLiteModel(str(tmp_path / "model.tflite"))
    assert lite.input_shape == (24, 40, 3)
    assert report["max_abs_logit_diff"] <= 1e-4
    np.testing.assert_allclose(lite(pixels), _keras_logits(model, pixels), atol=1e-4)


def test_tflite_defaults_to_the_training_size(dynamic_model, tmp_path):
    model = dynamic_model
    export.tflite(model, str(tmp_path / "model.tflite"))
    assert export.TFLiteModel(str(tmp_path / "model.tflite")).input_shape == (32, 32, 3)
    assert input_image_size(model) == (32, 32)


@pytest.mark.slow
def test_export_model_records_the_size(dynamic_model, tmp_path):
    from vit_app.inference.export.command import export_model

    model = dynamic_model
    report = export_model(model, str(tmp_path), formats=("saved_model", "tflite"),
                          latency_runs=2, image_size=(40, 16))
    assert report["input"]["shape"] == [40, 16, 3]
    assert report["serving_default_any_size"] is False
    assert all(entry["max_abs_logit_diff"] <= 1e-4 for entry in report["formats"].values())
    with open(tmp_path / "export.json") as file:
        assert json.load(file)["input"]["shape"] == [40, 16, 3]


def test_a_fixed_model_refuses_another_size(tiny_config, tmp_path):
    from vit_app.tasks.classify.evaluate import evaluation_size

    model = VisionTransformer(tiny_config)
    with pytest.raises(ValueError, match=r"takes \(32, 32\) images only.*dynamic_image_size"):
        graph.at_image_size(model, (48, 48))
    with pytest.raises(ValueError, match="32x32 images only.*model.dynamic_image_size=true"):
        evaluation_size(model, (48, 48))
    assert evaluation_size(model) == (32, 32)
    assert graph.at_image_size(model) is model


def test_analysis_runs_at_the_stored_size(dynamic_model):
    from vit_keras import analysis

    model = dynamic_model
    images = preprocess_input(_pixels(32, 32))
    assert len(analysis.attention_maps(model, images)) == 2
    with pytest.raises(ValueError, match=r"shape \(batch, 32, 32, 3\)"):
        analysis.attention_maps(model, preprocess_input(_pixels(48, 24)))
