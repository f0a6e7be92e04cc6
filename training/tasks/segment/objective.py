"""The segment task's training part: a `ViTSegmenter` (a class per pixel) on image/mask pairs.

Its data are image/mask pairs (`vit_app.tasks.segment.data.sources`), augmented together
(`training.tasks.segment.pipeline`); its loss pixel cross-entropy that ignores 255, with an
optional Dice term (`training.tasks.segment.loss`); its best weights follow Keras' `MeanIoU` at the
model's resolution, and metrics.json reports the exact mIoU, pixel accuracy and per-class IoU at
the masks' own resolution (`vit_app.tasks.segment.evaluate`). Its small-data rule sees fewer images
than a classifier's, since every pixel is a training signal.
"""

from __future__ import annotations

import dataclasses
import math

import keras
import numpy as np

from training import adapt, finetune
from training.tasks.segment import pipeline as segment_pipeline
from training.objective import Objective, float32_twin
from training.tasks.segment.loss import CrossEntropyDice
from vit_app.tasks.segment.data import sources as segmentation_data
from vit_app.tasks.segment import evaluate as segmentation_eval
from vit_keras import ViTConfig
from vit_keras.tasks.segment.model import ViTSegmenter, load_backbone
from vit_keras.preprocessing import OFFICIAL
from vit_keras.tasks.segment.scores import IGNORE


# Images whose longer side is at least this keep their resolution: shrunk whole to the rule's
# 64 px, 1-3 px structures vanish from the masks themselves (membrane IoU 0%,
# docs/segmentation.md), so they train as crops of NATIVE_CROP px at their own size.
NATIVE_FROM = 2 * adapt.MAX_SIDE
NATIVE_CROP, NATIVE_PATCH = 128, 8
# About 3 minutes on 2 CPU cores (the membranes' 24 slices: 12 epochs of 384 crops), the
# minutes a few dozen large images are worth; the skip head reached 91% mIoU in a third of it.
NATIVE_CROPS_SEEN = 4_800
NATIVE_MIN_EPOCHS = 5
# A 128 px crop holds 16 times a 32 px scene's pixels: the skip head's full-resolution level
# stays 16 wide (membranes: 95.7% mIoU, 0.3 points above a U-Net given the same time).
NATIVE_HEAD_WIDTH = 64


def _crops_per_image(native_hw) -> int:
    return segment_pipeline.crops_to_cover(native_hw, (NATIVE_CROP, NATIVE_CROP))


def _rule_choices(native_hw, num_examples: int, patch: int) -> dict:
    """The segment task's own choices: the skip head's levels back to full resolution; large
    images as native crops (see `NATIVE_FROM`) with flips, a narrower head, and epochs for
    `NATIVE_CROPS_SEEN` crops in all."""
    if max(native_hw) < NATIVE_FROM:
        return {"segment.stages": int(math.log2(patch))}
    epochs = round(NATIVE_CROPS_SEEN / (num_examples * _crops_per_image(native_hw)))
    return {"model.image_size": NATIVE_CROP, "model.patch_size": NATIVE_PATCH,
            "model.dynamic_image_size": True, "model.dynamic_image_pad": True,
            "segment.native": True,
            "segment.stages": int(math.log2(NATIVE_PATCH)),
            "segment.width": NATIVE_HEAD_WIDTH,
            "segment.scale_min": 1.0, "segment.scale_max": 1.0,
            "augment.flip": True,
            "schedule.epochs": int(min(adapt.MAX_EPOCHS, max(NATIVE_MIN_EPOCHS, epochs)))}


def _rule_reason(native_hw, num_examples: int, patch: int) -> str:
    if max(native_hw) < NATIVE_FROM:
        return ""
    return (f"images of {native_hw[0]}x{native_hw[1]} px keep their resolution: "
            f"{_crops_per_image(native_hw)} random {NATIVE_CROP} px crops per image per epoch, "
            f"about {NATIVE_CROPS_SEEN} crops in all (minutes on a CPU), and whole images "
            "segmented at their size; shrunk to 64 px, thin structures would vanish")


# About 18,000 images seen in all (the digit scenes' 15 epochs of 1,200), 15 to 100 epochs;
# photographs get no recipe of their own.
SMALL_DATA_RULE = adapt.TaskRule(images_seen=18_000, min_epochs=15, photo_recipe=False,
                                 own_choices=_rule_choices, own_reason=_rule_reason)


class Segmentation(Objective):
    """Semantic segmentation: a `ViTSegmenter`, pixel cross-entropy ignoring 255, mIoU.

    `finetune probe` is DINOv2's protocol: a linear head trained on the frozen encoder's patch
    tokens.
    """

    name = "segment"
    metric_label = "mIoU"
    metric_key = "val_mIoU"
    monitor = "val_mean_iou"
    monitor_label = "mIoU (model resolution)"
    probe_description = "a linear head trained on the frozen patch tokens"
    small_data_rule = SMALL_DATA_RULE

    def __init__(self, preset):
        if preset.objective.label_smoothing:
            raise ValueError("objective 'segment' takes no label smoothing: drop "
                             "objective.label_smoothing")
        if preset.segment.native and not preset.model.dynamic_image_size:
            raise ValueError("segment.native segments whole images at their own size, "
                             "which needs a model taking any size: set "
                             "model.dynamic_image_size=true (and model.dynamic_image_pad=true "
                             "for sides that are not multiples of the patch size)")
        super().__init__(preset)

    @property
    def native(self) -> bool:
        """Trained on crops at the images' own resolution, fed whole images at their size."""
        return self.preset.segment.native

    def model_preprocessing(self, preprocessing):
        """The data's rule, with images kept at their own size for a native-crop model."""
        return dataclasses.replace(preprocessing, crop_mode="native", crop_fraction=1.0) \
            if self.native else preprocessing

    def epoch_examples(self, source, num_examples: int) -> int:
        """Native crops: as many per image as cover a typical one
        (`segment_pipeline.native_passes`)."""
        if not self.native:
            return num_examples
        return num_examples * segment_pipeline.native_passes(source, self.preset.model.image_hw)

    def open_data(self, data_dir):
        data = self.preset.data
        return segmentation_data.open_segmentation_data(data.train, data.val, data.val_split,
                                                        self.preset.seed)

    def check_data(self, data) -> None:
        """Segmentation data: every pixel labelled with a class id (or ignored)."""
        if data.train.decode_mask is None:
            raise ValueError(f"{data.train.spec} has no masks: segmentation needs "
                             "'digit-scenes' or folder:DIR with DIR/images/ and DIR/masks/")

    def train_batches(self, source, image_size, batch_size, **options):
        return segment_pipeline.train_dataset(source, image_size, batch_size, self.preset,
                                              **options)

    def eval_batches(self, source, image_size, batch_size, num_classes, **options):
        """Images resized whole, or for a native-crop model tiles of its size at the images'
        own resolution (the exact whole-image scores come in `evaluate_extras`)."""
        if self.native:
            return segmentation_data.native_eval_dataset(
                source, image_size, batch_size, options.get("preprocessing", OFFICIAL))
        return segmentation_data.eval_dataset(source, image_size, batch_size, **options)

    def sample_targets(self, batch, config):
        return np.zeros((batch, *config.image_hw), np.int32)

    def export_samples(self, source, image_size, count: int, preprocessing):
        """Images resized whole, as the masks are (`preprocessing` crops nothing here), and
        their masks at the model's size (native-crop models: tiles at the images' own
        resolution): each file is checked pixel by pixel."""
        if self.native:
            return segmentation_data.take_tiles(source, image_size, count)
        return segmentation_data.take_pairs(source, image_size, count)

    def build(self, config: ViTConfig) -> keras.Model:
        settings = self.preset.segment
        probing = self.preset.finetune.mode == "probe"
        model = ViTSegmenter(config, head="linear" if probing else settings.head,
                             blocks=settings.blocks, head_width=settings.width,
                             head_stages=settings.stages)
        if self.preset.finetune.weights:  # position embeddings resized to this model's grid
            load_backbone(model, self.preset.finetune.weights)
        return model

    def compile_args(self, config: ViTConfig) -> dict:
        dice = self.preset.segment.dice
        loss = CrossEntropyDice(dice) if dice else keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, ignore_class=IGNORE)
        return {"loss": loss,
                "metrics": [keras.metrics.MeanIoU(config.num_classes, name="mean_iou",
                                                  ignore_class=IGNORE, sparse_y_pred=False)]}

    def classifier(self, model, config):
        """The float32 segmenter `model.keras` holds (LoRA merged)."""
        merged = finetune.mergeable(model)
        return float32_twin(merged, lambda: ViTSegmenter.from_config(
            {**merged.get_config(), "dtype": None}))

    def evaluate_extras(self, model, val_dataset, val_source=None, train_source=None) -> dict:
        """The exact scores at the masks' resolution over the whole validation source (a
        native-crop model segments each whole image at its size)."""
        preprocessing = self.preset.data.preprocessing
        if self.native:
            matrix = segmentation_eval.native_confusion(
                segmentation_eval.keras_native(model, preprocessing), val_source,
                model.config.num_classes)
        else:
            matrix = segmentation_eval.confusion(
                segmentation_eval.keras_predict(model), val_source, model.config.image_hw,
                model.config.num_classes, preprocessing=preprocessing)
        return segmentation_eval.report(matrix, val_source.class_names)

    def report(self, results: dict) -> dict:
        return {"val_mean_iou_model_resolution": float(results["mean_iou"]),
                "val_loss": float(results["loss"])}
