"""Position-embedding resize for a new resolution, exactly as the official `interpolate_posembed`
(and, for timm's files, as timm resizes them).

The official code resizes the (square) grid of patch embeddings with
`scipy.ndimage.zoom(order=1)`: bilinear interpolation with ALIGNED CORNERS, i.e. output index i
samples input position i * (old - 1) / (new - 1). The class-token row is kept as it is.
A half-pixel resize (`tf.image.resize`, `jax.image.resize`) gives different values.

timm (`resample_abs_pos_embed`, used for DINOv2, DeiT-III, SigLIP and CLIP files) resizes with
half-pixel, antialiased bicubic interpolation (PyTorch's `interpolate(mode='bicubic',
antialias=True)`, PIL's filter: Keys' cubic with a = -0.5, widened by the scale when shrinking,
weights renormalised at the borders): `method='bicubic'`.
"""

from __future__ import annotations

import math

import numpy as np


def as_pair(grid, what: str) -> tuple[int, int]:
    """An int (square) or a pair as two positive ints; a ValueError naming `what` otherwise."""
    if isinstance(grid, (int, np.integer)) and not isinstance(grid, bool):
        grid = (grid, grid)
    try:
        rows, cols = (int(side) for side in grid)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be an int or (rows, cols), got {grid!r}") from None
    if rows < 1 or cols < 1:
        raise ValueError(f"{what} must be positive, got {grid!r}")
    return rows, cols


def square_grid(num_tokens: int) -> tuple[int, int] | None:
    """(g, g) when `num_tokens` == g * g, else None."""
    side = math.isqrt(num_tokens)
    return (side, side) if side * side == num_tokens else None


def resize_axis(values: np.ndarray, new_length: int, axis: int) -> np.ndarray:
    """Linear interpolation along one axis with aligned corners (the ends map onto the ends).

    Args:
        values: any array.
        new_length: the length `axis` gets.
        axis: the axis resized.

    Returns:
        float array (float64 for float inputs) with `axis` of `new_length`.
    """
    old_length = values.shape[axis]
    if new_length == old_length:
        return values
    # A length-1 output samples position 0, as scipy.ndimage.zoom does.
    scale = (old_length - 1) / (new_length - 1) if new_length > 1 else 0.0
    positions = np.arange(new_length) * scale
    lower = np.clip(np.floor(positions).astype(int), 0, old_length - 1)
    upper = np.minimum(lower + 1, old_length - 1)
    weight_shape = [1] * values.ndim
    weight_shape[axis] = new_length
    upper_weight = (positions - lower).reshape(weight_shape)
    return (np.take(values, lower, axis=axis) * (1.0 - upper_weight)
            + np.take(values, upper, axis=axis) * upper_weight)


RESIZE_METHODS = ("official", "bicubic")


def _cubic(x: np.ndarray, a: float = -0.5) -> np.ndarray:
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1, near, np.where(x < 2, far, 0.0))


def bicubic_axis(values: np.ndarray, new_length: int, axis: int) -> np.ndarray:
    """Antialiased, half-pixel bicubic resampling along one axis (PIL's and PyTorch's
    `antialias=True` filter).

    Args:
        values: any array.
        new_length: the length `axis` gets.
        axis: the axis resized.

    Returns:
        float64 array with `axis` of `new_length`.
    """
    old_length = values.shape[axis]
    scale = old_length / new_length
    stretch = max(scale, 1.0)  # shrinking widens the filter (antialiasing)
    support = 2.0 * stretch
    weights = np.zeros((new_length, old_length))
    for index in range(new_length):
        centre = scale * (index + 0.5)
        start = max(int(centre - support + 0.5), 0)
        stop = min(int(centre + support + 0.5), old_length)
        taps = _cubic((np.arange(start, stop) - centre + 0.5) / stretch)
        weights[index, start:stop] = taps / taps.sum()
    moved = np.moveaxis(values.astype(np.float64), axis, 0)
    return np.moveaxis(np.tensordot(weights, moved, axes=1), 0, axis)


def resize_position_embedding(posemb, new_grid, has_class_token: bool, old_grid=None, *,
                              num_prefix_tokens: int | None = None,
                              method: str = "official") -> np.ndarray:
    """Resizes a learned position embedding to a new patch grid (official rule).

    Args:
        posemb: array (1, tokens, D) or (tokens, D); the class-token row first if there is one.
        new_grid: target grid, an int (square) or (rows, cols).
        has_class_token: whether the first row belongs to the class token (kept unchanged).
        old_grid: the grid of `posemb`, (rows, cols); None infers a square grid, as the
            official code does.
        num_prefix_tokens: the rows kept unchanged before the grid (2 for DeiT's class and
            distillation tokens); None = 1 with a class token, else 0.
        method: 'official' (aligned-corners linear, `interpolate_posembed`) or 'bicubic'
            (timm's antialiased bicubic, for weights made with timm).

    Returns:
        float array shaped like `posemb` with rows * cols (+1) tokens, in `posemb`'s dtype.

    Raises:
        ValueError: the token count does not match `old_grid` or is not a square.
    """
    posemb = np.asarray(posemb)
    if posemb.ndim not in (2, 3) or (posemb.ndim == 3 and posemb.shape[0] != 1):
        raise ValueError(f"posemb must be (1, tokens, D) or (tokens, D), got {posemb.shape}")
    table = posemb.reshape(posemb.shape[-2:])
    kept = int(has_class_token) if num_prefix_tokens is None else num_prefix_tokens
    prefix, grid_rows = table[:kept], table[kept:]
    num_grid = grid_rows.shape[0]
    if old_grid is None:
        old_grid = square_grid(num_grid)
        if old_grid is None:
            raise ValueError(
                f"cannot infer the grid of a position embedding with {num_grid} patch tokens: "
                "expected a square number (pass old_grid=(rows, cols) for a non-square grid)")
    old_rows, old_cols = as_pair(old_grid, "old_grid")
    if old_rows * old_cols != num_grid:
        raise ValueError(f"old_grid {old_grid} has {old_rows * old_cols} tokens, but posemb has "
                         f"{num_grid} patch tokens")
    new_rows, new_cols = as_pair(new_grid, "new_grid")
    if method not in RESIZE_METHODS:
        raise ValueError(f"method must be one of {RESIZE_METHODS}, got {method!r}")
    grid = grid_rows.reshape(old_rows, old_cols, -1).astype(np.float64)
    along = resize_axis if method == "official" else bicubic_axis
    grid = along(along(grid, new_rows, 0), new_cols, 1)
    grid = grid.reshape(new_rows * new_cols, -1).astype(table.dtype)
    resized = np.concatenate([prefix, grid], axis=0)
    return resized[None] if posemb.ndim == 3 else resized
