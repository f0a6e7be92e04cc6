"""The small-data rule: `digits_tiny` is its recipe for the digits, other image folders get
their own image size, patch size, width and epochs, and what the command line sets stays."""

import numpy as np
import pytest
from PIL import Image

from training import adapt
from training.presets import get_preset
from training.presets.overrides import apply_overrides
from training.tasks.segment.objective import SMALL_DATA_RULE as SEGMENT_RULE


def test_the_rule_gives_digits_tiny_for_the_digits():
    preset = get_preset("digits_tiny")
    assert preset.data.adapt and preset.model.stem == "conv" and preset.model.locality_attention
    adapted, message = adapt.adapt(preset, (8, 8), 1437)
    assert adapted == preset and message is None


@pytest.mark.parametrize("native, count, size, patch, width, epochs", [
    ((28, 28), 2250, 28, 4, 64, 50),          # MNIST-like grey glyphs
    ((32, 32), 3000, 32, 4, 64, 40),          # CIFAR-sized
    ((64, 48), 8000, (64, 48), 8, 128, 20),   # larger, non-square: 8x8 patches, wider
    ((200, 300), 1000, (40, 64), 8, 64, 100),  # reduced to 64 px, aspect kept
    ((10, 10), 500, 20, 4, 64, 100),           # enlarged by a whole factor to >= 16 px
])
def test_the_rule_for_other_data(native, count, size, patch, width, epochs):
    preset, message = adapt.adapt(get_preset("digits_tiny"), native, count)
    model = preset.model
    assert (model.image_size, model.patch_size, model.hidden_size, model.mlp_dim) == \
        (size, patch, width, 2 * width)
    assert model.stem == "conv" and model.locality_attention and preset.schedule.epochs == epochs
    assert not preset.augment.flip and preset.pinned == ()
    assert message.startswith(f"recipe: digits_tiny adapted to {count} images of "
                              f"{native[0]}x{native[1]} px: image_size 16 -> ")


@pytest.mark.parametrize("count, batch", [(1437, 64), (600, 64), (500, 32), (300, 32),
                                          (120, 16), (40, 16)])
def test_a_few_hundred_images_get_a_smaller_batch(count, batch):
    """At least 8 steps an epoch, down to batches of 16: the digits keep the preset's 64."""
    preset, message = adapt.adapt(get_preset("digits_tiny"), (28, 28), count)
    assert preset.schedule.batch_size == batch and "schedule.batch_size" not in preset.pinned
    assert ("batch_size 64 -> " in message) == (batch != 64)
    pinned = apply_overrides(get_preset("digits_tiny"), ["schedule.batch_size=64"])
    assert adapt.adapt(pinned, (28, 28), count)[0].schedule.batch_size == 64


def test_fields_set_on_the_command_line_stay():
    preset = apply_overrides(get_preset("digits_tiny"), ["schedule.epochs=7",
                                                         "model.patch_size=2"])
    preset = preset.replace_model(image_size=24)  # as --image-size does
    assert set(preset.pinned) == {"schedule.epochs", "model.patch_size", "model.image_size"}
    adapted, message = adapt.adapt(preset, (32, 32), 8000)
    assert (adapted.schedule.epochs, adapted.model.patch_size, adapted.model.image_size) == \
        (7, 2, 24)
    assert message.endswith(": hidden_size 64 -> 128, mlp_dim 128 -> 256 (the small-data "
                            "rule, docs/training.md; --set pins a field)")
    assert adapted.pinned == preset.pinned
    assert adapt.adapt(preset, (32, 32), 3000) == (preset, None)  # nothing left to change


def test_the_segmentation_rule_leaves_digits_segment_for_the_digit_scenes():
    preset = get_preset("digits_segment")
    assert preset.data.adapt
    assert adapt.adapt(preset, (32, 32), 1200, task_rule=SEGMENT_RULE) == (preset, None)


@pytest.mark.parametrize("native, count, size, patch, stages, epochs", [
    ((96, 120), 300, (48, 64), 8, 3, 60),     # small photos: 8x8 patches, a third level
    ((64, 64), 4000, 64, 8, 3, 15),           # many scenes: the epochs' floor
    ((16, 16), 120, 16, 4, 2, 100),           # a handful: the epochs' ceiling
])
def test_the_segmentation_rule_for_other_data(native, count, size, patch, stages, epochs):
    """Epochs that see about 18,000 images (15 to 100); the head's 2x stages undo the patch
    grid's downsampling, so that logits come back at the image's size."""
    preset, message = adapt.adapt(get_preset("digits_segment"), native, count,
                                  task_rule=SEGMENT_RULE)
    assert (preset.model.image_size, preset.model.patch_size) == (size, patch)
    assert preset.segment.stages == stages and 2 ** stages == patch
    assert preset.schedule.epochs == epochs and not preset.augment.flip
    assert message.startswith(f"recipe: digits_segment adapted to {count} images")


def test_presets_without_adapt_and_fine_tuning_are_left_alone():
    cifar = get_preset("cifar10_scratch")
    assert adapt.adapt(cifar, (28, 28), 500) == (cifar, None)
    finetune = get_preset("digits_tiny").replace(finetune={"weights": "model.keras"})
    assert adapt.adapt(finetune, (28, 28), 500) == (finetune, None)


def test_typical_image_size_reads_a_folder(tmp_path):
    from vit_app.tasks.classify.data import readers

    for index, size in enumerate([(20, 30), (20, 30), (24, 30), (20, 31), (19, 30)]):
        folder = tmp_path / str(index % 2)
        folder.mkdir(exist_ok=True)
        Image.fromarray(np.zeros((*size, 3), np.uint8)).save(folder / f"{index}.png")
    source = readers.load_source(f"folder:{tmp_path}", "train", val_split=0.0)
    assert adapt.typical_image_size(source) == (20, 30)
    assert adapt.typical_image_size(readers.load_source("digits", "train")) == (8, 8)


def _photo_crops(count: int = 32, size: int = 48) -> list[np.ndarray]:
    """Crops of scikit-image's photographs, as a user's photo folder would hold them."""
    import skimage.data

    rng = np.random.default_rng(0)
    pictures = [skimage.data.astronaut(), skimage.data.coffee(), skimage.data.chelsea()]
    crops = []
    for index in range(count):
        picture = pictures[index % len(pictures)]
        side = int(rng.integers(60, 200))
        top = int(rng.integers(0, picture.shape[0] - side))
        left = int(rng.integers(0, picture.shape[1] - side))
        crop = Image.fromarray(picture[top:top + side, left:left + side]).resize((size, size))
        crops.append(np.asarray(crop))
    return crops


def test_photographs_are_told_from_glyphs_by_their_texture():
    from vit_app.tasks.classify.data import readers

    digits = adapt.sample_images(readers.load_source("digits", "train"))[1]
    is_photos, share, _ = adapt.looks_like_photos(digits)
    assert not is_photos and share > 0.25
    is_photos, share, correlation = adapt.looks_like_photos(_photo_crops())
    assert is_photos and share < 0.05 and correlation > 0.8
    grey = [np.asarray(Image.fromarray(crop).convert("L"))[..., None] for crop in _photo_crops()]
    assert adapt.looks_like_photos(grey)[0]
    noise = list(np.random.default_rng(0).integers(0, 256, (8, 12, 12, 3), dtype=np.uint8))
    is_photos, share, correlation = adapt.looks_like_photos(noise)
    assert not is_photos and share < 0.05 and abs(correlation) < 0.3
    assert adapt.looks_like_photos([np.zeros((20, 20, 3), np.uint8)]) == (False, 1.0, 0.0)


def test_photographs_get_flips_and_the_line_says_why():
    preset = get_preset("digits_tiny")
    adapted, message = adapt.adapt(preset, (64, 64), 600, photos=(True, 0.02, 0.9))
    augment = adapted.augment
    assert augment.flip and augment.crop == "resize"
    assert (augment.translate, augment.zoom) == (preset.augment.translate, preset.augment.zoom)
    assert adapted.loop.eval_every == 5 and adapted.model.image_size == 64
    assert message.startswith("recipe: digits_tiny adapted to 600 photographs of 64x64 px "
                              "(natural images: 2% of neighbouring pixels equal, correlation "
                              "0.90): ")
    assert message.endswith("epochs 80 -> 100, flip False -> True, eval_every 10 -> 5 (the "
                            "small-data rule, docs/training.md; --set pins a field)")


@pytest.mark.parametrize("native, size, crops", [
    ((375, 500), (48, 64), True),    # VOC-sized photos trained at 48x64: 7.8x smaller
    ((128, 128), 64, True),          # twice the training size
    ((100, 100), 64, False),         # less than twice: the crops would blur
    ((25, 25), 24, False),
])
def test_photographs_at_least_twice_the_training_size_get_random_resized_crops(native, size,
                                                                                crops):
    preset = get_preset("digits_tiny")
    adapted, message = adapt.adapt(preset, native, 600, photos=(True, 0.02, 0.9))
    augment = adapted.augment
    assert adapted.model.image_size == size and augment.flip
    assert (augment.crop == "inception") == crops
    if crops:
        assert (augment.crop_area_min, augment.translate, augment.zoom) == (0.25, 0.0, 0.0)
        assert "crop resize -> inception, crop_area_min 0.05 -> 0.25" in message
    # Glyph-like data keeps the rule's plain choices; a flag set by hand is kept for photos.
    plain, message = adapt.adapt(preset, (375, 500), 600, photos=(False, 0.3, 0.4))
    assert not plain.augment.flip and plain.augment.crop == "resize" and "photographs" not in message
    pinned = apply_overrides(preset, ["augment.flip=false"])
    assert not adapt.adapt(pinned, (375, 500), 600, photos=(True, 0.02, 0.9))[0].augment.flip


def test_the_digits_are_not_photographs_so_the_default_job_is_unchanged():
    from vit_app.tasks.classify.data import readers

    shapes, crops = adapt.sample_images(readers.load_source("digits", "train"))
    preset = get_preset("digits_tiny")
    assert adapt.adapt(preset, adapt.typical_image_size(shapes), 1437,
                       photos=adapt.looks_like_photos(crops)) == (preset, None)


def test_segmentation_keeps_its_rule_for_photographs():
    preset = get_preset("digits_segment")
    adapted, _ = adapt.adapt(preset, (96, 120), 300, photos=(True, 0.02, 0.9),
                             task_rule=SEGMENT_RULE)
    assert adapted.augment == preset.augment and adapted.loop == preset.loop


@pytest.mark.parametrize("native, count, epochs", [
    ((512, 512), 24, 12),     # a microscopy folder: 16 crops an image, 12 epochs of 384
    ((375, 500), 300, 5),     # VOC-like photos: 11 crops an image, the floor of 5 epochs
])
def test_large_images_train_as_crops_at_their_own_resolution(native, count, epochs):
    """From 128 px up, the segmenter takes any size and trains on 128 px native crops (with
    flips, no rescale), about 4,800 in all; the recipe line says why."""
    preset, message = adapt.adapt(get_preset("digits_segment"), native, count,
                                  task_rule=SEGMENT_RULE)
    model, segment = preset.model, preset.segment
    assert (model.image_size, model.patch_size, model.dynamic_image_size,
            model.dynamic_image_pad) == (128, 8, True, True)
    assert segment.native and segment.stages == 3
    assert segment.width == 64
    assert (segment.scale_min, segment.scale_max) == (1.0, 1.0)
    assert preset.augment.flip and preset.schedule.epochs == epochs
    crops = round(native[0] * native[1] / 128 ** 2)
    assert f"\n  why: images of {native[0]}x{native[1]} px keep their resolution: {crops} " \
        "random 128 px crops per image per epoch" in message
    pinned = apply_overrides(get_preset("digits_segment"), ["model.image_size=64"])
    assert adapt.adapt(pinned, native, count, task_rule=SEGMENT_RULE)[0].model.image_size == 64


def test_vit_train_on_a_folder_adapts_and_says_so(tmp_path, capsys):
    import json

    from vit import cli

    rng = np.random.default_rng(0)
    for part, count in (("train", 6), ("test", 2)):
        for label in ("a", "b"):
            folder = tmp_path / part / label
            folder.mkdir(parents=True)
            for index in range(count):
                pixels = rng.integers(0, 256, (12, 12, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{index}.png")
    output = tmp_path / "run"
    # One block: the test reads what the rule chose; tracing digits_tiny's four blocks was
    # most of the run (14.4 -> 7.7 s).
    assert cli.main(["train", "--data", f"folder:{tmp_path / 'train'}", "--val-data",
                     f"folder:{tmp_path / 'test'}", "--epochs", "1", "--batch-size", "4",
                     "--preprocessing", "imagenet", "--set", "model.num_layers=1",
                     "--no-export", "--no-inspect", "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    assert ("recipe: digits_tiny adapted to 12 images of 12x12 px: image_size 16 -> 24 (the "
            "small-data rule") in printed
    assert "24x24px, conv stem, locality attention" in printed
    with open(output / "config.json") as handle:
        saved = json.load(handle)
    assert saved["model"]["image_size"] == 24 and saved["preset"]["schedule"]["epochs"] == 1
    assert saved["preset"]["pinned"] == ["data.preprocessing", "data.train", "data.val",
                                         "model.num_layers", "schedule.batch_size",
                                         "schedule.epochs"]
    assert saved["preprocessing"]["mean"] == [0.485, 0.456, 0.406]  # the flag, kept
    assert "model.image_size = 24  (small-data rule)" in saved["preset"]["resolution"]
    assert "schedule.epochs = 1  (--epochs)" in saved["preset"]["resolution"]


def test_the_detection_rule_leaves_digits_detect_for_the_digit_boxes_and_fits_others():
    from training.tasks.detect.objective import SMALL_DATA_RULE as DETECT_RULE

    preset = get_preset("digits_detect")
    assert adapt.adapt(preset, (64, 64), 1600, task_rule=DETECT_RULE) == (preset, None)
    # 300 photographs of 150x200 px: 48x64 px, 100 epochs (48,000 images seen), flips
    fitted, message = adapt.adapt(preset, (150, 200), 300, photos=(True, 0.09, 0.94),
                                  task_rule=DETECT_RULE)
    assert fitted.model.image_size == (48, 64) and fitted.schedule.epochs == 100
    assert fitted.augment.flip and fitted.detect.queries == 20
    assert fitted.optim.ema_momentum == 0.99 and "ema_momentum 0.0 -> 0.99" in message
    assert fitted.detect.auxiliary_matches == 4 and "auxiliary_matches 1 -> 4" in message
    # 16x16 px images: a 4x4 grid of 4 px patches holds 16 queries at most
    small, message = adapt.adapt(preset, (16, 16), 300, task_rule=DETECT_RULE)
    assert small.detect.queries == 16 and "detect.queries 20 -> 16" in message
    assert small.optim.ema_momentum == 0.0   # not photographs: the best epoch is kept
    assert small.detect.auxiliary_matches == 1


class _ReadsTheBoxes:
    """An objective that reads a box size off its training data."""

    def data_choices(self, source):
        return {"detect.anchor_width": 0.6, "detect.anchor_height": 0.8}, "the boxes' median"


def test_what_the_objective_reads_off_the_data_is_applied_unless_pinned():
    preset = get_preset("digits_detect")
    fitted, line = adapt.fit_to_data(preset, _ReadsTheBoxes(), source=None)
    assert (fitted.detect.anchor_width, fitted.detect.anchor_height) == (0.6, 0.8)
    assert line == ("fitted to the data: detect.anchor_width 0.0 -> 0.6, "
                    "detect.anchor_height 0.0 -> 0.8 (the boxes' median; --set pins a field)")
    assert fitted.pinned == preset.pinned    # what the rule chose is not the user's
    pinned = apply_overrides(preset, ["detect.anchor_width=0.3"])
    kept, line = adapt.fit_to_data(pinned, _ReadsTheBoxes(), source=None)
    assert (kept.detect.anchor_width, kept.detect.anchor_height) == (0.3, 0.8)
    assert "anchor_width" not in line
    assert adapt.fit_to_data(fitted, _ReadsTheBoxes(), source=None) == (fitted, "")


def test_photos_of_small_objects_train_at_a_size_where_most_span_a_patch():
    from training.tasks.detect.objective import size_for_boxes

    config = get_preset("digits_detect").model.replace(image_size=(56, 64))
    photos = np.tile([[360, 480]], (10, 1))
    # over a tenth of the objects 5% of the photo a side: 2.8 px high at 56 px, under a patch
    small = np.array([[0, 0.5, 0.5, 0.05, 0.05]] * 3 + [[0, 0.5, 0.5, 0.4, 0.4]] * 17)
    choices, why = size_for_boxes(small, photos, config)
    assert choices == {"model.image_size": (112, 128)}   # 128 px at most: 5.6 px
    assert why == ("a tenth of the objects are under 2.8 px at 56x64 px, less than a 8 px "
                   "patch; at 112x128 px, 5.6 px")
    # never past the photos' own size, and nothing where the objects span a patch
    assert size_for_boxes(small, np.tile([[60, 80]], (10, 1)), config)[0] == \
        {"model.image_size": (64, 80)}
    large = np.array([[0, 0.5, 0.5, 0.6, 0.8]] * 20)
    assert size_for_boxes(large, photos, config) == ({}, "")


def test_anchors_move_to_the_median_box_only_far_from_two_patches():
    from training.tasks.detect.objective import anchor_for_boxes

    config = get_preset("digits_detect").model.replace(image_size=(56, 64))   # 7x8 patches
    raccoons = np.array([[0, 0.5, 0.5, 0.62, 0.83]] * 3)
    assert anchor_for_boxes(raccoons, config) == (
        {"detect.anchor_width": 0.62, "detect.anchor_height": 0.83},
        "the patches' proposals start as the training boxes' median box, 62% x 83% of the "
        "image, not 2 patches a side")
    digits = np.array([[0, 0.5, 0.5, 0.17, 0.28]] * 3)   # two patches: 25% x 29%
    assert anchor_for_boxes(digits, config) == ({}, "")
    specks = np.array([[0, 0.5, 0.5, 0.05, 0.3]] * 3)   # a fifth of two patches' width
    assert anchor_for_boxes(specks, config)[0] == {"detect.anchor_width": 0.05,
                                                   "detect.anchor_height": 0.3}
