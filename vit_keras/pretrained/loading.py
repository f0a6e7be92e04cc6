"""Reading pretrained weights for a constructor: the file, and the config to build it with."""

from __future__ import annotations

import logging

from vit_keras.checkpoints import keys
from vit_keras.config import get_variant
from vit_keras.pretrained import sources, trained

logger = logging.getLogger(__name__)


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
    checkpoint, path, release = sources.read_weights(weights, variant, architecture.num_heads)
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
