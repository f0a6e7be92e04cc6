"""The `ViTConfig` of a model that carries none, read off its layers' names and shapes.

A functional model using the ViT layers (a `.keras` file of the 0.1 release, a re-wired view
of a `VisionTransformer`) has no `config`; `vit_keras.core.model.config_from_model` reads it
here. The layer names are those of `vit_keras.names`.
"""

from __future__ import annotations

from vit_keras import names
from vit_keras.config import ViTConfig, resnet_stride

_STEMS = {"ConvStem": "conv", "ShiftedPatchEmbedding": "shifted_patches"}
_POSEMBS = {"SinCosPositionEmbedding": "sincos2d", "Learned2DPositionEmbedding": "learn2d"}


def config_from_layers(model) -> ViTConfig:
    """The `ViTConfig` of a functional model built from the ViT layers.

    Args:
        model: a functional Keras model with the layers `VisionTransformer` builds.

    Returns:
        The config read off the layers' names and shapes (`num_classes` from the head, 1
        without one; `head_bias_init` at its default).

    Raises:
        ValueError: the model has no ViT layers.
    """
    try:
        embedding = model.get_layer(names.EMBEDDING)
        block = model.get_layer(names.block(0))
    except ValueError as error:
        raise ValueError(f"model {model.name!r} was not built by VisionTransformer: {error}")
    layer_names = {layer.name for layer in model.layers}
    num_layers = sum(names.block_index(name) is not None for name in layer_names)
    head = model.get_layer(names.HEAD) if names.HEAD in layer_names else None
    pre_logits = model.get_layer(names.PRE_LOGITS) if names.PRE_LOGITS in layer_names else None
    values = dict(
        patch_size=embedding.patch_size,
        hidden_size=embedding.hidden_size, mlp_dim=block.mlp_dim, num_heads=block.num_heads,
        num_layers=num_layers, num_classes=head.units if head is not None else 1,
        classifier="token" if names.CLS in layer_names else "gap",
        representation_size=pre_logits.units if pre_logits is not None else None,
        dropout_rate=block.dropout_rate, attention_dropout_rate=block.attention_dropout_rate,
        channels=model.inputs[0].shape[-1], gelu_approximate=block.gelu_approximate,
    )
    values.update(_option_fields(model, layer_names, num_layers))
    values.update(_image_size_fields(model, embedding, values))
    return ViTConfig(**values)


def _image_size_fields(model, embedding, values) -> dict:
    """`image_size` (the stored size, for a model taking any size) and the dynamic options."""
    _, height, width, _ = model.inputs[0].shape
    if height is not None and width is not None:
        return dict(image_size=(height, width))
    stored = model.get_layer(names.POSEMB).grid_size
    step = embedding.patch_size * resnet_stride(values.get("resnet_layers"))
    return dict(image_size=(stored[0] * step, stored[1] * step), dynamic_image_size=True,
                dynamic_image_pad=embedding.pad)


def _option_fields(model, layer_names, num_layers) -> dict:
    """The optional `ViTConfig` fields (hybrid, posemb, registers, ...) read off the layers."""
    fields = {}
    if names.RESNET in layer_names:
        resnet = model.get_layer(names.RESNET)
        fields.update(resnet_layers=resnet.block_counts, resnet_width=resnet.width_factor)
    last_block = model.get_layer(names.block(num_layers - 1))
    fields.update(drop_path_rate=last_block.drop_path_rate if num_layers > 1 else 0.0,
                  layer_scale_init=last_block.layer_scale_init,
                  distilled=names.DIST in layer_names,
                  locality_attention=getattr(last_block, "locality", False))
    stem = model.get_layer(names.EMBEDDING).__class__.__name__
    fields["stem"] = _STEMS.get(stem, "patchify")
    posemb = model.get_layer(names.POSEMB).__class__.__name__
    fields["posemb"] = _POSEMBS.get(posemb, "learn")
    if names.REGISTERS in layer_names:
        fields["num_register_tokens"] = model.get_layer(names.REGISTERS).num_tokens
    if names.POOL in layer_names and model.get_layer(names.POOL).__class__.__name__ == "MAPHead":
        fields["classifier"] = "map"
    return fields
