"""Read: a weight file -> its tensors under the canonical (released official) names.

One module per foreign layout converts names and shapes (`official`, `timm`, `huggingface`); this
one detects which layout a file has. Nothing here knows the model.
"""

from __future__ import annotations

from vit_keras.checkpoints import huggingface, io, keys, official, timm


def read_checkpoint(path: str, num_heads: int) -> keys.Checkpoint:
    """Reads a weight file and converts it to canonical names, detecting its layout.

    Args:
        path: an `.npz` or `.safetensors` file (local or `gs://`).
        num_heads: attention heads of the target model (needed to split fused torch weights).

    Returns:
        The `Checkpoint`.
    """
    file_format, tensors = io.read_tensors(path)
    if official.looks_official(tensors):
        return official.from_official(tensors)
    if timm.looks_timm(tensors):
        return timm.from_timm(tensors, num_heads)
    if huggingface.looks_huggingface(tensors):
        return huggingface.from_huggingface(tensors, num_heads)
    sample = sorted(tensors)[:8]
    raise ValueError(
        f"{file_format} file {path!r} is not a ViT checkpoint of a known layout: expected "
        "official/big_vision names ('embedding/kernel', optionally under 'params/' or "
        "'opt/target/'), timm names ('patch_embed.proj.weight', 'blocks.0....') or Hugging Face "
        f"names ('vit.embeddings.patch_embeddings.projection.weight'); found {sample}")
