"""Segmenting an image at its own size: whole, or in overlapping windows stitched back.

A segmenter trained on crops at the images' own resolution (`vit train --task segment` on
large images) segments each image at its size. A model taking any size sees a whole image when
its patch grid is small enough for attention's memory (`MAX_WHOLE_TOKENS`); larger images, and
every image given to a fixed-size file (TFLite, ONNX), go through windows of the model's size
that overlap by a quarter, whose scores are averaged where they overlap (the sliding-window
inference of mmsegmentation's `slide` mode). Images smaller than a fixed window are padded with
zeros and the padding is cut off again.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

WINDOW_OVERLAP = 0.25
# 64x64 patches (a 512 px image at 8 px patches): a few hundred MB of attention scores per
# layer at 4 heads; a larger grid goes in windows of this many tokens.
MAX_WHOLE_TOKENS = 64 * 64
WINDOWS_PER_CALL = 4


def window_starts(length: int, window: int, overlap: float = WINDOW_OVERLAP) -> list[int]:
    """Where windows of `window` pixels start to cover `length` pixels, overlapping by at least
    `overlap` of a window (the last one ends at the edge)."""
    if length <= window:
        return [0]
    stride = max(1, int(window * (1 - overlap)))
    return list(range(0, length - window, stride)) + [length - window]


def windowed_scores(predict: Callable, image: np.ndarray, window: tuple[int, int],
                    overlap: float = WINDOW_OVERLAP) -> np.ndarray:
    """Per-pixel scores of an image from overlapping windows of a fixed size.

    Args:
        predict: inputs [n, window height, window width, C] -> scores [n, same, same, classes].
        image: [height, width, C] inputs of any size.
        window: (height, width) of every window.
        overlap: the least share of a window two neighbours overlap by.

    Returns:
        float32 [height, width, classes], the mean over the windows covering each pixel.
    """
    height, width = image.shape[:2]
    rows, cols = window
    padded = np.pad(image, ((0, max(rows - height, 0)), (0, max(cols - width, 0)), (0, 0)))
    corners = [(top, left) for top in window_starts(padded.shape[0], rows, overlap)
               for left in window_starts(padded.shape[1], cols, overlap)]
    total, counts = None, np.zeros(padded.shape[:2] + (1,), np.float32)
    for start in range(0, len(corners), WINDOWS_PER_CALL):
        chunk = corners[start:start + WINDOWS_PER_CALL]
        scores = np.asarray(predict(np.stack([padded[top:top + rows, left:left + cols]
                                              for top, left in chunk])), np.float32)
        if total is None:
            total = np.zeros(padded.shape[:2] + scores.shape[-1:], np.float32)
        for (top, left), window_scores in zip(chunk, scores):
            total[top:top + rows, left:left + cols] += window_scores
            counts[top:top + rows, left:left + cols] += 1
    return (total / counts)[:height, :width]


def segment_scores(predict: Callable, image: np.ndarray, fixed_size=None,
                   patch_size: int | None = None) -> np.ndarray:
    """Per-pixel scores of one image at its own size, whole or in windows (module docstring).

    Args:
        predict: inputs [n, h, w, C] -> scores [n, h, w, classes].
        image: [height, width, C] inputs.
        fixed_size: (height, width) the model takes; None for a model taking any size.
        patch_size: pixels per patch side of a model taking any size (its windows are
            `MAX_WHOLE_TOKENS` patches); None treats it as 8.

    Returns:
        float32 [height, width, classes].
    """
    if fixed_size is not None:
        return windowed_scores(predict, image, tuple(fixed_size))
    patch = patch_size or 8
    height, width = image.shape[:2]
    if -(-height // patch) * -(-width // patch) <= MAX_WHOLE_TOKENS:
        return np.asarray(predict(image[None]), np.float32)[0]
    side = patch * int(MAX_WHOLE_TOKENS ** 0.5)
    return windowed_scores(predict, image, (min(side, height), min(side, width)))
