"""The count task's training part: a `ViTCounter` regressing how many dots an image holds.

Its loss is Huber (or squared error) on the count; its best weights follow the share of
validation images whose rounded estimate is the true count (`exact`), with the mean absolute
error beside it on each epoch's line.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from count_task.data import sources
from count_task.model import HEAD_PREFIX, ViTCounter
from training import adapt, finetune
from training.objective import Objective, float32_twin
from training.pipeline import paired_train_dataset
from vit_app import images
from vit_keras.preprocessing import OFFICIAL
from vit_keras.task_encoder import load_encoder

# Dots are small and few: a few thousand images seen in all, at least 10 epochs.
SMALL_DATA_RULE = adapt.TaskRule(images_seen=6_000, min_epochs=10, photo_recipe=False)


def exact_counts(true_counts, estimates):
    """1 where the rounded estimate (never below 0) is the true count, else 0."""
    rounded = keras.ops.round(keras.ops.maximum(estimates, 0.0))
    return keras.ops.cast(keras.ops.abs(rounded - true_counts) < 0.5, "float32")


class Counting(Objective):
    """Counting: a `ViTCounter`, Huber loss on the count, the share of exact counts."""

    name = "count"
    metric_label = "exact counts"
    metric_key = "val_exact"
    monitor = "val_exact"
    epoch_metrics = ("loss", "val_loss", "val_mae")
    activation = "linear"  # the estimate is the answer: no class scores
    small_data_rule = SMALL_DATA_RULE
    probe_description = "the count head on the frozen patch tokens"

    def open_data(self, data_dir):
        data = self.preset.data
        return sources.open_count_data(data.train, data.val, data.val_split, self.preset.seed)

    def check_data(self, data) -> None:
        if data.train.class_names != sources.OUTPUT_NAMES:
            raise ValueError(f"{data.train.spec} holds no counts: counting needs "
                             "'dot-counts' or folder:DIR with DIR/counts.csv")

    def train_batches(self, source, image_size, batch_size, *, start_epoch=0, start_step=0,
                      steps_per_epoch=None, preprocessing=OFFICIAL):
        size, flip = images.image_hw(image_size), self.preset.count.flip

        def prepare(record, count, seed):
            image = sources.resized(source, record, size)
            if flip:
                image = tf.image.stateless_random_flip_left_right(image, seed)
                image = tf.image.stateless_random_flip_up_down(image, seed + [0, 1])
            return images.scale(image, preprocessing), tf.reshape(count, [1])

        return paired_train_dataset(source, self.preset, batch_size, prepare,
                                    start_epoch=start_epoch, start_step=start_step,
                                    steps_per_epoch=steps_per_epoch)

    def eval_batches(self, source, image_size, batch_size, num_classes, **options):
        return sources.eval_dataset(source, image_size, batch_size, **options)

    def sample_targets(self, batch, config):
        return np.zeros((batch, 1), np.float32)

    def build(self, config):
        model = ViTCounter(config)
        if self.preset.finetune.weights:
            load_encoder(model, self.preset.finetune.weights, HEAD_PREFIX)
        return model

    def compile_args(self, config):
        loss = keras.losses.Huber() if self.preset.count.loss == "huber" else \
            keras.losses.MeanSquaredError()
        return {"loss": loss,
                "metrics": [keras.metrics.MeanAbsoluteError(name="mae"),
                            keras.metrics.MeanMetricWrapper(exact_counts, name="exact")]}

    def classifier(self, model, config):
        """The float32 counter `model.keras` holds (LoRA merged)."""
        merged = finetune.mergeable(model)
        return float32_twin(merged, lambda: ViTCounter.from_config(
            {**merged.get_config(), "dtype": None}))

    def export_samples(self, source, image_size, count, preprocessing):
        return sources.labelled_images(source, image_size, count)

    def report(self, results):
        return {"val_exact": float(results["exact"]), "val_mae": float(results["mae"]),
                "val_loss": float(results["loss"])}
