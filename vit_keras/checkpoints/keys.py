"""The canonical weight names (the released official `.npz` layout) and a model's variables.

Every reader converts its file to these names; `save_npz` writes them. The names are the
pre-Linen ones of the original release (`LayerNorm_0`, `MultiHeadDotProductAttention_1`,
`LayerNorm_2`, `MlpBlock_3`), and the position embedding includes the class-token row.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from vit_keras import keras_compat

POSEMB = "Transformer/posembed_input/pos_embedding"
EMBEDDING_KERNEL = "embedding/kernel"
CLS = "cls"
ATTENTION = "MultiHeadDotProductAttention_1"
MLP = "MlpBlock_3"
HEAD_PREFIX = "head/"
HEAD_DIST_PREFIX = "head_dist/"
DIST = "dist"                   # DeiT distillation token
REGISTERS = "registers"
POSEMB_ROW = "Transformer/posembed_input/row_embedding"
POSEMB_COL = "Transformer/posembed_input/col_embedding"
PRE_LOGITS_PREFIX = "pre_logits/"
MAP_PREFIX = "MAPHead_0/"      # big_vision's multihead attention pooling head
PRE_NORM_PREFIX = "Transformer/pre_norm/"  # CLIP's ln_pre
PROJECTION = "projection/kernel"            # CLIP's image projection (no bias)


def block_prefix(index: int) -> str:
    return f"Transformer/encoderblock_{index}/"


@dataclasses.dataclass
class Checkpoint:
    """A weight file converted to canonical names.

    Attributes:
        tensors: canonical name -> array. Names a reader could not map keep their original
            spelling, so that errors list them.
        layout: a human-readable name of the file layout, for messages.
        posemb_has_cls_row: whether the position embedding holds a class-token row when the
            file has a class token: True / False when the layout says so, None when only the
            row count can tell (big_vision, timm).
        posemb_method: how its position embedding is resized to another grid: 'official'
            (the official aligned-corners rule) or 'bicubic' (timm's, for files made with it).
    """

    tensors: dict[str, np.ndarray]
    layout: str
    posemb_has_cls_row: bool | None = True
    posemb_method: str = "official"


def _layer_norm(prefix, layer):
    return {f"{prefix}scale": layer.gamma, f"{prefix}bias": layer.beta}


def _dense(prefix, layer):
    """A Keras Dense/EinsumDense: its stored kernel (without any LoRA update) and bias."""
    return {f"{prefix}kernel": keras_compat.stored_kernel(layer), f"{prefix}bias": layer.bias}


def _attention(prefix, layer):
    names = {}
    for part in ("query", "key", "value", "out"):
        names.update(_dense(f"{prefix}{part}/", getattr(layer, part)))
    return names


def _block(prefix, block):
    names = {}
    names.update(_layer_norm(f"{prefix}LayerNorm_0/", block.layer_norm_0))
    names.update(_attention(f"{prefix}{ATTENTION}/", block.attention))
    names.update(_layer_norm(f"{prefix}LayerNorm_2/", block.layer_norm_2))
    names.update(_dense(f"{prefix}{MLP}/Dense_0/", block.mlp.dense_0))
    names.update(_dense(f"{prefix}{MLP}/Dense_1/", block.mlp.dense_1))
    if block.attention.locality:
        names[f"{prefix}{ATTENTION}/temperature"] = block.attention.temperature
    for index, scale in enumerate(block.layer_scales or []):
        names[f"{prefix}LayerScale_{index}/scale"] = scale.scale
    return names


def _stem(layer):
    """The patch embedding: the released `embedding/{kernel,bias}` for the official stem; the
    locality stems' layers under `embedding/<layer name>/` (no release has them)."""
    if not hasattr(layer, "convs") and not hasattr(layer, "norm"):
        return _dense("embedding/", layer.projection)
    names = _dense("embedding/projection/", layer.projection)
    if hasattr(layer, "norm"):
        names.update(_layer_norm(f"embedding/{layer.norm.name}/", layer.norm))
    for conv, norm in zip(getattr(layer, "convs", ()), getattr(layer, "norms", ())):
        names[f"embedding/{conv.name}/kernel"] = conv.kernel
        names.update({f"embedding/{norm.name}/{key}": getattr(norm, attribute) for key, attribute
                      in (("scale", "gamma"), ("bias", "beta"), ("mean", "moving_mean"),
                          ("var", "moving_variance"))})
    return names


def _conv_norm(prefix, conv, norm):
    return {f"{prefix}{conv.name}/kernel": conv.kernel, f"{prefix}{norm.name}/scale": norm.gamma,
            f"{prefix}{norm.name}/bias": norm.beta}


def _resnet(resnet):
    """The hybrid's ResNet under the official keys (`conv_root`, `block1/unit1/conv1`, ...)."""
    names = _conv_norm("", resnet.conv_root, resnet.gn_root)
    for stage_index, stage in enumerate(resnet.stages):
        for unit_index, unit in enumerate(stage):
            prefix = f"block{stage_index + 1}/unit{unit_index + 1}/"
            pairs = [(unit.conv1, unit.gn1), (unit.conv2, unit.gn2), (unit.conv3, unit.gn3)]
            if unit.conv_proj is not None:
                pairs.append((unit.conv_proj, unit.gn_proj))
            for conv, norm in pairs:
                names.update(_conv_norm(prefix, conv, norm))
    return names


def _options(layers) -> dict:
    """Weights of the optional features (DeiT, registers, 2-D posemb, MAP head)."""
    names = {}
    if "dist" in layers:
        names[DIST] = layers["dist"].dist
    if "registers" in layers:
        names[REGISTERS] = layers["registers"].registers
    posemb = layers["posembed_input"]
    if hasattr(posemb, "row_embedding"):
        names[POSEMB_ROW] = posemb.row_embedding
        names[POSEMB_COL] = posemb.col_embedding
    pool = layers.get("pool")
    if pool is not None and hasattr(pool, "probe"):
        prefix = MAP_PREFIX
        names[prefix + "probe"] = pool.probe
        names.update(_attention(f"{prefix}MultiHeadDotProductAttention_0/", pool.attention))
        names.update(_layer_norm(f"{prefix}LayerNorm_0/", pool.layer_norm))
        names.update(_dense(f"{prefix}MlpBlock_0/Dense_0/", pool.mlp.dense_0))
        names.update(_dense(f"{prefix}MlpBlock_0/Dense_1/", pool.mlp.dense_1))
    return names


def model_variables(model) -> dict:
    """Maps each canonical name to the Keras variable holding it in `model`.

    Args:
        model: a built model made by `VisionTransformer` or a `ViT*` constructor.

    Returns:
        canonical name -> `keras.Variable`.
    """
    from vit_keras.quantization import is_quantized

    if is_quantized(model):
        raise ValueError(f"model {model.name!r} is quantized: its kernels are integers. Load "
                         "or save float weights before model.quantize()")
    layers = {layer.name: layer for layer in model.layers}
    needed = ("embedding", "posembed_input", "encoder_norm", "encoderblock_0")
    absent = [name for name in needed if name not in layers]
    if absent:
        raise ValueError(f"model {model.name!r} was not built by VisionTransformer: it has no "
                         f"layer(s) {absent}")
    names = {}
    if "resnet" in layers:
        names.update(_resnet(layers["resnet"]))
    names.update(_stem(layers["embedding"]))
    if CLS in layers:
        names[CLS] = layers[CLS].cls
    if hasattr(layers["posembed_input"], "pos_embedding"):  # sincos2d has no weights
        names[POSEMB] = layers["posembed_input"].pos_embedding
    names.update(_options(layers))
    index = 0
    while f"encoderblock_{index}" in layers:
        names.update(_block(block_prefix(index), layers[f"encoderblock_{index}"]))
        index += 1
    names.update(_layer_norm("Transformer/encoder_norm/", layers["encoder_norm"]))
    if "pre_norm" in layers:
        names.update(_layer_norm(PRE_NORM_PREFIX, layers["pre_norm"]))
    for optional in ("pre_logits", "head", "head_dist"):
        if optional in layers:
            names.update(_dense(f"{optional}/", layers[optional]))
    if "projection" in layers:
        names[PROJECTION] = layers["projection"].kernel
    return names


def num_heads(model) -> int:
    """The attention head count of a model built by `VisionTransformer`."""
    return model.get_layer("encoderblock_0").num_heads


def split_heads(array: np.ndarray, heads: int, axis: int) -> np.ndarray:
    """Splits `axis` of size heads * head_dim into (heads, head_dim), heads outermost.

    Returns `array` unchanged when the axis does not divide, so the shape check reports it.
    """
    axis = axis % array.ndim
    size = array.shape[axis]
    if size % heads:
        return array
    return array.reshape(*array.shape[:axis], heads, size // heads, *array.shape[axis + 1:])
