"""Readers and writers of pretrained ViT weights in foreign layouts, and the posemb resize.

- `load_weights(model, weights, skip_head=None, variant=None)`: official / big_vision `.npz`,
  timm and Hugging Face `.safetensors`, detected from the file; weights by path, URL, `hf://`
  or released name (see `vit_keras.pretrained`).
- `save_npz(model, path)`: the official release layout.
- `resize_position_embedding(posemb, new_grid, has_class_token)`: the official resize rule.
- `resample_patch_embedding(kernel, new_patch_size)`: FlexiViT's patch-size resize.
"""

from vit_keras.checkpoints.loading import load_weights, read_checkpoint
from vit_keras.checkpoints.official import save_npz
from vit_keras.checkpoints.patch_resize import resample_patch_embedding
from vit_keras.checkpoints.resize import resize_position_embedding

__all__ = ["load_weights", "read_checkpoint", "resample_patch_embedding",
           "resize_position_embedding", "save_npz"]
