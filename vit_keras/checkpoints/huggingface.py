"""Hugging Face `ViTModel` / `ViTForImageClassification` `.safetensors` files.

`ViTForImageClassification` stores the encoder under `vit.` and the head as `classifier`;
a bare `ViTModel` has no prefix and, by default, a pooler (`pooler.dense`, a Dense + tanh on
the class token), which is exactly this library's `pre_logits` layer and loads into it.

Both generations of block names are read: transformers 4.x (the files on the Hub,
`encoder.layer.N.attention.attention.query`, `intermediate.dense`, `output.dense`) and
transformers 5.x (`layers.N.attention.q_proj`, `mlp.fc1`, `mlp.fc2`).
"""

from __future__ import annotations

import re

from vit_keras.checkpoints import keys, torch_layout

_LAYER = re.compile(r"^(?:encoder\.layer|layers)\.(\d+)\.(.+)\.(weight|bias)$")
_LAYER_NORMS = {"layernorm_before": "LayerNorm_0", "layernorm_after": "LayerNorm_2"}
_LAYER_DENSES = {
    "attention.attention.query": f"{keys.ATTENTION}/query",
    "attention.attention.key": f"{keys.ATTENTION}/key",
    "attention.attention.value": f"{keys.ATTENTION}/value",
    "attention.output.dense": f"{keys.ATTENTION}/out",
    "intermediate.dense": f"{keys.MLP}/Dense_0",
    "output.dense": f"{keys.MLP}/Dense_1",
    # transformers 5.x
    "attention.q_proj": f"{keys.ATTENTION}/query",
    "attention.k_proj": f"{keys.ATTENTION}/key",
    "attention.v_proj": f"{keys.ATTENTION}/value",
    "attention.o_proj": f"{keys.ATTENTION}/out",
    "mlp.fc1": f"{keys.MLP}/Dense_0",
    "mlp.fc2": f"{keys.MLP}/Dense_1",
}
_TOP_LEVEL_NORMS = {"layernorm": keys.ENCODER_NORM_PREFIX}
_TOP_LEVEL_DENSES = {"pooler.dense": keys.PRE_LOGITS_PREFIX, "classifier": keys.HEAD_PREFIX}


def looks_huggingface(tensors) -> bool:
    """True when the names are those of a Hugging Face ViT."""
    return any(name.endswith("embeddings.patch_embeddings.projection.weight")
               for name in tensors)


def _dense(target: str, kind: str, value, heads: int):
    """A torch Linear under `target` (a canonical prefix ending in '/'); the attention's
    projections get their head axes back."""
    if target.endswith(("/query/", "/key/", "/value/")):
        return torch_layout.attention_input(target, kind, value, heads)
    if target.endswith("/out/"):
        return torch_layout.attention_output(target, kind, value, heads)
    return torch_layout.dense(target, kind, value)


def _norm(target: str, kind: str, value):
    return {f"{target}{'scale' if kind == 'weight' else 'bias'}": value}


def _convert(name: str, value, heads: int) -> dict:
    layer = _LAYER.match(name)
    if layer:
        prefix = keys.block_prefix(int(layer.group(1)))
        part, kind = layer.group(2), layer.group(3)
        if part in _LAYER_NORMS:
            return _norm(f"{prefix}{_LAYER_NORMS[part]}/", kind, value)
        if part in _LAYER_DENSES:
            return _dense(f"{prefix}{_LAYER_DENSES[part]}/", kind, value, heads)
        return {}
    if name == "embeddings.cls_token":
        return {keys.CLS: value}
    if name == "embeddings.position_embeddings":
        return {keys.POSEMB: value}
    if name == "embeddings.patch_embeddings.projection.weight" and value.ndim == 4:
        return {keys.EMBEDDING_KERNEL: torch_layout.conv_kernel(value)}
    if name == "embeddings.patch_embeddings.projection.bias":
        return {"embedding/bias": value}
    module, _, kind = name.rpartition(".")
    if module in _TOP_LEVEL_NORMS:
        return _norm(_TOP_LEVEL_NORMS[module], kind, value)
    if module in _TOP_LEVEL_DENSES and kind in torch_layout.KERAS_PARAMETER:
        return _dense(_TOP_LEVEL_DENSES[module], kind, value, heads)
    return {}


def from_huggingface(tensors: dict, num_heads: int) -> keys.Checkpoint:
    """Converts a Hugging Face ViT state dict to canonical names.

    Args:
        tensors: name -> array as read from the file.
        num_heads: attention heads of the target model.

    Returns:
        The `Checkpoint`; unknown names (e.g. `embeddings.mask_token`) are kept as they are.
    """
    result = {}
    for name, value in tensors.items():
        short = name[len("vit."):] if name.startswith("vit.") else name
        result.update(_convert(short, value, num_heads) or {name: value})
    return keys.Checkpoint(result, "Hugging Face safetensors", posemb_has_cls_row=True)
