"""The pixel loss of `--task segment` with a Dice term (`segment.dice` > 0).

Cross-entropy scores every pixel on its own; the soft Dice loss (Milletari et al. 2016, as
mmsegmentation's `DiceLoss` computes it) scores each class's overlap as a whole, so a small class
weighs as much as the background. Pixels labelled 255 count in neither term.
"""

from __future__ import annotations

import keras
from keras import ops

from vit_keras.tasks.segment.scores import IGNORE

DICE_SMOOTH = 1.0  # mmsegmentation's default: an absent class that is not predicted scores 1


@keras.saving.register_keras_serializable(package="vit_training")
class CrossEntropyDice(keras.losses.Loss):
    """Pixel cross-entropy + `dice_weight` x (1 - soft Dice), per image, 255 ignored.

    Args:
        dice_weight: the Dice term's weight (> 0).
        ignore_class: the label of pixels left out (default 255).
        name: the loss's name.
    """

    def __init__(self, dice_weight: float, ignore_class: int = IGNORE,
                 name: str = "cross_entropy_dice", **kwargs):
        super().__init__(name=name, **kwargs)
        self.dice_weight = float(dice_weight)
        self.ignore_class = int(ignore_class)

    def call(self, y_true, y_pred):
        """Masks [batch, H, W] and logits [batch, H, W, classes] -> loss per image [batch]."""
        logits = ops.cast(y_pred, "float32")
        labels = ops.cast(y_true, "int32")
        valid = ops.cast(ops.not_equal(labels, self.ignore_class), "float32")
        safe = ops.where(labels == self.ignore_class, 0, labels)
        pixel = keras.losses.sparse_categorical_crossentropy(safe, logits, from_logits=True)
        counted = ops.maximum(ops.sum(valid, axis=(1, 2)), 1.0)
        cross_entropy = ops.sum(pixel * valid, axis=(1, 2)) / counted
        truth = ops.one_hot(safe, ops.shape(logits)[-1]) * valid[..., None]
        predicted = ops.softmax(logits, axis=-1) * valid[..., None]
        overlap = ops.sum(truth * predicted, axis=(1, 2))
        sizes = ops.sum(truth, axis=(1, 2)) + ops.sum(predicted, axis=(1, 2))
        dice = ops.mean((2 * overlap + DICE_SMOOTH) / (sizes + DICE_SMOOTH), axis=-1)
        return cross_entropy + self.dice_weight * (1.0 - dice)

    def get_config(self):
        return {**super().get_config(), "dice_weight": self.dice_weight,
                "ignore_class": self.ignore_class}
