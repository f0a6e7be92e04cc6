"""`load_weights`: any supported checkpoint layout into a model built by `VisionTransformer`.

Order of work: read the file safely, convert it to the canonical (released official) names,
decide about the head, fix the position embedding (class-token row, resolution), check every
tensor against the model, and only then assign. Nothing is assigned when anything is wrong.
"""

from __future__ import annotations

import logging

import numpy as np

from vit_keras.checkpoints import huggingface, io, keys, official, patch_resize, resize, timm

logger = logging.getLogger(__name__)

MAX_LISTED = 25  # offending keys listed per kind in an error message


def read_checkpoint(path: str, num_heads: int) -> keys.Checkpoint:
    """Reads a weight file and converts it to canonical names, detecting its layout.

    Args:
        path: an `.npz` or `.safetensors` file (local or `gs://`).
        num_heads: attention heads of the target model (needed to split fused torch weights).

    Returns:
        The `Checkpoint`.
    """
    file_format, tensors = io.read_tensors(path)
    if official.looks_official(tensors):
        return official.from_official(tensors)
    if timm.looks_timm(tensors):
        return timm.from_timm(tensors, num_heads)
    if huggingface.looks_huggingface(tensors):
        return huggingface.from_huggingface(tensors, num_heads)
    sample = sorted(tensors)[:8]
    raise ValueError(
        f"{file_format} file {path!r} is not a ViT checkpoint of a known layout: expected "
        "official/big_vision names ('embedding/kernel', optionally under 'params/' or "
        "'opt/target/'), timm names ('patch_embed.proj.weight', 'blocks.0....') or Hugging Face "
        f"names ('vit.embeddings.patch_embeddings.projection.weight'); found {sample}")


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


def _model_grid(model) -> tuple[int, int]:
    """The model's patch grid (rows, cols); a hybrid's patches count ResNet feature pixels."""
    from vit_keras.model import config_from_model  # the model module builds on this package

    return config_from_model(model).grid_size


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


def _fit_position_embedding(checkpoint, targets, model):
    """Puts the checkpoint posemb into the model's form, resizing it to the model's grid."""
    tensors = checkpoint.tensors
    if keys.POSEMB not in tensors or keys.POSEMB not in targets:
        return
    has_cls = keys.CLS in targets and keys.CLS in tensors
    prefix = has_cls + (keys.DIST in targets and keys.DIST in tensors)
    grid = _model_grid(model)
    posemb = _with_cls_row(tensors[keys.POSEMB], has_cls, checkpoint.posemb_has_cls_row,
                           grid[0] * grid[1], prefix)
    expected = tuple(targets[keys.POSEMB].shape)
    if (posemb.shape != expected and posemb.ndim == 3 and posemb.shape[-1] == expected[-1]
            and resize.square_grid(posemb.shape[1] - prefix) is not None):
        logger.info("Resizing the position embedding from %s to %s (grid %s)", posemb.shape,
                    expected, grid)
        posemb = resize.resize_position_embedding(posemb, grid, has_cls,
                                                  num_prefix_tokens=prefix)
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


def _listing(title: str, lines: list[str]) -> str:
    shown = lines[:MAX_LISTED]
    more = f"\n    ... and {len(lines) - MAX_LISTED} more" if len(lines) > MAX_LISTED else ""
    return f"  {title} ({len(lines)}):\n" + "\n".join(f"    {line}" for line in shown) + more


def _check(tensors, targets) -> str | None:
    """All problems between checkpoint tensors and model variables, or None."""
    missing = [f"{name}: expected {tuple(targets[name].shape)}"
               for name in sorted(set(targets) - set(tensors))]
    extra = [f"{name}: found {tuple(np.shape(tensors[name]))}"
             for name in sorted(set(tensors) - set(targets))]
    mis_shaped = [f"{name}: expected {tuple(targets[name].shape)}, found "
                  f"{tuple(np.shape(tensors[name]))}"
                  for name in sorted(set(tensors) & set(targets))
                  if tuple(np.shape(tensors[name])) != tuple(targets[name].shape)]
    parts = [_listing(title, lines) for title, lines in (
        ("missing from the checkpoint", missing), ("unexpected in the checkpoint", extra),
        ("shape mismatch", mis_shaped)) if lines]
    return "\n".join(parts) if parts else None


def load_weights(model, weights: str, *, skip_head: bool | None = None,
                 variant: str | None = None) -> None:
    """Loads pretrained weights into a model built by `VisionTransformer` / `ViT*`.

    The layout is detected from the file: official `.npz` (released pre-Linen names,
    Linen-numbered names, `opt/target/` prefix), big_vision `.npz` (`params/` prefix), timm ViT
    `.safetensors` and Hugging Face `ViTModel` / `ViTForImageClassification` `.safetensors`.
    A position embedding of another grid is resized to the model's as the official
    `interpolate_posembed` does (see `resize_position_embedding`); a patch embedding of another
    patch size is resampled to the model's as FlexiViT does (see `resample_patch_embedding`).

    Args:
        model: the target model; its architecture must match the checkpoint's (the patch size
            may differ).
        weights: a released weight name ('imagenet21k+imagenet2012', see
            `vit_keras.pretrained.releases()`), an `https://` URL, `hf://ORG/REPO[/FILE]`
            (with `huggingface_hub`), or the path of a checkpoint file (local or `gs://`).
            Names and URLs are downloaded once into the Keras cache.
        skip_head: None (default) loads the head when it fits and otherwise leaves the model's
            head at its initial values, with a logged warning (a checkpoint's pre_logits
            that the model lacks is then dropped too, with the head: the official
            "drop-head" fine-tuning variant); False requires the head to load; True never
            loads the head. A model's pre_logits that the checkpoint lacks is always an error.
        variant: with a weight name, the architecture it is for ('B/16'); default: the
            official variant the model's architecture is.

    Raises:
        ValueError: unknown name, failed download, unreadable or unknown file, or any missing,
            unexpected or mis-shaped tensor (all listed with expected and found shapes). The
            model is then unchanged.
    """
    from vit_keras.pretrained import sources  # imported here: pretrained builds on this module

    if skip_head not in (None, True, False):
        raise ValueError(f"skip_head must be None, True or False, got {skip_head!r}")
    keys.model_variables(model)  # a model of another kind fails here, before any download
    checkpoint, path, _ = sources.read_weights(
        weights, variant or sources.variant_of_model(model, weights), keys.num_heads(model))
    assign_checkpoint(model, checkpoint, path, skip_head=skip_head)


def assign_checkpoint(model, checkpoint: keys.Checkpoint, path: str, *,
                      skip_head: bool | None = None) -> None:
    """Assigns a read checkpoint to `model` (see `load_weights`); all or nothing.

    Args:
        model: the target model.
        checkpoint: from `read_checkpoint`; its tensors are modified (head dropped, posemb fit).
        path: where the checkpoint came from, for messages.
        skip_head: as in `load_weights`.
    """
    targets = keys.model_variables(model)
    skipped, reason = _head_names_to_skip(checkpoint.tensors, targets, skip_head)
    if reason and skipped & set(targets):
        logger.warning("load_weights(%s): not loading %s (%s); the model's head keeps its "
                       "initial values", path, ", ".join(sorted(skipped)), reason)
    elif reason:  # a headless model: nothing of it is left out
        logger.info("load_weights(%s): the model has no head; not loading %s", path,
                    ", ".join(sorted(skipped)))
    tensors = {name: value for name, value in checkpoint.tensors.items() if name not in skipped}
    targets = {name: value for name, value in targets.items() if name not in skipped}
    checkpoint.tensors = tensors
    _fit_patch_embedding(tensors, targets)
    _fit_position_embedding(checkpoint, targets, model)
    _fit_2d_position_embedding(tensors, targets)
    problems = _check(tensors, targets)
    if problems:
        raise ValueError(f"checkpoint {path!r} ({checkpoint.layout}) does not fit model "
                         f"{model.name!r}; nothing was loaded:\n{problems}")
    for name, variable in targets.items():
        variable.assign(np.asarray(tensors[name], dtype=variable.dtype))
    logger.info("load_weights: loaded %d tensors from %s (%s)", len(targets), path,
                checkpoint.layout)

