"""vit_keras: the Vision Transformer (Dosovitskiy et al., 2021) for Keras 3, official-faithful.

Layout: `config` (ViTConfig), `core` (layers and the `VisionTransformer` model), `fast_paths`
(backend and export kernels), `quantization` and `lora` (Keras' own, on every projection),
`weights` (resolve -> read -> fit -> assign pretrained weights), `checkpoints` (one module per
foreign layout), `pretrained` (registry, download cache, labels), `families` (DeiT-III, DINOv2,
SigLIP, CLIP by timm's names), `applications` (`ViTB16`, `create_model`), `preprocessing` (what
the weights expect, carried by the model), `intermediates` (any block's tokens: `features`),
`export`, `analysis`.

Importing the package loads no framework: each public name below is imported on first use
(PEP 562), so `import vit_keras.config` stays cheap. The layers register themselves with Keras
as soon as Keras is imported (`vit_keras.serializable`), so `.keras` files load after
`import vit_keras` alone, whichever of the two is imported first.
"""

import importlib
import sys

from vit_keras import _after_import, _lazy, tasks

__version__ = "0.2.0"

# Public name -> the module that defines it.
_HOMES = {
    "vit_keras.config": ("HYBRID_VARIANTS", "VARIANTS", "ViTConfig", "get_variant"),
    "vit_keras.applications": (
        "ViTB8", "ViTB16", "ViTB32", "ViTH14", "ViTL16", "ViTL32", "ViTR26B32", "ViTR26S32",
        "ViTR50B16", "ViTR50L32", "ViTRTi16", "ViTS16", "ViTS32", "ViTTi16", "build_classifier",
        "create_model", "preprocess_input"),
    "vit_keras.core.attention": ("MultiHeadSelfAttention",),
    "vit_keras.core.heads": ("MAPHead",),
    "vit_keras.core.layers": ("ClassToken", "EncoderBlock", "MLPBlock", "PatchEmbedding",
                              "PositionEmbedding", "TokenPooling"),
    "vit_keras.core.model": ("VisionTransformer", "config_from_model"),
    "vit_keras.core.stems": ("ConvStem", "ShiftedPatchEmbedding"),
    "vit_keras.checkpoints": ("resample_patch_embedding",),
    "vit_keras.hub_presets": ("from_preset", "save_preset"),
    "vit_keras.intermediates": ("features", "features_model"),
    "vit_keras.mobilevit.model": ("MobileViT",),
    "vit_keras.mobilevit.weights": ("create_mobilevit",),
    "vit_keras.preprocessing": ("Preprocessing",),
    "vit_keras.lora": ("load_lora_weights", "merge_lora", "save_lora_weights"),
    "vit_keras.pretrained": ("decode_predictions",),
    "vit_keras.weight_decay": ("no_weight_decay",),
    "vit_keras.weights": ("load_weights",),
}


def _task_models() -> dict[str, tuple[str, ...]]:
    """Each registered task's model (`ViTSegmenter`, `ViTDetector`), from its line of TASKS."""
    return {parts.head.partition(":")[0]: parts.exports for parts in tasks.TASKS.values()
            if parts.exports}

__getattr__, __dir__, __all__ = _lazy.lazy_names(__name__, globals(), _HOMES, _task_models)


def _register_layers_with_keras() -> None:
    """Imports `vit_keras.serializable` now when Keras is loaded, else right after it is."""
    if "keras" in sys.modules:
        importlib.import_module("vit_keras.serializable")
        return
    _after_import.call_after("keras", __name__,
                             lambda: importlib.import_module("vit_keras.serializable"))


_register_layers_with_keras()
