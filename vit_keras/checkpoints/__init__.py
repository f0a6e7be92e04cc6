"""Readers and writers of pretrained ViT weights in foreign layouts, and the posemb resize.

- `read_checkpoint(path, num_heads)`: official / big_vision `.npz`, timm and Hugging Face
  `.safetensors`, detected from the file, under the canonical names (`read`); then `fit`
  (head, position-embedding and patch-size resampling) and `assign` (all or nothing), which
  `vit_keras.load_weights` runs in that order.
- `save_npz(model, path)`: the official release layout.
- `resize_position_embedding(posemb, new_grid, has_class_token)`: the official resize rule.
- `resample_patch_embedding(kernel, new_patch_size)`: FlexiViT's patch-size resize.
"""

from vit_keras import _lazy

__getattr__, __dir__, __all__ = _lazy.lazy_names(__name__, globals(), {
    "vit_keras.checkpoints.official": ("save_npz",),
    "vit_keras.checkpoints.patch_resize": ("resample_patch_embedding",),
    "vit_keras.checkpoints.read": ("read_checkpoint",),
    "vit_keras.checkpoints.resize": ("resize_position_embedding",),
})
