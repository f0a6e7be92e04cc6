"""An image ViT inflated to a `SpaceTimeViT`: whatever weights the image model was loaded with
(an official release, a timm family, a keras-hub preset, a trained `.keras` classifier) start
the clip model.

Every spatial layer keeps its weights under its name. The patch kernel (P, P, C, D) gains the
frame axis of a tubelet (t, P, P, C, D): spread evenly over its frames (each 1/t of it, so a
clip of identical frames embeds as the image does) or centred on one frame (the others zero;
ViViT's 'central frame'). The temporal position table stays zero, the divided layout's
temporal attention outputs zero, and the factorised layout's temporal blocks are zeroed on both
residual branches: with the even spread, a clip of identical frames gives the image model's
logits (tested), and training starts from the image model's function.
"""

from __future__ import annotations

import keras
import numpy as np

from vit_keras import names
from vit_keras.core.model import VisionTransformer
from vit_keras.tasks.spacetime.model import TEMPORAL_PREFIX, SpaceTimeViT, temporal_block_name

SPREADS = ("even", "central")


def inflate(image_model: VisionTransformer, frames: int = 8, tubelet_frames: int = 2,
            layout: str = "divided", temporal_layers: int = 2, spread: str = "even",
            name: str | None = None) -> SpaceTimeViT:
    """A `SpaceTimeViT` of `image_model`'s config, started from its weights.

    Args:
        image_model: a `VisionTransformer` (with or without its head: without, the clip
            model's head starts at zero) whose weights are loaded.
        frames, tubelet_frames, layout, temporal_layers: the clip model's options (see
            `SpaceTimeViT`).
        spread: 'even' (default): each frame of a tubelet gets 1/t of the patch kernel;
            'central': the middle frame (frame t // 2) gets all of it.
        name: the clip model's name (default 'spacetime_vit').

    Returns:
        The clip model, with the image model's preprocessing.

    Raises:
        ValueError: not a `VisionTransformer`, an unknown spread, or an option the clip
            model cannot take (`SpaceTimeViT` says which).
    """
    if not isinstance(image_model, VisionTransformer):
        raise ValueError(f"inflate takes a vit_keras VisionTransformer, got "
                         f"{type(image_model).__name__}: load the image weights into one first "
                         "(vit_keras.create_model, from_preset, keras.saving.load_model)")
    if spread not in SPREADS:
        raise ValueError(f"spread must be one of {SPREADS}, got {spread!r}")
    clip = SpaceTimeViT(image_model.config, frames, tubelet_frames, layout, temporal_layers,
                        name=name, preprocessing=image_model.preprocessing)
    image_layers = {layer.name: layer for layer in image_model.layers if layer.weights}
    for layer in clip.layers:
        if layer.name == names.EMBEDDING:
            _inflate_patch_kernel(layer, image_layers[names.EMBEDDING], spread)
        elif layer.name == names.POSEMB:
            _copy_positions(layer, image_layers)
        elif layer.name.startswith(TEMPORAL_PREFIX):
            _zero_residual_outputs(layer, clip, temporal_layers)
        elif layer.name in image_layers:
            layer.set_weights(image_layers[layer.name].get_weights())
    return clip


def _inflate_patch_kernel(tubelets, patches, spread: str) -> None:
    kernel, bias = patches.projection.get_weights()
    frames = tubelets.tubelet_frames
    if spread == "even":
        inflated = np.repeat(kernel[None] / frames, frames, axis=0)
    else:
        inflated = np.zeros((frames, *kernel.shape), kernel.dtype)
        inflated[frames // 2] = kernel
    tubelets.projection.set_weights([inflated, bias])


def _copy_positions(embedding, image_layers: dict) -> None:
    """The image table (and class token) into the clip's; the temporal table stays zero."""
    table = keras.ops.convert_to_numpy(image_layers[names.POSEMB].pos_embedding)
    expected = tuple(embedding.pos_embedding.shape)
    if table.shape != expected:
        raise ValueError(f"the image model's position table is {table.shape}, the clip model "
                         f"expects {expected}: inflate a model of the same ViTConfig")
    embedding.pos_embedding.assign(table)
    if embedding.num_prefix_tokens:
        embedding.cls.assign(keras.ops.convert_to_numpy(image_layers[names.CLS].cls))


def _zero_residual_outputs(layer, clip: SpaceTimeViT, temporal_layers: int) -> None:
    """A temporal layer made the identity: its attention's output projection and, in a
    temporal encoder block, its MLP's last Dense, zero."""
    blocks = {temporal_block_name(index) for index in range(temporal_layers)}
    outputs = [layer.attention.out] if hasattr(layer, "attention") else []
    if clip.layout == "factorised" and layer.name in blocks:
        outputs.append(layer.mlp.dense_1)
    for projection in outputs:
        for weight in projection.weights:
            weight.assign(np.zeros(weight.shape, weight.dtype))
