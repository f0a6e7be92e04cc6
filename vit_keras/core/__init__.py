"""The model core: the Vision Transformer's layers and the `VisionTransformer` model.

Built from Keras' own `EinsumDense`, `Dense` and `LayerNormalization` (subclassed only for the
fast paths of `vit_keras.fast_paths`), so `quantize` and LoRA attach; sub-layer names follow the
released checkpoints. `model` builds the network from a `ViTConfig`; `applications` has the
keras.applications-style constructors of the official variants.
"""
