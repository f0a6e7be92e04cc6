"""The images `vit export` calibrates and evaluates on: an .npz file, or a data spec of
`vit train` read the way the run that trained the model read it.
"""

from __future__ import annotations

import dataclasses

import numpy as np

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


def load(spec: str, input_size, calibration_count: int = 300, eval_count: int = 2000,
         trained_on: dict | None = None, rule=None, task=None) -> ExportImages:
    """The calibration and evaluation images of `spec`.

    Args:
        spec: an .npz with 'images' (N, H, W, 3) and optional 'labels', or a data spec of
            `vit train`.
        input_size: the model's (height, width); a clip model's (frames, height, width).
        calibration_count: at most this many calibration images.
        eval_count: at most this many evaluation images.
        trained_on: the run's data fields (`run_config.training_data`): its validation data,
            split and seed.
        rule: the model's preprocessing, whose resize rule applies (default: the official
            one).
        task: the model's task's inference part (`vit_app.inference.inference_task`), which reads a
            data spec as its task's runs read it (`export_examples`); needed for a data spec,
            not for an .npz.

    Returns:
        The `ExportImages`.
    """

    if not spec.endswith(".npz"):
        return _load_preset_data(spec, input_size, calibration_count, eval_count,
                                 trained_on or {}, rule or OFFICIAL, task)
    with np.load(spec, allow_pickle=False) as arrays:
        if "images" not in arrays:
            raise ValueError(f"{spec}: expected an array 'images' (N, H, W, 3), found "
                             f"{sorted(arrays.files)}")
        images = arrays["images"].astype(np.float32)
        labels = arrays["labels"] if "labels" in arrays else None
    eval_labels = None if labels is None else labels[:eval_count]
    return ExportImages(images[:calibration_count], images[:eval_count], eval_labels)


def _load_preset_data(spec, input_size, calibration_count, eval_count, trained_on,
                      rule, task) -> ExportImages:
    """Calibration images from the training data, evaluation images + labels from its
    validation data as the run chose them (`--val-data`, or the held-out part), taken by the
    model's task (`InferenceTask.export_examples`)."""
    if task is None:
        raise ValueError(f"{spec}: a data spec is read by the model's task; pass task= (an "
                         "InferenceTask of vit_app.inference.inference_task), or an .npz of "
                         "images")
    validation = (trained_on.get("val_data", ""), trained_on.get("val_split", 0.1),
                  trained_on.get("seed", 0))
    data, take = task.export_examples(spec, validation, rule, tuple(input_size))
    calibration, _ = take(data.train, calibration_count)
    if data.val is None:
        return ExportImages(calibration)
    return ExportImages(calibration, *take(data.val, eval_count))
