"""What a run trains for: each objective supplies its model, its loss and its outputs.

`training.run.Run` does everything else the same way for all of them (strategy, data, plan,
precision, optimizer, backups and `--resume`, the NaN stop, history, best weights, evaluation,
export and inspection):

- `classify` (supervised): a `VisionTransformer` with softmax cross-entropy.
- `mpp` (masked patch prediction, paper 4.6): `vit_keras.core.masked_patch.MaskedPatchPretrainer`
  on the images (labels unused); writes `encoder.npz` (the pre-trained encoder as an
  official-layout checkpoint) to fine-tune from with `--weights`.
- `distill` (DeiT): a `distilled=True` ViT trained by `vit_keras.core.deit.DistillationTrainer`
  against the `teacher` `.keras` model, on its argmax ('hard') or its softened distribution
  ('soft').
- `multilabel`: a `VisionTransformer` whose classes are independent (sigmoid cross-entropy,
  timm's `--bce-loss`), scored by mAP and F1 (`training.multilabel`); its exports and
  `vit predict` / `vit serve` give sigmoid scores (`activation` in config.json).
- `segment`: a `vit_keras.ViTSegmenter` (a class per pixel) on image/mask pairs
  (`vit.data.segmentation`, `training.segment_pipeline`), pixel cross-entropy that ignores
  255, scored by mIoU, pixel accuracy and per-class IoU at the masks' own resolution.

Each objective opens its data (`open_data`) and makes its training and validation batches
(`train_batches`, `eval_batches`), so the run never asks which objective it trains.

The losses live in the models' `compute_loss` (keras.ops), so `fit` trains all three alike.
"""

from __future__ import annotations

import os

import keras
import numpy as np

import vit_keras
from vit.data import evaluation, segmentation as segmentation_data, sources, subsets
from vit.inference import multilabel_scores, segmentation_eval
from training import finetune, multilabel, pipeline, recipe, segment_pipeline
from training.segment_loss import CrossEntropyDice
from vit_keras import ViTConfig, atomic
from vit_keras.segmentation import ViTSegmenter, load_backbone
from vit_keras.segmentation_scores import IGNORE
from vit_keras.core.deit import DistillationTrainer
from vit_keras.core.masked_patch import MaskedPatchPretrainer, to_classifier



def float32_copy(model: keras.Model, config: ViTConfig) -> keras.Model:
    """A float32, uncompiled `VisionTransformer(config)` holding `model`'s weights."""
    return _float32_twin(model, lambda: vit_keras.VisionTransformer(config))


def _float32_twin(model: keras.Model, make) -> keras.Model:
    """`make()` built under the float32 policy, holding `model`'s weights."""
    policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("float32")
    try:
        copy = make()
    finally:
        keras.mixed_precision.set_global_policy(policy)
    copy.set_weights([np.asarray(weight) for weight in model.get_weights()])
    return copy


class Classification:
    """Supervised classification: the ViT itself, softmax cross-entropy, top-1/top-5."""

    name = "classify"
    metric_label = "top-1"
    metric_key = "val_top1"
    exports = True
    export_skipped = ""  # why `exports` is False, for the run's output
    monitor = "val_accuracy"  # the logged metric that chooses the best weights (higher = better)
    activation = "softmax"  # what turns the model's logits into its scores, in every format
    multilabel = False  # each class scored on its own (sigmoid), e.g. for the linear probe

    closed_form_probe = True  # finetune 'probe' fits the head once, without gradient steps

    def __init__(self, preset):
        self.preset = preset

    def open_data(self, data_dir: str | None):
        """The training and validation data (`vit.data.sources.TrainingData`), the preset's
        classes subset applied."""
        data = self.preset.data
        return subsets.restrict_training_data(
            sources.open_training_data(data.train, data.val, data.val_split, self.preset.seed,
                                       data_dir), data.classes)

    def train_batches(self, source, image_size, batch_size: int, **options):
        """The augmented training batches (`training.pipeline.train_dataset`'s options)."""
        return pipeline.train_dataset(source, image_size, batch_size, self.preset, **options)

    def eval_batches(self, source, image_size, batch_size: int, num_classes: int, **options):
        """Validation batches (`vit.data.evaluation.eval_dataset`'s options)."""
        return evaluation.eval_dataset(source, image_size, batch_size, num_classes=num_classes,
                                       **options)

    def sample_targets(self, batch: int, config: ViTConfig) -> np.ndarray:
        """Zero targets of one batch, to build a model without reading the data."""
        return np.zeros((batch, config.num_classes), np.float32)

    @property
    def monitor_label(self) -> str:
        """How the result table names the `monitor` metric."""
        return self.metric_label

    def loss_note(self) -> str:
        """The header's line on how the epoch lines' loss differs from the table's ('' when
        it does not)."""
        smoothing = self.preset.objective.label_smoothing
        if not smoothing:
            return ""
        return (f"loss: the epoch lines' loss is the training objective, cross-entropy with "
                f"label smoothing {smoothing}; the result table reports plain cross-entropy, "
                "as `vit evaluate` does")

    def check_data(self, data) -> None:
        """Refuses training data this objective cannot learn from (a multi-label source, fewer
        than 2 classes).

        Args:
            data: the run's `vit.data.sources.TrainingData`.
        """
        if data.train.multilabel:
            raise ValueError(f"{data.train.spec} is multi-label data (an image may have several "
                             f"classes): train it with --set objective.kind=multilabel, not "
                             f"{self.name!r}")
        if data.train.num_classes < 2:
            raise ValueError(f"{data.train.spec} has {data.train.num_classes} class "
                             f"({', '.join(data.train.class_names)}): a classifier needs at "
                             "least 2 classes to tell apart")

    def model_config(self, num_classes: int) -> ViTConfig:
        """The classifier's config for data with `num_classes` classes; a frozen backbone
        (`finetune` head or probe) runs without dropout, stochastic depth or patch dropout,
        whose noise would only blur the features its head learns from."""
        config = self.preset.model.replace(num_classes=num_classes)
        if self.preset.finetune.mode in finetune.FROZEN_BACKBONE:
            config = config.replace(**{name: 0.0 for name in finetune.BACKBONE_NOISE
                                       if hasattr(config, name)})
        return config

    def build(self, config: ViTConfig) -> keras.Model:
        """The trained model (called inside the strategy scope)."""
        model = vit_keras.VisionTransformer(config)
        self._load_weights(model)
        return model

    def _load_weights(self, model) -> None:
        if self.preset.finetune.weights:  # head skipped when its shape differs, posemb resized
            vit_keras.load_weights(model, self.preset.finetune.weights, skip_head=None)

    def network(self, model: keras.Model) -> keras.Model:
        """The `VisionTransformer` inside the trained model (`--finetune` freezes it)."""
        return model

    def compile_args(self, config: ViTConfig) -> dict:
        """The loss and metrics `compile` gets."""
        return {"loss": recipe.make_loss(self.preset),
                "metrics": recipe.make_metrics(config.num_classes)}

    def classifier(self, model: keras.Model, config: ViTConfig) -> keras.Model:
        """The float32 classifier `model.keras` holds and exports get (LoRA merged)."""
        return float32_copy(finetune.mergeable(self.network(model)), config)

    def write_extras(self, classifier: keras.Model, output: str) -> None:
        """Files only this objective writes (none)."""

    def export_samples(self, source, image_size, count: int, preprocessing):
        """Up to `count` raw examples the exports calibrate and are checked on: (float32
        images in 0..255 at `image_size`, their labels)."""
        return evaluation.take_raw_images(source, image_size, count, preprocessing)

    def evaluate_extras(self, model, val_dataset, val_source=None) -> dict:
        """metrics.json entries measured beyond `evaluate` (none); `val_source` is the
        validation `Source` the batches come from."""
        return {}

    def report(self, results: dict) -> dict:
        """metrics.json entries from `evaluate`'s results on the validation data."""
        return {"val_top1": float(results["accuracy"]), "val_loss": float(results["loss"]),
                "val_cross_entropy": float(results["cross_entropy"]),
                "val_top5": float(results["top5"]) if "top5" in results else None}


class MaskedPatchPrediction(Classification):
    """Self-supervised pre-training: predict the mean colour of corrupted patches."""

    name = "mpp"
    metric_label = "masked-patch colour top-1"
    metric_key = "val_mpp_accuracy"
    exports = False
    export_skipped = "its head is untrained; fine-tune the encoder, then export"

    def __init__(self, preset):
        if preset.finetune.mode != "full":
            raise ValueError(f"objective 'mpp' pre-trains every weight; got finetune="
                             f"{preset.finetune.mode!r}: use finetune=full")
        super().__init__(preset)

    def build(self, config: ViTConfig) -> keras.Model:
        if self.preset.finetune.weights:
            raise ValueError("objective 'mpp' pre-trains from scratch; got --weights "
                             f"{self.preset.finetune.weights!r}: drop it, or fine-tune with "
                             "'classify'")

        return MaskedPatchPretrainer(config, seed=self.preset.seed)

    def check_data(self, data) -> None:
        """Any data: the labels are not used."""

    def loss_note(self) -> str:
        return ""  # the table reports this objective's own loss

    def compile_args(self, config: ViTConfig) -> dict:
        return {}  # the loss and the patch accuracy are the pretrainer's own

    def classifier(self, model, config):
        return float32_copy(to_classifier(model.network, config), config)

    def write_extras(self, classifier, output):
        vit_keras.checkpoints.save_npz(classifier, os.path.join(output, "encoder.npz"))

    def report(self, results):
        return {"val_mpp_accuracy": float(results["accuracy"]),
                "val_mpp_loss": float(results["loss"])}


class Distillation(Classification):
    """DeiT distillation of a `distilled=True` student from `preset.objective.teacher` (hard or
    soft)."""

    name = "distill"

    def __init__(self, preset):
        if not preset.objective.teacher:
            raise ValueError("objective 'distill' needs a teacher: --set "
                             "objective.teacher=PATH.keras (any Keras classifier of [-1, 1] "
                             "images, e.g. a model.keras of vit train)")
        if not atomic.exists(preset.objective.teacher):
            raise ValueError(f"teacher {preset.objective.teacher!r} does not exist: expected a "
                             ".keras model file")
        if preset.finetune.mode == "probe":
            raise ValueError("finetune 'probe' fits the head to the labels without a teacher; "
                             "objective 'distill' trains against one: use finetune=head")
        super().__init__(preset)

    def model_config(self, num_classes):
        return super().model_config(num_classes).replace(distilled=True)

    def loss_note(self) -> str:
        return ""  # the table reports this objective's own loss

    def build(self, config):
        teacher = keras.saving.load_model(self.preset.objective.teacher, safe_mode=True)
        student = vit_keras.VisionTransformer(config)
        self._load_weights(student)
        return DistillationTrainer(student, teacher,
                                   label_smoothing=self.preset.objective.label_smoothing,
                                   mode=self.preset.objective.distill_mode,
                                   temperature=self.preset.objective.distill_temperature)

    def network(self, model):
        return model.student

    def compile_args(self, config):
        return {"metrics": recipe.make_metrics(config.num_classes)}

    def evaluate_extras(self, model, val_dataset, val_source=None):
        """The teacher's top-1 on the same validation data, to compare the student with."""
        hits = keras.metrics.CategoricalAccuracy()
        for images, labels in val_dataset:
            hits.update_state(labels, model.teacher(images, training=False))
        return {"teacher_val_top1": float(hits.result())}

    def report(self, results):
        report = super().report(results)
        report["val_distill_loss"] = report.pop("val_loss")  # student and teacher terms
        return report


class MultiLabel(Classification):
    """Multi-label classification: one sigmoid per class, binary cross-entropy, mAP and F1.

    Any source trains: a single-label one's one-hot targets are multi-hot with one class. The
    best weights follow Keras' binned PR-AUC (`pr_auc`); metrics.json reports the exact mAP and
    F1 of the whole validation set (`training.multilabel`).
    """

    name = "multilabel"
    metric_label = "mAP"
    metric_key = "val_mAP"
    monitor = "val_pr_auc"
    monitor_label = "PR-AUC (binned mAP)"
    activation = "sigmoid"
    multilabel = True

    def check_data(self, data) -> None:
        """Any labelled data."""

    def loss_note(self) -> str:
        return ""  # the table reports this objective's own loss

    def compile_args(self, config: ViTConfig) -> dict:
        return {"loss": multilabel.SigmoidCrossEntropy(self.preset.objective.label_smoothing),
                "metrics": multilabel.make_metrics(config.num_classes)}

    def evaluate_extras(self, model, val_dataset, val_source=None) -> dict:
        """The exact mAP and F1 (threshold 0.5) over every validation example."""
        logits, targets = multilabel_scores.predictions(model, val_dataset)
        scores = multilabel_scores.report(targets, logits)
        extras = {f"val_{key}": scores[key] for key in ("mAP", "f1_micro", "f1_macro")}
        extras = {key: None if np.isnan(value) else value for key, value in extras.items()}
        return {**extras, "val_classes_scored": scores["classes_scored"]}

    def report(self, results: dict) -> dict:
        return {"val_pr_auc": float(results["pr_auc"]), "val_loss": float(results["loss"]),
                "val_cross_entropy": float(results["cross_entropy"])}


class Segmentation(Classification):
    """Semantic segmentation: a `ViTSegmenter`, pixel cross-entropy ignoring 255, mIoU.

    The best weights follow Keras' `MeanIoU` at the model's resolution (`val_mean_iou`);
    metrics.json reports the exact mIoU, pixel accuracy and per-class IoU at the masks' own
    resolution (`vit.inference.segmentation_eval`). `finetune probe` is DINOv2's protocol: a
    linear head trained on the frozen encoder's patch tokens.
    """

    name = "segment"
    metric_label = "mIoU"
    metric_key = "val_mIoU"
    monitor = "val_mean_iou"
    monitor_label = "mIoU (model resolution)"
    closed_form_probe = False

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

    def loss_note(self) -> str:
        return ""

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
        return _float32_twin(merged, lambda: ViTSegmenter.from_config(
            {**merged.get_config(), "dtype": None}))

    def evaluate_extras(self, model, val_dataset, val_source=None) -> dict:
        """The exact scores at the masks' resolution over the whole validation source."""
        source = val_source
        matrix = segmentation_eval.confusion(
            segmentation_eval.keras_predict(model), source, model.config.image_hw,
            model.config.num_classes, preprocessing=model.config.preprocessing)
        return segmentation_eval.report(matrix, source.class_names)

    def report(self, results: dict) -> dict:
        return {"val_mean_iou_model_resolution": float(results["mean_iou"]),
                "val_loss": float(results["loss"])}


def get_objective(preset):
    """The objective `preset.objective.kind` names, set up for `preset`."""
    table = {"classify": Classification, "mpp": MaskedPatchPrediction, "distill": Distillation,
             "multilabel": MultiLabel, "segment": Segmentation}
    return table[preset.objective.kind](preset)
