"""The segment task's training part: a `ViTSegmenter` (a class per pixel) on image/mask pairs.

Its data are image/mask pairs (`vit_app.data.segmentation`), augmented together
(`training.segment_pipeline`); its loss pixel cross-entropy that ignores 255, with an optional
Dice term (`training.segment_loss`); its best weights follow Keras' `MeanIoU` at the model's
resolution, and metrics.json reports the exact mIoU, pixel accuracy and per-class IoU at the
masks' own resolution (`vit_app.inference.segmentation_eval`). Its small-data rule sees fewer
images than a classifier's, since every pixel is a training signal.
"""

from __future__ import annotations

import math

import keras
import numpy as np

from training import adapt, finetune, segment_pipeline
from training.objective import Objective, float32_twin
from training.segment_loss import CrossEntropyDice
from vit_app.data import segmentation as segmentation_data
from vit_app.inference import segmentation_eval
from vit_keras import ViTConfig
from vit_keras.segmentation import ViTSegmenter, load_backbone
from vit_keras.segmentation_scores import IGNORE


def _head_stages(patch: int) -> dict:
    """The progressive head's 2x stages undo the patch grid's downsampling."""
    return {"objective.segment_stages": int(math.log2(patch))}


# About 18,000 images seen in all (the digit scenes' 15 epochs of 1,200), 15 to 100 epochs;
# photographs get no recipe of their own.
SMALL_DATA_RULE = adapt.TaskRule(images_seen=18_000, min_epochs=15, photo_recipe=False,
                                 own_choices=_head_stages)


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
        super().__init__(preset)

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
        return segmentation_data.eval_dataset(source, image_size, batch_size, **options)

    def sample_targets(self, batch, config):
        return np.zeros((batch, *config.image_hw), np.int32)

    def export_samples(self, source, image_size, count: int, preprocessing):
        """Images resized whole, as the masks are (`preprocessing` crops nothing here), and
        their masks at the model's size: each file is checked pixel by pixel."""
        return segmentation_data.take_pairs(source, image_size, count)

    def build(self, config: ViTConfig) -> keras.Model:
        settings = self.preset.objective
        probing = self.preset.finetune.mode == "probe"
        model = ViTSegmenter(config, head="linear" if probing else settings.segment_head,
                             blocks=settings.segment_blocks, head_width=settings.segment_width,
                             head_stages=settings.segment_stages)
        if self.preset.finetune.weights:  # position embeddings resized to this model's grid
            load_backbone(model, self.preset.finetune.weights)
        return model

    def compile_args(self, config: ViTConfig) -> dict:
        dice = self.preset.objective.segment_dice
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

    def evaluate_extras(self, model, val_dataset, val_source=None) -> dict:
        """The exact scores at the masks' resolution over the whole validation source."""
        matrix = segmentation_eval.confusion(
            segmentation_eval.keras_predict(model), val_source, model.config.image_hw,
            model.config.num_classes, preprocessing=self.preset.data.preprocessing)
        return segmentation_eval.report(matrix, val_source.class_names)

    def report(self, results: dict) -> dict:
        return {"val_mean_iou_model_resolution": float(results["mean_iou"]),
                "val_loss": float(results["loss"])}
