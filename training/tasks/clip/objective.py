"""The clip task's training part: a `SpaceTimeViT` classifying clips and volumes.

Training windows are random temporal crops (`frames` frames `stride` apart, a random start),
each given one random translation and one brightness/contrast change for all of its frames,
so that motion stays what the frames show. Validation scores each clip's middle window; the
scores of `clip.views` windows spread over each clip, averaged, are metrics.json's
`val_top1_views`.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

import vit_keras
from training import adapt, finetune, recipe
from training.objective import Objective, float32_twin
from training.pipeline import paired_train_dataset
from vit_app import images
from vit_app.tasks.clip.data import sources
from vit_keras.config import ViTConfig
from vit_keras.preprocessing import OFFICIAL
from vit_keras.tasks.clip.inflate import inflate
from vit_keras.tasks.clip.model import SpaceTimeViT

MAX_SHIFT = 0.125  # the random translation, as a share of each side


MIN_PATCH = 8


def _rule_choices(native_hw, num_examples, patch) -> dict:
    """Tubelets are plain patches (every layout takes their attention), at least 8 px a side
    from 32 px frames: a clip has `frames / tubelet_frames` times an image's tokens (the
    built-in sprites' divided model: 0.50 s a step of 32 clips with 4 px patches, 0.08 s with
    8 px, on 2 CPU cores)."""
    choices = {"model.stem": "patchify", "model.locality_attention": False}
    if patch < MIN_PATCH and max(native_hw) >= 4 * MIN_PATCH:
        (height, width), _ = adapt.image_size(native_hw)
        height, width = (max(MIN_PATCH, round(side / MIN_PATCH) * MIN_PATCH)
                         for side in (height, width))
        choices.update({"model.patch_size": MIN_PATCH,
                        "model.image_size": height if height == width else (height, width)})
    return choices


# A clip is seen about 20,000 times in all (the built-in sprites' 10 epochs of 2,000), in at
# least 10 epochs; videos are no photographs' recipe (a flip turns 'left' into 'right').
SMALL_DATA_RULE = adapt.TaskRule(images_seen=20_000, min_epochs=10, photo_recipe=False,
                                 own_choices=_rule_choices)


def shifted(clip, seed):
    """One random translation (up to `MAX_SHIFT` of each side, edges repeated) for all the
    frames of a float32 [frames, height, width, 3] clip."""
    height, width = tf.shape(clip)[1], tf.shape(clip)[2]
    pad_h = tf.cast(tf.cast(height, tf.float32) * MAX_SHIFT, tf.int32)
    pad_w = tf.cast(tf.cast(width, tf.float32) * MAX_SHIFT, tf.int32)
    padded = tf.pad(clip, [[0, 0], [pad_h, pad_h], [pad_w, pad_w], [0, 0]], mode="SYMMETRIC")
    top = tf.random.stateless_uniform([], seed, 0, 2 * pad_h + 1, tf.int32)
    left = tf.random.stateless_uniform([], seed + [0, 1], 0, 2 * pad_w + 1, tf.int32)
    return padded[:, top:top + height, left:left + width]


class ClipClassification(Objective):
    """Clip classification: a `SpaceTimeViT`, cross-entropy, top-1 on each clip's middle
    window (and averaged over `clip.views` windows in metrics.json)."""

    name = "clip"
    metric_label = "top-1"
    metric_key = "val_top1"
    monitor = "val_accuracy"
    epoch_metrics = ("loss", "accuracy", "val_loss", "val_accuracy")
    small_data_rule = SMALL_DATA_RULE
    probe_description = "a linear head on the frozen space-time features"

    @property
    def windows(self) -> sources.Windows:
        clip = self.preset.clip
        return sources.Windows(frames=clip.frames, stride=clip.stride, short=clip.short)

    def open_data(self, data_dir):
        data, store_side = self.preset.data, max(self.preset.clip.store_side,
                                                 *images.image_hw(self.preset.model.image_size))
        return sources.open_clip_data(data.train, data.val, data.val_split, self.preset.seed,
                                      self.windows, store_side)

    def check_data(self, data) -> None:
        if not isinstance(data.train, sources.ClipSource):
            raise ValueError(f"{data.train.spec} holds no clips: --task clip trains on "
                             f"{sources.BUILT_IN!r} or folder:DIR of class folders of clips")

    def sample_images(self, source) -> list[np.ndarray]:
        """A middle frame of up to 64 clips, for the small-data rule."""
        clips, picks = source.clips, np.linspace(0, len(source.lengths) - 1, 64)
        return [clips[index, source.lengths[index] // 2] for index in np.unique(picks.astype(int))]

    def train_batches(self, source, image_size, batch_size, *, start_epoch=0, start_step=0,
                      steps_per_epoch=None, preprocessing=OFFICIAL):
        size, windows, lengths = images.image_hw(image_size), self.windows, source.lengths
        lengths = tf.constant(lengths)

        def prepare(index, label, seed):
            room = tf.maximum(lengths[index] - windows.span, 0)
            start = tf.random.stateless_uniform([], seed + [0, 2], 0, room + 1, tf.int32)
            clip = sources.resized_window(
                source, index, sources.window_indices(lengths[index], windows, start), size)
            clip = tf.ensure_shape(shifted(clip, seed), (windows.frames, *size, 3))
            return (images.scale(clip, preprocessing),
                    tf.one_hot(label, source.num_classes))

        return paired_train_dataset(source, self.preset, batch_size, prepare,
                                    start_epoch=start_epoch, start_step=start_step,
                                    steps_per_epoch=steps_per_epoch)

    def eval_batches(self, source, image_size, batch_size, num_classes, **options):
        return sources.eval_dataset(source, image_size, batch_size, num_classes, self.windows,
                                    **options)

    def sample_targets(self, batch: int, config: ViTConfig) -> np.ndarray:
        return np.zeros((batch, config.num_classes), np.float32)

    def sample_inputs(self, batch: int, config: ViTConfig) -> np.ndarray:
        return np.zeros((batch, self.preset.clip.frames, *config.image_hw, config.channels),
                        np.float32)

    def _arguments(self) -> dict:
        clip = self.preset.clip
        return dict(frames=clip.frames, tubelet_frames=clip.tubelet_frames, layout=clip.layout,
                    temporal_layers=clip.temporal_layers)

    def build(self, config: ViTConfig) -> keras.Model:
        """A clip model from scratch, or the image ViT of `finetune.weights` inflated (its
        tubelet kernels spread evenly over their frames, its temporal parts starting at zero)."""
        if not self.preset.finetune.weights:
            return SpaceTimeViT(config, **self._arguments())
        image_model = vit_keras.VisionTransformer(config)
        vit_keras.load_weights(image_model, self.preset.finetune.weights, skip_head=None)
        return inflate(image_model, **self._arguments())

    def compile_args(self, config: ViTConfig) -> dict:
        return {"loss": recipe.make_loss(self.preset),
                "metrics": recipe.make_metrics(config.num_classes)}

    def classifier(self, model, config):
        """The float32 clip model `model.keras` holds (LoRA merged)."""
        merged = finetune.mergeable(model)
        return float32_twin(merged, lambda: SpaceTimeViT.from_config(
            {**merged.get_config(), "dtype": None}))

    def export_samples(self, source, image_size, count, preprocessing):
        return sources.labelled_clips(source, image_size, self.windows, count)

    def report(self, results):
        return {"val_top1": float(results["accuracy"]), "val_loss": float(results["loss"])}

    def evaluate_extras(self, model, val_dataset, val_source=None, train_source=None) -> dict:
        """The top-1 of each clip's `clip.views` windows' scores averaged."""
        views = self.preset.clip.views
        if val_source is None or views == 1:
            return {}
        size = model.input_shape[2:4]
        correct = 0
        for clips, label in sources.eval_windows(val_source, size, self.windows, views).batch(16):
            batch, frames = clips.shape[0], clips.shape[2:]
            logits = model.predict_on_batch(images.scale(
                tf.reshape(clips, (-1, *frames)), model.preprocessing))
            averaged = np.mean(np.reshape(np.asarray(logits, np.float32), (batch, views, -1)), 1)
            correct += int(np.sum(np.argmax(averaged, -1) == label.numpy()))
        return {"val_top1_views": correct / val_source.num_examples, "views": views}
