"""The released official weights by name: the table in `registry.json`, and lookups into it.

A release is one file of Google's public `vit_models` bucket, named by the architecture it is
for ('B/16') and a weight name ('imagenet21k+imagenet2012'). `VIT_KERAS_WEIGHTS_URL` replaces
the bucket's address (a mirror, an air-gapped file server); files keep their bucket paths.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os

from vit_keras.config import variant_name
from vit_keras.pretrained import download

BASE_URL_VARIABLE = "VIT_KERAS_WEIGHTS_URL"
REGISTRY_FILE = os.path.join(os.path.dirname(__file__), "registry.json")


@dataclasses.dataclass(frozen=True)
class Release:
    """One released weight file.

    Attributes:
        variant: the architecture ('B/16', 'R50+B/16').
        name: the weight name ('imagenet21k', 'augreg-in21k-ft-in1k-384', ...).
        path: the file's path in the bucket ('imagenet21k/ViT-B_16.npz').
        image_size: the resolution it was trained (or fine-tuned) at.
        num_classes: outputs of its head (21843: ImageNet-21k, 1000: ImageNet-1k).
        pre_logits: whether it has the Dense+tanh `pre_logits` layer (hidden-size wide).
        summary: how it was trained, in a few words.
        classifier: how the head pools the tokens ('token': the class token, as every official
            ViT release).
        head_trained: False when the released head is not a classifier (the original
            ImageNet-21k files had theirs zeroed: they are for fine-tuning).
        size: file size in bytes, when published.
        sha256: hex digest, when published.
    """

    variant: str
    name: str
    path: str
    image_size: int
    num_classes: int
    pre_logits: bool
    summary: str
    classifier: str = "token"
    head_trained: bool = True
    size: int | None = None
    sha256: str | None = None

    @property
    def url(self) -> str:
        """Where it is downloaded from (honours VIT_KERAS_WEIGHTS_URL)."""
        return f"{base_url()}/{self.path}"

    @property
    def cache_path(self) -> str:
        """Where it is cached: the bucket path under the Keras cache."""
        return os.path.join(download.cache_root(), "vit_models", *self.path.split("/"))

    @property
    def cached(self) -> bool:
        """Whether the file is already in the cache."""
        return os.path.exists(self.cache_path)


def base_url() -> str:
    """The bucket's address.

    Returns:
        VIT_KERAS_WEIGHTS_URL when set, else the official one; no trailing slash.
    """
    return (os.environ.get(BASE_URL_VARIABLE) or _table()["base_url"]).rstrip("/")


@functools.lru_cache(maxsize=None)
def _table() -> dict:
    with open(REGISTRY_FILE, encoding="utf-8") as file:
        return json.load(file)


@functools.lru_cache(maxsize=None)
def releases() -> tuple[Release, ...]:
    """Every registered release.

    Returns:
        The `Release`s, in the registry's order.
    """
    return tuple(Release(**entry) for entry in _table()["releases"])


def weight_names() -> tuple[str, ...]:
    """The distinct weight names ('imagenet21k', ...), in the registry's order."""
    return tuple(dict.fromkeys(release.name for release in releases()))


def is_weight_name(weights: str) -> bool:
    """Whether `weights` is a registered weight name (rather than a path or URL)."""
    return weights in weight_names()


def find(name: str, variant: str | None) -> Release:
    """The release of weight name `name` for `variant`.

    Args:
        name: a weight name ('imagenet21k+imagenet2012').
        variant: the architecture, in any official spelling ('B/16', 'ViT-B_16').

    Returns:
        The `Release`.

    Raises:
        ValueError: no variant given, or no such release (the error lists what there is).
    """
    if variant is None:
        raise ValueError(f"weights {name!r} is a release name: say which architecture it is "
                         "for (variant='B/16'; --model B/16 on the command line)")
    variant = variant_name(variant)
    for release in releases():
        if release.name == name and release.variant == variant:
            return release
    available = [release.name for release in releases() if release.variant == variant]
    raise ValueError(f"there are no {name!r} weights for ViT-{variant}; released for "
                     f"ViT-{variant}: {available or 'none'} (see `vit weights list`)")

