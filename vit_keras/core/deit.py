"""DeiT (Touvron et al., 2021): a distillation token trained against a teacher.

`ViTConfig(distilled=True)` makes `VisionTransformer` insert a `DistillationToken` after the
class token and read it with a second head `head_dist`; the model returns the average of both
heads (inference as in DeiT). `DistillationTrainer` trains such a model with `fit` and the
distillation loss against any Keras teacher, hard (DeiT's best) or soft:

    hard: loss = 1/2 CE(head(cls), labels) + 1/2 CE(head_dist(dist), argmax teacher(images))
    soft: loss = 1/2 CE(head(cls), labels)
                 + 1/2 T^2 KL(softmax(teacher(images) / T) || softmax(head_dist(dist) / T))
"""

from __future__ import annotations

import keras
from keras import ops

from vit_keras.core.initializers import PACKAGE


@keras.saving.register_keras_serializable(package=PACKAGE)
class DistillationToken(keras.layers.Layer):
    """Inserts a learned distillation token (weight `dist` (1, 1, D), normal(0.02)) after the
    class token: [cls, patches...] -> [cls, dist, patches...]."""

    def build(self, input_shape):
        self.dist = self.add_weight(name="dist", shape=(1, 1, input_shape[-1]),
                                    initializer=keras.initializers.RandomNormal(stddev=0.02))

    def no_weight_decay(self):
        return [self.dist]

    def call(self, tokens):
        batch = ops.shape(tokens)[0]
        dist = ops.broadcast_to(ops.cast(self.dist, tokens.dtype), (batch, 1, tokens.shape[-1]))
        return ops.concatenate([tokens[:, :1], dist, tokens[:, 1:]], axis=1)

    def compute_output_shape(self, input_shape):
        batch, length, width = input_shape
        return (batch, None if length is None else length + 1, width)


def two_head_model(model: keras.Model) -> keras.Model:
    """The (class-head logits, distillation-head logits) model sharing `model`'s layers.

    Args:
        model: a `VisionTransformer` built with `distilled=True` (with its head).
    """
    names = {layer.name for layer in model.layers}
    if not {"head", "head_dist"} <= names:
        raise ValueError(f"model {model.name!r} has no 'head' and 'head_dist' layers: build it "
                         "with ViTConfig(distilled=True) and include_top=True")
    return keras.Model(model.inputs[0], [model.get_layer("head").output,
                                         model.get_layer("head_dist").output],
                       name=f"{model.name}_two_heads")


def hard_distillation_loss(labels, teacher_logits, class_logits, distill_logits,
                           label_smoothing: float = 0.0):
    """DeiT's hard-label distillation objective (mean over the batch).

    Under a tf.distribute strategy the value is scaled per replica, as Keras losses are.

    Args:
        labels: one-hot (or soft) targets [batch, classes].
        teacher_logits: the teacher's outputs [batch, classes] (logits or probabilities).
        class_logits, distill_logits: the student's two heads.
        label_smoothing: applied to the true labels only (the teacher's labels stay hard).

    Returns:
        scalar loss.
    """
    classes = class_logits.shape[-1]
    teacher_labels = ops.one_hot(ops.argmax(teacher_logits, axis=-1), classes)
    true_loss = keras.losses.CategoricalCrossentropy(from_logits=True,
                                                     label_smoothing=label_smoothing)
    teacher_loss = keras.losses.CategoricalCrossentropy(from_logits=True)
    return 0.5 * true_loss(labels, class_logits) + 0.5 * teacher_loss(teacher_labels,
                                                                      distill_logits)


def soft_distillation_loss(labels, teacher_logits, class_logits, distill_logits,
                           temperature: float = 1.0, label_smoothing: float = 0.0):
    """DeiT's soft distillation objective (mean over the batch): the distillation head matches
    the teacher's distribution softened by `temperature` (Hinton et al.), scaled by T^2 so that
    its gradients keep their size as T changes.

    Args:
        labels: one-hot (or soft) targets [batch, classes].
        teacher_logits: the teacher's logits [batch, classes] (not probabilities).
        class_logits, distill_logits: the student's two heads.
        temperature: the softening temperature T > 0.
        label_smoothing: applied to the true labels only.

    Returns:
        scalar loss.
    """
    true_loss = keras.losses.CategoricalCrossentropy(from_logits=True,
                                                     label_smoothing=label_smoothing)
    teacher = ops.softmax(ops.cast(teacher_logits, "float32") / temperature, axis=-1)
    student = ops.softmax(ops.cast(distill_logits, "float32") / temperature, axis=-1)
    kl = keras.losses.KLDivergence()(teacher, student)
    return 0.5 * true_loss(labels, class_logits) + 0.5 * temperature ** 2 * kl


DISTILL_MODES = ("hard", "soft")


class DistillationTrainer(keras.Model):
    """Trains a distilled ViT against a frozen teacher with `fit`.

    Its outputs are the student's two heads; `compute_loss` is `hard_distillation_loss`
    against the teacher's argmax or `soft_distillation_loss` against its softened logits, and compiled metrics see the average of the two heads (the
    student's inference output). Only `keras.ops`: it trains on every backend and under any
    distribution strategy. Save `trainer.student`, not the trainer.

    Args:
        student: a `VisionTransformer` with `distilled=True`.
        teacher: any Keras model mapping the same images to class scores.
        label_smoothing: label smoothing of the true-label term.
        mode: 'hard' or 'soft' (the teacher must then give logits).
        temperature: the temperature of 'soft' distillation.
    """

    def __init__(self, student: keras.Model, teacher: keras.Model, label_smoothing: float = 0.0,
                 mode: str = "hard", temperature: float = 1.0, **kwargs):
        if mode not in DISTILL_MODES:
            raise ValueError(f"distillation mode must be one of {DISTILL_MODES}, got {mode!r}")
        if not temperature > 0:
            raise ValueError(f"distillation temperature must be > 0, got {temperature!r}")
        super().__init__(**kwargs)
        self.mode, self.temperature = mode, float(temperature)
        self.student = student
        self.two_heads = two_head_model(student)
        self.teacher = teacher
        self.teacher.trainable = False
        self.label_smoothing = label_smoothing
        self.built = True  # the student and the teacher come built

    def call(self, images, training=False):
        """The student's (class-head logits, distillation-head logits)."""
        return self.two_heads(images, training=training)

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        class_logits, distill_logits = y_pred
        teacher_logits = ops.stop_gradient(self.teacher(x, training=False))
        if self.mode == "soft":
            return soft_distillation_loss(y, teacher_logits, class_logits, distill_logits,
                                          self.temperature, self.label_smoothing)
        return hard_distillation_loss(y, teacher_logits, class_logits, distill_logits,
                                      self.label_smoothing)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        class_logits, distill_logits = y_pred
        averaged = (class_logits + distill_logits) / 2
        return super().compute_metrics(x, y, averaged, sample_weight=sample_weight)
