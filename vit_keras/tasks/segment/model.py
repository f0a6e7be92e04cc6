"""Semantic segmentation on the ViT's patch tokens: `ViTSegmenter`, a functional Keras model
images -> per-pixel class logits [batch, H, W, classes] at the input's own resolution.

The encoder is the `VisionTransformer`'s, layer for layer and under the same names, so every
weight source the classifier loads fills it (`load_backbone`). The prefix tokens (class,
distillation, registers) are dropped and the patch tokens of the chosen blocks are read as
their NHWC grid (`vit_keras.intermediates.SplitTokens`); a head turns that grid into logits:

- `linear`: BatchNorm + a 1x1 classifier on the grid (several blocks' grids concatenated),
  upsampled bilinearly to the image: DINOv2's linear ('lin1', or 'ms' over the last 4 blocks)
  head, the protocol for judging frozen features.
- `progressive`: `head_stages` times (3x3 conv, BatchNorm, ReLU, 2x bilinear upsampling), then
  the 1x1 classifier and the upsampling to the image: SETR's progressive upsampling (PUP),
  the head of the Keras tutorial this project follows.
- `skip`: a U-Net's decoder with the ViT as its bottleneck. A light conv path keeps the
  image's own detail (two 3x3 conv-BN-ReLU per level at full, 1/2, ... resolution, down to
  twice the patch grid's), and the grid climbs back up in 2x steps, each concatenating the
  path's maps at its scale: the input-level skips of UNETR (Hatamizadeh et al. 2022) and
  TransUNet's cascaded upsampler. `head_stages` levels (log2 of the patch size gives full
  resolution), `head_width` channels at the coarsest level, halved per finer level (at least
  16). Edges and 1-3 px structures survive the patch grid this way (see docs/segmentation.md).

Intermediate blocks are normed by the encoder's final LayerNorm, as DINOv2's
`get_intermediate_layers(norm=True)` (none for a model with `pooled_norm`, as timm).
"""

from __future__ import annotations

import keras
from keras import ops

from vit_keras import fast_paths, lora, quantization, tasks
from vit_keras.config import ViTConfig
from vit_keras.core.initializers import PACKAGE
from vit_keras.core.model import ConfiguredModel
from vit_keras.intermediates import block_indices
from vit_keras.task_encoder import block_grids, load_encoder, task_config
from vit_keras.tasks.segment import windows

HEADS = ("linear", "progressive", "skip")
# Runs of a few hundred steps leave the default 0.99 momentum's moving statistics far from the
# data's, and inference then uses them (the conv stem uses 0.9 for the same reason).
SKIP_NORM_MOMENTUM = 0.9
SKIP_MIN_WIDTH = 16
HEAD_PREFIX = "seg_"  # every layer of a segmentation head; the rest is the ViT's encoder
CLASSIFIER = "seg_classifier"


def _class_ids(logits) -> dict:
    return {"class_ids": ops.cast(ops.argmax(logits, axis=-1), "int32")}


# The segment task's library contract: each image resized whole (its mask covers all of it);
# a SavedModel also gives the class id per pixel, alone through `serve_class_ids`; a model fed
# images at their own size segments each whole or in windows stitched back.
TASK = tasks.TaskContract("segment", class_per_image=False, whole_image=True,
                          derived_outputs=_class_ids, derived_endpoint="serve_class_ids",
                          native_scores=windows.segment_scores)


@keras.saving.register_keras_serializable(package=PACKAGE)
class ResizeToImage(keras.layers.Layer):
    """[maps [batch, h, w, C], images [batch, H, W, channels]] -> maps resized bilinearly to
    [batch, H, W, C], whatever size the images have (half-pixel centres, as PyTorch's
    `align_corners=False`)."""

    def call(self, inputs):
        maps, images = inputs
        return fast_paths.resize_bilinear(maps, ops.shape(images)[1:3])

    def compute_output_shape(self, input_shape):
        maps_shape, images_shape = input_shape
        return (maps_shape[0], images_shape[1], images_shape[2], maps_shape[-1])


@keras.saving.register_keras_serializable(package=PACKAGE)
class Upsample(keras.layers.Layer):
    """[batch, h, w, C] -> [batch, factor h, factor w, C], bilinear with half-pixel centres
    (Keras' `UpSampling2D` needs a static size; this one takes any-size models' grids too).

    Args:
        factor: the integer scale of both sides.
    """

    def __init__(self, factor: int, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, maps):
        rows, cols = ops.shape(maps)[1:3]
        return fast_paths.resize_bilinear(maps, (rows * self.factor, cols * self.factor))

    def compute_output_shape(self, input_shape):
        batch, height, width, channels = input_shape
        return (batch, None if height is None else height * self.factor,
                None if width is None else width * self.factor, channels)

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


def _check_head(config: ViTConfig, head: str, head_width: int, head_stages: int) -> None:
    if head not in HEADS:
        raise ValueError(f"segmentation head must be one of {HEADS}, got {head!r}")
    for name, value, least in (("head_width", head_width, 1), ("head_stages", head_stages, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
    if head == "skip" and head_stages < 1:
        raise ValueError("the skip head needs head_stages >= 1 (its conv path's levels; log2 "
                         f"of the patch size reaches full resolution), got {head_stages}")
    if config.num_classes < 2:
        raise ValueError(f"a segmenter needs at least 2 classes (background counts as one), got "
                         f"num_classes={config.num_classes}")


def _conv_block(features, width: int, name: str, dtype=None):
    """Two 3x3 conv-BN-ReLU (a U-Net's level), layers named `{name}_conv_0` ... ."""
    for index in range(2):
        features = keras.layers.Conv2D(width, 3, padding="same", use_bias=False,
                                       name=f"{name}_conv_{index}", dtype=dtype)(features)
        features = keras.layers.BatchNormalization(momentum=SKIP_NORM_MOMENTUM,
                                                   name=f"{name}_norm_{index}",
                                                   dtype=dtype)(features)
        features = keras.layers.ReLU(name=f"{name}_relu_{index}", dtype=dtype)(features)
    return features


def skip_widths(head_width: int, levels: int) -> list[int]:
    """The skip head's channels per level, full resolution first: `head_width` at the
    coarsest, halved per finer level, at least 16 (64, 3 levels -> [16, 32, 64])."""
    return [max(SKIP_MIN_WIDTH, head_width // 2 ** (levels - 1 - level))
            for level in range(levels)]


def _skip_decoder(grid, images, head_width: int, levels: int, dtype=None):
    """The `skip` head up to its last features: the image's conv path, then the grid brought
    up level by level beside it (resized to each level's exact size, so any input size fits)."""
    widths = skip_widths(head_width, levels)
    path, features = [], images
    for level, width in enumerate(widths):
        if level:
            features = keras.layers.MaxPooling2D(padding="same", dtype=dtype,
                                                 name=f"{HEAD_PREFIX}pool_{level}")(features)
        features = _conv_block(features, width, f"{HEAD_PREFIX}path_{level}", dtype)
        path.append(features)
    features = keras.layers.Conv2D(widths[-1], 1, name=f"{HEAD_PREFIX}grid_projection",
                                   dtype=dtype)(grid)
    for level in reversed(range(levels)):
        features = ResizeToImage(name=f"{HEAD_PREFIX}up_{level}", dtype=dtype)(
            [features, path[level]])
        features = keras.layers.Concatenate(name=f"{HEAD_PREFIX}join_{level}", dtype=dtype)(
            [features, path[level]])
        features = _conv_block(features, widths[level], f"{HEAD_PREFIX}up_{level}", dtype)
    return features


def _head(features, images, head: str, num_classes: int, head_width: int, head_stages: int,
          dtype=None):
    """Patch grid -> logits on the grid (linear), on a grid 2**head_stages finer
    (progressive) or at the image's size over `head_stages` levels (skip)."""
    if head == "skip":
        features = _skip_decoder(features, images, head_width, head_stages, dtype)
    elif head == "progressive":
        for stage in range(head_stages):
            features = keras.layers.Conv2D(head_width, 3, padding="same", use_bias=False,
                                           name=f"{HEAD_PREFIX}conv_{stage}",
                                           dtype=dtype)(features)
            features = keras.layers.BatchNormalization(name=f"{HEAD_PREFIX}norm_{stage}",
                                                       dtype=dtype)(features)
            features = keras.layers.ReLU(name=f"{HEAD_PREFIX}relu_{stage}",
                                         dtype=dtype)(features)
            features = Upsample(2, name=f"{HEAD_PREFIX}up_{stage}", dtype=dtype)(features)
    else:
        features = keras.layers.BatchNormalization(name=f"{HEAD_PREFIX}norm",
                                                   dtype=dtype)(features)
    # Logits in float32, so mixed-precision models still return float32 (as the classifier).
    return keras.layers.Dense(num_classes, name=CLASSIFIER,
                              dtype=quantization.float32_policy(dtype, CLASSIFIER))(features)


@keras.saving.register_keras_serializable(package=PACKAGE)
class ViTSegmenter(ConfiguredModel, keras.Model):
    """Semantic segmentation with a ViT encoder: images -> logits [batch, H, W, num_classes].

    The input is the `VisionTransformer`'s (NHWC images prepared by `preprocess_input`, at
    `config.image_size`, or any size with `dynamic_image_size`); the logits come at the
    input's resolution. `get_config()` is the `ViTConfig` and the head options, so `.keras`
    files load under `safe_mode`. `quantize` and `enable_lora` work as on the classifier.

    Args:
        config: a `ViTConfig` (or its `to_dict()`); `num_classes` counts every class the masks
            hold, background included.
        head: 'linear' (default), 'progressive' or 'skip' (see the module docstring).
        blocks: which blocks' patch tokens the head reads: None (default) the last block, an
            int n the last n blocks (DINOv2's 'ms' head reads 4), or a list of indices.
        head_width: channels of the progressive head's convolutions, or of the skip head's
            coarsest level (default 256).
        head_stages: the progressive head's 2x upsampling stages, or the skip head's levels
            (default 2; log2 of the patch size brings either back to the image's size).
        name: model name; default 'vit_segmenter'.
        dtype: dtype policy of the layers (None: the global policy).
        preprocessing: as for `VisionTransformer` (default: the official [-1, 1]).
    """

    vit_task = TASK.name

    def __init__(self, config, head: str = "linear", blocks=None, head_width: int = 256,
                 head_stages: int = 2, name: str | None = None, dtype=None,
                 preprocessing=None, **kwargs):
        config, preprocessing = task_config(config, preprocessing)
        _check_head(config, head, head_width, head_stages)
        indices = block_indices([-1] if blocks is None else blocks, config.num_layers)
        height, width = (None, None) if config.dynamic_image_size else config.image_hw
        images = keras.Input((height, width, config.channels), name="images")
        grids = block_grids(config, images, indices, HEAD_PREFIX, dtype)
        features = grids[0] if len(grids) == 1 else keras.layers.Concatenate(
            name=f"{HEAD_PREFIX}concat", dtype=dtype)(grids)
        logits = _head(features, images, head, config.num_classes, head_width, head_stages, dtype)
        logits = ResizeToImage(name=f"{HEAD_PREFIX}resize", dtype="float32")([logits, images])
        super().__init__(images, logits, name=name or "vit_segmenter", dtype=dtype, **kwargs)
        self._vit_config = config
        self.vit_preprocessing = preprocessing
        self.head = head
        self.blocks = blocks if blocks is None or isinstance(blocks, int) else list(blocks)
        self.head_width = head_width
        self.head_stages = head_stages

    def get_config(self):
        return {"config": self._vit_config.to_dict(),
                "preprocessing": self.preprocessing.to_dict(), "head": self.head,
                "blocks": self.blocks,
                "head_width": self.head_width, "head_stages": self.head_stages,
                "name": self.name, "trainable": self.trainable,
                "dtype": keras.dtype_policies.serialize(quantization.dtype_policy_map(self))}

    def head_layers(self) -> list:
        """The segmentation head's layers with weights (trained anew in every fine-tuning)."""
        return [layer for layer in self.layers
                if layer.name.startswith(HEAD_PREFIX) and layer.weights]

    def enable_lora(self, rank: int, targets=lora.DEFAULT_TARGETS, alpha=None) -> None:
        """Freezes the encoder, adds LoRA adapters to its projections named by `targets` (see
        `vit_keras.lora.enable_lora`) and keeps the segmentation head trainable."""
        lora.enable_lora(self, rank, targets, alpha)
        for layer in self.head_layers():
            layer.trainable = True


def load_backbone(segmenter: ViTSegmenter, weights) -> None:
    """Fills the segmenter's encoder from a classifier or any weight source; the head is left
    as it is (`load_encoder`)."""
    load_encoder(segmenter, weights, HEAD_PREFIX)
