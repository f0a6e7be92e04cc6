"""Features of any encoder block: the patch tokens as an NHWC grid and the prefix tokens apart
(timm's `forward_intermediates`), as a Keras model sharing the ViT's weights.

The prefix tokens are the class and distillation tokens, then the registers, in that order
(timm's order). Block outputs are taken before the final norm unless `norm=True`, which
applies the model's final LayerNorm to them (timm's `norm=True`).
"""

from __future__ import annotations

import keras
from keras import ops

from vit_keras import names
from vit_keras.core.initializers import PACKAGE
from vit_keras.core.model import (VisionTransformer, config_from_model, keep_records,
                                  last_block_outputs)


@keras.saving.register_keras_serializable(package=PACKAGE)
class SplitTokens(keras.layers.Layer):
    """[batch, tokens, D] -> (patches, prefix): patches as [batch, rows, cols, D] (or
    [batch, patches, D] with `grid=False`), prefix [batch, prefix + registers, D].

    Args:
        num_prefix_tokens: tokens before the patches (class, distillation).
        num_register_tokens: tokens after the patches (registers).
        grid: return the patches as a grid; its shape comes from `patch_grid`'s, the
            embedding's output, when the model takes any size, else from `grid_size`.
        grid_size: (rows, cols) of a fixed-size model.
    """

    def __init__(self, num_prefix_tokens, num_register_tokens, grid=True, grid_size=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.num_prefix_tokens = num_prefix_tokens
        self.num_register_tokens = num_register_tokens
        self.grid = grid
        self.grid_size = tuple(grid_size) if grid_size is not None else None

    def call(self, tokens, patch_grid=None):
        first, registers = self.num_prefix_tokens, self.num_register_tokens
        stop = ops.shape(tokens)[1] - registers
        patches = tokens[:, first:stop]
        prefix = ops.concatenate([tokens[:, :first], tokens[:, stop:]], axis=1)
        if self.grid:
            rows, cols = ((ops.shape(patch_grid)[1], ops.shape(patch_grid)[2])
                          if patch_grid is not None else self.grid_size)
            patches = ops.reshape(patches, (-1, rows, cols, tokens.shape[-1]))
        return patches, prefix

    def compute_output_shape(self, tokens_shape, patch_grid_shape=None):
        batch, width = tokens_shape[0], tokens_shape[-1]
        prefix = (batch, self.num_prefix_tokens + self.num_register_tokens, width)
        if not self.grid:
            return (batch, None, width), prefix
        rows, cols = ((patch_grid_shape[1], patch_grid_shape[2]) if patch_grid_shape
                      else self.grid_size)
        return (batch, rows, cols, width), prefix

    def get_config(self):
        config = super().get_config()
        config.update(num_prefix_tokens=self.num_prefix_tokens,
                      num_register_tokens=self.num_register_tokens, grid=self.grid,
                      grid_size=list(self.grid_size) if self.grid_size else None)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class ClassTokenOf(keras.layers.Layer):
    """[batch, prefix tokens, D] -> [batch, D]: the first prefix token, the class token."""

    def call(self, prefix):
        return prefix[:, 0]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])


def features_model(model, blocks=None, grid: bool = True, norm: bool = False) -> keras.Model:
    """A Keras model: images -> {'block_<i>': patches, 'block_<i>_prefix': prefix tokens}.

    Args:
        model: a `VisionTransformer` (any head). The features model shares its weights; for a
            class-token classifier, whose last block computes only the class token, it holds
            a copy of them instead (rebuild it after training the model further).
        blocks: which blocks: None (all), an int n (the last n) or a list of indices
            (negative ones count from the end), as timm's `indices`.
        grid: patch tokens as an NHWC grid [batch, rows, cols, D]; False: [batch, patches, D].
        norm: apply the model's final LayerNorm to each block's output (none for a model
            with `pooled_norm`, as timm).

    Returns:
        The model; its inputs are the ViT's (preprocessed images).

    Raises:
        ValueError: a block index out of range, or a model without the ViT's layers.
    """
    config = config_from_model(model)
    indices = block_indices(blocks, config.num_layers)
    source = _full_token_model(model, config)
    patch_grid = source.get_layer(names.EMBEDDING).output if config.dynamic_image_size else None
    # With a pooled norm (timm's fc_norm) the tokens have no final norm: norm=True is a no-op,
    # as timm's (its `norm` is then the identity).
    final_norm = None if config.pooled_norm else source.get_layer(names.ENCODER_NORM)
    outputs = {}
    for index in indices:
        tokens = source.get_layer(names.block(index)).output
        if norm and final_norm is not None:
            tokens = final_norm(tokens)
        split = SplitTokens(config.num_prefix_tokens, config.num_register_tokens, grid,
                            None if config.dynamic_image_size else config.grid_size,
                            name=f"split_{index}", dtype=model.dtype_policy)
        patches, prefix = split(tokens, patch_grid) if patch_grid is not None else split(tokens)
        outputs[f"block_{index}"] = patches
        outputs[f"block_{index}_prefix"] = prefix
    return keep_records(model, keras.Model(source.inputs[0], outputs,
                                                 name=f"{model.name}_features"))


def features(model, images, blocks=None, grid: bool = True, norm: bool = False) -> dict:
    """The features of `images` (see `features_model`), as NumPy arrays.

    Args:
        model: a `VisionTransformer`.
        images: model inputs [batch, H, W, C] (see `vit_keras.preprocess_input`).
        blocks, grid, norm: as for `features_model`.

    Returns:
        {'block_<i>': patches, 'block_<i>_prefix': prefix tokens} for each chosen block.
    """
    outputs = features_model(model, blocks, grid, norm)(images, training=False)
    return {name: ops.convert_to_numpy(value) for name, value in outputs.items()}


def block_embedding_model(model, block: int) -> keras.Model:
    """A Keras model: images -> one vector per image from block `block`'s output, final-normed:
    its class token when the model has one, else the mean of its patch tokens (for probing
    any block, e.g. `vit evaluate --few-shot --block`).

    Args:
        model: a `VisionTransformer`.
        block: the block index (negative counts from the end).

    Returns:
        The model (sharing `model`'s weights, as `features_model`).
    """
    config = config_from_model(model)
    (index,) = block_indices([block], config.num_layers)
    extractor = features_model(model, [index], grid=False, norm=True)
    outputs = extractor.output
    if config.classifier == "token":
        pooled = ClassTokenOf(name="class_token")(outputs[f"block_{index}_prefix"])
    else:
        pooled = keras.layers.GlobalAveragePooling1D(name="patch_mean")(
            outputs[f"block_{index}"])
    return keep_records(model, keras.Model(extractor.inputs[0], pooled,
                                                 name=f"{model.name}_block_{index}"))


def block_indices(blocks, num_layers: int) -> list[int]:
    """The blocks `blocks` chooses, by timm's `indices` rule.

    Args:
        blocks: None (all), an int n (the last n) or a list of indices (negatives count from
            the end).
        num_layers: the model's block count.

    Returns:
        Non-negative block indices, in the order given.

    Raises:
        ValueError: an index or count out of range.
    """
    if blocks is None:
        return list(range(num_layers))
    if isinstance(blocks, int) and not isinstance(blocks, bool):
        if not 1 <= blocks <= num_layers:
            raise ValueError(f"blocks={blocks} asks for the last {blocks} blocks of a model with "
                             f"{num_layers}: expected 1..{num_layers}")
        return list(range(num_layers - blocks, num_layers))
    indices = []
    for index in blocks:
        if isinstance(index, bool) or not isinstance(index, int) or \
                not -num_layers <= index < num_layers:
            raise ValueError(f"block index {index!r} is out of range for a model with "
                             f"{num_layers} blocks: expected {-num_layers}..{num_layers - 1}")
        indices.append(index % num_layers)
    return indices


def _full_token_model(model, config):
    """`model` itself when its last block outputs every token; otherwise (a class-token head
    skips the others in the last block) a headless twin holding a copy of its weights."""
    if hasattr(model, "include_top"):  # a VisionTransformer says how its last block was built
        truncated = last_block_outputs(config, model.include_top, model.pooling) is not None
    else:
        last = model.get_layer(names.block(config.num_layers - 1))
        truncated = last.output.shape[1] not in (None, config.seq_len)
    if not truncated:
        return model
    twin = VisionTransformer(config, include_top=False, name=model.name,
                             dtype=model.dtype_policy)
    for layer in twin.layers:
        if layer.weights:
            layer.set_weights(model.get_layer(layer.name).get_weights())
    return twin
