"""The canonical weight names (the released official `.npz` layout) and a model's variables.

Every reader converts its file to these names; `save_npz` writes them. The names are the
pre-Linen ones of the original release (`LayerNorm_0`, `MultiHeadDotProductAttention_1`,
`LayerNorm_2`, `MlpBlock_3`), and the position embedding includes the class-token row. They
are the model's layer names (`vit_keras.names`), the encoder's under `Transformer/`.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Mapping

import numpy as np

from vit_keras import keras_compat, names
from vit_keras.checkpoints.resize import RESIZE_METHODS
# Kept importable from here, where the torch readers found it before `torch_layout`.
from vit_keras.checkpoints.torch_layout import split_heads  # noqa: F401

POSEMB = names.encoder_scope(names.POSEMB) + "pos_embedding"
EMBEDDING_KERNEL = f"{names.EMBEDDING}/kernel"
CLS = names.CLS
ATTENTION = names.ATTENTION
MLP = names.MLP
HEAD_PREFIX = f"{names.HEAD}/"
HEAD_DIST_PREFIX = f"{names.HEAD_DIST}/"
DIST = names.DIST               # DeiT distillation token
REGISTERS = names.REGISTERS
POSEMB_ROW = names.encoder_scope(names.POSEMB) + "row_embedding"
POSEMB_COL = names.encoder_scope(names.POSEMB) + "col_embedding"
PRE_LOGITS_PREFIX = f"{names.PRE_LOGITS}/"
MAP_PREFIX = "MAPHead_0/"      # big_vision's multihead attention pooling head
PRE_NORM_PREFIX = names.encoder_scope(names.PRE_NORM)  # CLIP's ln_pre
ENCODER_NORM_PREFIX = names.encoder_scope(names.ENCODER_NORM)
PROJECTION = f"{names.PROJECTION}/kernel"   # CLIP's image projection (no bias)


def block_prefix(index: int) -> str:
    """The prefix of encoder block `index`'s weights ('Transformer/encoderblock_0/')."""
    return names.encoder_scope(names.block(index))


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A weight file converted to canonical names; read-only (`dataclasses.replace` makes a
    changed copy, and `fit_checkpoint` fits a copy of the tensors).

    Attributes:
        tensors: canonical name -> array, a read-only mapping. Names a reader could not map
            keep their original spelling, so that errors list them.
        layout: a human-readable name of the file layout, for messages.
        posemb_has_cls_row: whether the position embedding holds a class-token row when the
            file has a class token: True / False when the layout says so, None when only the
            row count can tell (big_vision, timm).
        posemb_method: how its position embedding is resized to another grid: 'official'
            (the official aligned-corners rule) or 'bicubic' (timm's, for files made with it).
    """

    tensors: Mapping[str, np.ndarray]
    layout: str
    posemb_has_cls_row: bool | None = True
    posemb_method: str = "official"

    def __post_init__(self):
        if self.posemb_method not in RESIZE_METHODS:
            raise ValueError(f"posemb_method must be one of {RESIZE_METHODS}, got "
                             f"{self.posemb_method!r}")
        object.__setattr__(self, "tensors", types.MappingProxyType(dict(self.tensors)))


def _layer_norm(prefix, layer):
    return {f"{prefix}scale": layer.gamma, f"{prefix}bias": layer.beta}


def _refuse_quantized(layer) -> None:
    """Raises ValueError when `layer` is quantized: its kernel no longer holds float weights."""
    if layer.quantization_mode:
        raise ValueError(f"layer {layer.path!r} is quantized ({layer.quantization_mode}): its "
                         "kernel is not the float weights. Load or save float weights before "
                         "model.quantize()")


def _dense(prefix, layer):
    """A Keras Dense/EinsumDense: its stored kernel (without any LoRA update) and bias."""
    _refuse_quantized(layer)
    return {f"{prefix}kernel": keras_compat.stored_kernel(layer), f"{prefix}bias": layer.bias}


def _attention(prefix, layer):
    found = {}
    for part in names.ATTENTION_PROJECTIONS:
        found.update(_dense(f"{prefix}{part}/", getattr(layer, part)))
    return found


def _block(prefix, block):
    found = {}
    found.update(_layer_norm(f"{prefix}{names.LAYER_NORM_0}/", block.layer_norm_0))
    found.update(_attention(f"{prefix}{ATTENTION}/", block.attention))
    found.update(_layer_norm(f"{prefix}{names.LAYER_NORM_2}/", block.layer_norm_2))
    found.update(_dense(f"{prefix}{MLP}/Dense_0/", block.mlp.dense_0))
    found.update(_dense(f"{prefix}{MLP}/Dense_1/", block.mlp.dense_1))
    if block.attention.locality:
        found[f"{prefix}{ATTENTION}/temperature"] = block.attention.temperature
    for index, scale in enumerate(block.layer_scales or []):
        found[f"{prefix}LayerScale_{index}/scale"] = scale.scale
    return found


def _stem(layer):
    """The patch embedding: the released `embedding/{kernel,bias}` for the official stem; the
    locality stems' layers under `embedding/<layer name>/` (no release has them)."""
    prefix = f"{names.EMBEDDING}/"
    if not hasattr(layer, "convs") and not hasattr(layer, "norm"):
        return _dense(prefix, layer.projection)
    found = _dense(f"{prefix}projection/", layer.projection)
    if hasattr(layer, "norm"):
        found.update(_layer_norm(f"{prefix}{layer.norm.name}/", layer.norm))
    for conv, norm in zip(getattr(layer, "convs", ()), getattr(layer, "norms", ())):
        found[f"{prefix}{conv.name}/kernel"] = conv.kernel
        found.update({f"{prefix}{norm.name}/{key}": getattr(norm, attribute) for key, attribute
                      in (("scale", "gamma"), ("bias", "beta"), ("mean", "moving_mean"),
                          ("var", "moving_variance"))})
    return found


def _conv_norm(prefix, conv, norm):
    return {f"{prefix}{conv.name}/kernel": conv.kernel, f"{prefix}{norm.name}/scale": norm.gamma,
            f"{prefix}{norm.name}/bias": norm.beta}


def _resnet(resnet):
    """The hybrid's ResNet under the official keys (`conv_root`, `block1/unit1/conv1`, ...)."""
    found = _conv_norm("", resnet.conv_root, resnet.gn_root)
    for stage_index, stage in enumerate(resnet.stages):
        for unit_index, unit in enumerate(stage):
            prefix = f"block{stage_index + 1}/unit{unit_index + 1}/"
            pairs = [(unit.conv1, unit.gn1), (unit.conv2, unit.gn2), (unit.conv3, unit.gn3)]
            if unit.conv_proj is not None:
                pairs.append((unit.conv_proj, unit.gn_proj))
            for conv, norm in pairs:
                found.update(_conv_norm(prefix, conv, norm))
    return found


def _options(layers) -> dict:
    """Weights of the optional features (DeiT, registers, 2-D posemb, MAP head)."""
    found = {}
    if names.DIST in layers:
        found[DIST] = layers[names.DIST].dist
    if names.REGISTERS in layers:
        found[REGISTERS] = layers[names.REGISTERS].registers
    posemb = layers[names.POSEMB]
    if hasattr(posemb, "row_embedding"):
        found[POSEMB_ROW] = posemb.row_embedding
        found[POSEMB_COL] = posemb.col_embedding
    pool = layers.get(names.POOL)
    if pool is not None and hasattr(pool, "probe"):
        prefix = MAP_PREFIX
        found[prefix + "probe"] = pool.probe
        found.update(_attention(f"{prefix}MultiHeadDotProductAttention_0/", pool.attention))
        found.update(_layer_norm(f"{prefix}LayerNorm_0/", pool.layer_norm))
        found.update(_dense(f"{prefix}MlpBlock_0/Dense_0/", pool.mlp.dense_0))
        found.update(_dense(f"{prefix}MlpBlock_0/Dense_1/", pool.mlp.dense_1))
    return found


def _encoder(layers) -> dict:
    """The blocks and the norms around them."""
    found = {}
    index = 0
    while names.block(index) in layers:
        found.update(_block(block_prefix(index), layers[names.block(index)]))
        index += 1
    found.update(_layer_norm(ENCODER_NORM_PREFIX, layers[names.ENCODER_NORM]))
    if names.PRE_NORM in layers:
        found.update(_layer_norm(PRE_NORM_PREFIX, layers[names.PRE_NORM]))
    return found


def model_variables(model) -> dict:
    """Maps each canonical name to the Keras variable holding it in `model`.

    Args:
        model: a built model made by `VisionTransformer` or a `ViT*` constructor.

    Returns:
        canonical name -> `keras.Variable`.

    Raises:
        ValueError: the model lacks the ViT's layers, or is quantized (`model.quantize`).
    """
    layers = {layer.name: layer for layer in model.layers}
    needed = (names.EMBEDDING, names.POSEMB, names.ENCODER_NORM, names.block(0))
    absent = [name for name in needed if name not in layers]
    if absent:
        raise ValueError(f"model {model.name!r} was not built by VisionTransformer: it has no "
                         f"layer(s) {absent}")
    found = {}
    if names.RESNET in layers:
        found.update(_resnet(layers[names.RESNET]))
    found.update(_stem(layers[names.EMBEDDING]))
    if names.CLS in layers:
        found[CLS] = layers[names.CLS].cls
    if hasattr(layers[names.POSEMB], "pos_embedding"):  # sincos2d has no weights
        found[POSEMB] = layers[names.POSEMB].pos_embedding
    found.update(_options(layers))
    found.update(_encoder(layers))
    for optional in (names.PRE_LOGITS, names.HEAD, names.HEAD_DIST):
        if optional in layers:
            found.update(_dense(f"{optional}/", layers[optional]))
    if names.PROJECTION in layers:
        _refuse_quantized(layers[names.PROJECTION])
        found[PROJECTION] = layers[names.PROJECTION].kernel
    return found


def num_heads(model) -> int:
    """The attention head count of a model built by `VisionTransformer`."""
    return model.get_layer(names.block(0)).num_heads
