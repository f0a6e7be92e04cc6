"""Read: a weight file -> its tensors under the canonical (released official) names.

One module per foreign layout converts names and shapes (`official`, `timm`, `huggingface`,
`transformers_towers`); this one detects which layout a file has. Nothing here knows the model.
"""

from __future__ import annotations

import dataclasses

from vit_keras import atomic
from vit_keras.checkpoints import (huggingface, io, keras_hub, keras_hub_config, keys, official,
                                   timm, transformers_towers)


def read_checkpoint(path: str, num_heads: int, *,
                    posemb_method: str = "official") -> keys.Checkpoint:
    """Reads a weight file and converts it to canonical names, detecting its layout.

    Args:
        path: an `.npz` or `.safetensors` file (local or `gs://`), a `.keras` ViT model
            (e.g. the `model.keras` of an earlier `vit train`) or a keras-hub preset folder.
        num_heads: attention heads of the target model (needed to split fused torch weights).
        posemb_method: how its position embedding is resized to another grid: 'official'
            or 'bicubic' (timm's, for the files of timm's families).

    Returns:
        The `Checkpoint`.
    """
    return dataclasses.replace(_read_layout(path, num_heads), posemb_method=posemb_method)


def _read_layout(path: str, num_heads: int) -> keys.Checkpoint:
    """The file at `path` under canonical names, by the reader of its layout."""
    if path.lower().endswith(".keras"):
        return official.from_official(_keras_model_tensors(path))
    if keras_hub_config.is_preset(path):
        return keras_hub.read_preset(path).checkpoint
    file_format, tensors = io.read_tensors(path)
    if official.looks_official(tensors):
        return official.from_official(tensors)
    if timm.looks_timm(tensors):
        return timm.from_timm(tensors, num_heads)
    if transformers_towers.family_of(tensors):  # before ViTModel: DINOv2 shares its names
        return transformers_towers.from_transformers_tower(tensors, num_heads)
    if huggingface.looks_huggingface(tensors):
        return huggingface.from_huggingface(tensors, num_heads)
    sample = sorted(tensors)[:8]
    raise ValueError(
        f"{file_format} file {path!r} is not a ViT checkpoint of a known layout: expected "
        "official/big_vision names ('embedding/kernel', optionally under 'params/' or "
        "'opt/target/'), timm names ('patch_embed.proj.weight', 'blocks.0....') or Hugging Face "
        f"names ('vit.embeddings.patch_embeddings.projection.weight'); found {sample}")


def _keras_model_tensors(path: str) -> dict:
    """The official-layout tensors of a `.keras` ViT (loaded with `safe_mode=True`)."""
    import keras


    if not atomic.exists(path):
        raise ValueError(f"checkpoint file {path!r} does not exist: expected a .keras model "
                         "file")
    try:
        model = keras.saving.load_model(path, safe_mode=True, compile=False)
    except Exception as error:  # a corrupt archive or a model of unknown layers
        raise ValueError(f"{path!r} cannot be loaded as a Keras model "
                         f"({type(error).__name__}: {error})") from None
    return official.model_tensors(model)
