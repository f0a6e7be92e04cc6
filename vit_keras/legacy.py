"""`.keras` files of the earlier release (before the layers became Keras' own EinsumDense).

Those files hold the attention weights on the attention layer itself (`vars/0..7`: query, key,
value and out kernels and biases) and the patch embedding's on `PatchEmbedding`; now they live
in the `EinsumDense` sublayers `query`, `key`, `value`, `out` and `projection`, and the model
is a `VisionTransformer` carrying its `ViTConfig`. Loading such a file fails with
`LEGACY_FILE_ERROR`, which names the one-line conversion:

    python -m vit_keras.convert OLD.keras NEW.keras

Such a file, and any functional model using the ViT layers, carries no `ViTConfig`:
`config_from_layers` reads it off the layers' names and shapes.
"""

from __future__ import annotations

from vit_keras.config import ViTConfig, resnet_stride

LEGACY_FILE_ERROR = (
    "this .keras file was written by vit_keras 0.1 (attention and patch-embedding weights on "
    "the layers themselves); convert it once with: python -m vit_keras.convert OLD.keras "
    "NEW.keras")


def refuse_legacy_variables(layer, store) -> None:
    """Raises ValueError(LEGACY_FILE_ERROR) when `store` holds variables for `layer`, a layer
    that has none of its own now (the earlier release kept its weights there)."""
    if store is not None and len(store.keys()):
        raise ValueError(f"layer {layer.name!r}: {LEGACY_FILE_ERROR}")


def config_of(model) -> ViTConfig:
    """The model's `ViTConfig`: its own (`model.config`), or read off the layers of a model
    that carries none (`config_from_layers`)."""
    config = getattr(model, "config", None)
    return config if isinstance(config, ViTConfig) else config_from_layers(model)


def config_from_layers(model) -> ViTConfig:
    """The `ViTConfig` of a functional model built from the ViT layers, read off their names
    and shapes (`num_classes` from the head, 1 without one; `head_bias_init` at its default).

    Raises:
        ValueError: the model has no ViT layers.
    """
    try:
        embedding = model.get_layer("embedding")
        block = model.get_layer("encoderblock_0")
    except ValueError as error:
        raise ValueError(f"model {model.name!r} was not built by VisionTransformer: {error}")
    layer_names = {layer.name for layer in model.layers}
    num_layers = sum(name.startswith("encoderblock_") for name in layer_names)
    channels = model.inputs[0].shape[-1]
    head = model.get_layer("head") if "head" in layer_names else None
    pre_logits = model.get_layer("pre_logits") if "pre_logits" in layer_names else None
    values = dict(
        patch_size=embedding.patch_size,
        hidden_size=embedding.hidden_size, mlp_dim=block.mlp_dim, num_heads=block.num_heads,
        num_layers=num_layers, num_classes=head.units if head is not None else 1,
        classifier="token" if "cls" in layer_names else "gap",
        representation_size=pre_logits.units if pre_logits is not None else None,
        dropout_rate=block.dropout_rate, attention_dropout_rate=block.attention_dropout_rate,
        channels=channels, gelu_approximate=block.gelu_approximate,
    )
    values.update(_option_fields(model, layer_names, num_layers))
    values.update(_image_size_fields(model, embedding, values))
    return ViTConfig(**values)


def _image_size_fields(model, embedding, values) -> dict:
    """`image_size` (the stored size, for a model taking any size) and the dynamic options."""
    _, height, width, _ = model.inputs[0].shape
    if height is not None and width is not None:
        return dict(image_size=(height, width))
    stored = model.get_layer("posembed_input").grid_size
    step = embedding.patch_size * resnet_stride(values.get("resnet_layers"))
    return dict(image_size=(stored[0] * step, stored[1] * step), dynamic_image_size=True,
                dynamic_image_pad=embedding.pad)


def _option_fields(model, layer_names, num_layers) -> dict:
    """The optional `ViTConfig` fields (hybrid, posemb, registers, ...) read off the layers."""
    fields = {}
    if "resnet" in layer_names:
        resnet = model.get_layer("resnet")
        fields.update(resnet_layers=resnet.block_counts, resnet_width=resnet.width_factor)
    last_block = model.get_layer(f"encoderblock_{num_layers - 1}")
    fields.update(drop_path_rate=last_block.drop_path_rate if num_layers > 1 else 0.0,
                  layer_scale_init=last_block.layer_scale_init,
                  distilled="dist" in layer_names,
                  locality_attention=getattr(last_block, "locality", False))
    stem = model.get_layer("embedding").__class__.__name__
    fields["stem"] = {"ConvStem": "conv", "ShiftedPatchEmbedding": "shifted_patches"}.get(
        stem, "patchify")
    posemb = model.get_layer("posembed_input").__class__.__name__
    fields["posemb"] = {"SinCosPositionEmbedding": "sincos2d",
                        "Learned2DPositionEmbedding": "learn2d"}.get(posemb, "learn")
    if "registers" in layer_names:
        fields["num_register_tokens"] = model.get_layer("registers").num_tokens
    if "pool" in layer_names and model.get_layer("pool").__class__.__name__ == "MAPHead":
        fields["classifier"] = "map"
    return fields
