"""timm `VisionTransformer` state dicts (`.safetensors`): `blocks.N.*` names, fused `qkv`.

The torch layouts (transposed `Linear` kernels, the fused `qkv` projection stacking query, key
and value along its output axis) are converted by `torch_layout`. The same layout
holds timm's DeiT, DeiT-III, DINOv2 (with registers), SigLIP and CLIP image towers: layer
scales (`ls1.gamma`), `norm_pre`, `fc_norm` and the attention-pooling head (`attn_pool.*`)
map to the options of `ViTConfig`. A file of those families loaded by name (`vit_keras.families`)
has its position embedding resized as timm does (antialiased bicubic).
"""

from __future__ import annotations

import re

import numpy as np

from vit_keras.checkpoints import keys, torch_layout

_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")
# Hybrid models (`vision_transformer_hybrid`): a ResNetV2 backbone inside the patch embedding.
_BACKBONE = "patch_embed.backbone."
_BACKBONE_UNIT = re.compile(r"^stages\.(\d+)\.blocks\.(\d+)\.(.+)$")  # a module path
_UNIT_PARTS = {"downsample.conv": "conv_proj", "downsample.norm": "gn_proj",
               "conv1": "conv1", "conv2": "conv2", "conv3": "conv3",
               "norm1": "gn1", "norm2": "gn2", "norm3": "gn3"}
_TOP_LEVEL = {
    "cls_token": keys.CLS,
    "pos_embed": keys.POSEMB,
    "patch_embed.proj.bias": "embedding/bias",
    "norm.weight": keys.ENCODER_NORM_PREFIX + "scale",
    "norm.bias": keys.ENCODER_NORM_PREFIX + "bias",
    "head.bias": "head/bias",
    "head_dist.bias": "head_dist/bias",
    "dist_token": keys.DIST,
    "reg_token": keys.REGISTERS,
    "pre_logits.fc.bias": "pre_logits/bias",
    "norm_pre.weight": keys.PRE_NORM_PREFIX + "scale",
    "norm_pre.bias": keys.PRE_NORM_PREFIX + "bias",
    # timm's fc_norm replaces the token norm (then Identity) after the pooling.
    "fc_norm.weight": keys.ENCODER_NORM_PREFIX + "scale",
    "fc_norm.bias": keys.ENCODER_NORM_PREFIX + "bias",
}
_BLOCK_SIMPLE = {
    "norm1.weight": "LayerNorm_0/scale", "norm1.bias": "LayerNorm_0/bias",
    "norm2.weight": "LayerNorm_2/scale", "norm2.bias": "LayerNorm_2/bias",
    "mlp.fc1.bias": f"{keys.MLP}/Dense_0/bias", "mlp.fc2.bias": f"{keys.MLP}/Dense_1/bias",
    "attn.proj.bias": f"{keys.ATTENTION}/out/bias",
    "ls1.gamma": "LayerScale_0/scale", "ls2.gamma": "LayerScale_1/scale",
}
_BLOCK_LINEAR = {"mlp.fc1.weight": f"{keys.MLP}/Dense_0/kernel",
                 "mlp.fc2.weight": f"{keys.MLP}/Dense_1/kernel"}
_QKV = ("query", "key", "value")  # timm's fused `qkv`, stacked in this order


def looks_timm(tensors) -> bool:
    """True when the names are those of a timm ViT state dict."""
    return "patch_embed.proj.weight" in tensors and any(_BLOCK.match(name) for name in tensors)


def _backbone(name: str, value: np.ndarray) -> dict:
    """A hybrid backbone tensor under the official ResNet keys (empty when unknown)."""
    module_path, _, kind = name[len(_BACKBONE):].rpartition(".")
    if module_path in ("stem.conv", "stem.norm"):
        prefix, module = "", "conv_root" if module_path == "stem.conv" else "gn_root"
    else:
        unit = _BACKBONE_UNIT.match(module_path)
        if not unit or unit.group(3) not in _UNIT_PARTS:
            return {}
        prefix = f"block{int(unit.group(1)) + 1}/unit{int(unit.group(2)) + 1}/"
        module = _UNIT_PARTS[unit.group(3)]
    if module.startswith("conv") and kind == "weight" and value.ndim == 4:
        return {f"{prefix}{module}/kernel": torch_layout.conv_kernel(value)}
    if module.startswith("gn") and kind in ("weight", "bias"):
        return {f"{prefix}{module}/{'scale' if kind == 'weight' else 'bias'}": value}
    return {}


def _block(part: str, value: np.ndarray, heads: int) -> dict:
    if part in _BLOCK_SIMPLE:
        return {_BLOCK_SIMPLE[part]: value}
    if part in _BLOCK_LINEAR:
        return {_BLOCK_LINEAR[part]: value.T}
    if part in ("attn.qkv.weight", "attn.qkv.bias"):
        kind = part.rpartition(".")[2]
        return torch_layout.fused_attention_inputs(f"{keys.ATTENTION}/", _QKV, kind, value, heads)
    if part == "attn.proj.weight":
        return torch_layout.attention_output(f"{keys.ATTENTION}/out/", "weight", value, heads)
    return {}


def _attention_pool(part: str, value: np.ndarray, heads: int) -> dict:
    """timm's `AttentionPoolLatent` under big_vision's `MAPHead_0` names (empty when unknown)."""
    prefix = keys.MAP_PREFIX
    attention = f"{prefix}MultiHeadDotProductAttention_0/"
    if part == "latent":
        return {prefix + "probe": value}
    if part.startswith(("norm.", "mlp.")):
        converted = _block(part.replace("norm.", "norm2.", 1), value, heads)
        return {name.replace(f"{keys.MLP}/", f"{prefix}MlpBlock_0/")
                    .replace("LayerNorm_2/", f"{prefix}LayerNorm_0/"): array
                for name, array in converted.items()}
    layer, _, kind = part.partition(".")
    if layer == "proj":
        return {attention + name[len(keys.ATTENTION) + 1:]: array
                for name, array in _block(f"attn.proj.{kind}", value, heads).items()}
    if layer not in ("q", "kv") or kind not in ("weight", "bias"):
        return {}
    parts = ("query",) if layer == "q" else ("key", "value")
    return torch_layout.fused_attention_inputs(attention, parts, kind, value, heads)


def from_timm(tensors: dict, num_heads: int) -> keys.Checkpoint:
    """Converts a timm ViT state dict to canonical names.

    Args:
        tensors: name -> array as read from the file.
        num_heads: attention heads of the target model (the fused weights do not say).

    Returns:
        The `Checkpoint`; names with no counterpart (e.g. `fc_norm.*` beside `norm.*`, a
        `mask_token`) are kept as they are, so they show up as unexpected keys.
    """
    result = {}
    for name, value in tensors.items():
        block = _BLOCK.match(name)
        converted = {}
        if block:
            prefix = keys.block_prefix(int(block.group(1)))
            converted = {prefix + key: array
                         for key, array in _block(block.group(2), value, num_heads).items()}
        elif name in _TOP_LEVEL and not (name.startswith("fc_norm.") and "norm.weight" in tensors):
            # fc_norm stands for the final norm only where `norm` is timm's Identity.
            converted = {_TOP_LEVEL[name]: value}
        elif name == "patch_embed.proj.weight" and value.ndim == 4:
            converted = {keys.EMBEDDING_KERNEL: torch_layout.conv_kernel(value)}
        elif name in ("head.weight", "head_dist.weight", "pre_logits.fc.weight"):
            converted = {name.split(".")[0] + "/kernel": value.T}
        elif name.startswith(_BACKBONE):
            converted = _backbone(name, value)
        elif name.startswith("attn_pool."):
            converted = _attention_pool(name[len("attn_pool."):], value, num_heads)
        result.update(converted or {name: value})
    weight = tensors.get("patch_embed.proj.weight")
    if "patch_embed.proj.bias" not in tensors and weight is not None:
        # CLIP's patch projection has no bias: a zero bias is the same function.
        result["embedding/bias"] = np.zeros(weight.shape[0], weight.dtype)
    layout = "timm safetensors"
    if "dist_token" in tensors:
        # DeiT: the posemb has class- and distillation-token rows (original timm layout).
        return keys.Checkpoint(result, layout + " (DeiT distilled)", posemb_has_cls_row=True)
    if any(name.startswith(_BACKBONE) for name in tensors):
        layout += " (hybrid)"
    # timm keeps the class-token row unless built with no_embed_class: the row count tells.
    return keys.Checkpoint(result, layout, posemb_has_cls_row=None)
