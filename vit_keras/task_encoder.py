"""The ViT encoder a task's head sits on (a segmenter's, a detector's): the patch-token grids of
chosen blocks, and filling the encoder from a classifier or any weight source while the head's
layers (named by the task's prefix) are left alone."""

from __future__ import annotations

import keras
from keras import ops

from vit_keras import names
from vit_keras.config import ViTConfig
from vit_keras.core.model import (VisionTransformer, config_and_preprocessing, encode_tokens,
                                  patch_tokens)
from vit_keras.intermediates import SplitTokens
from vit_keras.weights import load_weights


def task_config(config, preprocessing=None) -> tuple:
    """The (`ViTConfig`, `Preprocessing`) a task's model is built with: checked as a
    classifier's (`config_and_preprocessing`: a config or its dict, a preprocessing or its
    dict), the config without the classification head's own fields (`ViTConfig.encoder`),
    which a task's head never reads, so the model's file records none of them."""
    config, preprocessing = config_and_preprocessing(config, preprocessing)
    return config.encoder(), preprocessing


def block_grids(config: ViTConfig, images, blocks, prefix: str, dtype=None) -> list:
    """The encoder on `images` and the patch-token grids of `blocks`, final-normed.

    Args:
        config: the model configuration.
        images: the [batch, H, W, C] input tensor.
        blocks: block indices (non-negative, see `intermediates.block_indices`).
        prefix: of the grid layers' names (the head's, which `load_encoder` leaves alone).
        dtype: the layers' dtype policy.

    Returns:
        One [batch, rows, cols, D] grid per block, in the order of `blocks`.
    """
    embedded = patch_tokens(config, images, dtype)
    tokens = encode_tokens(config, embedded, None, dtype)
    encoder = keras.Model(images, tokens)  # to reach the blocks' outputs by their names
    final_norm = None if config.pooled_norm else encoder.get_layer(names.ENCODER_NORM)
    grids = []
    for index in blocks:
        last = index == config.num_layers - 1  # `tokens` went through the final norm already
        block_tokens = tokens if last else encoder.get_layer(names.block(index)).output
        if not last and final_norm is not None:
            block_tokens = final_norm(block_tokens)
        split = SplitTokens(config.num_prefix_tokens, config.num_register_tokens, True,
                            None if config.dynamic_image_size else config.grid_size,
                            name=f"{prefix}grid_{index}", dtype=dtype)
        grid, _ = split(block_tokens, embedded) if config.dynamic_image_size else \
            split(block_tokens)
        grids.append(grid)
    return grids


def load_encoder(model: keras.Model, weights, head_prefix: str) -> None:
    """Fills the ViT encoder inside a task's model (a segmenter, a detector) from a classifier
    or any weight source; the layers named `head_prefix...` (the task's head) are left as they
    are.

    Args:
        model: a model built on the ViT's encoder layers (`block_grids`), carrying its config.
        weights: a Keras model with the ViT's layers (a `VisionTransformer`, e.g. `vit train`'s
            model.keras), or anything `vit_keras.load_weights` takes (a release name, an
            .npz/.safetensors/.h5 file, a preset folder, ...).
        head_prefix: the names of the head's layers start with it.

    Raises:
        ValueError: the source misses one of the encoder's layers, or its shapes differ.
    """
    if isinstance(weights, keras.Model):
        source = weights
    else:
        source = VisionTransformer(model.config, include_top=False, name="backbone")
        load_weights(source, weights, skip_head=True)
    by_name = {layer.name: layer for layer in source.layers}
    encoder = [layer for layer in model.layers
               if layer.weights and not layer.name.startswith(head_prefix)]
    missing = [layer.name for layer in encoder if layer.name not in by_name]
    if missing:
        raise ValueError(f"{source.name!r} has no layer {', '.join(missing)} of the {model.name!r} "
                         "encoder: expected a ViT of the same config (or its weights)")
    for layer in encoder:
        theirs = [ops.convert_to_numpy(w) for w in by_name[layer.name].weights]
        ours = [tuple(w.shape) for w in layer.weights]
        if [tuple(w.shape) for w in theirs] != ours:
            raise ValueError(f"layer {layer.name!r}: {model.name!r} expects weights of shapes "
                             f"{ours}, {source.name!r} has {[tuple(w.shape) for w in theirs]}: "
                             "build it from the same ViTConfig")
        layer.set_weights(theirs)
