"""Where and when a clip model looks: attention rollout (Abnar & Zuidema, 2020) through the
joint layout's space-time blocks, as a map over each token frame's patch grid.

In the joint layout every token of every frame attends to every other, so the rollout of its
blocks is the image model's, over one long sequence: a class token's row (the mean of the
frames' copies, which the head reads averaged) or, without one, the mean row, over every
frame's patches. Each map's sum is the share of the model's attention its frames get.
"""

from __future__ import annotations

import keras
import numpy as np

from vit_keras.analysis import AttentionProbe, rollout_matrix
from vit_keras.core.model import config_from_model


def space_time_rollout(model, clips, discard_ratio: float = 0.0, head_fusion: str = "mean",
                       batch_size: int = 16) -> np.ndarray:
    """The rollout of a joint-layout `SpaceTimeViT` over each token frame's patches.

    Args:
        model: a `SpaceTimeViT` of the 'joint' layout.
        clips: [batch, frames, height, width, channels] model inputs (in [-1, 1]).
        discard_ratio: fraction of the weakest fused attention weights dropped per block.
        head_fusion: 'mean', 'max' or 'min' over heads.
        batch_size: clips per forward pass.

    Returns:
        float32 [batch, token frames, grid rows, grid cols]: all of a clip's maps sum to 1
        (token frames = frames / tubelet frames).

    Raises:
        ValueError: another layout (whose blocks attend within frames and across them in
            turn, so no one attention matrix spans the clip), or clips of another shape.
    """
    if getattr(model, "layout", None) != "joint":
        raise ValueError("the space-time rollout follows the joint layout's attention, where "
                         "every token attends to every other; got a model of layout "
                         f"{getattr(model, 'layout', None)!r}")
    clips = np.asarray(clips, np.float32)
    expected = tuple(model.inputs[0].shape[1:])
    if clips.ndim != 5 or clips.shape[1:] != expected or not len(clips):
        raise ValueError(f"clips must be a non-empty batch of shape (batch, {expected}) (the "
                         f"model's input), got {clips.shape}")
    config = config_from_model(model)
    steps = model.frames // model.tubelet_frames
    probe = AttentionProbe(model)
    maps = []
    for start in range(0, len(clips), batch_size):
        attentions = keras.ops.convert_to_numpy(probe(clips[start:start + batch_size]))
        rollout = rollout_matrix(list(attentions), discard_ratio, head_fusion)
        maps.append(_frame_maps(rollout, steps, config.num_prefix_tokens))
    grid = config.grid_size
    return np.concatenate(maps).reshape(len(clips), steps, *grid).astype(np.float32)


def _frame_maps(rollout: np.ndarray, steps: int, prefix: int) -> np.ndarray:
    """[batch, steps, patches]: the class tokens' mean row (or the mean row) over the
    frames' patch tokens, normalised to sum to 1 over the clip."""
    batch, tokens = rollout.shape[:2]
    per_frame = tokens // steps
    if prefix:
        copies = np.arange(steps) * per_frame  # each frame's class token copy leads it
        row = rollout[:, copies].mean(axis=1)
    else:
        row = rollout.mean(axis=1)
    patches = row.reshape(batch, steps, per_frame)[:, :, prefix:]
    return patches / patches.sum(axis=(1, 2), keepdims=True)
