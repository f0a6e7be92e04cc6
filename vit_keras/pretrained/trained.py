"""What a checkpoint's tensors say about the model it was trained in, and whether a file is
the release it is registered as."""

from __future__ import annotations

from vit_keras.checkpoints import keys, resize
from vit_keras.config import ViTConfig


def trained_config_fields(checkpoint: keys.Checkpoint, config: ViTConfig) -> dict:
    """The `ViTConfig` fields a checkpoint was trained with, as far as its tensors tell.

    Args:
        checkpoint: from `vit_keras.checkpoints.read_checkpoint` (canonical names).
        config: the architecture it is loaded into (its ResNet stride, and the patch size when
            the file has no patch embedding, turn the position-embedding grid into pixels).

    Returns:
        classifier ('token' with a class token, 'map' with a MAP head, else 'gap'), distilled,
        representation_size (the pre_logits width or None), num_classes (when there is a
        head) and image_size (when the position embedding is a learned square grid).
    """
    tensors = checkpoint.tensors
    pre_logits = tensors.get(keys.PRE_LOGITS_PREFIX + "kernel")
    has_map_head = any(name.startswith(keys.MAP_PREFIX) for name in tensors)
    fields = {"classifier": ("token" if keys.CLS in tensors else
                             "map" if has_map_head else "gap"),
              "distilled": keys.DIST in tensors,
              "representation_size": int(pre_logits.shape[-1]) if pre_logits is not None
              else None}
    if keys.HEAD_PREFIX + "kernel" in tensors:
        fields["num_classes"] = int(tensors[keys.HEAD_PREFIX + "kernel"].shape[-1])
    grid = _posemb_grid(checkpoint)
    kernel = tensors.get(keys.EMBEDDING_KERNEL)
    patch = int(kernel.shape[0]) if kernel is not None and kernel.ndim == 4 else config.patch_size
    if grid is not None:  # in the checkpoint's own patch size: the resolution it was trained at
        fields["image_size"] = grid * patch * config.resnet_stride
    return fields


def _posemb_grid(checkpoint: keys.Checkpoint) -> int | None:
    """The side of the learned position embedding's square patch grid, or None."""
    posemb = checkpoint.tensors.get(keys.POSEMB)
    if posemb is None or posemb.ndim != 3:
        return None
    rows = posemb.shape[1]
    prefix = (keys.CLS in checkpoint.tensors) + (keys.DIST in checkpoint.tensors)
    if prefix and checkpoint.posemb_has_cls_row is not False:  # rows for the prefix tokens
        grid = resize.square_grid(rows - prefix)
        if grid is not None:
            return grid[0]
    grid = resize.square_grid(rows)
    return grid[0] if grid is not None else None


def release_mismatch(release, fields: dict) -> str | None:
    """How a file's trained config differs from its registry entry, or None when it matches."""
    found = {"image_size": fields.get("image_size"), "num_classes": fields.get("num_classes"),
             "pre_logits": fields.get("representation_size") is not None}
    expected = {"image_size": release.image_size, "num_classes": release.num_classes,
                "pre_logits": release.pre_logits}
    if found == expected:
        return None
    return (f"it is not the {release.name!r} release of ViT-{release.variant}: expected "
            f"{expected}, the file has {found}")
