"""Readers and writers of pretrained ViT weights in foreign layouts, and the posemb resize.

- `load_weights(model, path, skip_head=None)`: official / big_vision `.npz`, timm and Hugging
  Face `.safetensors`, detected from the file.
- `save_npz(model, path)`: the official release layout.
- `resize_position_embedding(posemb, new_grid, has_class_token)`: the official resize rule.
"""

from vit_keras.checkpoints.loading import load_weights, read_checkpoint
from vit_keras.checkpoints.official import save_npz
from vit_keras.checkpoints.resize import resize_position_embedding

__all__ = ["load_weights", "read_checkpoint", "resize_position_embedding", "save_npz"]
