"""What a `--weights` argument may be, checked before any framework is imported or anything is
downloaded: a released or family weight name, a URL, an `hf://` reference, or a file or folder
that exists. (`vit_keras.pretrained.sources` resolves one to its local file.)"""

from __future__ import annotations

import os

from vit_keras import families
from vit_keras.mobilevit.config import PRETRAINED, timm_name
from vit_keras.pretrained import registry


def check_weights_reference(weights: str | None, architecture: str | None = None) -> None:
    """A `--weights` that is no URL, `hf://` reference, released or family weight name (or
    'pretrained' for a MobileViT: timm's file) must be a file or folder that exists (checked
    before anything is imported or downloaded).

    Args:
        weights: the `--weights` argument (None or '': nothing to check).
        architecture: the `--model` architecture it loads into, when known ('B/16',
            'mobilevit_xs').

    Raises:
        ValueError: naming what was given and what is accepted.
    """
    if not weights or "://" in weights or registry.is_weight_name(weights):
        return
    if weights == PRETRAINED and architecture and timm_name(architecture):
        return
    if families.weights_file_reference(weights) or os.path.exists(os.path.expanduser(weights)):
        return
    raise ValueError(f"--weights {weights!r} is no file, and no weight name: expected a name "
                     "from `vit weights list` ('pretrained' for a MobileViT), an https:// URL, "
                     "hf://ORG/REPO or a file (.npz, .safetensors, .pth, .keras) or keras-hub "
                     "preset folder")
