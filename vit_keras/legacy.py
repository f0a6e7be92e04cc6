"""`.keras` files of the earlier release (before the layers became Keras' own EinsumDense).

Those files hold the attention weights on the attention layer itself (`vars/0..7`: query, key,
value and out kernels and biases) and the patch embedding's on `PatchEmbedding`; now they live
in the `EinsumDense` sublayers `query`, `key`, `value`, `out` and `projection`, and the model
is a `VisionTransformer` carrying its `ViTConfig`. Loading such a file fails with
`LEGACY_FILE_ERROR`, which names the one-line conversion:

    python -m vit_keras.convert OLD.keras NEW.keras

Such a file, and any functional model using the ViT layers, carries no `ViTConfig`:
`vit_keras.core.layer_config.config_from_layers` reads it off the layers' names and shapes.
"""

from __future__ import annotations

import importlib
import warnings

LEGACY_FILE_ERROR = (
    "this .keras file was written by vit_keras 0.1 (attention and patch-embedding weights on "
    "the layers themselves); convert it once with: python -m vit_keras.convert OLD.keras "
    "NEW.keras")


def refuse_legacy_variables(layer, store) -> None:
    """Raises ValueError(LEGACY_FILE_ERROR) when `store` holds variables for `layer`, a layer
    that has none of its own now (the earlier release kept its weights there)."""
    if store is not None and len(store.keys()):
        raise ValueError(f"layer {layer.name!r}: {LEGACY_FILE_ERROR}")


# Where the config readers moved (they serve every model, not only 0.1 files).
_MOVED = {"config_of": ("vit_keras.core.model", "config_from_model"),
          "config_from_layers": ("vit_keras.core.layer_config", "config_from_layers")}


def __getattr__(name):
    """Deprecated aliases of the config readers that lived here (PEP 562)."""
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _MOVED[name]
    warnings.warn(f"vit_keras.legacy.{name} is deprecated: use {module}.{attribute}",
                  DeprecationWarning, stacklevel=2)
    # Imported by name at first use: this module sits below the core it points to.
    return getattr(importlib.import_module(module), attribute)
