"""vit_app.images, the one image reader: checks with a structured reason, the resize rule shared by
the input pipeline, predict, serve and inspect, and the server's status for each reason."""

import io

import numpy as np
import pytest
import tensorflow as tf
from helpers import png_bomb
from PIL import Image

from vit_app import images
from vit_app.data import evaluation, sources
from vit_app.inference.server.app import STATUS_OF_IMAGE_PROBLEM


def _png(pixels) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.asarray(pixels, np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize("data, reason, message", [
    (b"GIF89a not really", "corrupt", "is a corrupt image"),
    (b"hello", "not_an_image", "is not a JPEG, PNG, BMP or GIF file"),
    (png_bomb(20000, 20000), "too_large", "is too large"),
    (_png(np.zeros((4, 4, 3)))[:-20], "corrupt", "corrupt|truncated"),
])
def test_a_bad_file_is_refused_with_its_reason(data, reason, message):
    with pytest.raises(images.ImageError, match=message) as refused:
        images.check(data, "upload.png")
    assert refused.value.reason == reason and str(refused.value).startswith("upload.png ")


def test_every_reason_has_a_server_status():
    assert set(STATUS_OF_IMAGE_PROBLEM) == set(images.REASONS)
    assert STATUS_OF_IMAGE_PROBLEM["too_large"] == 413
    assert {STATUS_OF_IMAGE_PROBLEM[reason] for reason in images.REASONS
            if reason != "too_large"} == {400}


def test_missing_file_and_channel_count_are_refused(tmp_path):
    with pytest.raises(images.ImageError, match="does not exist") as refused:
        images.load_files([str(tmp_path / "missing.png")], 8)
    assert refused.value.reason == "unreadable"
    with pytest.raises(images.ImageError, match="1 or 3 channels") as refused:
        images.read_images([_png(np.zeros((4, 4, 3)))], 8, channels=4)
    assert refused.value.reason == "channels"


def test_one_resize_rule_for_files_and_the_evaluation_pipeline(tmp_path):
    """An image read by predict/serve/inspect equals the same file through the data source and
    evaluation pipeline: bilinear, antialiased, half-pixel centres, clipped to 0..255."""
    rng = np.random.default_rng(0)
    folder = tmp_path / "data" / "a"
    folder.mkdir(parents=True)
    pixels = rng.integers(0, 256, (37, 23, 3))
    (folder / "x.png").write_bytes(_png(pixels))
    read = images.load_files([str(folder / "x.png")], (16, 12))
    source = sources.load_source(f"folder:{tmp_path / 'data'}", val_split=0.0)
    through_pipeline, _ = evaluation.take_raw_images(source, (16, 12), 1)
    np.testing.assert_array_equal(read, through_pipeline)
    expected = tf.clip_by_value(tf.image.resize(tf.constant(pixels, tf.float32), (16, 12),
                                                antialias=True), 0, 255)
    np.testing.assert_allclose(read[0], expected, atol=1e-4)
    assert read.dtype == np.float32 and read.shape == (1, 16, 12, 3)
    np.testing.assert_allclose(images.scale(np.array([0.0, 127.5, 255.0])), [-1, 0, 1])


@pytest.mark.parametrize("rule", ["official", "imagenet", "clip"])
def test_the_compiled_decoder_gives_the_pixels_of_the_eager_ops(rule):
    """decode_checked runs decode + resize as one graph (a server pays it per file): the same
    pixels as the ops run one by one, for squashed, cropped and bicubic rules, RGB and grey."""
    from vit_keras.preprocessing import OFFICIAL, parse_preprocessing

    preprocessing = OFFICIAL if rule == "official" else parse_preprocessing(rule)
    rng = np.random.default_rng(3)
    files = []
    for size in [(16, 16), (40, 30), (90, 200)]:
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (*size, 3)).astype(np.uint8)).save(buffer, "PNG")
        files.append(buffer.getvalue())
    eager = np.stack([images.resize(images.decode(tf.constant(data)), (24, 24),
                                    preprocessing).numpy() for data in files])
    np.testing.assert_array_equal(images.decode_checked(files, 24, preprocessing=preprocessing),
                                  eager)
    np.testing.assert_array_equal(images.decode_checked(files, 24, channels=1,
                                                        preprocessing=preprocessing),
                                  tf.image.rgb_to_grayscale(eager).numpy())
    with pytest.raises(images.ImageError, match=r"image 0 cannot be decoded \(Invalid PNG"):
        images.decode_checked([files[0][:60]], 24)  # the op's words, not the graph's stack
