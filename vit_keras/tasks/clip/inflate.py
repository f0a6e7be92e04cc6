"""An image ViT inflated to a `SpaceTimeViT`: whatever weights the image model was loaded with
(an official release, a timm family, a keras-hub preset, a trained `.keras` classifier) start
the clip model; and a clip model carried to another clip length or frame size
(`at_clip_size`).

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
from vit_keras.checkpoints.resize import resize_position_embedding
from vit_keras.core import grid_resize
from vit_keras.core.model import VisionTransformer
from vit_keras.tasks.clip.model import TEMPORAL_PREFIX, SpaceTimeViT

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
        elif layer.name.startswith(TEMPORAL_PREFIX) and hasattr(layer, "attention"):
            _zero_residual_outputs(layer)
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


def _zero_residual_outputs(layer) -> None:
    """A temporal layer made the identity: its attention's output projection and, in a
    temporal encoder block, its MLP's last Dense, zero."""
    outputs = [layer.attention.out] + ([layer.mlp.dense_1] if hasattr(layer, "mlp") else [])
    for projection in outputs:
        for weight in projection.weights:
            weight.assign(np.zeros(weight.shape, weight.dtype))


def at_clip_size(model: SpaceTimeViT, frames: int | None = None,
                 image_size=None) -> SpaceTimeViT:
    """`model` rebuilt for clips of `frames` frames of `image_size` px, every weight kept.

    The position tables are resampled by the official load-time rule (linear, aligned corners):
    the spatial one to the new patch grid, the temporal one to the new number of
    token frames; the tubelet kernel and every other weight are the same.

    Args:
        model: a `SpaceTimeViT`.
        frames: frames per clip (a multiple of its `tubelet_frames`); None: its own.
        image_size: an int or (height, width); None: its own.

    Returns:
        A new `SpaceTimeViT` with `model`'s options, preprocessing and name.

    Raises:
        ValueError: frames or a size the model's tubelets do not divide.
    """
    config = model.config if image_size is None else model.config.replace(
        image_size=image_size)
    resized = SpaceTimeViT(config, frames or model.frames, model.tubelet_frames, model.layout,
                           model.temporal_layers, name=model.name,
                           preprocessing=model.preprocessing)
    for layer in resized.layers:
        if not layer.weights:
            continue
        source = model.get_layer(layer.name)
        if layer.name != names.POSEMB:
            layer.set_weights(source.get_weights())
            continue
        layer.pos_embedding.assign(resize_position_embedding(
            keras.ops.convert_to_numpy(source.pos_embedding), config.grid_size,
            bool(layer.num_prefix_tokens), model.config.grid_size))
        layer.temporal_embedding.assign(grid_resize.resize_axis(
            source.temporal_embedding, layer.frames, axis=1))
        if layer.num_prefix_tokens:
            layer.cls.assign(source.cls)
    return resized
