"""2-D position embeddings: fixed sine-cosine (big_vision) and learned row/column (the paper's
ablation, appendix D.4). Both are added to the patch tokens only, before any class token.

The official 1-D learned embedding stays `vit_keras.layers.PositionEmbedding`.
"""

import keras
import numpy as np
from keras import ops

from vit_keras.initializers import PACKAGE


def sincos2d(rows: int, cols: int, width: int, temperature: float = 10_000.0) -> np.ndarray:
    """The fixed 2-D sine-cosine table of big_vision's `posemb_sincos_2d`.

    Each quarter of the channels holds sin(x w), cos(x w), sin(y w), cos(y w) for the patch's
    column x and row y, with frequencies w = temperature ** -(k / (width/4 - 1)).

    Args:
        rows, cols: the patch grid.
        width: channels D, a multiple of 4.
        temperature: the longest wavelength.

    Returns:
        float32 array [rows * cols, width], patches row-major.
    """
    if width % 4:
        raise ValueError(f"sincos2d needs a width divisible by 4, got {width}")
    quarter = width // 4
    omega = np.arange(quarter, dtype=np.float64) / max(quarter - 1, 1)
    omega = 1.0 / temperature ** omega
    y, x = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    angles_x = x.reshape(-1, 1) * omega[None]
    angles_y = y.reshape(-1, 1) * omega[None]
    table = np.concatenate([np.sin(angles_x), np.cos(angles_x), np.sin(angles_y),
                            np.cos(angles_y)], axis=1)
    return table.astype(np.float32)


@keras.saving.register_keras_serializable(package=PACKAGE)
class SinCosPositionEmbedding(keras.layers.Layer):
    """Adds the fixed `sincos2d` table to [batch, rows*cols, D] patch tokens (no weights).

    Args:
        grid_size: (rows, cols) of the patch grid.
    """

    def __init__(self, grid_size, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = tuple(int(side) for side in grid_size)

    def build(self, input_shape):
        rows, cols = self.grid_size
        if input_shape[1] is not None and input_shape[1] != rows * cols:
            raise ValueError(f"SinCosPositionEmbedding expected {rows}x{cols} = {rows * cols} "
                             f"patch tokens, got input shape {input_shape}")
        self.table = sincos2d(rows, cols, input_shape[-1])[None]

    def call(self, tokens):
        return tokens + ops.cast(self.table, tokens.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(grid_size=list(self.grid_size))
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class Learned2DPositionEmbedding(keras.layers.Layer):
    """Adds learned row and column embeddings of D/2 each, concatenated per patch.

    Weights `row_embedding` (rows, D/2) and `col_embedding` (cols, D/2), initialised
    normal(0.02) like the 1-D embedding: rows * D/2 + cols * D/2 weights instead of rows*cols*D.

    Args:
        grid_size: (rows, cols) of the patch grid.
    """

    def __init__(self, grid_size, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = tuple(int(side) for side in grid_size)

    def build(self, input_shape):
        rows, cols = self.grid_size
        width = input_shape[-1]
        if width % 2 or (input_shape[1] is not None and input_shape[1] != rows * cols):
            raise ValueError(f"Learned2DPositionEmbedding expected [batch, {rows * cols}, even "
                             f"width], got input shape {input_shape}")
        init = keras.initializers.RandomNormal(stddev=0.02)
        self.row_embedding = self.add_weight(name="row_embedding", shape=(rows, width // 2),
                                             initializer=init)
        self.col_embedding = self.add_weight(name="col_embedding", shape=(cols, width // 2),
                                             initializer=init)

    def no_weight_decay(self):
        return [self.row_embedding, self.col_embedding]

    def call(self, tokens):
        rows, cols = self.grid_size
        half = tokens.shape[-1] // 2
        row_part = ops.broadcast_to(self.row_embedding[:, None, :], (rows, cols, half))
        col_part = ops.broadcast_to(self.col_embedding[None, :, :], (rows, cols, half))
        table = ops.reshape(ops.concatenate([col_part, row_part], axis=-1), (1, rows * cols, -1))
        return tokens + ops.cast(table, tokens.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(grid_size=list(self.grid_size))
        return config
