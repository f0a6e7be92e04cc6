"""The detect task's training part: a `ViTDetector` (DETR on the ViT) on images with boxes.

Its data are images with boxes (`vit_app.tasks.detect.data.sources`), cropped, flipped and
recoloured with their boxes (`training.tasks.detect.pipeline`); its loss DETR's set loss on every
decoder block (`vit_keras.tasks.detect.loss`); its best weights follow the box F1 at IoU 0.5 that
Keras computes in the step, and metrics.json reports COCO's mAP, mAP@0.5, AP per size and per class
from pycocotools on the validation images at their own size (`vit_app.tasks.detect.evaluate`).
"""

from __future__ import annotations

import keras
import numpy as np

from training import adapt, finetune
from training.tasks.detect import pipeline as detect_pipeline
from training.objective import Objective, float32_twin
from vit_app.tasks.detect.data import sources as detection_data
from vit_app.tasks.detect import baseline
from vit_app.tasks.detect import evaluate as detection_eval
from vit_keras import ViTConfig
from vit_keras.tasks.detect.model import PATCH_ANCHOR_SPAN, ViTDetector, load_backbone
from vit_keras.tasks.detect.loss import BoxF1, SetPredictionLoss

QUERIES = 20  # digits_detect's: the queries are chosen among the patches, so at most one each
ANCHOR_RANGE = (0.01, 0.95)  # a median box's sides, kept clear of a sigmoid's ends
# The patches' anchors move to the median box only where it is over twice (or under half) the
# two-patch box a side: on the digit boxes (median 17% x 28%, two patches 25%) the median box
# gave mAP 65.8% against 66.5%; on raccoons (62% x 83%) mAP@0.5 27.0% -> 41.0%.
ANCHOR_FACTOR = 2.0


def anchor_for_boxes(fractions, config: ViTConfig) -> tuple[dict, str]:
    """The patches' anchor box at the training boxes' median width and height, where that is
    over `ANCHOR_FACTOR` times the two-patch box's side, or under its inverse.

    Args:
        fractions: float [objects, 5]: class, cx, cy, w, h in fractions of their images.
        config: the model's `ViTConfig` as the rule chose it.

    Returns:
        ({'detect.anchor_width': w, 'detect.anchor_height': h}, why), or ({}, '').
    """
    width, height = (round(float(np.clip(side, *ANCHOR_RANGE)), 2)
                     for side in np.median(fractions[:, 3:5], axis=0))
    rows, cols = (side // config.patch_size for side in config.image_hw)
    ratios = np.array([width * cols, height * rows]) / PATCH_ANCHOR_SPAN
    if np.all((ratios <= ANCHOR_FACTOR) & (ratios >= 1 / ANCHOR_FACTOR)):
        return {}, ""
    return ({"detect.anchor_width": width, "detect.anchor_height": height},
            f"the patches' proposals start as the training boxes' median box, {width:.0%} x "
            f"{height:.0%} of the image, not {PATCH_ANCHOR_SPAN:g} patches a side")


# A tenth of the objects may be smaller than a patch; to keep the rest above one, the training
# size grows up to this side (4x the rule's 64 px tokens) and never past the photos' own.
SMALL_OBJECTS_PERCENTILE = 10
MAX_SIDE_FOR_BOXES = 128


def size_for_boxes(fractions, image_sizes, config: ViTConfig) -> tuple[dict, str]:
    """The training size at which the objects' `SMALL_OBJECTS_PERCENTILE` shorter side spans a
    patch, up to `MAX_SIDE_FOR_BOXES` and the images' median longer side.

    Args:
        fractions: float [objects, 5]: class, cx, cy, w, h in fractions of their images.
        image_sizes: int [images, 2]: each training image's (height, width).
        config: the model's `ViTConfig` as the rule chose it.

    Returns:
        ({'model.image_size': the larger size}, why), or ({}, '') where the size holds them.
    """
    height, width = config.image_hw
    patch, longest = config.patch_size, max(config.image_hw)
    shorter = np.minimum(fractions[:, 3] * width, fractions[:, 4] * height)
    small = float(np.percentile(shorter, SMALL_OBJECTS_PERCENTILE))
    native = float(np.median(np.max(image_sizes, axis=1)))
    target = min(MAX_SIDE_FOR_BOXES, native, longest * patch / max(small, 1e-3))
    if small >= patch or target < longest + patch:
        return {}, ""
    factor = target / longest
    new_hw = tuple(max(patch, int(side * factor) // patch * patch) for side in (height, width))
    grown = small * new_hw[0] / height
    return ({"model.image_size": new_hw[0] if new_hw[0] == new_hw[1] else new_hw},
            f"a tenth of the objects are under {small:.1f} px at {height}x{width} px, less than "
            f"a {patch} px patch; at {new_hw[0]}x{new_hw[1]} px, {grown:.1f} px")


def _rule_choices(native_hw, num_examples: int, patch: int) -> dict:
    """Fewer queries than `QUERIES` where the rule's grid has fewer patches."""
    (height, width), _ = adapt.image_size(native_hw)
    patches = (height // patch) * (width // patch)
    return {"detect.queries": patches} if patches < QUERIES else {}


# DETR learns slowly: about 48,000 images seen in all (the digit boxes' 30 epochs of 1,600),
# at least 30 epochs; photographs get the photo recipe (flips) and keep a moving average of
# the weights, whose last state is the model: 158 raccoon photos, mAP@0.5 27.0% -> 45.4% (the
# box F1 that picks a best epoch otherwise stays near 0 on them). Their few boxes also get four
# queries each in the auxiliary blocks: over three seeds, mAP 14.9% -> 16.8%, mAP@0.5 43.8% ->
# 51.2% (docs/detection.md).
SMALL_DATA_RULE = adapt.TaskRule(images_seen=48_000, min_epochs=30, own_choices=_rule_choices,
                                 photo_choices={"optim.ema_momentum": 0.99,
                                                "detect.auxiliary_matches": 4})


class Detection(Objective):
    """Object detection: a `ViTDetector`, Hungarian matching with focal, L1 and GIoU losses on
    every decoder block, COCO mAP."""

    name = "detect"
    metric_label = "mAP"
    metric_key = "val_mAP"
    monitor = "val_box_f1"
    monitor_label = "box F1 @ IoU 0.5"
    activation = "sigmoid"  # every format's probabilities: class scores, then the box
    small_data_rule = SMALL_DATA_RULE

    def __init__(self, preset):
        if preset.objective.label_smoothing:
            raise ValueError("objective 'detect' takes no label smoothing: drop "
                             "objective.label_smoothing")
        if preset.finetune.mode == "probe":
            raise ValueError("finetune 'probe' fits a linear classifier; a detector's head "
                             "trains by gradient steps: use finetune.mode=head or lora")
        super().__init__(preset)

    def data_choices(self, source) -> tuple[dict, str]:
        """From the training boxes: the patches' anchor box at their median width and height,
        and, training from scratch, an image size at which most objects span a patch."""
        sizes = detection_data.image_sizes(source)   # every file's header, read once
        fractions = detection_data.object_fractions(source, sizes)
        if not len(fractions):
            return {}, ""
        choices, why = anchor_for_boxes(fractions, self.preset.model)
        reasons = [why] if why else []
        if not self.preset.finetune.weights:   # pre-trained weights fix the model's size
            size, why = size_for_boxes(fractions, sizes, self.preset.model)
            choices.update(size)
            reasons += [why] if why else []
        return (choices, "; ".join(reasons)) if choices else ({}, "")

    def open_data(self, data_dir):
        data = self.preset.data
        return detection_data.open_detection_data(data.train, data.val, data.val_split,
                                                  self.preset.seed)

    def check_data(self, data) -> None:
        """Detection data: boxes, and no image holding more objects than the queries."""
        if not data.train.boxes:
            raise ValueError(f"{data.train.spec} has no boxes: detection needs 'digit-boxes' "
                             "or folder:DIR with COCO JSON, YOLO or Pascal VOC boxes")
        queries = self.preset.detect.queries
        for source in (data.train, data.val):
            most = _most_objects(source)
            if source is not None and most > queries:
                raise ValueError(f"{source.spec}: an image holds {most} objects, more than the "
                                 f"{queries} object queries: set detect.queries="
                                 f"{most} or more")

    def train_batches(self, source, image_size, batch_size, **options):
        return detect_pipeline.train_dataset(source, image_size, batch_size, self.preset,
                                             **options)

    def eval_batches(self, source, image_size, batch_size, num_classes, **options):
        """Images resized whole, their boxes in fractions of them."""
        return detect_pipeline.eval_dataset(source, image_size, batch_size,
                                            options.get("preprocessing"))

    def sample_targets(self, batch, config):
        return np.full((batch, 1, 5), detection_data.PAD_CLASS, np.float32)

    def export_samples(self, source, image_size, count: int, preprocessing):
        """Images resized whole and their boxes in fractions of them (each file's boxes are
        checked against Keras', and its mAP against Keras')."""
        return detection_data.take_examples(source, image_size, count)

    def build(self, config: ViTConfig) -> keras.Model:
        settings = self.preset.detect
        anchor_size = (settings.anchor_width, settings.anchor_height) \
            if settings.anchor_width and settings.anchor_height else None
        model = ViTDetector(config, num_queries=settings.queries,
                            decoder_layers=settings.layers, decoder_width=settings.width,
                            anchor_size=anchor_size, all_layers=True)
        if self.preset.finetune.weights:  # position embeddings resized to this model's grid
            load_backbone(model, self.preset.finetune.weights)
        return model

    def compile_args(self, config: ViTConfig) -> dict:
        """The set loss, and the box F1 that picks the best epoch. TensorFlow compiles the
        step without XLA: the matching calls SciPy on the host (`vit_keras.tasks.detect.loss`)."""
        loss = SetPredictionLoss(config.num_classes,
                                 auxiliary_matches=self.preset.detect.auxiliary_matches)
        args = {"loss": loss,
                "metrics": [BoxF1(config.num_classes, name="box_f1")]}
        if keras.backend.backend() == "tensorflow":
            args["jit_compile"] = False
        return args

    def classifier(self, model, config):
        """The float32 detector `model.keras` holds: the last block's outputs, LoRA merged."""
        merged = finetune.mergeable(model)
        return float32_twin(merged, lambda: ViTDetector.from_config(
            {**merged.get_config(), "all_layers": False, "dtype": None}))

    def evaluate_extras(self, model, val_dataset, val_source=None, train_source=None) -> dict:
        """COCO's scores on the whole validation source, each image's boxes at its own size."""
        scores = detection_eval.evaluate_keras(model, val_source,
                                               self.preset.data.preprocessing)
        found = detection_eval.report(scores)
        if train_source is not None:
            constant = baseline.source_scores(train_source, val_source)
            found.update({f"val_constant_box_{key}": value for key, value in constant.items()})
            found["val_beats_constant_box"] = baseline.beats(scores, constant)
        return found

    def baseline_rows(self, metrics: dict) -> list[tuple[str, str]]:
        """The constant box's mAP and mAP@0.5 on the validation images, and the lead over it."""
        if "val_constant_box_mAP" not in metrics:
            return []
        return [("constant box (val/test)",
                 baseline.table_cell(*_against_constant_box(metrics)))]

    def shortfall(self, metrics: dict) -> str | None:
        if "val_constant_box_mAP" not in metrics:
            return None
        return baseline.shortfall(*_against_constant_box(metrics))

    def report(self, results: dict) -> dict:
        return {"val_box_f1": float(results["box_f1"]), "val_loss": float(results["loss"])}


def _against_constant_box(metrics: dict) -> tuple[dict, dict]:
    """(the detector's, the constant box's) mAP and mAP@0.5 from metrics.json's entries."""
    return ({key: metrics[f"val_{key}"] for key, _ in baseline.COMPARED},
            {key: metrics[f"val_constant_box_{key}"] for key, _ in baseline.COMPARED})


def _most_objects(source) -> int:
    if source is None:
        return 0
    boxes = source.arrays[1]
    return int((boxes[..., 4] >= 0).sum(axis=-1).max()) if len(boxes) else 0
