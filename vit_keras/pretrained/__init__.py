"""Pretrained weights by name: the registry of official releases, the download cache, and the
ImageNet class names of their heads.

- `releases()`: every registered release (architecture, weight name, resolution, classes).
- `weights_file(weights, variant=None)`: the local path of a weight name, URL, `hf://` reference
  or path, downloading into the Keras cache (`$KERAS_HOME/models/vit_keras`) when needed.
- `decode_predictions(predictions, top=5)`: ImageNet-1k / ImageNet-21k class names.
"""

from vit_keras.pretrained.download import DownloadError, cache_root
from vit_keras.pretrained.labels import decode_predictions, imagenet_classes
from vit_keras.pretrained.registry import Release, base_url, find, releases, weight_names
from vit_keras.pretrained.sources import local_weights


def weights_file(weights: str, variant: str | None = None, *, quiet: bool = False) -> str:
    """The local path of `weights`, downloaded into the Keras cache first when needed.

    Args:
        weights: a weight name ('imagenet21k'), an http(s) URL, `hf://ORG/REPO[/FILE]` or a
            path (returned as it is).
        variant: the architecture a weight name is for ('B/16').
        quiet: no download progress output.

    Returns:
        The path.
    """
    return local_weights(weights, variant, quiet=quiet)[0]


__all__ = ["DownloadError", "Release", "base_url", "cache_root", "decode_predictions", "find",
           "imagenet_classes", "releases", "weight_names", "weights_file"]
