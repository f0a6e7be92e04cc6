"""vit_keras: the Vision Transformer (Dosovitskiy et al., 2021) for Keras 3, official-faithful.

Layout: `config` (ViTConfig), `core` (layers and the `VisionTransformer` model), `fast_paths`
(backend and export kernels), `quantization` and `lora` (Keras' own, on every projection),
`weights` (resolve -> read -> fit -> assign pretrained weights), `checkpoints` (one module per
foreign layout), `pretrained` (registry, download cache, labels), `families` (DeiT-III, DINOv2,
SigLIP, CLIP by timm's names), `preprocessing` (what the weights expect, carried by the model),
`intermediates` (any block's tokens: `features`), `export`, `analysis`.
"""

from vit_keras.config import HYBRID_VARIANTS, VARIANTS, ViTConfig, get_variant
from vit_keras.core.applications import (ViTB8, ViTB16, ViTB32, ViTH14, ViTL16, ViTL32,
                                         ViTR26B32, ViTR26S32, ViTR50B16, ViTR50L32, ViTRTi16,
                                         ViTS16, ViTS32, ViTTi16, create_model,
                                         preprocess_input)
from vit_keras.core.attention import MultiHeadSelfAttention
from vit_keras.core.heads import MAPHead
from vit_keras.core.layers import (ClassToken, EncoderBlock, MLPBlock, PatchEmbedding,
                                   PositionEmbedding, TokenPooling)
from vit_keras.core.model import VisionTransformer, config_from_model
from vit_keras.core.stems import ConvStem, ShiftedPatchEmbedding
from vit_keras.checkpoints import resample_patch_embedding
from vit_keras.intermediates import features, features_model
from vit_keras.preprocessing import Preprocessing
from vit_keras.lora import load_lora_weights, merge_lora, save_lora_weights
from vit_keras.pretrained import decode_predictions
from vit_keras.weight_decay import no_weight_decay
from vit_keras.weights import load_weights
# Every module that registers serializable layers, so `.keras` files of every model option load
# after `import vit_keras` alone.
from vit_keras.core import deit, masked_patch, posemb, resnet  # noqa: E402,F401

__version__ = "0.2.0"

__all__ = [
    "VARIANTS", "ViTConfig", "get_variant", "ClassToken", "EncoderBlock", "MLPBlock",
    "MultiHeadSelfAttention", "MAPHead", "PatchEmbedding", "ConvStem", "ShiftedPatchEmbedding",
    "PositionEmbedding", "TokenPooling",
    "VisionTransformer", "config_from_model", "preprocess_input", "ViTTi16", "ViTS16", "ViTS32",
    "ViTB8", "ViTB16", "ViTB32", "ViTL16", "ViTL32", "ViTH14",
    "ViTRTi16", "ViTR26S32", "ViTR26B32", "ViTR50B16", "ViTR50L32", "HYBRID_VARIANTS",
    "load_weights", "no_weight_decay", "decode_predictions", "create_model",
    "resample_patch_embedding", "save_lora_weights", "load_lora_weights", "merge_lora",
    "features", "features_model", "Preprocessing",
]
