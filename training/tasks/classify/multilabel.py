"""Multi-label training: the sigmoid cross-entropy loss and the per-epoch Keras metrics.

Keras' `AUC(curve='PR', multi_label=True)` approximates average precision from 200 score bins:
it is logged each epoch as `pr_auc` and chooses the best weights. The mAP a run reports is exact
(`vit_app.tasks.classify.multilabel_scores`), computed from every validation score once
training ends.
"""

from __future__ import annotations

import keras
from keras import ops

from vit_app.tasks.classify.multilabel_scores import THRESHOLD


@keras.saving.register_keras_serializable(package="vit_training")
class SigmoidCrossEntropy(keras.losses.Loss):
    """Binary cross-entropy of sigmoid(logits) per class, averaged over the classes.

    Label smoothing `s` is timm's (`BinaryCrossEntropy`): a target y becomes
    y (1 - s) + s / C for C classes, so a positive aims at 1 - s + s / C and a negative at s / C.
    (Keras' own smoothing pulls every target towards 0.5, which with many classes weighs on the
    many negatives.)

    Args:
        label_smoothing: s in [0, 1).
        name: the loss's name.
    """

    def __init__(self, label_smoothing: float = 0.0, name: str = "sigmoid_cross_entropy",
                 **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = float(label_smoothing)

    def call(self, y_true, y_pred):
        y_pred = ops.cast(y_pred, "float32")
        y_true = ops.cast(y_true, "float32")
        if self.label_smoothing:
            classes = ops.cast(ops.shape(y_true)[-1], "float32")
            y_true = y_true * (1.0 - self.label_smoothing) + self.label_smoothing / classes
        return keras.losses.binary_crossentropy(y_true, y_pred, from_logits=True)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}


@keras.saving.register_keras_serializable(package="vit_training")
class SigmoidF1Score(keras.metrics.F1Score):
    """`keras.metrics.F1Score` of logits: F1Score thresholds probabilities, so the logits go
    through a sigmoid first."""

    def update_state(self, y_true, y_pred, sample_weight=None):
        probabilities = ops.sigmoid(ops.cast(y_pred, "float32"))
        return super().update_state(y_true, probabilities, sample_weight)


def make_metrics(num_classes: int) -> list:
    """The per-epoch metrics: `pr_auc` (Keras' binned approximation of the mAP), `f1_micro` and
    `f1_macro` (at `THRESHOLD`) and `cross_entropy` (sigmoid, without label smoothing)."""
    return [keras.metrics.AUC(curve="PR", multi_label=True, num_labels=num_classes,
                              from_logits=True, name="pr_auc"),
            SigmoidF1Score(average="micro", threshold=THRESHOLD, name="f1_micro"),
            SigmoidF1Score(average="macro", threshold=THRESHOLD, name="f1_macro"),
            keras.metrics.BinaryCrossentropy(from_logits=True, name="cross_entropy")]
