"""The images `vit export` calibrates and evaluates on: an .npz file, or a data spec of
`vit train` read the way the run that trained the model read it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from vit_app.data import detection, evaluation, segmentation, sources
from vit_keras.preprocessing import OFFICIAL


@dataclasses.dataclass(frozen=True)
class ExportImages:
    """Float32 images in 0..255 at the model's size.

    Attributes:
        calibration: the images calibrating int8 files.
        eval_images: the held-out images every file is checked on, or None.
        eval_labels: their labels, or None.
    """

    calibration: object
    eval_images: object = None
    eval_labels: object = None


def load(spec: str, image_hw, calibration_count: int = 300, eval_count: int = 2000,
         trained_on: dict | None = None, rule=None, labels: str = "classes") -> ExportImages:
    """The calibration and evaluation images of `spec`.

    Args:
        spec: an .npz with 'images' (N, H, W, 3) and optional 'labels', or a data spec of
            `vit train`.
        image_hw: the model's (height, width).
        calibration_count: at most this many calibration images.
        eval_count: at most this many evaluation images.
        trained_on: the run's data fields (`run_config.training_data`): its validation data,
            split and seed.
        rule: the model's preprocessing, whose resize rule applies (default: the official
            one).
        labels: what the model's task labels images with ('classes'; 'masks': `spec` is
            segmentation data, images resized whole, labels are masks at the model's size,
            tiles at the images' own resolution for a `native` rule; 'boxes': detection data,
            images resized whole, labels are targets in fractions of them), or what an .npz's
            'labels' are.

    Returns:
        The `ExportImages`.
    """

    if not spec.endswith(".npz"):
        return _load_preset_data(spec, image_hw, calibration_count, eval_count, trained_on or {},
                                 rule or OFFICIAL, labels)
    with np.load(spec, allow_pickle=False) as arrays:
        if "images" not in arrays:
            raise ValueError(f"{spec}: expected an array 'images' (N, H, W, 3), found "
                             f"{sorted(arrays.files)}")
        images = arrays["images"].astype(np.float32)
        labels = arrays["labels"] if "labels" in arrays else None
    eval_labels = None if labels is None else labels[:eval_count]
    return ExportImages(images[:calibration_count], images[:eval_count], eval_labels)


def _load_preset_data(spec, image_hw, calibration_count, eval_count, trained_on,
                      rule, labels: str) -> ExportImages:
    """Calibration images from the training data, evaluation images + labels from its
    validation data as the run chose them (`--val-data`, or the held-out part), resized as
    `vit train` resizes for evaluation."""
    arguments = (spec, trained_on.get("val_data", ""), trained_on.get("val_split", 0.1),
                 trained_on.get("seed", 0))
    if labels == "boxes":
        data = detection.open_detection_data(*arguments)
        take = detection.take_examples
    elif labels == "masks":
        data = segmentation.open_segmentation_data(*arguments)
        # a model fed images at their own size was trained on crops of them: it is checked
        # on tiles at that resolution, as `vit train` checks it
        take = segmentation.take_tiles if rule.native else segmentation.take_pairs
    else:
        data = sources.open_training_data(*arguments)

        def take(source, size, count):
            return evaluation.take_raw_images(source, size, count, rule)

    calibration, _ = take(data.train, image_hw, calibration_count)
    if data.val is None:
        return ExportImages(calibration)
    return ExportImages(calibration, *take(data.val, image_hw, eval_count))
