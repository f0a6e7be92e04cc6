"""The official JAX/Flax `.npz` layouts: the original release, Linen-numbered, `opt/target/`
and big_vision `params/` files; and `save_npz`, which writes the original release layout.

Names inside an encoder block, per layout (all map to the first column):

| released (pre-Linen)            | Linen-numbered / big_vision     |
|---------------------------------|---------------------------------|
| LayerNorm_0                     | LayerNorm_0                     |
| MultiHeadDotProductAttention_1  | MultiHeadDotProductAttention_0  |
| LayerNorm_2                     | LayerNorm_1                     |
| MlpBlock_3                      | MlpBlock_0                      |

big_vision keeps the position embedding at the top level (`params/pos_embedding`) and adds it
before prepending the class token, so it has no class-token row; its scanned encoders store all
blocks stacked in `Transformer/encoderblock/...`.
"""

from __future__ import annotations

import re

import numpy as np

from vit_keras import names
from vit_keras.checkpoints import io, keys

PREFIXES = (("opt/target/", "official npz (opt/target/ prefix)"),
            # SigLIP's two-tower files: the image tower (the text tower is left out).
            ("params/img/", "big_vision two-tower npz (params/img/, the image tower)"),
            ("params/", "big_vision npz (params/ prefix)"))
LINEN_NAMES = {"MultiHeadDotProductAttention_0": keys.ATTENTION, "LayerNorm_1": names.LAYER_NORM_2,
               "MlpBlock_0": keys.MLP}
BIG_VISION_POSEMB = ("pos_embedding", "Transformer/pos_embedding")
_BLOCK_PART = re.compile(
    rf"^({re.escape(names.TRANSFORMER)}/{re.escape(names.BLOCK_PREFIX)}\d+/)([^/]+)(/.*)$")
_SCANNED = names.encoder_scope("encoderblock")  # big_vision's scanned blocks, stacked


def looks_official(tensors) -> bool:
    """True when the names are those of an official / big_vision checkpoint (or of
    `save_npz`, whose locality stems keep their layers under `embedding/<layer>/`)."""
    kernels = ("embedding/kernel", "embedding/projection/kernel")
    return any(name in kernels or name.endswith(tuple("/" + kernel for kernel in kernels))
               for name in tensors)


def _strip_prefix(tensors):
    for prefix, layout in PREFIXES:
        if any(name.startswith(prefix + "embedding/") for name in tensors):
            # Other top-level entries (optimizer state, step) are not model weights.
            return {name[len(prefix):]: value for name, value in tensors.items()
                    if name.startswith(prefix)}, layout
    return dict(tensors), "official npz"


def _unstack_scanned(tensors):
    """big_vision's scanned encoder: one `encoderblock/` entry stacked over the depth axis."""
    result = {}
    for name, value in tensors.items():
        if name.startswith(_SCANNED):
            for index in range(value.shape[0]):
                result[f"{keys.block_prefix(index)}{name[len(_SCANNED):]}"] = value[index]
        else:
            result[name] = value
    return result


def _rename_linen(name):
    match = _BLOCK_PART.match(name)
    if match and match.group(2) in LINEN_NAMES:
        return match.group(1) + LINEN_NAMES[match.group(2)] + match.group(3)
    return name


def from_official(tensors: dict) -> keys.Checkpoint:
    """Converts any official-family `.npz` content to canonical names.

    Args:
        tensors: name -> array as read from the file.

    Returns:
        The `Checkpoint`.
    """
    tensors, layout = _strip_prefix(tensors)
    if any(name.startswith(_SCANNED) for name in tensors):
        tensors, layout = _unstack_scanned(tensors), layout + ", scanned encoder"
    if any(_rename_linen(name) != name for name in tensors):
        layout += ", Linen-numbered names"
    tensors = {_rename_linen(name): value for name, value in tensors.items()}
    has_cls_row = True
    for old_name in BIG_VISION_POSEMB:
        if old_name in tensors and keys.POSEMB not in tensors:
            tensors[keys.POSEMB] = tensors.pop(old_name)
            has_cls_row = None  # with or without the class-token row: the row count tells
    return keys.Checkpoint(tensors, layout, has_cls_row)


def model_tensors(model) -> dict[str, np.ndarray]:
    """The model's weights under the released official names, as float32 numpy arrays."""
    return {name: np.asarray(variable.numpy(), dtype=np.float32)
            for name, variable in keys.model_variables(model).items()}


def save_npz(model, path: str) -> None:
    """Writes the model's weights as an official `.npz` (the original release's names).

    The file loads in the official JAX code, in timm (`.npz` reader) and back here with
    `load_weights`. It is written to a temp file next to `path`, then renamed.

    Args:
        model: a model made by `VisionTransformer` or a `ViT*` constructor.
        path: destination, local or `gs://`; no suffix is added.
    """
    io.write_npz(path, model_tensors(model))
