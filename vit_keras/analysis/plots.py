"""PNG figures of the `vit_keras.analysis` results (paper section 4.5 style).

Needs matplotlib (the `viz` extra), imported inside each function. Figures are drawn on
`matplotlib.figure.Figure` objects, never through pyplot, so no global state or GUI backend is
touched. Each function writes its PNG atomically (temp file, then rename) and returns the path;
a figure of `figsize` inches at `dpi` is exactly figsize x dpi pixels.
"""

from __future__ import annotations

import io

import numpy as np

from vit_keras.analysis import overlay
from vit_keras import atomic


def _new_figure(figsize, dpi):
    try:
        from matplotlib.figure import Figure
    except ImportError as error:  # pragma: no cover - depends on the environment
        raise ImportError("plots need matplotlib: pip install 'vit_keras[viz]'") from error
    return Figure(figsize=figsize, dpi=dpi)


def _save(figure, path: str) -> str:
    """Writes `figure` as a PNG to `path` without ever leaving a half-written file."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=figure.dpi)
    atomic.write_bytes(path, buffer.getvalue())
    return path


def _tile(tiles: np.ndarray, columns: int, gap: int = 1) -> np.ndarray:
    """Arranges [n, h, w, c] tiles in a grid separated by NaN gaps -> [H, W, c]."""
    count, height, width, channels = tiles.shape
    rows = -(-count // columns)
    mosaic = np.full((rows * (height + gap) - gap, columns * (width + gap) - gap, channels),
                     np.nan, dtype=np.float32)
    for index in range(count):
        top, left = (index // columns) * (height + gap), (index % columns) * (width + gap)
        mosaic[top:top + height, left:left + width] = tiles[index]
    return mosaic


def plot_rollout(images, maps, path: str, titles=None, alpha: float = 0.5, dpi: int = 100) -> str:
    """Images (top row) and their attention-rollout overlays (bottom row).

    Args:
        images: [n, h, w, c] pixels in 0..255.
        maps: [n, rows, cols] maps, e.g. from `attention_rollout`.
        path: PNG file to write.
        titles: optional n captions (e.g. file names or predicted classes).
        alpha: weight of the heat map in the overlay.
        dpi: resolution; the figure is 2n x 4.4 inches.

    Returns:
        `path`.
    """
    images = np.asarray(images, dtype=np.float32)
    maps = np.asarray(maps, dtype=np.float32)
    if images.ndim != 4 or maps.ndim != 3 or len(images) != len(maps) or not len(images):
        raise ValueError(f"need [n, h, w, c] images and [n, rows, cols] maps with the same n >= 1, "
                         f"got {images.shape} and {maps.shape}")
    count = len(images)
    figure = _new_figure((2.0 * count, 4.4), dpi)
    for index in range(count):
        shown = images[index] if images.shape[-1] == 3 else np.repeat(images[index], 3, axis=-1)
        top = figure.add_subplot(2, count, index + 1)
        top.imshow(np.clip(shown, 0, 255).astype(np.uint8))
        top.set_title(str(titles[index]) if titles is not None else f"image {index}", fontsize=8)
        bottom = figure.add_subplot(2, count, count + index + 1)
        bottom.imshow(overlay(images[index], maps[index], alpha=alpha))
        bottom.set_title("attention rollout", fontsize=8)
        for axes in (top, bottom):
            axes.set_axis_off()
    figure.tight_layout()
    return _save(figure, path)


def plot_attention_distance(distances, path: str, image_size=None, dpi: int = 100) -> str:
    """The paper's mean-attention-distance figure: one dot per head, x = layer, y = pixels.

    Args:
        distances: [layers, heads] from `mean_attention_distance`.
        path: PNG file to write.
        image_size: optional (height, width); sets the y range to the image diagonal.
        dpi: resolution; the figure is 5 x 4 inches.

    Returns:
        `path`.
    """
    distances = np.asarray(distances, dtype=np.float32)
    if distances.ndim != 2:
        raise ValueError(f"distances must be [layers, heads], got shape {distances.shape}")
    layers, heads = distances.shape
    figure = _new_figure((5.0, 4.0), dpi)
    from matplotlib import colormaps

    axes = figure.add_subplot(1, 1, 1)
    colours = colormaps["viridis"](np.linspace(0.0, 0.9, heads))
    for head in range(heads):
        axes.scatter(np.arange(1, layers + 1), distances[:, head], s=14, color=colours[head],
                     label=f"head {head + 1}" if heads <= 16 else None)
    axes.set_xlabel("network depth (layer)")
    axes.set_ylabel("mean attention distance (pixels)")
    axes.set_xticks(np.arange(1, layers + 1, max(1, layers // 12)))
    if image_size is not None:
        axes.set_ylim(0, float(np.hypot(*image_size)) / 2)
    if heads <= 16:
        axes.legend(fontsize=6, ncol=2, loc="lower right")
    axes.set_title("How far each head looks", fontsize=10)
    figure.tight_layout()
    return _save(figure, path)


def plot_position_similarity(similarity, path: str, dpi: int = 100) -> str:
    """The grid-of-grids figure: tile (i, j) shows the cosine similarity of patch (i, j)'s
    position embedding with every other patch's.

    Args:
        similarity: [rows, cols, rows, cols] from `position_embedding_similarity`.
        path: PNG file to write.
        dpi: resolution; the figure is 6 x 5.2 inches.

    Returns:
        `path`.
    """
    similarity = np.asarray(similarity, dtype=np.float32)
    if similarity.ndim != 4 or similarity.shape[:2] != similarity.shape[2:]:
        raise ValueError(f"similarity must be [rows, cols, rows, cols], got {similarity.shape}")
    rows, cols = similarity.shape[:2]
    tiles = similarity.reshape(rows * cols, rows, cols, 1)
    mosaic = _tile(tiles, columns=cols)[..., 0]
    figure = _new_figure((6.0, 5.2), dpi)
    axes = figure.add_subplot(1, 1, 1)
    image = axes.imshow(mosaic, cmap="viridis", vmin=-1.0, vmax=1.0, interpolation="nearest")
    axes.set_xticks([(cols + 1) * j + cols / 2 - 0.5 for j in range(cols)],
                    [str(j + 1) for j in range(cols)], fontsize=6)
    axes.set_yticks([(rows + 1) * i + rows / 2 - 0.5 for i in range(rows)],
                    [str(i + 1) for i in range(rows)], fontsize=6)
    axes.set_xlabel("input patch column")
    axes.set_ylabel("input patch row")
    axes.set_title("Position embedding similarity", fontsize=10)
    figure.colorbar(image, ax=axes, label="cosine similarity", shrink=0.8)
    figure.tight_layout()
    return _save(figure, path)


def plot_filters(filters, path: str, columns: int = 7, dpi: int = 100) -> str:
    """A mosaic of patch-embedding principal components, each rescaled to its own [0, 1].

    Args:
        filters: [k, P, P, C] from `embedding_filters` (C = 3 shown in RGB, else channel 0).
        path: PNG file to write.
        columns: tiles per row.
        dpi: resolution; the figure is `columns` x rows inches (at least 2 x 2).

    Returns:
        `path`.
    """
    filters = np.asarray(filters, dtype=np.float32)
    if filters.ndim != 4 or not len(filters):
        raise ValueError(f"filters must be [k, P, P, C] with k >= 1, got {filters.shape}")
    if filters.shape[-1] != 3:
        filters = filters[..., :1]
    low = filters.min(axis=(1, 2, 3), keepdims=True)
    span = filters.max(axis=(1, 2, 3), keepdims=True) - low
    scaled = (filters - low) / np.where(span > 0, span, 1.0)
    columns = min(columns, len(filters))
    rows = -(-len(filters) // columns)
    mosaic = _tile(scaled, columns=columns)
    if mosaic.shape[-1] == 1:
        mosaic = np.repeat(mosaic, 3, axis=-1)
    mosaic = np.where(np.isnan(mosaic), 1.0, mosaic)          # white gaps
    figure = _new_figure((max(2.0, 1.0 * columns), max(2.0, 1.0 * rows + 0.4)), dpi)
    axes = figure.add_subplot(1, 1, 1)
    axes.imshow(mosaic, interpolation="nearest")
    axes.set_axis_off()
    axes.set_title(f"RGB embedding filters (first {len(filters)} principal components)",
                   fontsize=8)
    figure.tight_layout()
    return _save(figure, path)
