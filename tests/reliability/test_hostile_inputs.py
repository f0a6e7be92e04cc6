"""Hostile inputs, fuzzed with hypothesis: each ends in a clear, documented exception.

Documented types: `ValueError` for files and arguments given to the library and the `vit`
commands; `tf.errors.InvalidArgumentError` for one bad request to an exported SavedModel
(the server keeps running).
"""

import io
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import png_bomb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

import vit_keras
from vit_app import images
from vit_app.tasks.classify.data import readers

# VIT_FUZZ_EXAMPLES=500 pytest tests/reliability explores further (random, not derandomized).
EXAMPLES = int(os.environ.get("VIT_FUZZ_EXAMPLES", "0"))
FUZZ = settings(max_examples=EXAMPLES or 25, deadline=None, derandomize=not EXAMPLES,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
SIGNATURES = [b"", b"\xff\xd8\xff", b"\x89PNG\r\n\x1a\n", b"BM", b"GIF89a", b"II*\x00", b"MM\x00*"]
TINY = vit_keras.ViTConfig(image_size=8, patch_size=4, hidden_size=8, mlp_dim=8, num_heads=1,
                           num_layers=1, num_classes=2)


def _encoded(fmt: str, seed: int = 0, dtype=np.uint8) -> bytes:
    image = np.random.default_rng(seed).integers(0, 256, (12, 10, 3), np.uint8)
    if dtype != np.uint8:  # a grey image of 16-bit samples
        image = image[..., 0].astype(dtype) * 16
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format=fmt)
    return buffer.getvalue()


VALID = {**{fmt: _encoded(fmt) for fmt in ("JPEG", "PNG", "BMP", "GIF", "TIFF")},
         **{f"{fmt}16": _encoded(fmt, dtype=np.uint16) for fmt in ("PNG", "TIFF")}}


# Random bytes behind a real image signature, and valid images cut at any point.
hostile_bytes = st.one_of(
    st.builds(lambda sig, tail: sig + tail, st.sampled_from(SIGNATURES), st.binary(max_size=300)),
    st.builds(lambda fmt, frac: VALID[fmt][:int(len(VALID[fmt]) * frac)],
              st.sampled_from(sorted(VALID)), st.floats(0.0, 0.999)),
)


@FUZZ
@given(payload=hostile_bytes)
def test_image_files_are_refused_or_decode(tmp_path, payload):
    """The up-front check and the decoder agree: a file that passes decodes."""
    path = tmp_path / "cls" / "x.png"
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(payload)
    with images.bomb_warnings_silenced():
        why = images.file_problem(str(path))
    if why is None:
        assert images.decode_file(tf.constant(str(path))).shape[-1] == 3
        return
    with pytest.raises(ValueError, match="x.png"):
        readers.folder_source(str(tmp_path), "train", 0.0, 0)
    with pytest.raises(ValueError, match="x.png"):
        images.load_files([str(path)], 8)


@pytest.mark.parametrize("width, height", [(60000, 60000), (10000, 10000), (100, 900_000)])
def test_decompression_bomb_is_refused_with_the_limit(tmp_path, width, height):
    path = tmp_path / "cls" / "bomb.png"
    path.parent.mkdir()
    path.write_bytes(png_bomb(width, height))
    assert path.stat().st_size < 100_000
    limit = str(images.MAX_IMAGE_PIXELS)
    with pytest.raises(ValueError, match=f"bomb.png:? is too large.*limit is {limit}"):
        readers.folder_source(str(tmp_path), "train", 0.0, 0)
    with pytest.raises(images.ImageError, match=f"bomb.png:? is too large.*limit is {limit}") \
            as refused:
        images.load_files([str(path)], 8)
    assert refused.value.reason == "too_large"


@pytest.fixture(scope="module")
def weight_files(tmp_path_factory):
    """Valid .npz, .safetensors and .keras files of one tiny model."""
    from vit_keras.checkpoints import save_npz

    folder = tmp_path_factory.mktemp("weights")
    model = vit_keras.VisionTransformer(TINY)
    model.save(str(folder / "model.keras"))
    save_npz(model, str(folder / "model.npz"))
    timm = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data",
                        "timm_token.safetensors")
    with open(timm, "rb") as file:
        safetensors = file.read()
    return {".npz": (folder / "model.npz").read_bytes(), ".safetensors": safetensors,
            ".keras": (folder / "model.keras").read_bytes()}


@pytest.fixture(scope="module")
def target_model():
    """The model every hostile file is loaded into (whether a file raises is the file's: built
    once, not per example)."""
    return vit_keras.VisionTransformer(TINY)


@FUZZ
@given(suffix=st.sampled_from([".npz", ".safetensors", ".keras"]),
       cut=st.floats(0.0, 0.999), noise=st.binary(max_size=64))
def test_truncated_or_random_weight_files_raise_value_error(tmp_path, weight_files, target_model,
                                                            suffix, cut, noise):
    payload = weight_files[suffix]
    payload = payload[:int(len(payload) * cut)] + noise
    path = tmp_path / f"hostile{suffix}"
    path.write_bytes(payload)
    with pytest.raises(ValueError):
        vit_keras.load_weights(target_model, str(path))
    if suffix == ".keras":
        with pytest.raises(ValueError):
            keras.saving.load_model(str(path), safe_mode=True)


def test_intact_weight_files_load(tmp_path, weight_files):
    """Control for the fuzz test: the untouched .npz loads."""
    path = tmp_path / "model.npz"
    path.write_bytes(weight_files[".npz"])
    vit_keras.load_weights(vit_keras.VisionTransformer(TINY), str(path))


sizes = st.integers(-4, 40)


@FUZZ
@given(image=sizes, patch=sizes, hidden=sizes, heads=sizes, layers=st.integers(-2, 3),
       dropout=st.floats(-1.0, 2.0))
def test_absurd_configs_raise_value_error(image, patch, hidden, heads, layers, dropout):
    fields = dict(image_size=image, patch_size=patch, hidden_size=hidden, num_heads=heads,
                  num_layers=layers, dropout_rate=dropout, mlp_dim=8, num_classes=2)
    sane = (image > 0 and patch > 0 and hidden > 0 and heads > 0 and layers > 0
            and image % patch == 0 and hidden % heads == 0 and 0 <= dropout < 1)
    if sane:
        assert vit_keras.ViTConfig(**fields).num_patches == (image // patch) ** 2
    else:
        with pytest.raises(ValueError):
            vit_keras.ViTConfig(**fields)


@pytest.mark.parametrize("images", [
    np.zeros((8, 8, 3), np.float32),          # no batch dimension
    np.zeros((1, 8, 8, 1), np.float32),       # grey
    np.zeros((1, 8, 8, 4), np.float32),       # RGBA
    np.zeros((1, 16, 16, 3), np.float32),     # wrong resolution
    np.zeros((1, 1, 8, 8, 3), np.float32),    # rank 5
    np.array([[["a"]]]),                      # strings
], ids=["rank3", "grey", "rgba", "size", "rank5", "strings"])
def test_wrong_images_raise_value_error(images):
    model = vit_keras.VisionTransformer(TINY)
    with pytest.raises(ValueError):
        model(images)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    from vit_keras import export

    path = str(tmp_path_factory.mktemp("export") / "saved_model")
    export.saved_model(vit_keras.VisionTransformer(TINY), path)
    return tf.saved_model.load(path).signatures[export.SERVE_BYTES]


@FUZZ
@given(payload=hostile_bytes)
def test_serve_bytes_fails_the_request_not_the_server(served, payload):
    try:
        outputs = served(image_bytes=tf.constant([payload]))
    except tf.errors.InvalidArgumentError:
        pass
    else:
        assert np.all(np.isfinite(outputs["probabilities"].numpy()))
    good = served(image_bytes=tf.constant([VALID["PNG"]]))  # the server still answers
    assert good["probabilities"].shape == (1, 2)


@pytest.mark.parametrize("width, height", [(20000, 20000), (60000, 60000)])
def test_serve_bytes_refuses_decompression_bombs(served, width, height):
    with pytest.raises(tf.errors.InvalidArgumentError, match="decompression bomb"):
        served(image_bytes=tf.constant([png_bomb(width, height)]))
    assert served(image_bytes=tf.constant([VALID["JPEG"]]))["logits"].shape == (1, 2)
