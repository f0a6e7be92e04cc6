"""The clip task's preset section, `clip` (`--set clip.layout=joint`), read without a
framework."""

from __future__ import annotations

import dataclasses

from training.presets.sections import Section

LAYOUTS = ("divided", "joint", "factorised")  # vit_keras.tasks.clip.model's, without Keras


@dataclasses.dataclass(frozen=True)
class Clip(Section):
    """How a clip model is built and fed (`vit train --task clip`).

    Attributes:
        frames: frames per clip the model takes (its input length).
        stride: frames between a window's frames in the video (1: consecutive; 2: every
            other), so a window covers (frames - 1) x stride + 1 frames of the clip.
        tubelet_frames: frames per tubelet (each token sees this many frames of a patch).
        layout: 'divided' (attention across frames, then within each frame: TimeSformer),
            'joint' (every token attends to every other: ViViT model 1) or 'factorised' (an
            image encoder per frame, then `temporal_layers` blocks across frames: ViViT 2).
        temporal_layers: the factorised layout's blocks across frames.
        short: a clip shorter than a window: 'stretch' (its frames repeated evenly to fill
            it) or 'refuse' (named before training).
        views: windows spread over each clip whose scores evaluation averages.
        store_side: the longest side clips are stored at in memory, read once (a model
            larger than it reads them at its own size).
    """

    NAME = "clip"
    RULES = {"frames": ">=1", "stride": ">=1", "tubelet_frames": ">=1", "layout": LAYOUTS,
             "temporal_layers": ">=1", "short": ("stretch", "refuse"), "views": ">=1",
             "store_side": ">=1"}

    frames: int = 8
    stride: int = 1
    tubelet_frames: int = 2
    layout: str = "divided"
    temporal_layers: int = 2
    short: str = "stretch"
    views: int = 3
    store_side: int = 64

    def __post_init__(self):
        super().__post_init__()
        if self.frames % self.tubelet_frames:
            raise ValueError(f"clip.frames ({self.frames}) must be a multiple of "
                             f"clip.tubelet_frames ({self.tubelet_frames})")
