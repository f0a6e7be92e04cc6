"""`ViTSegmenter` (heads on the patch-token grid) and the exact segmentation scores."""

import dataclasses

import keras
import numpy as np
import pytest

import vit_keras
from vit_keras.tasks.segment import scores as segmentation_scores
from vit_keras.tasks.segment.model import ViTSegmenter, load_backbone


def _images(config, batch=2, size=None, seed=0):
    height, width = size or config.image_hw
    return np.random.default_rng(seed).uniform(
        -1, 1, (batch, height, width, config.channels)).astype("float32")


@pytest.mark.parametrize("head, blocks", [("linear", None), ("linear", 2),
                                          ("progressive", None), ("progressive", [0, -1]),
                                          ("skip", None), ("skip", 2)])
def test_logits_at_the_input_resolution(tiny_config, head, blocks):
    model = ViTSegmenter(tiny_config, head=head, blocks=blocks, head_width=8)
    logits = model(_images(tiny_config))
    assert tuple(logits.shape) == (2, 32, 32, tiny_config.num_classes)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"


@pytest.mark.parametrize("options", [
    dict(num_register_tokens=2), dict(classifier="gap"), dict(stem="conv"),
    dict(distilled=True), dict(resnet_layers=(1,), patch_size=1, image_size=64),
    dict(pooled_norm=True, classifier="gap")])
def test_every_model_option_segments(tiny_config, options):
    config = dataclasses.replace(tiny_config, **options)
    logits = ViTSegmenter(config)(_images(config))
    assert tuple(logits.shape) == (2, *config.image_hw, config.num_classes)


@pytest.mark.parametrize("head", ["progressive", "skip"])
def test_any_size_model_returns_each_inputs_size(tiny_config, head):
    config = dataclasses.replace(tiny_config, dynamic_image_size=True, dynamic_image_pad=True)
    model = ViTSegmenter(config, head=head, head_width=8, head_stages=3)
    for size in ((32, 32), (48, 24), (37, 53)):  # the skip head's levels fit odd sizes too
        assert tuple(model.predict(_images(config, 1, size), verbose=0).shape) == \
            (1, *size, config.num_classes)


def test_the_skip_head_joins_the_grid_to_a_conv_path_at_every_level(tiny_config):
    """8 px patches: the image's conv path at 32, 16 and 8 px, each joined by the grid brought
    up to it, the last at full resolution (where 1-3 px structures survive)."""
    model = ViTSegmenter(tiny_config, head="skip", head_width=32, head_stages=3)
    for level, (side, width) in enumerate([(32, 16), (16, 16), (8, 32)]):
        path = model.get_layer(f"seg_path_{level}_relu_1").output
        joined = model.get_layer(f"seg_join_{level}").output
        assert tuple(path.shape[1:]) == (side, side, width)
        assert tuple(joined.shape[1:3]) == (side, side)
    assert tuple(model.get_layer("seg_grid_projection").output.shape[1:3]) == (4, 4)


def test_skip_widths_halve_towards_full_resolution():
    from vit_keras.tasks.segment.model import skip_widths

    assert skip_widths(64, 3) == [16, 32, 64]
    assert skip_widths(256, 4) == [32, 64, 128, 256]
    assert skip_widths(16, 2) == [16, 16]


def test_the_head_reads_the_patch_grid_in_place(tiny_config):
    """A linear head on a ViT whose patch tokens are the embedding of each patch: the logit
    map upsampled from the grid follows the patch each pixel lies in (no transposed grid)."""
    model = ViTSegmenter(tiny_config)
    images = np.zeros((1, 32, 32, 3), "float32")
    images[:, :8, 16:24] = 1.0  # the patch at row 0, column 2
    reference = ViTSegmenter(tiny_config)
    reference.set_weights(model.get_weights())
    moved = np.zeros_like(images)
    moved[:, 16:24, :8] = 1.0   # the patch at row 2, column 0
    first, second = model.predict(images, verbose=0), reference.predict(moved, verbose=0)
    changed = np.abs(first - model.predict(np.zeros_like(images), verbose=0)).sum(-1)[0]
    assert changed[0:8, 16:24].mean() > changed[24:32, 0:8].mean()
    assert not np.allclose(first, second)


@pytest.mark.parametrize("head", ["progressive", "skip"])
def test_config_round_trips_through_a_keras_file(tiny_config, tmp_path, head):
    model = ViTSegmenter(tiny_config, head=head, blocks=[0, 1], head_width=8,
                         head_stages=1)
    path = str(tmp_path / "seg.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded, ViTSegmenter) and loaded.config == tiny_config
    assert (loaded.head, loaded.blocks, loaded.head_width, loaded.head_stages) == \
        (head, [0, 1], 8, 1)
    images = _images(tiny_config)
    np.testing.assert_allclose(loaded.predict(images, verbose=0), model.predict(images, verbose=0),
                               atol=1e-5)


def test_quantized_segmenter_saves_and_stays_close(tiny_config, tmp_path):
    # Called, not `predict`ed: three compiled graphs of a quantized model cost 10 s here.
    model = ViTSegmenter(tiny_config)
    images = _images(tiny_config)
    reference = keras.ops.convert_to_numpy(model(images))
    model.quantize("int8")
    assert model.get_layer("seg_classifier").quantization_mode == "int8"
    quantized = keras.ops.convert_to_numpy(model(images))
    assert np.abs(quantized - reference).max() < 0.05 * np.abs(reference).max() + 1e-3
    path = str(tmp_path / "int8.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(images)), quantized,
                               atol=1e-5)


@pytest.mark.parametrize("head, head_conv", [("progressive", "seg_conv_0"),
                                             ("skip", "seg_path_0_conv_0")])
def test_lora_trains_adapters_and_the_head(tiny_config, head, head_conv):
    model = ViTSegmenter(tiny_config, head=head, head_width=8)
    model.enable_lora(2)
    trainable = {weight.path for weight in model.trainable_weights}
    assert any("lora_kernel" in path for path in trainable)
    assert any(path.startswith("seg_classifier") for path in trainable)
    assert any(path.startswith(head_conv) for path in trainable)
    assert not any("encoderblock_0/MlpBlock" in path and "lora" not in path
                   for path in trainable)


def test_backbone_from_a_classifier_and_from_a_weights_file(tiny_config, tmp_path):
    classifier = vit_keras.VisionTransformer(tiny_config)
    classifier.set_weights([np.random.default_rng(i).normal(size=w.shape).astype("float32")
                            for i, w in enumerate(classifier.get_weights())])
    segmenter = ViTSegmenter(tiny_config)
    load_backbone(segmenter, classifier)
    block = "encoderblock_1"
    for mine, theirs in zip(segmenter.get_layer(block).weights,
                            classifier.get_layer(block).weights):
        np.testing.assert_array_equal(np.asarray(mine), np.asarray(theirs))
    path = str(tmp_path / "vit.npz")
    vit_keras.checkpoints.save_npz(classifier, path)
    from_file = ViTSegmenter(tiny_config)
    load_backbone(from_file, path)
    images = _images(tiny_config)
    from_file.get_layer("seg_classifier").set_weights(
        segmenter.get_layer("seg_classifier").get_weights())
    np.testing.assert_allclose(from_file.predict(images, verbose=0),
                               segmenter.predict(images, verbose=0), atol=1e-5)


def test_bad_options_and_mismatched_backbones_are_named(tiny_config):
    with pytest.raises(ValueError, match="one of"):
        ViTSegmenter(tiny_config, head="fpn")
    with pytest.raises(ValueError, match="head_width"):
        ViTSegmenter(tiny_config, head_width=0)
    with pytest.raises(ValueError, match="skip head needs head_stages >= 1"):
        ViTSegmenter(tiny_config, head="skip", head_stages=0)
    with pytest.raises(ValueError, match="at least 2 classes"):
        ViTSegmenter(dataclasses.replace(tiny_config, num_classes=1))
    with pytest.raises(ValueError, match="out of range"):
        ViTSegmenter(tiny_config, blocks=[5])
    wider = vit_keras.VisionTransformer(dataclasses.replace(tiny_config, mlp_dim=32))
    with pytest.raises(ValueError, match="same ViTConfig"):
        load_backbone(ViTSegmenter(tiny_config), wider)
    with pytest.raises(ValueError, match="built for 32x32"):
        ViTSegmenter(tiny_config).predict(np.zeros((1, 48, 48, 3), "float32"), verbose=0)


def _numpy_reference(labels, predictions, num_classes):
    ious, hits, total = [], 0, 0
    for cls in range(num_classes):
        kept = labels != 255
        true, pred = (labels == cls) & kept, (predictions == cls) & kept
        union = (true | pred).sum()
        if union:
            ious.append((true & pred).sum() / union)
    hits = ((labels == predictions) & (labels != 255)).sum()
    total = (labels != 255).sum()
    return np.mean(ious), hits / total


def test_scores_match_a_pixel_by_pixel_reference():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, (3, 17, 11))
    labels[rng.random(labels.shape) < 0.2] = 255
    predictions = rng.integers(0, 4, labels.shape)
    predictions[labels == 2] = 2  # one well-predicted class
    confusion = segmentation_scores.confusion_matrix(labels, predictions, 5)
    assert confusion.sum() == (labels != 255).sum()
    result = segmentation_scores.scores(confusion)
    miou, accuracy = _numpy_reference(labels, predictions, 5)
    assert result["mIoU"] == pytest.approx(miou) and result["pixel_accuracy"] == \
        pytest.approx(accuracy)
    assert np.isnan(result["iou"][4]) and result["pixels"][4] == 0  # class 4 never occurs
    assert result["iou"][2] == pytest.approx(
        ((labels == 2)).sum() / ((labels == 2) | ((predictions == 2) & (labels != 255))).sum())


def test_scores_refuse_ids_beyond_the_classes():
    with pytest.raises(ValueError, match="label 7 is outside the 3 classes"):
        segmentation_scores.confusion_matrix(np.array([0, 7]), np.array([0, 1]), 3)
    with pytest.raises(ValueError, match="same shape"):
        segmentation_scores.confusion_matrix(np.zeros((2, 2)), np.zeros((2, 3)), 3)
