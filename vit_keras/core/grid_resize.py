"""Position tables resampled to the patch grid of each input, at call time, in `keras.ops`.

The same rule as the load-time resize (`vit_keras.checkpoints.resize`, the official
`interpolate_posembed`): bilinear interpolation with aligned corners, one axis at a time. Written
as products with [new, old] interpolation matrices so that it runs on every backend and in
exported graphs, including when the grid is only known at run time (a TensorFlow graph traced
for any size). At the stored grid the matrices are the identity, and a grid known when the
graph is traced skips the resample entirely.
"""

from __future__ import annotations

from keras import ops


def grid_of(patches) -> tuple:
    """(rows, cols) of a [batch, rows, cols, D] patch grid: ints where static, else tensors."""
    shape = ops.shape(patches)
    return shape[1], shape[2]


def is_static_grid(grid, stored) -> bool:
    """Whether `grid` is known while tracing and equal to the `stored` (rows, cols)."""
    return all(isinstance(side, int) for side in grid) and tuple(grid) == tuple(stored)


def interpolation_matrix(old: int, new):
    """The [new, old] matrix of linear interpolation with aligned corners.

    Output position i samples input position i * (old - 1) / (new - 1) (position 0 when
    new == 1, as scipy.ndimage.zoom does).

    Args:
        old: the stored length (a Python int).
        new: the wanted length (an int, or a scalar tensor when only known at run time).

    Returns:
        float32 [new, old]; each row has at most two non-zero weights summing to 1.
    """
    if isinstance(new, int):  # a constant (JAX traces every shape with static sides)
        positions = ops.arange(new, dtype="float32") * ((old - 1) / max(new - 1, 1))
    else:
        new = ops.cast(new, "float32")
        positions = ops.arange(0, new, dtype="float32") * (
            (old - 1) / ops.maximum(new - 1.0, 1.0))
    lower = ops.clip(ops.floor(positions), 0, old - 1)
    upper_weight = (positions - lower)[:, None]
    lower = ops.cast(lower, "int32")
    upper = ops.minimum(lower + 1, old - 1)
    return (ops.one_hot(lower, old) * (1.0 - upper_weight)
            + ops.one_hot(upper, old) * upper_weight)


def resize_axis(table, new, axis: int):
    """Resamples `table` along `axis` (a static length) to `new` entries (aligned corners).

    Args:
        table: a float tensor whose `axis` has a static length.
        new: the wanted length (int or scalar tensor).
        axis: 0 or 1.

    Returns:
        The table with `axis` of length `new`, in `table`'s dtype.
    """
    old = table.shape[axis]
    if isinstance(new, int) and new == old:
        return table
    matrix = interpolation_matrix(old, new)
    resized = ops.tensordot(matrix, ops.cast(ops.moveaxis(table, axis, 0), "float32"), axes=1)
    return ops.cast(ops.moveaxis(resized, 0, axis), table.dtype)


def resize_grid(table, grid):
    """Resamples a [rows, cols, D] table to `grid` = (new_rows, new_cols), rows first.

    Args:
        table: [rows, cols, D] with static rows and cols.
        grid: (rows, cols), ints or scalar tensors.

    Returns:
        [new_rows, new_cols, D].
    """
    return resize_axis(resize_axis(table, grid[0], 0), grid[1], 1)
