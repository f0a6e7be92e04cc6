"""Pretrained weights into a model, in one direction:

resolve (`pretrained.sources`: a name, URL, `hf://` or path -> a local file) -> read
(`checkpoints.read`: the file -> tensors under the official names, one module per foreign
layout) -> fit (`checkpoints.fit`: head, position-embedding and patch-size resampling to the
model) -> assign (`checkpoints.assign`: all or nothing).
"""

from __future__ import annotations

import logging
import os

from vit_keras import families
from vit_keras.checkpoints import keys
from vit_keras.checkpoints.assign import assign
from vit_keras.checkpoints.fit import fit_checkpoint
from vit_keras.checkpoints.read import read_checkpoint
from vit_keras.config import ViTConfig, get_variant, variant_of
from vit_keras.core.model import config_from_model, preprocessing_of
from vit_keras.pretrained import download, registry, sources, trained

logger = logging.getLogger(__name__)


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
            `vit_keras.pretrained.releases()`), family weights by timm's name
            ('vit_small_patch14_dinov2.lvd142m', see `vit_keras.families`; the position
            embedding is then resized as timm does), an `https://` URL, `hf://ORG/REPO[/FILE]`
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
    if skip_head not in (None, True, False):
        raise ValueError(f"skip_head must be None, True or False, got {skip_head!r}")
    keys.model_variables(model)  # a model of another kind fails here, before any download
    config = config_from_model(model)
    family_file = families.weights_file_reference(weights) if isinstance(weights, str) else None
    if family_file:
        # timm's resize, as for create_model.
        checkpoint, path = read_weights_file(family_file, config.num_heads,
                                             posemb_method="bicubic")
        _warn_on_other_preprocessing(preprocessing_of(model), weights)
    else:
        checkpoint, path, _ = _read(weights, variant or _variant_of_model(config, weights),
                                    config.num_heads)
    assign_checkpoint(model, checkpoint, path, skip_head=skip_head, config=config)


def assign_checkpoint(model, checkpoint: keys.Checkpoint, path: str, *,
                      skip_head: bool | None = None, config: ViTConfig | None = None) -> None:
    """Fits a read checkpoint to `model` and assigns it (see `load_weights`); all or nothing.

    Args:
        model: the target model.
        checkpoint: from `read_checkpoint` (unchanged: its tensors are fitted in a copy).
        path: where the checkpoint came from, for messages.
        skip_head: as in `load_weights`.
        config: the model's config, when the caller has it.
    """
    config = config or config_from_model(model)
    variables = keys.model_variables(model)
    tensors, targets, skipped, reason = fit_checkpoint(checkpoint, variables, config.grid_size,
                                                       skip_head)
    if reason and skipped & set(variables):
        logger.warning("load_weights(%s): not loading %s (%s); the model's head keeps its "
                       "initial values", path, ", ".join(sorted(skipped)), reason)
    elif reason:  # a headless model: nothing of it is left out
        logger.info("load_weights(%s): the model has no head; not loading %s", path,
                    ", ".join(sorted(skipped)))
    assign(tensors, targets, f"checkpoint {path!r} ({checkpoint.layout}) does not fit model "
                             f"{model.name!r}")
    logger.info("load_weights: loaded %d tensors from %s (%s)", len(targets), path,
                checkpoint.layout)


def read_pretrained(weights: str, variant: str, config_overrides: dict, *,
                    classes: int | None = None,
                    include_top: bool = True) -> tuple[keys.Checkpoint, str, dict]:
    """Fetches and reads `weights` for a `variant` model, and says how to build it.

    Args:
        weights: a weight name, URL, `hf://` reference or path.
        variant: the constructor's architecture ('B/16').
        config_overrides: the caller's `ViTConfig` overrides (they may change the architecture).
        classes: the caller's number of classes, if given. A head of another size replaces the
            whole head, pre_logits included, as the paper's fine-tuning does.
        include_top: False: the model is the encoder alone, without pre_logits.

    Returns:
        (checkpoint, local path, the `ViTConfig` fields to take from the weights).

    Raises:
        ValueError: unknown name, failed download, unreadable file, or a file that is not the
            release it is cached as.
    """
    architecture = get_variant(variant, **config_overrides)
    checkpoint, path, release = _read(weights, variant, architecture.num_heads)
    fields = trained.trained_config_fields(checkpoint, architecture)
    mismatch = trained.release_mismatch(release, fields) if release is not None else None
    if mismatch:
        raise ValueError(f"{path}: {mismatch}; delete it and download it again (from "
                         f"{release.url}, or a mirror that has the release)")
    if release is not None and not release.head_trained and include_top and classes is None:
        logger.warning("%s: the released head of ViT-%s %r is all zeros (it was released for "
                       "fine-tuning): pass classes=N to train a new head", path,
                       release.variant, release.name)
    if not include_top or (classes is not None and classes != fields.get("num_classes")):
        fields.pop("representation_size")
    return checkpoint, path, fields


def _read(weights: str, variant: str | None, num_heads: int,
          posemb_method: str = "official") -> tuple[keys.Checkpoint, str, registry.Release | None]:
    """`local_weights`, then the file read into canonical names.

    Args:
        weights: as `local_weights`.
        variant: as `local_weights`.
        num_heads: attention heads of the target model (to split fused torch weights).
        posemb_method: as in `read_checkpoint`.

    Returns:
        (checkpoint, path, release or None).

    Raises:
        ValueError: as `local_weights`, or an unreadable file (a cached one is named, with
            what to do).
    """
    path, release = sources.local_weights(weights, variant)
    try:
        return read_checkpoint(path, num_heads, posemb_method=posemb_method), path, release
    except ValueError as error:
        if os.path.abspath(path).startswith(download.cache_root() + os.sep):
            raise ValueError(f"{error}\n  {path} is in the weights cache: delete it to download "
                             "it again") from None
        raise


def _warn_on_other_preprocessing(preprocessing, weights: str) -> None:
    """Family weights expect their own preprocessing; a model built without it would be fed
    differently prepared images (create_model and `vit train --model` set it)."""
    spec, tag = families.split_name(weights)
    expected = spec.tags[tag]
    if preprocessing != expected:
        logger.warning("load_weights(%s): these weights expect preprocessing %s; the model's is "
                       "%s: call model.set_preprocessing(...), or build it with "
                       "vit_keras.create_model(%r)", weights, expected.describe(),
                       preprocessing.describe(), spec.name)


def read_weights_file(weights: str, num_heads: int, *,
                      posemb_method: str = "official") -> tuple[keys.Checkpoint, str]:
    """An `https://` URL, `hf://` reference or path, fetched and read into canonical names.

    Args:
        weights: where the file is (no weight name: those are official releases).
        num_heads: attention heads of the target model.
        posemb_method: how its position embedding is resized to another grid: 'official' or
            'bicubic' (timm's, which users of timm's family files expect).

    Returns:
        (checkpoint, local path).
    """
    checkpoint, path, _ = _read(weights, None, num_heads, posemb_method)
    return checkpoint, path


def _variant_of_model(config, weights) -> str | None:
    """The official variant of `config`, when `weights` is a weight name (else None: unneeded).

    Args:
        config: the model's `ViTConfig`.
        weights: the `weights` argument.

    Returns:
        'B/16'-style variant, or None when `weights` is no weight name.

    Raises:
        ValueError: `weights` is a weight name and the model is no official architecture.
    """
    if not (isinstance(weights, str) and registry.is_weight_name(weights)):
        return None
    variant = variant_of(config)
    if variant is None:
        raise ValueError(f"weights {weights!r} name a release for an official architecture, but "
                         "the model is not one (its patch size, width, depth, heads "
                         "or MLP differ): pass variant='B/16' (or similar), or a file path")
    return variant
