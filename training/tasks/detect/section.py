"""The detect task's preset section, `detect` (`--set detect.queries=50`), read without a
framework. Before it, these were the `objective` section's `detect_*` fields; those keys are
refused with their new name."""

from __future__ import annotations

import dataclasses

from training.presets.sections import Section


@dataclasses.dataclass(frozen=True)
class Detect(Section):
    """How a detector is built and trained (`vit train --task detect`: DETR on the ViT,
    `vit_keras.ViTDetector`, Hungarian matching, focal + L1 + GIoU losses, COCO mAP).

    Attributes:
        queries: object queries, the most objects an image may hold.
        layers: decoder blocks (each with its own class and box heads and auxiliary loss).
        width: the decoder's width (a multiple of 8 and of 4 heads).
        scale_min: the random crop's least area, as a fraction of the image's (1 = no crop).
        photometric: random brightness and contrast (image only).
        anchor_width, anchor_height: the patches' anchor box, which their proposals correct,
            in fractions of the image (0 in either: two patches a side); where the preset fits
            the data (`data.adapt`), the training boxes' median width and height.
    """

    NAME = "detect"
    RENAMED_FROM = "objective.detect_"
    RULES = {"queries": ">=1", "layers": ">=1", "width": ">=1", "scale_min": "(0,1]",
             "anchor_width": "[0,1)", "anchor_height": "[0,1)", "auxiliary_matches": ">=1"}

    queries: int = 20
    layers: int = 3
    width: int = 128
    scale_min: float = 0.5
    photometric: bool = True
    anchor_width: float = 0.0
    anchor_height: float = 0.0
    auxiliary_matches: int = 1
