"""The small-data rule: a from-scratch preset (`data.adapt`, as `digits_tiny`) fits its model and
schedule to the training data it is given.

From the data's typical image size and its number of training examples:

- image size: the images' own size, enlarged by a whole factor to at least 16 px or reduced to
  at most 64 px (keeping the aspect), rounded to a multiple of the patch size;
- patch size 4 up to 32 px, 8 above (a grid of 4x4 to 8x8 tokens), with the convolutional stem
  (Xiao et al. 2021) and locality self-attention (Lee et al. 2021), which give a small ViT the
  locality a small data set cannot teach it;
- width 64 (4 heads, MLP 128) below 5000 examples, 128 (4 heads, MLP 256) from 5000;
- epochs: about 115,000 images seen in all (80 epochs of the 1437 digits), at least 20 and
  at most 100, rounded to 5;
- batch size: at most the preset's, so that an epoch has at least 8 steps (a power of two, at
  least 16): a few hundred images get hundreds of updates rather than one per epoch
  (`benchmarks/small_data.py --counts 160`: 120 training images, 51% -> 71% on glyphs);
- augmentation: for glyph-like images, the preset's relative shifts and zoom (they scale with
  the image) and no flips, which could change a glyph's label (`--set augment.flip=true` when
  they do not). Photographs (`looks_like_photos`: few exactly equal neighbouring pixels, and
  neighbours that correlate) get flips too, and validation every 5 epochs, so that the best
  epoch kept (`loop.keep`) lags little; photographs at least twice the training size get
  random resized crops (25-100% of the area) in place of the shifts and zoom.

The digits are the data `digits_tiny` was made for: the rule gives that preset unchanged. A
field set on the command line (`--set`, `--epochs`, `--image-size`, `--model`, ...) is never
changed, and a run starting from pre-trained weights (`--weights`) is not adapted.

A task's objective adapts the rule by its `TaskRule` (`Objective.small_data_rule`): how many
images its epochs see, whether photographs get their recipe, and choices of its own. The
segment task's (its objective's): about 18,000 images in all (the digit scenes' 15
epochs of 1,200), at least 15 and at most 100 epochs, since every pixel of an image is a
training signal; the head gets one level per halving the patch size calls for (2 for 4x4
patches, 3 for 8x8), so that its last level is back at the image's size; and images of 128 px
or more train as 128 px crops at their own resolution, segmented whole at their size. The
digit scenes are the data `digits_segment` was made for: the rule gives that preset unchanged.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np

from training.presets.sections import task_sections

MIN_SIDE, MAX_SIDE = 16, 64
LARGE_PATCH_ABOVE = 32          # sides above this get 8x8 patches
WIDE_FROM_EXAMPLES = 5000
IMAGES_SEEN = 115_000           # the digits' 80 epochs x 1437 images
MIN_EPOCHS, MAX_EPOCHS = 20, 100
MIN_STEPS_PER_EPOCH, MIN_BATCH = 8, 16
SAMPLED_IMAGES = 64
PHOTO_EQUAL_NEIGHBOURS_BELOW = 0.15  # photographs 2-3%, glyphs on a blank ground 27-30%
PHOTO_CORRELATION_ABOVE = 0.5  # photographs 0.8-0.9, noise 0
# Flips beside the shifts and zoom; validation often enough that the kept best epoch
# (`loop.keep`) lags little.
PHOTO_RECIPE = {"augment.flip": True, "loop.eval_every": 5}
# Photographs at least twice the training size also get random resized crops of 25-100% of the
# area in place of the shifts: such a crop still holds the training size's pixels (300 crops
# of 128 px trained at 64: 80.0% -> 91.0%). At their own size the crops only blur and cut
# small objects out (600 of 64 px: 95.0% -> 92.5%; shapes of 32 px: 53.6% -> 37.3%).
CROP_FROM_DOWNSCALE = 2
PHOTO_CROPS = {"augment.crop": "inception", "augment.crop_area_min": 0.25,
               "augment.translate": 0.0, "augment.zoom": 0.0}
TEXTURE_CROP = 256  # the texture statistics read a centre crop of at most this side


def image_size(native_hw: tuple[int, int]) -> tuple[tuple[int, int], int]:
    """(training (height, width), patch size) for images of `native_hw`."""
    longest = max(native_hw)
    if longest < MIN_SIDE:
        factor = math.ceil(MIN_SIDE / longest)
    else:
        factor = min(1.0, MAX_SIDE / longest)
    scaled = [side * factor for side in native_hw]
    patch = 4 if max(scaled) <= LARGE_PATCH_ABOVE else 8
    return tuple(max(patch, int(round(side / patch)) * patch) for side in scaled), patch


@dataclasses.dataclass(frozen=True)
class TaskRule:
    """How a task's objective adapts the rule.

    Attributes:
        images_seen: the images an adapted run sees in all (`IMAGES_SEEN`: a classifier's).
        min_epochs: the fewest epochs it gives.
        photo_recipe: photographs get `PHOTO_RECIPE` (and `PHOTO_CROPS` where large).
        photo_choices: the task's own {'SECTION.FIELD': value} for photographs, beside them.
        own_choices: (typical (height, width), number of images, patch size) -> the task's
            own {'SECTION.FIELD': value} (they may replace the rule's), or None.
        own_reason: the same arguments -> why the task chose so, for the recipe line ('' when
            there is nothing to add), or None.
    """

    images_seen: int = IMAGES_SEEN
    min_epochs: int = MIN_EPOCHS
    photo_recipe: bool = True
    photo_choices: dict = dataclasses.field(default_factory=dict)
    own_choices: Callable[[tuple, int, int], dict] | None = None
    own_reason: Callable[[tuple, int, int], str] | None = None


CLASSIFY_RULE = TaskRule()


def epochs(num_examples: int, task_rule: TaskRule = CLASSIFY_RULE) -> int:
    """Passes over `num_examples` images that see about `task_rule.images_seen` images."""
    passes = task_rule.images_seen / max(num_examples, 1)
    return int(min(MAX_EPOCHS, max(task_rule.min_epochs, round(passes / 5) * 5)))


def batch_size(num_examples: int, preset_batch: int) -> int:
    """The preset's batch, or a smaller power of two (>= `MIN_BATCH`) that gives an epoch of
    `num_examples` at least `MIN_STEPS_PER_EPOCH` steps."""
    fitting = 2 ** int(math.log2(max(num_examples // MIN_STEPS_PER_EPOCH, 1)))
    return min(preset_batch, max(MIN_BATCH, fitting))


def rule(native_hw: tuple[int, int], num_examples: int, preset_batch: int = 64,
         task_rule: TaskRule = CLASSIFY_RULE) -> dict:
    """The rule's choices as {'SECTION.FIELD': value} for data of this shape (`preset_batch`:
    the preset's batch size, the largest the rule gives; `task_rule`: the objective's)."""
    (height, width), patch = image_size(native_hw)
    wide = num_examples >= WIDE_FROM_EXAMPLES
    choices = {"model.image_size": height if height == width else (height, width),
               "model.patch_size": patch, "model.stem": "conv", "model.locality_attention": True,
               "model.hidden_size": 128 if wide else 64, "model.mlp_dim": 256 if wide else 128,
               "model.num_heads": 4, "schedule.epochs": epochs(num_examples, task_rule),
               "schedule.batch_size": batch_size(num_examples, preset_batch),
               "augment.flip": False}
    if task_rule.own_choices is not None:
        choices.update(task_rule.own_choices(native_hw, num_examples, patch))
    return choices


def looks_like_photos(images: list[np.ndarray]) -> tuple[bool, float, float]:
    """Whether sampled images are natural photographs rather than glyph-like drawings (or
    noise), by two texture statistics of horizontally neighbouring pixels:

    - the share that are exactly equal: strokes on a blank ground repeat the ground (the
      digits 30%, glyphs 27%), while a photograph's sensor noise, gradients and JPEG coding
      leave a few percent (crops of scikit-image's and scikit-learn's photographs 2%, faces
      3%): under 15% is a photograph;
    - the correlation of their brightness: natural images are smooth (photographs 0.9, faces
      0.8), random noise is not (0.0): over 0.5 is a photograph.

    Args:
        images: uint8 [height, width, channels] arrays, as decoded.

    Returns:
        (photographs or not, the median share of equal neighbours, their median correlation).
    """
    shares, correlations = [], []
    for image in images:
        if image.shape[1] < 2:
            continue
        left, right = image[:, :-1], image[:, 1:]
        shares.append(float(np.mean(np.all(left == right, axis=-1))))
        brightness = [side.astype(np.float32).mean(axis=-1).ravel() for side in (left, right)]
        flat = min(float(np.std(side)) for side in brightness) == 0.0
        correlations.append(0.0 if flat else float(np.corrcoef(*brightness)[0, 1]))
    if not shares:
        return False, 1.0, 0.0
    share, correlation = float(np.median(shares)), float(np.median(correlations))
    return (share < PHOTO_EQUAL_NEIGHBOURS_BELOW and
            correlation > PHOTO_CORRELATION_ABOVE), share, correlation


def adapt(preset, native_hw: tuple[int, int], num_examples: int,
          photos: tuple[bool, float, float] = (False, 1.0, 0.0),
          task_rule: TaskRule = CLASSIFY_RULE):
    """`preset` fitted to the data by the rule, leaving its pinned fields alone.

    Args:
        preset: a `Preset`; nothing changes unless `preset.data.adapt` and it trains from
            scratch (no `finetune.weights`).
        native_hw: the training images' typical (height, width).
        num_examples: training examples.
        photos: `looks_like_photos`' answer for the training images (photographs get
            `PHOTO_RECIPE` too, where `task_rule.photo_recipe`).
        task_rule: the objective's `TaskRule` (`Objective.small_data_rule`).

    Returns:
        (the preset, a 'recipe: ...' line naming each change, or None when nothing changed).
    """
    if not preset.data.adapt or preset.finetune.weights:  # pre-trained weights fix the model
        return preset, None
    choices = rule(native_hw, num_examples, preset.schedule.batch_size, task_rule)
    is_photos = photos[0] and task_rule.photo_recipe
    if is_photos:
        choices.update({**PHOTO_RECIPE, **task_rule.photo_choices})
        if max(native_hw) >= CROP_FROM_DOWNSCALE * max(image_size(native_hw)[0]):
            choices.update(PHOTO_CROPS)
    changes = {key: value for key, value in choices.items()
               if key not in preset.pinned and preset.value(key) != value}
    if not changes:
        return preset, None
    adapted = preset.with_values(changes, "small-data rule")
    listing = ", ".join(f"{_recipe_name(key)} {preset.value(key)} -> {value}"
                        for key, value in changes.items())
    size = "x".join(str(side) for side in native_hw)
    kind = (f"photographs of {size} px (natural images: {100 * photos[1]:.0f}% of neighbouring "
            f"pixels equal, correlation {photos[2]:.2f})" if is_photos
            else f"images of {size} px")
    reason = task_rule.own_reason(native_hw, num_examples, image_size(native_hw)[1]) \
        if task_rule.own_reason is not None else ""
    return adapted, (f"recipe: {preset.name} adapted to {num_examples} {kind}: "
                     f"{listing} (the small-data rule, docs/training.md; --set pins a field)"
                     + (f"\n  why: {reason}" if reason else ""))


def fit_to_data(preset, objective, source):
    """`preset` with what `objective` reads off the training `source`
    (`Objective.data_choices`), leaving its pinned fields alone.

    Returns:
        (the preset, a 'fitted to the data: ...' line naming each change and why, or '' when
        none changed).
    """
    choices, reason = objective.data_choices(source)
    changes = {key: value for key, value in choices.items()
               if key not in preset.pinned and preset.value(key) != value}
    if not changes:
        return preset, ""
    listing = ", ".join(f"{_recipe_name(key)} {preset.value(key)} -> {value}"
                        for key, value in changes.items())
    return (preset.with_values(changes, "small-data rule"),
            f"fitted to the data: {listing} ({reason}; --set pins a field)")


def _recipe_name(key: str) -> str:
    """How the recipe line names 'SECTION.FIELD': a shared section's field by its name
    ('image_size'), a task section's whole ('segment.native')."""
    section, _, field = key.partition(".")
    return key if section in task_sections() else field


def sample_images(source) -> tuple[list[tuple[int, int]], list[np.ndarray]]:
    """The (height, width) of up to 64 images spread over `source`, and a centre crop of each
    (at most 256 px a side, uint8 [height, width, channels]) for their texture."""
    return shapes_and_crops(sampled_images(source), source.spec)


def sampled_images(source) -> list[np.ndarray]:
    """Up to 64 decoded images spread over `source` (uint8 [height, width, channels])."""
    import tensorflow as tf

    if source.arrays is not None:
        records = source.arrays[0]
        picks = np.linspace(0, len(records) - 1, min(SAMPLED_IMAGES, len(records))).astype(int)
        samples = [records[index] for index in picks]
    else:
        samples = [record for record, _ in source.records().take(SAMPLED_IMAGES)]
    decoded = [np.asarray(source.decode(tf.convert_to_tensor(sample))) for sample in samples]
    return [image if image.ndim == 3 else image[..., None] for image in decoded]


def shapes_and_crops(images: list[np.ndarray], spec: str):
    """`sample_images`' answer for images already sampled from the data `spec`."""
    shapes, crops = [], []
    for image in images:
        height, width = image.shape[:2]
        top, left = max(0, (height - TEXTURE_CROP) // 2), max(0, (width - TEXTURE_CROP) // 2)
        shapes.append((height, width))
        crops.append(image[top:top + TEXTURE_CROP, left:left + TEXTURE_CROP])
    if not shapes:
        raise ValueError(f"training data {spec!r} holds no images")
    return shapes, crops


def typical_image_size(shapes) -> tuple[int, int]:
    """The median (height, width) of `shapes` (a list of them, or a `Source` to sample)."""
    if not isinstance(shapes, list):
        shapes = sample_images(shapes)[0]
    return tuple(int(side) for side in np.median(np.array(shapes), axis=0))
