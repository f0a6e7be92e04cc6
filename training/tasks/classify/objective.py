"""What a run trains for: the classification objectives, each supplying its data, model, loss
and outputs (`training.objective.Objective`), and its variants by `objective.kind` (`VARIANTS`).

`training.run.Run` does everything else the same way for all of them:

- `classify` (supervised): a `VisionTransformer` with softmax cross-entropy.
- `mpp` (masked patch prediction, paper 4.6): `vit_keras.core.masked_patch.MaskedPatchPretrainer`
  on the images (labels unused); writes `encoder.npz` (the pre-trained encoder as an
  official-layout checkpoint) to fine-tune from with `--weights`.
- `distill` (DeiT): a `distilled=True` ViT trained by `vit_keras.core.deit.DistillationTrainer`
  against the `teacher` `.keras` model, on its argmax ('hard') or its softened distribution
  ('soft').
- `multilabel`: a `VisionTransformer` whose classes are independent (sigmoid cross-entropy,
  timm's `--bce-loss`), scored by mAP and F1 (`training.tasks.classify.multilabel`); its exports
  and `vit predict` / `vit serve` give sigmoid scores (`activation` in config.json).
- `segment`: the segment task's (`training.tasks.segment.objective`).

mpp, distill and multilabel are variants of classification (they subclass it); a task of its
own subclasses `Objective` in its own module, which its line in `vit_keras.tasks.TASKS`
names.

The losses live in the models' `compute_loss` (keras.ops), so `fit` trains all of them alike.
"""

from __future__ import annotations

import os

import keras
import numpy as np

import vit_keras
from vit_app.data import evaluation, subsets
from vit_app.tasks.classify.data import readers
from vit_app.tasks.classify import multilabel_scores
from training import finetune, pipeline, recipe
from training.tasks.classify import multilabel
from training.objective import Objective, float32_twin
from vit_keras import ViTConfig, atomic
from vit_keras.core.deit import DistillationTrainer
from vit_keras.core.masked_patch import MaskedPatchPretrainer, to_classifier


def float32_copy(model: keras.Model, config: ViTConfig) -> keras.Model:
    """A float32, uncompiled classifier of `config` (`vit_keras.build_classifier`) holding
    `model`'s weights."""
    return float32_twin(model, lambda: vit_keras.build_classifier(config))


class Classification(Objective):
    """Supervised classification: the ViT itself, softmax cross-entropy, top-1/top-5."""

    name = "classify"
    metric_label = "top-1"
    metric_key = "val_top1"
    monitor = "val_accuracy"
    epoch_metrics = ("loss", "accuracy", "val_loss", "val_accuracy", "val_top5")
    closed_form_probe = True
    probe_description = "a linear classifier on frozen features, fitted once"
    hints_fine_tuning = True
    other_networks = True

    def open_data(self, data_dir: str | None):
        """The training and validation data (`vit_app.data.training_data.TrainingData`), the
        preset's classes subset applied."""
        data = self.preset.data
        return subsets.restrict_training_data(
            readers.open_training_data(data.train, data.val, data.val_split, self.preset.seed,
                                       data_dir), data.classes)

    def train_batches(self, source, image_size, batch_size: int, **options):
        """The augmented training batches (`training.pipeline.train_dataset`'s options)."""
        return pipeline.train_dataset(source, image_size, batch_size, self.preset, **options)

    def eval_batches(self, source, image_size, batch_size: int, num_classes: int, **options):
        """Validation batches (`vit_app.data.evaluation.eval_dataset`'s options)."""
        return evaluation.eval_dataset(source, image_size, batch_size, num_classes=num_classes,
                                       **options)

    def sample_targets(self, batch: int, config: ViTConfig) -> np.ndarray:
        """Zero targets of one batch, to build a model without reading the data."""
        return np.zeros((batch, config.num_classes), np.float32)

    def loss_note(self) -> str:
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
            data: the run's `vit_app.data.training_data.TrainingData`.
        """
        if data.train.multilabel:
            raise ValueError(f"{data.train.spec} is multi-label data (an image may have several "
                             f"classes): train it with --set objective.kind=multilabel, not "
                             f"{self.name!r}")
        if data.train.num_classes < 2:
            raise ValueError(f"{data.train.spec} has {data.train.num_classes} class "
                             f"({', '.join(data.train.class_names)}): a classifier needs at "
                             "least 2 classes to tell apart")

    def build(self, config: ViTConfig) -> keras.Model:
        """The trained model (called inside the strategy scope): the config's classifier
        with `--weights`, a head of another shape left at its initial values."""
        return vit_keras.build_classifier(config, weights=self.preset.finetune.weights or None)

    def compile_args(self, config: ViTConfig) -> dict:
        """The loss and metrics `compile` gets."""
        return {"loss": recipe.make_loss(self.preset),
                "metrics": recipe.make_metrics(config.num_classes)}

    def classifier(self, model: keras.Model, config: ViTConfig) -> keras.Model:
        """The float32 classifier `model.keras` holds and exports get (LoRA merged)."""
        return float32_copy(finetune.mergeable(self.network(model)), config)

    def export_samples(self, source, image_size, count: int, preprocessing):
        """Up to `count` raw examples the exports calibrate and are checked on: (float32
        images in 0..255 at `image_size`, their labels)."""
        return evaluation.take_raw_images(source, image_size, count, preprocessing)

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
    hints_fine_tuning = False
    other_networks = False

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
    hints_fine_tuning = False
    other_networks = False

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
        student = vit_keras.build_classifier(config,
                                             weights=self.preset.finetune.weights or None)
        return DistillationTrainer(student, teacher,
                                   label_smoothing=self.preset.objective.label_smoothing,
                                   mode=self.preset.objective.distill_mode,
                                   temperature=self.preset.objective.distill_temperature)

    def network(self, model):
        return model.student

    def compile_args(self, config):
        return {"metrics": recipe.make_metrics(config.num_classes)}

    def evaluate_extras(self, model, val_dataset, val_source=None, train_source=None):
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
    F1 of the whole validation set (`training.tasks.classify.multilabel`).
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

    def evaluate_extras(self, model, val_dataset, val_source=None, train_source=None) -> dict:
        """The exact mAP and F1 (threshold 0.5) over every validation example."""
        logits, targets = multilabel_scores.predictions(model, val_dataset)
        scores = multilabel_scores.report(targets, logits)
        extras = {f"val_{key}": scores[key] for key in ("mAP", "f1_micro", "f1_macro")}
        extras = {key: None if np.isnan(value) else value for key, value in extras.items()}
        return {**extras, "val_classes_scored": scores["classes_scored"]}

    def report(self, results: dict) -> dict:
        return {"val_pr_auc": float(results["pr_auc"]), "val_loss": float(results["loss"]),
                "val_cross_entropy": float(results["cross_entropy"])}


# objective.kind -> the objective of a variant of classification (`training.objective`'s
# `get_objective` finds a task's own objective by its line in `vit_keras.tasks.TASKS`, a
# variant here)
VARIANTS = {"mpp": MaskedPatchPrediction, "distill": Distillation, "multilabel": MultiLabel}
