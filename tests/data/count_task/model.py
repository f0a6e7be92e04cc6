"""The count task's head: a ViT encoder whose patch tokens, pooled, give how many dots an image
holds; and its export contract (a SavedModel adds the rounded `count` and its signature)."""

from __future__ import annotations

import keras
from keras import ops

from vit_keras import quantization, tasks
from vit_keras.core.model import ConfiguredModel
from vit_keras.task_encoder import block_grids, task_config

HEAD_PREFIX = "count_"  # every layer of the head; the rest is the ViT's encoder


def rounded_counts(logits) -> dict:
    """The whole number of dots per image (never below 0) from the estimates [batch, 1]."""
    return {"count": ops.cast(ops.round(ops.maximum(logits[:, 0], 0.0)), "int32")}


TASK = tasks.TaskContract("count", class_per_image=False, derived_outputs=rounded_counts,
                          derived_endpoint="serve_count")


@keras.saving.register_keras_serializable(package="count_task")
class ViTCounter(ConfiguredModel, keras.Model):
    """Images -> float32 [batch, 1] estimates of how many dots each holds.

    Args:
        config: a `ViTConfig` (or its `to_dict()`); its `num_classes` is 1.
        name: model name; default 'vit_counter'.
        dtype: dtype policy of the layers (None: the global policy).
        preprocessing: as for `VisionTransformer` (default: the official [-1, 1]).
    """

    vit_task = TASK.name

    def __init__(self, config, name: str | None = None, dtype=None, preprocessing=None,
                 **kwargs):
        config, preprocessing = task_config(config, preprocessing)
        images = keras.Input((*config.image_hw, config.channels), name="images")
        grid = block_grids(config, images, [config.num_layers - 1], HEAD_PREFIX, dtype)[0]
        pooled = keras.layers.GlobalAveragePooling2D(name=f"{HEAD_PREFIX}pool",
                                                     dtype=dtype)(grid)
        hidden = keras.layers.Dense(config.hidden_size, activation="gelu",
                                    name=f"{HEAD_PREFIX}hidden", dtype=dtype)(pooled)
        estimate = keras.layers.Dense(1, name=f"{HEAD_PREFIX}estimate", dtype="float32")(hidden)
        super().__init__(images, estimate, name=name or "vit_counter", dtype=dtype, **kwargs)
        self._vit_config = config
        self.vit_preprocessing = preprocessing

    def get_config(self):
        return {"config": self._vit_config.to_dict(),
                "preprocessing": self.preprocessing.to_dict(), "name": self.name,
                "trainable": self.trainable,
                "dtype": keras.dtype_policies.serialize(quantization.dtype_policy_map(self))}
