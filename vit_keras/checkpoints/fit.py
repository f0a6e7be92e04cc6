"""Fit: a read checkpoint -> the model's tensors: which head to leave out, the position
embedding's class-token row and resolution (the official `interpolate_posembed` rule) and the
patch size (FlexiViT's resampling). Works on arrays and the model's variable shapes only.
"""

from __future__ import annotations

import logging

import numpy as np

from vit_keras.checkpoints import keys, patch_resize, resize

logger = logging.getLogger(__name__)


def fit_checkpoint(checkpoint: keys.Checkpoint, targets: dict, grid, skip_head=None):
    """The checkpoint's tensors fitted to the model's variables.

    Args:
        checkpoint: from `read_checkpoint` (left as it is: the fitted tensors are a new dict).
        targets: canonical name -> the model's variable (`keys.model_variables`).
        grid: the model's patch grid (rows, cols).
        skip_head: None, True or False (see `vit_keras.load_weights`).

    Returns:
        (fitted tensors, the targets they are for, the names left out, why or None).
    """
    tensors = dict(checkpoint.tensors)
    _fit_projection(tensors, targets)
    skipped, reason = _head_names_to_skip(tensors, targets, skip_head)
    tensors = {name: value for name, value in tensors.items() if name not in skipped}
    targets = {name: value for name, value in targets.items() if name not in skipped}
    _fit_patch_embedding(tensors, targets)
    _fit_position_embedding(checkpoint, tensors, targets, grid)
    _fit_2d_position_embedding(tensors, targets)
    return tensors, targets, skipped, reason


def _fit_projection(tensors, targets) -> None:
    """timm stores CLIP's image projection as its head (with a zero bias): a model with a
    projection and no such head takes it as the projection."""
    kernel, bias = tensors.get("head/kernel"), tensors.get("head/bias")
    target = targets.get(keys.PROJECTION)
    model_head = targets.get("head/kernel")
    if (target is None or keys.PROJECTION in tensors or kernel is None
            or tuple(kernel.shape) != tuple(target.shape)
            or (model_head is not None and tuple(model_head.shape) == tuple(kernel.shape))
            or (bias is not None and np.any(bias))):
        return
    tensors[keys.PROJECTION] = tensors.pop("head/kernel")
    tensors.pop("head/bias", None)


def _is_head(name: str) -> bool:
    return name.startswith(keys.HEAD_PREFIX) or name.startswith(keys.HEAD_DIST_PREFIX)


def _is_pre_logits(name: str) -> bool:
    return name.startswith(keys.PRE_LOGITS_PREFIX)


def _head_names_to_skip(tensors, targets, skip_head) -> tuple[set, str | None]:
    """Which checkpoint/model head names to leave out, and why (None when nothing is left out).

    skip_head=False skips nothing. True skips the head, and pre_logits when the model has none.
    None skips the head when it cannot load (no head in the model, other shape, or a checkpoint
    pre_logits the model lacks), and that pre_logits too.
    """
    if skip_head is False:
        return set(), None
    head_names = {name for name in (*tensors, *targets) if _is_head(name)}
    dropped_pre_logits = ({name for name in tensors if _is_pre_logits(name)}
                          if not any(_is_pre_logits(name) for name in targets) else set())
    if skip_head is True:
        return head_names | dropped_pre_logits, "skip_head=True"
    model_head = {name: tuple(targets[name].shape) for name in targets if _is_head(name)}
    file_head = {name: tuple(tensors[name].shape) for name in tensors if _is_head(name)}
    if dropped_pre_logits:
        reason = "the checkpoint has pre_logits, the model has none (drop-head variant)"
    elif file_head and not model_head:
        reason = "the model has no head"
    elif file_head != model_head:
        reason = f"head shapes differ: model {model_head}, checkpoint {file_head}"
    else:
        return set(), None
    return head_names | dropped_pre_logits, reason


def _with_cls_row(posemb: np.ndarray, has_cls: bool, flag, num_patches: int,
                  prefix: int) -> np.ndarray:
    """Returns the posemb with a class-token row iff the model has a class token.

    A layout that adds the position embedding before prepending the class token (big_vision,
    timm `no_embed_class`) has no such row: a zero row is exactly equivalent. `prefix` counts
    the model's rows before the grid (class and distillation tokens).
    """
    if not has_cls or posemb.ndim != 3:
        return posemb
    rows = posemb.shape[1]
    if flag is None:  # the row count tells: first at the model's grid, then by squareness
        if rows in (num_patches + prefix, num_patches + prefix - 1):
            flag = rows == num_patches + prefix
        else:
            flag = (resize.square_grid(rows - prefix + 1) is None
                    and resize.square_grid(rows - prefix) is not None)
    if flag:
        return posemb
    return np.concatenate([np.zeros_like(posemb[:, :1]), posemb], axis=1)


def _fit_position_embedding(checkpoint, tensors, targets, grid):
    """Puts the posemb of `tensors` (the checkpoint's, being fitted) into the model's form,
    resizing it to the model's `grid` by the checkpoint's `posemb_method`."""
    if keys.POSEMB not in tensors or keys.POSEMB not in targets:
        return
    has_cls = keys.CLS in targets and keys.CLS in tensors
    prefix = has_cls + (keys.DIST in targets and keys.DIST in tensors)
    posemb = _with_cls_row(tensors[keys.POSEMB], has_cls, checkpoint.posemb_has_cls_row,
                           grid[0] * grid[1], prefix)
    expected = tuple(targets[keys.POSEMB].shape)
    if (posemb.shape != expected and posemb.ndim == 3 and posemb.shape[-1] == expected[-1]
            and resize.square_grid(posemb.shape[1] - prefix) is not None):
        logger.info("Resizing the position embedding from %s to %s (grid %s)", posemb.shape,
                    expected, grid)
        posemb = resize.resize_position_embedding(posemb, grid, has_cls,
                                                  num_prefix_tokens=prefix,
                                                  method=checkpoint.posemb_method)
    tensors[keys.POSEMB] = posemb


def _fit_2d_position_embedding(tensors, targets) -> None:
    """Resizes learned row / column embeddings of another grid along their axis (aligned
    corners, as the 1-D embedding's grid)."""
    for name in (keys.POSEMB_ROW, keys.POSEMB_COL):
        table, target = tensors.get(name), targets.get(name)
        if (table is not None and target is not None and table.ndim == 2
                and table.shape != tuple(target.shape) and table.shape[1] == target.shape[1]):
            logger.info("Resizing %s from %s to %s", name, table.shape, tuple(target.shape))
            tensors[name] = resize.resize_axis(table, target.shape[0], axis=0)


def _fit_patch_embedding(tensors, targets) -> None:
    """Resamples a patch-embedding kernel of another patch size to the model's (FlexiViT)."""
    kernel, target = tensors.get(keys.EMBEDDING_KERNEL), targets.get(keys.EMBEDDING_KERNEL)
    if kernel is None or target is None or kernel.ndim != 4:
        return
    expected = tuple(target.shape)
    if kernel.shape != expected and kernel.shape[2:] == expected[2:]:
        logger.info("Resampling the patch embedding from %sx%s to %sx%s patches (FlexiViT)",
                    *kernel.shape[:2], *expected[:2])
        tensors[keys.EMBEDDING_KERNEL] = patch_resize.resample_patch_embedding(kernel,
                                                                               expected[:2])
