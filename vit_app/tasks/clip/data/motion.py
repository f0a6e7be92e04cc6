"""The built-in clips: a sprite moving in one of four directions, which no single frame tells.

Each clip is `frames` frames of `size` x `size` px: Gaussian noise, a still sprite (a
distractor) and a moving one, each a random 6 x 6 px pattern in a random bright colour. The
moving sprite travels 2-3 px a frame left, right, up or down (the class) on a torus (it leaves
one side and comes back on the other), from a uniformly random start: in every frame, for every
class, it is at a uniformly random place. A model that looks at frames one at a time scores
chance (25%); the frames without their order show the axis of the motion (a line of places),
not its direction (50%); only their order tells the class.
"""

from __future__ import annotations

import numpy as np

CLASS_NAMES = ("left", "right", "up", "down")
_STEPS = {"left": (0, -1), "right": (0, 1), "up": (-1, 0), "down": (1, 0)}  # (rows, cols)
SPRITE = 6


def _sprite(rng: np.random.Generator) -> np.ndarray:
    """A 6 x 6 x 3 pattern: about half its pixels on, in one bright colour."""
    mask = rng.random((SPRITE, SPRITE)) < 0.55
    mask[SPRITE // 2 - 1:SPRITE // 2 + 1, SPRITE // 2 - 1:SPRITE // 2 + 1] = True
    colour = rng.uniform(150, 255, 3)
    return mask[..., None] * colour


def _paste(frame: np.ndarray, sprite: np.ndarray, row: int, col: int) -> None:
    """Adds `sprite` at (row, col), wrapping round the frame's edges."""
    size = frame.shape[0]
    rows = (row + np.arange(SPRITE)) % size
    cols = (col + np.arange(SPRITE)) % size
    frame[np.ix_(rows, cols)] = np.maximum(frame[np.ix_(rows, cols)], sprite)


def moving_sprites(count: int, frames: int = 8, size: int = 32, seed: int = 0):
    """`count` clips of the built-in motion set.

    Args:
        count: clips to make (the classes in turn, so every class has count / 4).
        frames: frames per clip (default 8).
        size: frame side in px (default 32; at least 16).
        seed: the clips are a function of it.

    Returns:
        (clips uint8 [count, frames, size, size, 3], labels int32 [count]), labels indexing
        `CLASS_NAMES`.

    Raises:
        ValueError: fewer than 2 frames, or frames smaller than 16 px.
    """
    if frames < 2 or size < 16:
        raise ValueError(f"moving sprites need at least 2 frames of 16 px, got {frames} "
                         f"frames of {size} px")
    rng = np.random.default_rng(seed)
    clips = np.empty((count, frames, size, size, 3), np.uint8)
    labels = np.arange(count, dtype=np.int32) % len(CLASS_NAMES)
    for index, label in enumerate(labels):
        clips[index] = _clip(rng, CLASS_NAMES[label], frames, size)
    return clips, labels


def _clip(rng: np.random.Generator, direction: str, frames: int, size: int) -> np.ndarray:
    moving, still = _sprite(rng), _sprite(rng)
    speed = int(rng.integers(2, 4))
    start = rng.integers(0, size, 2)
    still_at = rng.integers(0, size, 2)
    step = np.array(_STEPS[direction]) * speed
    clip = rng.normal(40, 20, (frames, size, size, 3))
    for index in range(frames):
        _paste(clip[index], still, *still_at)
        _paste(clip[index], moving, *(start + index * step))
    return np.clip(clip, 0, 255).astype(np.uint8)
