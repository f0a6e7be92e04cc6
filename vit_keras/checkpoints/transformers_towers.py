"""Hugging Face transformers' DINOv2, SigLIP and CLIP image towers (`.safetensors`).

Each is renamed to timm's layout, then read by `vit_keras.checkpoints.timm` (transformers'
separate q/k/v projections are stacked into timm's fused `qkv`):

- `Dinov2Model` / `Dinov2WithRegistersModel`: `embeddings.*`, `encoder.layer.N.*` (the files'
  `attention.attention.query` names, or transformers 5's `attention.q_proj`),
  `layer_scale{1,2}.lambda1`, SwiGLU's packed `mlp.weights_in` (or `gate_proj` + `up_proj`),
  the final `layernorm`. The class token's position-embedding row is in the table.
- `SiglipVisionModel` (no prefix) / `SiglipModel` (`vision_model.*`): `post_layernorm` and the
  attention
  pooling `head` (`probe`, a packed `in_proj` whose first third is the query).
- `CLIPVisionModelWithProjection` / `CLIPModel` (`vision_model.*`): `pre_layrnorm` (sic),
  `post_layernorm` and `visual_projection`, which becomes the model's `projection`.

A two-tower file's text tower and logit scale are not image weights and are left out.
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np

from vit_keras.checkpoints import keys, timm

_DINOV2_BLOCK = re.compile(r"^encoder\.layer\.(\d+)\.(.+)$")
_TOWER_BLOCK = re.compile(r"^encoder\.layers\.(\d+)\.(.+)$")
_DINOV2_PARTS = {"norm1": "norm1", "norm2": "norm2", "mlp.fc1": "mlp.fc1", "mlp.fc2": "mlp.fc2",
                 "mlp.weights_in": "mlp.fc1", "mlp.weights_out": "mlp.fc2",
                 "mlp.down_proj": "mlp.fc2", "attention.output.dense": "attn.proj",
                 "attention.o_proj": "attn.proj", "layer_scale1": "ls1", "layer_scale2": "ls2"}
_DINOV2_QKV = {"attention.attention.query": 0, "attention.attention.key": 1,
               "attention.attention.value": 2, "attention.q_proj": 0, "attention.k_proj": 1,
               "attention.v_proj": 2}
_TOWER_PARTS = {"layer_norm1": "norm1", "layer_norm2": "norm2", "mlp.fc1": "mlp.fc1",
                "mlp.fc2": "mlp.fc2", "self_attn.out_proj": "attn.proj"}
_TOWER_QKV = {"self_attn.q_proj": 0, "self_attn.k_proj": 1, "self_attn.v_proj": 2}
_TOWER_TOP = {"embeddings.patch_embedding": "patch_embed.proj", "pre_layrnorm": "norm_pre",
              "post_layernorm": "norm", "head.attention.out_proj": "attn_pool.proj",
              "head.layernorm": "attn_pool.norm", "head.mlp.fc1": "attn_pool.mlp.fc1",
              "head.mlp.fc2": "attn_pool.mlp.fc2"}
_VISION = "vision_model."  # absent in a SiglipVisionModel file, present in the others


def family_of(tensors) -> str | None:
    """Which transformers tower a state dict is.

    Args:
        tensors: the file's names (and arrays).

    Returns:
        'dinov2', 'siglip' or 'clip', or None for another layout.
    """
    if any(_DINOV2_BLOCK.match(name.removeprefix("dinov2.")) and ".norm1." in name
           for name in tensors):
        return "dinov2"
    names = {name[len(_VISION):] if name.startswith(_VISION) else name for name in tensors}
    if "embeddings.class_embedding" in names:
        return "clip"
    if "embeddings.patch_embedding.weight" in names:
        return "siglip"
    return None


def _part(parts: dict, fused: dict, block: str, part: str, qkv: dict, value) -> dict:
    """One block tensor under timm's name; q/k/v are collected in `qkv` to be stacked."""
    module, _, kind = part.rpartition(".")
    if module in fused:
        qkv.setdefault((block, kind), [None] * 3)[fused[module]] = value
        return {}
    if module == "mlp.gate_proj" or module == "mlp.up_proj":
        qkv.setdefault((block, f"swiglu.{kind}"), [None] * 2)[module == "mlp.up_proj"] = value
        return {}
    if module in parts:
        name = parts[module]
        return {f"blocks.{block}.{name}.{'gamma' if kind == 'lambda1' else kind}": value}
    return {}


def _stacked(pending: dict) -> dict:
    """The fused q/k/v (and gate/up) tensors collected per block."""
    result = {}
    for (block, kind), values in pending.items():
        if any(value is None for value in values):
            continue  # a block missing one of them: the shape check reports the layer
        if kind.startswith("swiglu."):
            result[f"blocks.{block}.mlp.fc1.{kind[len('swiglu.'):]}"] = np.concatenate(values)
        else:
            result[f"blocks.{block}.attn.qkv.{kind}"] = np.concatenate(values)
    return result


def _dinov2_to_timm(tensors: dict) -> dict:
    result, pending = {}, {}
    for name, value in tensors.items():
        name = name[len("dinov2."):] if name.startswith("dinov2.") else name
        block = _DINOV2_BLOCK.match(name)
        if block:
            result.update(_part(_DINOV2_PARTS, _DINOV2_QKV, block.group(1), block.group(2),
                                pending, value))
        elif name == "embeddings.cls_token":
            result["cls_token"] = value
        elif name == "embeddings.register_tokens":
            result["reg_token"] = value
        elif name == "embeddings.position_embeddings":
            result["pos_embed"] = value
        elif name.startswith("embeddings.patch_embeddings.projection."):
            result["patch_embed.proj." + name.rsplit(".", 1)[1]] = value
        elif name.startswith("layernorm."):
            result["norm." + name.rsplit(".", 1)[1]] = value
        elif name != "embeddings.mask_token":
            result[name] = value  # unknown: reported as unexpected
    result.update(_stacked(pending))
    return result


def _tower_to_timm(tensors: dict) -> dict:
    result, pending = {}, {}
    for name, value in tensors.items():
        if name.startswith(("text_model.", "text_projection.", "logit_")) or \
                name.endswith("position_ids"):
            continue  # the text tower and the similarity scale: not image weights
        if name.startswith(_VISION):
            name = name[len(_VISION):]
        block = _TOWER_BLOCK.match(name)
        module, _, kind = name.rpartition(".")
        if block:
            result.update(_part(_TOWER_PARTS, _TOWER_QKV, block.group(1), block.group(2),
                                pending, value))
        elif module in _TOWER_TOP:
            result[f"{_TOWER_TOP[module]}.{kind}"] = value
        elif name == "embeddings.class_embedding":
            result["cls_token"] = value.reshape(1, 1, -1)
        elif name == "embeddings.position_embedding.weight":
            result["pos_embed"] = value[None]
        elif name == "head.probe":
            result["attn_pool.latent"] = value
        elif module == "head.attention" and kind.startswith("in_proj_"):
            width = value.shape[0] // 3  # query first, then key and value (timm's kv)
            suffix = "weight" if kind == "in_proj_weight" else "bias"
            result[f"attn_pool.q.{suffix}"] = value[:width]
            result[f"attn_pool.kv.{suffix}"] = value[width:]
        elif name == "visual_projection.weight":
            result["head.weight"] = value  # timm's CLIP head: the projection, zero bias
            result["head.bias"] = np.zeros(value.shape[0], value.dtype)
        else:
            result[name] = value
    result.update(_stacked(pending))
    return result


def from_transformers_tower(tensors: dict, num_heads: int) -> keys.Checkpoint:
    """Converts a transformers DINOv2, SigLIP or CLIP state dict to canonical names.

    Args:
        tensors: name -> array as read from the file.
        num_heads: attention heads of the target model.

    Returns:
        The `Checkpoint`; names with no counterpart are kept, so errors list them.
    """
    family = family_of(tensors)
    renamed = _dinov2_to_timm(tensors) if family == "dinov2" else _tower_to_timm(tensors)
    checkpoint = timm.from_timm(renamed, num_heads)
    # DINOv2's table always has the class-token row.
    has_cls_row = True if family == "dinov2" else checkpoint.posemb_has_cls_row
    return dataclasses.replace(checkpoint, layout=f"Hugging Face transformers {family} "
                               "safetensors", posemb_has_cls_row=has_cls_row)
