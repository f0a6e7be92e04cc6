"""2-D position embeddings: fixed sine-cosine (big_vision) and learned row/column (the paper's
ablation, appendix D.4). Both are added to the patch tokens only, before any class token.

The official 1-D learned embedding stays `vit_keras.core.layers.PositionEmbedding`.
"""

import keras
import numpy as np
from keras import ops

from vit_keras.core import grid_resize
from vit_keras.core.initializers import PACKAGE


def sincos2d(rows, cols, width: int, temperature: float = 10_000.0, xp=np):
    """The fixed 2-D sine-cosine table of big_vision's `posemb_sincos_2d`.

    Each quarter of the channels holds sin(x w), cos(x w), sin(y w), cos(y w) for the patch's
    column x and row y, with frequencies w = temperature ** -(k / (width/4 - 1)).

    Args:
        rows, cols: the patch grid (ints; scalar tensors with `xp=keras.ops`).
        width: channels D, a multiple of 4.
        temperature: the longest wavelength.
        xp: `numpy` (computed in float64, the exact table) or `keras.ops` (float32, for a grid
            only known at run time).

    Returns:
        float32 array [rows * cols, width], patches row-major.
    """
    if width % 4:
        raise ValueError(f"sincos2d needs a width divisible by 4, got {width}")
    quarter = width // 4
    omega = np.arange(quarter, dtype=np.float64) / max(quarter - 1, 1)
    omega = 1.0 / temperature ** omega
    dtype = "float64" if xp is np else "float32"
    angles_y = xp.arange(0, xp.cast(rows, dtype) if xp is ops else rows,
                         dtype=dtype)[:, None, None] * omega.astype(dtype)
    angles_x = xp.arange(0, xp.cast(cols, dtype) if xp is ops else cols,
                         dtype=dtype)[None, :, None] * omega.astype(dtype)
    shape = (rows, cols, quarter)
    parts = [xp.sin(angles_x), xp.cos(angles_x), xp.sin(angles_y), xp.cos(angles_y)]
    table = xp.concatenate([xp.broadcast_to(part, shape) for part in parts], axis=-1)
    table = xp.reshape(table, (-1, width))
    return table.astype(np.float32) if xp is np else table


def _patch_grid(patch_grid, stored):
    """(rows, cols) of `patch_grid` ([batch, rows, cols, D]), or `stored` when it is None."""
    return stored if patch_grid is None else grid_resize.grid_of(patch_grid)


@keras.saving.register_keras_serializable(package=PACKAGE)
class SinCosPositionEmbedding(keras.layers.Layer):
    """Adds the fixed `sincos2d` table to [batch, rows*cols, D] patch tokens (no weights).

    A model taking any image size passes the patch grid of each input; the table is then
    computed for that grid.

    Args:
        grid_size: (rows, cols) of the patch grid (of the stored size, for any-size models).
    """

    def __init__(self, grid_size, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = tuple(int(side) for side in grid_size)

    def build(self, tokens_shape, patch_grid_shape=None):
        rows, cols = self.grid_size
        if patch_grid_shape is None and tokens_shape[1] not in (None, rows * cols):
            raise ValueError(f"SinCosPositionEmbedding expected {rows}x{cols} = {rows * cols} "
                             f"patch tokens, got input shape {tokens_shape}")
        self.width = tokens_shape[-1]
        self.table = sincos2d(rows, cols, self.width)[None]

    def call(self, tokens, patch_grid=None):
        """Adds the table; `patch_grid` ([batch, rows, cols, D]) gives the grid."""
        grid = _patch_grid(patch_grid, self.grid_size)
        if all(isinstance(side, int) for side in grid):
            table = self.table if tuple(grid) == self.grid_size else sincos2d(*grid, self.width)
        else:
            table = sincos2d(*grid, self.width, xp=ops)
        return tokens + ops.cast(ops.reshape(table, (1, -1, self.width)), tokens.dtype)

    def compute_output_shape(self, tokens_shape, patch_grid_shape=None):
        return tokens_shape

    def get_config(self):
        config = super().get_config()
        config.update(grid_size=list(self.grid_size))
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class Learned2DPositionEmbedding(keras.layers.Layer):
    """Adds learned row and column embeddings of D/2 each, concatenated per patch.

    Weights `row_embedding` (rows, D/2) and `col_embedding` (cols, D/2), initialised
    normal(0.02) like the 1-D embedding: rows * D/2 + cols * D/2 weights instead of rows*cols*D.
    A model taking any image size passes the patch grid of each input; each table is then
    resampled along its axis (bilinear, aligned corners).

    Args:
        grid_size: (rows, cols) of the patch grid (of the stored size, for any-size models).
    """

    def __init__(self, grid_size, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = tuple(int(side) for side in grid_size)

    def build(self, tokens_shape, patch_grid_shape=None):
        rows, cols = self.grid_size
        width = tokens_shape[-1]
        wrong_count = patch_grid_shape is None and tokens_shape[1] not in (None, rows * cols)
        if width % 2 or wrong_count:
            raise ValueError(f"Learned2DPositionEmbedding expected [batch, {rows * cols}, even "
                             f"width], got input shape {tokens_shape}")
        init = keras.initializers.RandomNormal(stddev=0.02)
        self.row_embedding = self.add_weight(name="row_embedding", shape=(rows, width // 2),
                                             initializer=init)
        self.col_embedding = self.add_weight(name="col_embedding", shape=(cols, width // 2),
                                             initializer=init)

    def no_weight_decay(self):
        return [self.row_embedding, self.col_embedding]

    def call(self, tokens, patch_grid=None):
        """Adds the embeddings; `patch_grid` ([batch, rows, cols, D]) gives the grid."""
        rows, cols = _patch_grid(patch_grid, self.grid_size)
        half = tokens.shape[-1] // 2
        row_table = grid_resize.resize_axis(self.row_embedding, rows, 0)
        col_table = grid_resize.resize_axis(self.col_embedding, cols, 0)
        row_part = ops.broadcast_to(row_table[:, None, :], (rows, cols, half))
        col_part = ops.broadcast_to(col_table[None, :, :], (rows, cols, half))
        table = ops.reshape(ops.concatenate([col_part, row_part], axis=-1), (1, -1, 2 * half))
        return tokens + ops.cast(table, tokens.dtype)

    def compute_output_shape(self, tokens_shape, patch_grid_shape=None):
        return tokens_shape

    def get_config(self):
        config = super().get_config()
        config.update(grid_size=list(self.grid_size))
        return config
