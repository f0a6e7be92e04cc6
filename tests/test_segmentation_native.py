"""Large images segmented at their own resolution: the windows that stitch a whole image
together, the 'native' preprocessing a model carries, crops and tiles cut at the images' own
size, and `vit train --task segment` on a folder of 160x200 px scenes of thin lines: the rule
turns to native crops, and predict, evaluate and serve answer at each image's own size."""

import base64
import io
import json

import numpy as np
import pytest
from PIL import Image

from training.tasks.segment import pipeline as segment_pipeline
from training.presets import get_preset
from vit_app.tasks.segment.data import sources as segmentation
from vit_keras.tasks.segment import windows as segmentation_windows
from vit_keras.preprocessing import Preprocessing, parse_preprocessing

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

HEIGHT, WIDTH = 160, 200


# --- windows --------------------------------------------------------------------------------------

def test_windows_start_a_stride_apart_and_the_last_ends_at_the_edge():
    assert segmentation_windows.window_starts(512, 128) == [0, 96, 192, 288, 384]
    assert segmentation_windows.window_starts(130, 128) == [0, 2]
    assert segmentation_windows.window_starts(100, 128) == [0]


@pytest.mark.parametrize("height, width", [(300, 417), (90, 70), (128, 128)])
def test_windows_stitch_a_pointwise_model_back_exactly(height, width):
    """A model that works pixel by pixel gives the same scores in overlapping windows as on the
    whole image (overlaps averaged, the padding of small images cut off)."""
    image = np.random.default_rng(0).normal(size=(height, width, 3)).astype(np.float32)
    calls = []

    def predict(batch):
        assert batch.shape[1:3] == (128, 128)  # a fixed-size file sees its own size only
        calls.append(len(batch))
        return batch[..., :2] * np.float32(2) + 1

    scores = segmentation_windows.segment_scores(predict, image, fixed_size=(128, 128))
    np.testing.assert_allclose(scores, image[..., :2] * 2 + 1, rtol=1e-6, atol=1e-6)
    rows, cols = (len(segmentation_windows.window_starts(max(side, 128), 128))
                  for side in (height, width))
    assert sum(calls) == rows * cols and max(calls) <= segmentation_windows.WINDOWS_PER_CALL


def test_a_model_taking_any_size_sees_a_whole_image_until_attention_would_not_fit():
    seen = []

    def predict(batch):
        seen.append(batch.shape[1:3])
        return batch[..., :1]

    small = np.zeros((512, 480, 3), np.float32)   # 64x60 patches of 8 px: whole
    assert segmentation_windows.segment_scores(predict, small, patch_size=8).shape == \
        (512, 480, 1)
    assert seen == [(512, 480)]
    seen.clear()
    large = np.zeros((700, 1100, 3), np.float32)  # windows of 64x64 patches
    assert segmentation_windows.segment_scores(predict, large, patch_size=8).shape == \
        (700, 1100, 1)
    assert set(seen) == {(512, 512)} and len(seen) == 2  # 2x3 windows, 4 per call


# --- the 'native' rule a model carries ------------------------------------------------------------

def test_native_preprocessing_needs_a_model_taking_any_size():
    from vit_keras import ViTConfig, ViTSegmenter

    native = parse_preprocessing("crop=native")
    assert native.native and native.resizes_whole and "native" in native.describe()
    config = ViTConfig(image_size=32, patch_size=8, hidden_size=16, num_layers=1, num_heads=2,
                       mlp_dim=32, num_classes=2)
    with pytest.raises(ValueError, match="needs a model taking any size"):
        ViTSegmenter(config, preprocessing=native)
    model = ViTSegmenter(config.replace(dynamic_image_size=True), head="skip", head_width=16,
                         head_stages=3, preprocessing=native)
    assert model.preprocessing == native
    assert Preprocessing.from_dict(model.get_config()["preprocessing"]).native


# --- crops and tiles at the images' own resolution ------------------------------------------------

def _ramp(height, width):
    """An image whose pixels say where they are (red: row, green: column)."""
    rows, cols = np.meshgrid(np.arange(height), np.arange(width), indexing="ij")
    return np.stack([rows % 256, cols % 256, (rows // 256) * 16 + cols // 256], -1)


def test_a_native_crop_is_cut_from_the_image_at_its_own_size():
    import tensorflow as tf

    image = _ramp(300, 417).astype(np.float32)
    mask = (np.arange(300)[:, None] % 7 == 0).repeat(417, 1).astype(np.uint8)
    settings = get_preset("digits_segment").with_values(
        {"segment.scale_min": 1.0, "segment.scale_max": 1.0}).segment
    crop, crop_mask = (np.asarray(part) for part in segment_pipeline.paired_geometry(
        tf.constant(image), tf.constant(mask), (128, 128), settings, False,
        tf.constant([3, 4], tf.int64), native=True))
    top, left = int(round(crop[0, 0, 0])), int(round(crop[0, 0, 1]))
    np.testing.assert_array_equal(crop, image[top:top + 128, left:left + 128])
    np.testing.assert_array_equal(crop_mask, mask[top:top + 128, left:left + 128])


def _thin_lines(seed, height=HEIGHT, width=WIDTH):
    """A grey textured image with 2 px dark lines (class 1, about 8% of pixels)."""
    rng = np.random.default_rng(seed)
    mask = np.zeros((height, width), np.uint8)
    for _ in range(4):
        if rng.random() < 0.5:
            row = rng.integers(2, height - 4)
            mask[row:row + 2] = 1
        else:
            col = rng.integers(2, width - 4)
            mask[:, col:col + 2] = 1
    image = np.where(mask[..., None] == 1, 60, 170) + rng.normal(0, 12, (height, width, 1))
    return np.clip(image.repeat(3, -1), 0, 255).astype(np.uint8), mask


def _write_lines(root, count, seed):
    (root / "images").mkdir(parents=True)
    (root / "masks").mkdir()
    for index in range(count):
        image, mask = _thin_lines(seed + index)
        Image.fromarray(image).save(root / "images" / f"{index}.png")
        Image.fromarray(mask).save(root / "masks" / f"{index}.png")
    (root / "classes.txt").write_text("ground\nline\n")
    return root


def test_tiles_cover_each_image_side_by_side_padding_ignored(tmp_path):
    root = _write_lines(tmp_path / "lines", 2, seed=0)
    source = segmentation.load_segmentation_source(f"folder:{root}", "train", 0.0)
    tiles = list(segmentation.native_tiles(source, 128).as_numpy_iterator())
    assert len(tiles) == 2 * 2 * 2  # ceil(160 / 128) x ceil(200 / 128) per image
    image, mask = _thin_lines(0)
    top = np.concatenate([tiles[0][0], tiles[1][0]], axis=1)[:, :WIDTH]
    np.testing.assert_array_equal(top, image[:128].astype(np.float32))
    assert (tiles[3][1][HEIGHT - 128:] == 255).all() and (tiles[1][1][:, WIDTH - 128:] == 255).all()
    np.testing.assert_array_equal(tiles[3][1][:HEIGHT - 128, :WIDTH - 128], mask[128:, 128:])
    assert segment_pipeline.crops_to_cover((HEIGHT, WIDTH), (128, 128)) == 2


# --- a run on a folder of large images, and its model in use --------------------------------------

def _train_native(root):
    """`vit train --task segment` of a tiny segmenter on 8 scenes of 160x200 px (the rule's
    native crops), no export; its printed output beside."""
    import contextlib

    from vit import cli

    data = _write_lines(root / "train", 8, seed=10)
    val = _write_lines(root / "val", 2, seed=40)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        status = cli.main(["train", "--task", "segment", "--data", f"folder:{data}",
                           "--val-data", f"folder:{val}", "--epochs", "30",
                           "--set", "model.num_layers=1", "--set", "model.hidden_size=32",
                           "--set", "model.mlp_dim=64", "--set", "segment.width=32",
                           "--no-export", "--no-inspect", "--output", str(root / "run")])
    (root / "printed.txt").write_text(printed.getvalue())
    assert status == 0, printed.getvalue()[-3000:]


@pytest.fixture(scope="module")
def native_run():
    from artifacts import shared

    return shared("segmenter-native", {"height": HEIGHT, "width": WIDTH, "epochs": 30},
                  _train_native)


@pytest.mark.slow  # the shared native run: 21 s of the default tier's 6 minutes
def test_the_rule_trains_large_images_as_native_crops(native_run):
    printed = (native_run / "printed.txt").read_text()
    assert "dynamic_image_size False -> True" in printed and "segment.native False -> True" \
        in printed
    assert "why: images of 160x200 px keep their resolution: 2 random 128 px crops" in printed
    assert "30 epochs x 1 steps" in printed  # 8 images x 2 crops in batches of 16
    config = json.loads((native_run / "run" / "config.json").read_text())
    assert config["preprocessing"]["crop_mode"] == "native"
    assert config["model"]["dynamic_image_size"] and config["model"]["image_size"] == 128
    metrics = json.loads((native_run / "run" / "metrics.json").read_text())
    # 30 steps of 16 crops find the lines (97% mIoU measured), scored on the whole images
    assert metrics["val_class_pixels"]["line"] > 0 and metrics["val_mIoU"] > 0.85


@pytest.mark.slow  # the shared native run: 21 s of the default tier's 6 minutes
def test_predict_and_evaluate_answer_at_each_images_own_size(native_run, tmp_path, capsys):
    from vit import cli

    model = str(native_run / "run" / "model.keras")
    odd = tmp_path / "odd.png"
    image, _ = _thin_lines(99, 150, 230)
    Image.fromarray(image).save(odd)
    assert cli.main(["predict", "--model", model, str(odd), "--masks",
                     str(tmp_path / "masks")]) == 0
    assert np.asarray(Image.open(tmp_path / "masks" / "odd.png")).shape == (150, 230)
    capsys.readouterr()
    assert cli.main(["evaluate", "--model", model, "--data",
                     f"folder:{native_run / 'val'}"]) == 0
    said = capsys.readouterr().out
    assert "2 images at their own size, scored at the masks' own size" in said


@pytest.mark.slow  # the shared native run: 21 s of the default tier's 6 minutes
def test_a_keras_model_and_a_fixed_size_file_segment_alike_through_windows(native_run):
    """The Keras model sees the whole image; a fixed-size view of it (what a TFLite file is)
    sees 128 px windows: their masks agree but where windows cut the context."""
    import keras

    from vit_app.inference import classifier

    loaded = classifier.load(str(native_run / "run" / "model.keras"))
    image, _ = _thin_lines(7, 300, 260)
    whole = loaded.predict_native(image.astype(np.float32))["logits"].argmax(-1)
    fixed = classifier.from_keras_model(keras.saving.load_model(
        str(native_run / "run" / "model.keras"), safe_mode=True), "fixed")
    fixed.takes_any_size = False
    windowed = fixed.predict_native(image.astype(np.float32))["logits"].argmax(-1)
    assert whole.shape == windowed.shape == (300, 260)
    assert (whole == windowed).mean() > 0.95


@pytest.mark.slow  # the shared native run: 21 s of the default tier's 6 minutes
def test_serve_answers_each_file_at_its_own_size(native_run):
    import httpx
    from localhost import served

    from vit_app.inference import classifier
    from vit_app.inference.server import create_app

    def png(height, width, seed):
        buffer = io.BytesIO()
        Image.fromarray(_thin_lines(seed, height, width)[0]).save(buffer, "PNG")
        return buffer.getvalue()

    model = classifier.load(str(native_run / "run" / "model.keras"))
    files = [png(150, 230, 1), png(96, 120, 2)]
    with served(create_app(model, "lines")) as url, \
            httpx.Client(base_url=url, timeout=60) as client:
        answer = client.post("/v1/models/lines:predict", json={
            "signature_name": "serve_bytes",
            "instances": [{"b64": base64.b64encode(data).decode()} for data in files]})
        assert answer.status_code == 200, answer.text
        shapes = [np.asarray(row["class_ids"]).shape for row in answer.json()["predictions"]]
        explained = client.post("/api/explain", content=files[0],
                                headers={"content-type": "image/png"}).json()
    assert shapes == [(150, 230), (96, 120)]
    assert (explained["mask"]["rows"], explained["mask"]["cols"]) == (150, 230)
