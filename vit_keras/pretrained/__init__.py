"""Pretrained weights by name: the registry of official releases, the download cache, and the
ImageNet class names of their heads.

- `releases()`: every registered release (architecture, weight name, resolution, classes).
- `weights_file(weights, variant=None)`: the local path of a weight name, URL, `hf://` reference
  or path, downloading into the Keras cache (`$KERAS_HOME/models/vit_keras`) when needed.
- `decode_predictions(predictions, top=5)`: ImageNet-1k / ImageNet-21k class names.
"""

from vit_keras import _lazy

__getattr__, __dir__, __all__ = _lazy.lazy_names(__name__, globals(), {
    "vit_keras.pretrained.download": ("DownloadError", "cache_root"),
    "vit_keras.pretrained.labels": ("decode_predictions", "imagenet_classes"),
    "vit_keras.pretrained.registry": ("Release", "base_url", "find", "releases", "weight_names"),
    "vit_keras.pretrained.sources": ("local_weights", "weights_file"),
})
