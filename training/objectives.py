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

The losses live in the models' `compute_loss` (keras.ops), so `fit` trains all three alike.
"""

from __future__ import annotations

import os

import keras
import numpy as np

import vit_keras
from vit.inference import multilabel_scores
from training import finetune, multilabel, recipe
from vit_keras import ViTConfig, atomic
from vit_keras.core.deit import DistillationTrainer
from vit_keras.core.masked_patch import MaskedPatchPretrainer, to_classifier



def float32_copy(model: keras.Model, config: ViTConfig) -> keras.Model:
    """A float32, uncompiled `VisionTransformer(config)` holding `model`'s weights."""
    policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("float32")
    try:
        copy = vit_keras.VisionTransformer(config)
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
    monitor = "val_accuracy"  # the logged metric that chooses the best weights (higher = better)
    activation = "softmax"  # what turns the model's logits into its scores, in every format
    multilabel = False  # each class scored on its own (sigmoid), e.g. for the linear probe

    def __init__(self, preset):
        self.preset = preset

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

    def evaluate_extras(self, model, val_dataset) -> dict:
        """metrics.json entries measured beyond `evaluate` (none)."""
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
    exports = False  # the head is untrained: fine-tune the encoder first

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

    def evaluate_extras(self, model, val_dataset):
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

    def evaluate_extras(self, model, val_dataset) -> dict:
        """The exact mAP and F1 (threshold 0.5) over every validation example."""
        logits, targets = multilabel_scores.predictions(model, val_dataset)
        scores = multilabel_scores.report(targets, logits)
        extras = {f"val_{key}": scores[key] for key in ("mAP", "f1_micro", "f1_macro")}
        extras = {key: None if np.isnan(value) else value for key, value in extras.items()}
        return {**extras, "val_classes_scored": scores["classes_scored"]}

    def report(self, results: dict) -> dict:
        return {"val_pr_auc": float(results["pr_auc"]), "val_loss": float(results["loss"]),
                "val_cross_entropy": float(results["cross_entropy"])}


def get_objective(preset):
    """The objective `preset.objective.kind` names, set up for `preset`."""
    table = {"classify": Classification, "mpp": MaskedPatchPrediction, "distill": Distillation,
             "multilabel": MultiLabel}
    return table[preset.objective.kind](preset)
