"""The segment task's preset section, `segment` (`--set segment.head=skip`), read without a
framework. Before it, these were the `objective` section's `segment_*` fields; those keys are
refused with their new name."""

from __future__ import annotations

import dataclasses

from training.presets.sections import Section

HEADS = ("linear", "progressive", "skip")  # vit_keras.tasks.segment.model.HEADS, without Keras


@dataclasses.dataclass(frozen=True)
class Segment(Section):
    """How a segmenter is built and trained (`vit train --task segment`).

    Attributes:
        head: 'linear' (BatchNorm + 1x1 classifier on the patch grid, DINOv2's linear head),
            'progressive' (conv-BN-ReLU + 2x upsampling stages, SETR's PUP) or 'skip' (a U-Net
            decoder on the patch grid with a conv path from the image: UNETR's skips).
        blocks: the head reads the last this many blocks' patch tokens.
        width: progressive head: channels of its convolutions (skip head: of its coarsest
            level).
        stages: progressive head: its 2x upsampling stages (skip head: its levels).
        scale_min, scale_max: the random rescale of image and mask before the crop (1 = the
            model's size; with `native`, the image's own).
        photometric: random brightness and contrast (image only).
        dice: the weight of a soft Dice loss added to the pixel cross-entropy (0:
            cross-entropy alone; mmsegmentation's DiceLoss, smooth 1).
        native: train on random crops of the model's size cut from the images at their own
            resolution (many per image each epoch, covering its area once), and segment whole
            images at their size; the model must take any size (`model.dynamic_image_size`).
            Off: each image is resized whole to the model's size.
    """

    NAME = "segment"
    RENAMED_FROM = "objective.segment_"
    RULES = {"head": HEADS, "blocks": ">=1", "width": ">=1", "stages": ">=0",
             "scale_min": ">0", "scale_max": ">0", "dice": ">=0"}

    head: str = "linear"
    blocks: int = 1
    width: int = 256
    stages: int = 2
    scale_min: float = 0.5
    scale_max: float = 2.0
    photometric: bool = True
    dice: float = 0.0
    native: bool = False
