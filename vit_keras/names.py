"""The names of a `VisionTransformer`'s layers: the one table that builds the model, reads it
back (its config, its blocks' outputs, its weights) and names its weights in files.

The names are those of the original Flax modules, so a layer's weights sit under the same
path in the released `.npz` files: the encoder's under `Transformer/` (`encoder_scope`), the
others at the top level. `vit_keras.checkpoints.keys` builds the canonical weight names
from this table.
"""

from __future__ import annotations

# Top-level layers of the model, in the order the image meets them.
RESNET = "resnet"                   # the hybrid's ResNet stem
EMBEDDING = "embedding"             # the patch embedding
CLS = "cls"                         # the class token
DIST = "dist"                       # DeiT's distillation token
POSEMB = "posembed_input"           # the position embedding, of any kind
REGISTERS = "registers"             # register tokens (appended after the patches)
PRE_NORM = "pre_norm"               # CLIP's norm before the blocks
BLOCK_PREFIX = "encoderblock_"      # `block(i)`: encoder block i
ENCODER_NORM = "encoder_norm"       # the final norm (after the pooling for `pooled_norm`)
POOL = "pool"
POOL_DIST = "pool_dist"
PRE_LOGITS = "pre_logits"
PROJECTION = "projection"           # CLIP's image projection
HEAD = "head"
HEAD_DIST = "head_dist"

# Sublayers of an encoder block (the released pre-Linen names).
LAYER_NORM_0 = "LayerNorm_0"
ATTENTION = "MultiHeadDotProductAttention_1"
LAYER_NORM_2 = "LayerNorm_2"
MLP = "MlpBlock_3"

# The patch embedding's projection inside `EMBEDDING` (the checkpoints' `embedding/kernel`).
PATCH_PROJECTION = "projection"

# Sublayers of the MLP and of the attention (the projections LoRA and quantization select).
MLP_DENSES = ("Dense_0", "Dense_1")
ATTENTION_PROJECTIONS = ("query", "key", "value", "out")

# The scope of the encoder's layers in the official checkpoints.
TRANSFORMER = "Transformer"

# The layers before the first block: what layer-wise schedules count as the embeddings.
EMBEDDING_LAYERS = (EMBEDDING, RESNET, CLS, DIST, REGISTERS, POSEMB)


def block(index: int) -> str:
    """The name of encoder block `index` ('encoderblock_0' for the first)."""
    return f"{BLOCK_PREFIX}{index}"


def block_index(name: str) -> int | None:
    """The index of the encoder block named `name`, or None for any other layer name."""
    suffix = name[len(BLOCK_PREFIX):] if name.startswith(BLOCK_PREFIX) else ""
    return int(suffix) if suffix.isdigit() else None


def encoder_scope(layer: str) -> str:
    """The prefix of encoder layer `layer`'s weights in the official checkpoints
    ('Transformer/encoder_norm/' for `ENCODER_NORM`)."""
    return f"{TRANSFORMER}/{layer}/"
