"""vit_app.images, the one image reader: checks with a structured reason, the resize rule shared by
the input pipeline, predict, serve and inspect, and the server's status for each reason."""

import io

import numpy as np
import pytest
import tensorflow as tf
from helpers import png_bomb
from PIL import Image

from vit_app import images
from vit_app.data import evaluation
from vit_app.tasks.classify.data import readers
from vit_app.inference.server.app import STATUS_OF_IMAGE_PROBLEM


def _png(pixels) -> bytes:
    return _encoded(np.asarray(pixels, np.uint8), "PNG")


def _encoded(pixels: np.ndarray, fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt, **options)
    return buffer.getvalue()


def _decoded(data: bytes) -> np.ndarray:
    assert images.problem(data) is None
    return images.decode(tf.constant(data)).numpy()


def test_tiff_files_are_read_as_they_were_written():
    """8-bit TIFFs, compressed or not, grey or colour, decode to their own pixels (grey repeated
    to RGB); a stack of pages gives its first page."""
    rng = np.random.default_rng(0)
    colour = rng.integers(0, 256, (12, 10, 3)).astype(np.uint8)
    grey = rng.integers(0, 256, (7, 9)).astype(np.uint8)
    for options in [{}, {"compression": "tiff_lzw"}, {"compression": "tiff_adobe_deflate"}]:
        np.testing.assert_array_equal(_decoded(_encoded(colour, "TIFF", **options)), colour)
    np.testing.assert_array_equal(_decoded(_encoded(grey, "TIFF")),
                                  np.repeat(grey[..., None], 3, -1))
    buffer = io.BytesIO()
    Image.fromarray(colour).save(buffer, "TIFF", save_all=True,
                                 append_images=[Image.fromarray(255 - colour)])
    np.testing.assert_array_equal(_decoded(buffer.getvalue()), colour)
    with pytest.raises(images.ImageError, match="x.tif cannot be decoded"):
        images.check(_encoded(colour, "TIFF")[:200], "x.tif")


def test_a_folder_of_tiff_files_is_a_data_source(tmp_path):
    """`folder:` data of .tif/.tiff files: found, and read by the pipeline as by predict."""
    rng = np.random.default_rng(2)
    for name, pixels in [("a/x.tif", rng.integers(0, 4096, (20, 30)).astype(np.uint16)),
                         ("b/y.TIFF", rng.integers(0, 256, (25, 20, 3)).astype(np.uint8))]:
        (tmp_path / name).parent.mkdir()
        (tmp_path / name).write_bytes(_encoded(pixels, "TIFF"))
    source = readers.load_source(f"folder:{tmp_path}", val_split=0.0)
    assert source.class_names == ["a", "b"] and source.num_examples == 2
    through_pipeline, _ = evaluation.take_raw_images(source, (16, 12), 2)
    read = images.load_files([str(tmp_path / "a/x.tif"), str(tmp_path / "b/y.TIFF")], (16, 12))
    np.testing.assert_array_equal(read, through_pipeline)


def test_images_of_more_than_8_bits_are_stretched_from_their_own_percentiles():
    """A 12-bit camera frame stored in 16 bits (TIFF in either byte order, or PNG), a 32-bit
    float TIFF: the 1st and 99.8th percentiles of the image's own pixels become 0 and 255, so
    its contrast is kept rather than squeezed into the dark 16 levels of 1/257 scaling."""
    rng = np.random.default_rng(1)
    twelve_bit = rng.integers(0, 4096, (40, 50)).astype(np.uint16)
    twelve_bit[0, :5] = 4095  # hot pixels above the white point are clipped, not the white
    low, high = np.percentile(twelve_bit, images.HIGH_DEPTH_PERCENTILES)
    expected = np.round(np.clip((twelve_bit - low) / (high - low), 0, 1) * 255)
    as_png, as_tiff = _encoded(twelve_bit, "PNG"), _encoded(twelve_bit, "TIFF")
    big_endian = _encoded(twelve_bit.astype(">u2"), "TIFF")
    for data in (as_png, as_tiff, big_endian):
        decoded = _decoded(data)
        assert decoded.dtype == np.uint8 and decoded.shape == (40, 50, 3)
        np.testing.assert_array_equal(decoded[..., 0], expected)
        np.testing.assert_array_equal(decoded[..., 0], decoded[..., 2])
    floats = (twelve_bit.astype(np.float32) / 4095.0) - 0.5
    np.testing.assert_array_equal(_decoded(_encoded(floats, "TIFF"))[..., 0], expected)
    assert not _decoded(_encoded(np.full((4, 4), 300, np.uint16), "TIFF")).any()  # constant
    # predict and serve read files by the same rule (PIL resizing for timm's bicubic weights)
    from vit_keras.preprocessing import parse_preprocessing
    for rule in (images.rules.OFFICIAL, parse_preprocessing("clip")):
        np.testing.assert_array_equal(
            images.decode_checked([as_tiff], (20, 25), preprocessing=rule),
            images.decode_checked([_png(np.repeat(expected[..., None], 3, -1))], (20, 25),
                                  preprocessing=rule))


@pytest.mark.parametrize("data, reason, message", [
    (b"GIF89a not really", "corrupt", "is a corrupt image"),
    (b"hello", "not_an_image", "is not a JPEG, PNG, BMP, GIF or TIFF file"),
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
    source = readers.load_source(f"folder:{tmp_path / 'data'}", val_split=0.0)
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
    files.append(_encoded(rng.integers(0, 4096, (30, 50)).astype(np.uint16), "TIFF"))
    eager = np.stack([images.resize(images.decode(tf.constant(data)), (24, 24),
                                    preprocessing).numpy() for data in files])
    np.testing.assert_array_equal(images.decode_checked(files, 24, preprocessing=preprocessing),
                                  eager)
    np.testing.assert_array_equal(images.decode_checked(files, 24, channels=1,
                                                        preprocessing=preprocessing),
                                  tf.image.rgb_to_grayscale(eager).numpy())
    with pytest.raises(images.ImageError, match=r"image 0 cannot be decoded \(Invalid PNG"):
        images.decode_checked([files[0][:60]], 24)  # the op's words, not the graph's stack
