"""Offline segmentation sets shaped like real dense work, beside the digit and shape scenes.

`make_membranes`: grayscale slices of cells packed like tissue under an electron microscope,
their masks the thin membranes between them (1-3 px, about a tenth of the pixels): Voronoi
cells with their own brightness and texture, dark organelles inside them that are not
membrane, blur and noise. A thin, rare class at its own resolution, which a model that shrinks
the slices loses.

    python benchmarks/dense_sets.py membranes OUT [--count 24] [--size 512] [--seed 0]

writes OUT/images/*.png, OUT/masks/*.png (0 = cell, 1 = membrane) and OUT/classes.txt, the
layout `vit train --task segment --data folder:OUT` reads.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

CELL_SIDE = 64  # typical cell diameter in pixels at size 512
MEMBRANE_HALF_WIDTH = (0.6, 1.6)  # half the membrane's width, pixels, drawn per slice


def make_membranes(folder: str, count: int, seed: int, size: int = 512) -> str:
    """Writes `count` membrane slices of `size` x `size` px into `folder`.

    Args:
        folder: where images/, masks/ and classes.txt go (created).
        count: slices.
        seed: the random seed (the same seed gives the same files).
        size: side in pixels.

    Returns:
        The `folder:` data spec.
    """
    from PIL import Image

    rng = np.random.default_rng(seed)
    for name in ("images", "masks"):
        os.makedirs(os.path.join(folder, name), exist_ok=True)
    for index in range(count):
        image, mask = membrane_slice(rng, size)
        Image.fromarray(image).save(os.path.join(folder, "images", f"{index:04d}.png"))
        Image.fromarray(mask).save(os.path.join(folder, "masks", f"{index:04d}.png"))
    with open(os.path.join(folder, "classes.txt"), "w") as handle:
        handle.write("cell\nmembrane\n")
    return f"folder:{folder}"


def membrane_slice(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """One slice: (uint8 [size, size] image, uint8 [size, size] mask of 0 and 1)."""
    cells = max(4, int((size / CELL_SIDE) ** 2 * rng.uniform(0.8, 1.3)))
    seeds = rng.uniform(0, size, (cells, 2))
    rows, cols = np.mgrid[0:size, 0:size].astype(np.float32)
    distances = np.stack([np.hypot(rows - y, cols - x) for y, x in seeds], axis=-1)
    nearest_two = np.partition(distances, 1, axis=-1)[..., :2]
    owner = distances.argmin(-1)
    # The bisector between two seeds is where the two nearest distances meet; half their
    # difference is the distance to it (exact for Voronoi edges).
    to_edge = (nearest_two[..., 1] - nearest_two[..., 0]) / 2
    membrane = to_edge < rng.uniform(*MEMBRANE_HALF_WIDTH)
    brightness = rng.uniform(120, 200, cells)[owner]
    canvas = brightness + 18 * _smooth_noise(rng, size, 24) + 8 * _smooth_noise(rng, size, 4)
    canvas -= _organelles(rng, size, cells) * rng.uniform(50, 90)
    canvas = np.where(membrane, rng.uniform(35, 75) + 10 * _smooth_noise(rng, size, 8), canvas)
    canvas = _blur(canvas, 1.0) + rng.normal(0, 9, (size, size))
    return np.clip(canvas, 0, 255).astype(np.uint8), membrane.astype(np.uint8)


def _smooth_noise(rng: np.random.Generator, size: int, scale: float) -> np.ndarray:
    """Noise of unit spread varying over about `scale` pixels."""
    noise = _blur(rng.normal(0, 1, (size, size)), scale)
    return noise / (noise.std() + 1e-8)


def _organelles(rng: np.random.Generator, size: int, cells: int) -> np.ndarray:
    """Dark round bodies inside the cells (not membrane): [size, size] in 0..1."""
    rows, cols = np.mgrid[0:size, 0:size].astype(np.float32)
    bodies = np.zeros((size, size), np.float32)
    for _ in range(int(cells * rng.uniform(0.5, 1.5))):
        y, x = rng.uniform(0, size, 2)
        radius = rng.uniform(3, 9)
        bodies = np.maximum(bodies, np.clip(radius - np.hypot(rows - y, cols - x), 0, 1))
    return bodies


def _blur(values: np.ndarray, sigma: float) -> np.ndarray:
    """A Gaussian blur of `sigma` pixels (separable, reflected at the borders)."""
    radius = max(1, int(3 * sigma))
    taps = np.exp(-0.5 * (np.arange(-radius, radius + 1) / sigma) ** 2)
    taps /= taps.sum()
    padded = np.pad(values, radius, mode="reflect")
    along_rows = np.apply_along_axis(lambda line: np.convolve(line, taps, "valid"), 0, padded)
    return np.apply_along_axis(lambda line: np.convolve(line, taps, "valid"), 1, along_rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["membranes"])
    parser.add_argument("output")
    parser.add_argument("--count", type=int, default=24)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(make_membranes(args.output, args.count, args.seed, args.size))


if __name__ == "__main__":
    main()
