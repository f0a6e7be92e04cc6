"""SavedModel export: both serving signatures reload, match Keras, and refuse corrupt images."""

import io
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import record_calls
from PIL import Image

from vit_keras import VisionTransformer, ViTConfig, export, preprocess_input


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """One exported tiny softmax classifier shared by the tests: (images, Keras probabilities,
    SavedModel path)."""
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, mlp_dim=64, num_heads=4,
                       num_layers=2, num_classes=5)
    model = VisionTransformer(config, classifier_activation="softmax")
    rng = np.random.default_rng(1)
    for weight in model.get_layer("head").weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    images = rng.integers(0, 256, (6, 32, 32, 3)).astype("float32")
    path = str(tmp_path_factory.mktemp("export") / "saved_model")
    assert export.saved_model(model, path) == path
    return images, model(preprocess_input(images)).numpy(), path


def _encode(image, fmt, mode="RGB"):
    buffer = io.BytesIO()
    Image.fromarray(image.astype("uint8")).convert(mode).save(buffer, format=fmt)
    return buffer.getvalue()


def test_signatures_reload_and_match_keras(exported):
    images, probabilities, path = exported
    loaded = tf.saved_model.load(path)
    assert set(loaded.signatures) == {"serving_default", "serve_bytes"}
    outputs = loaded.signatures["serving_default"](images=tf.constant(images))
    np.testing.assert_allclose(outputs["probabilities"].numpy(), probabilities, atol=1e-5)
    np.testing.assert_allclose(tf.nn.softmax(outputs["logits"]).numpy(), probabilities,
                               atol=1e-5)
    # Lossless formats at the model's resolution decode to the same pixels: same answers.
    for fmt in ("PNG", "BMP"):
        encoded = tf.constant([_encode(image, fmt) for image in images])
        from_bytes = loaded.signatures["serve_bytes"](image_bytes=encoded)
        np.testing.assert_allclose(from_bytes["probabilities"].numpy(), probabilities, atol=1e-5)


def test_serve_bytes_decodes_every_format_and_mode(exported):
    images, _, path = exported
    serve_bytes = tf.saved_model.load(path).signatures["serve_bytes"]
    big = np.kron(images[0], np.ones((3, 2, 1)))  # 96 x 64: resized inside the graph
    encoded = [_encode(images[0], "JPEG"), _encode(images[0], "GIF"),
               _encode(images[0], "PNG", "L"), _encode(images[0], "PNG", "RGBA"),
               _encode(big, "PNG")]
    probabilities = serve_bytes(image_bytes=tf.constant(encoded))["probabilities"].numpy()
    assert probabilities.shape == (5, 5)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-5)


def test_corrupt_image_is_a_clear_error_not_a_crash(exported):
    images, _, path = exported
    serve_bytes = tf.saved_model.load(path).signatures["serve_bytes"]
    with pytest.raises(tf.errors.InvalidArgumentError, match="Unknown image file format"):
        serve_bytes(image_bytes=tf.constant([b"this is not an image"]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="got an empty string"):
        serve_bytes(image_bytes=tf.constant([b""]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Invalid PNG data"):
        serve_bytes(image_bytes=tf.constant([_encode(images[0], "PNG")[:60]]))
    # The same loaded model keeps serving after the failed requests.
    good = serve_bytes(image_bytes=tf.constant([_encode(images[0], "PNG")]))
    assert good["probabilities"].shape == (1, 5)


@pytest.mark.slow  # TensorFlow's own saved_model_cli in a fresh process (about 8 s)
def test_saved_model_cli_gives_keras_top1(exported, tmp_path):
    images, probabilities, path = exported
    np.save(tmp_path / "images.npy", images)
    np.savez(tmp_path / "bytes.npz",
             image_bytes=np.array([_encode(image, "PNG") for image in images]))
    runs = {"serving_default": f"images={tmp_path / 'images.npy'}",
            "serve_bytes": f"image_bytes={tmp_path / 'bytes.npz'}[image_bytes]"}
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    processes = {  # both at once: each spends most of its time importing TensorFlow
        signature: subprocess.Popen(
            [cli, "run", "--dir", path, "--tag_set", "serve", "--signature_def", signature,
             "--inputs", inputs, "--outdir", str(tmp_path / signature)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
        for signature, inputs in runs.items()}
    for signature, process in processes.items():
        _, stderr = process.communicate(timeout=300)
        assert process.returncode == 0, stderr.decode()[-2000:]
        logits = np.load(tmp_path / signature / "logits.npy", allow_pickle=False)
        np.testing.assert_array_equal(logits.argmax(-1), probabilities.argmax(-1))


def test_every_endpoint_calls_one_trace_of_the_model(tiny_config, tmp_path, monkeypatch):
    """serving_default and serve_bytes (and a task's own endpoint) call one traced function of
    the model: Keras' export archive builds its graph twice (once to list the variables the
    endpoints use, once to track them) and the SavedModel writer once more; each endpoint
    traced the model itself before (5 graphs for a classifier; ViT-S/16's export took 7.6 s,
    now 6.1 s)."""
    model = VisionTransformer(tiny_config)
    calls = record_calls(monkeypatch, VisionTransformer, "__call__",
                         lambda *args, **kwargs: tf.executing_eagerly())
    export.saved_model(model, str(tmp_path / "model"))
    assert calls == [False] * 3


def test_failed_export_leaves_no_directory(tiny_config, tmp_path, monkeypatch):
    """The archive written whole, then an error: nothing is left at the path.

    The failure is patched into the backend's export archive, not `tf.saved_model.save`:
    after another export in the same process (`export_model` refusing its formats first, as
    test order may have it), the archive called a `save` that a patch of `tf.saved_model` did
    not reach, and the export ended without the error."""
    model = VisionTransformer(tiny_config)
    archive_class = type(keras.export.ExportArchive())  # the backend's own archive
    write_out = archive_class.write_out

    def write_then_fail(archive, directory, **kwargs):
        write_out(archive, directory, **kwargs)
        raise RuntimeError("interrupted")

    monkeypatch.setattr(archive_class, "write_out", write_then_fail)
    with pytest.raises(RuntimeError, match="interrupted"):
        export.saved_model(model, str(tmp_path / "saved_model"))
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_mixed_precision_model_serves_float32(tmp_path):
    """A model trained under mixed_bfloat16 (the default on bf16 CPUs) exports as float32."""
    import keras

    config = ViTConfig(image_size=32, patch_size=8, hidden_size=32, mlp_dim=64, num_heads=4,
                       num_layers=2, num_classes=5)
    float_model = VisionTransformer(config)
    rng = np.random.default_rng(2)
    for weight in float_model.weights:
        weight.assign(weight + rng.normal(0, 0.05, weight.shape).astype("float32"))
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        mixed = VisionTransformer(config)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    mixed.set_weights(float_model.get_weights())
    images = rng.integers(0, 256, (4, 32, 32, 3)).astype("float32")
    path = export.saved_model(mixed, str(tmp_path / "saved_model"))
    outputs = tf.saved_model.load(path).signatures["serving_default"](images=tf.constant(images))
    assert outputs["logits"].dtype == tf.float32
    expected = float_model(preprocess_input(images)).numpy()
    np.testing.assert_allclose(outputs["logits"].numpy(), expected, atol=1e-4)
