"""Reading pretrained weights for a constructor: the file, and the config it was trained with."""

from __future__ import annotations

from vit_keras.checkpoints import keys, loading
from vit_keras.config import get_variant
from vit_keras.pretrained import sources


def read_pretrained(weights: str, variant: str, config_overrides: dict,
                    classes: int | None = None) -> tuple[keys.Checkpoint, str, dict]:
    """Fetches and reads `weights` for a `variant` model, and says how to build it.

    Args:
        weights: a weight name, URL, `hf://` reference or path.
        variant: the constructor's architecture ('B/16').
        config_overrides: the caller's `ViTConfig` overrides (they may change the architecture).
        classes: the caller's number of classes, if given. A head of another size replaces the
            whole head, pre_logits included, as the paper's fine-tuning does.

    Returns:
        (checkpoint, local path, the `ViTConfig` fields to take from the weights: some of
        image_size, num_classes, representation_size).

    Raises:
        ValueError: unknown name, failed download, unreadable file, or a file that is not the
            release it was downloaded as.
    """
    architecture = get_variant(variant, **config_overrides)
    path, release = sources.local_weights(weights, variant)
    checkpoint = loading.read_checkpoint(path, architecture.num_heads)
    fields = loading.trained_config_fields(checkpoint, architecture)
    if release is not None:
        _check_release(release, fields, path)
    if classes is not None and classes != fields.get("num_classes"):
        fields.pop("representation_size")
    return checkpoint, path, fields


def _check_release(release, fields: dict, path: str) -> None:
    """A downloaded file must be the release it is registered as (a mirror may hold another)."""
    found = {"image_size": fields.get("image_size"), "num_classes": fields.get("num_classes"),
             "pre_logits": fields.get("representation_size") is not None}
    expected = {"image_size": release.image_size, "num_classes": release.num_classes,
                "pre_logits": release.pre_logits}
    if found != expected:
        raise ValueError(f"{path} is not the {release.name!r} release of ViT-{release.variant}: "
                         f"expected {expected}, the file has {found}; delete it and download "
                         f"it again from {release.url}")
