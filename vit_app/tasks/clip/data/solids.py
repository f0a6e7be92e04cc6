"""Synthetic 3-D scans: a bright solid in a noisy volume, its kind told only across slices.

Each volume is `depth` slices of `size` x `size` voxels, 16-bit intensities as a scanner
writes them: Gaussian noise around a background level, and one solid around the depth axis at
a random place, brighter by a random contrast. The solid's cross-section is a disk in every
slice; its kind (the class) is how the disk's radius runs through the slices:

- `spindle`: grows linearly to the middle slice, then shrinks (two cones base to base);
- `cylinder`: the same in every slice (a random fraction of the largest radius);
- `widening` / `narrowing`: grows / shrinks linearly from the first slice to the last.

The largest radius is random per volume, and every kind's radii run over the same range with
the same mean area (a disk of 0.3 to 1 times the largest radius), so a single slice tells
little; the radii's run through the slices tells the class. The slices without their order
tell a spindle or a cylinder from a cone, not a widening cone from a narrowing one.
"""

from __future__ import annotations

import numpy as np

CLASS_NAMES = ("spindle", "cylinder", "widening", "narrowing")
BACKGROUND, NOISE = 800.0, 120.0  # a 16-bit scan's levels


def _profile(kind: str, depth: int, rng: np.random.Generator) -> np.ndarray:
    """The radius of each slice as a fraction of the largest, float [depth]."""
    place = (np.arange(depth) + 0.5) / depth  # 0..1 through the volume
    if kind == "spindle":
        return 0.3 + 0.7 * (1.0 - np.abs(2.0 * place - 1.0))
    if kind == "cylinder":
        return np.full(depth, rng.uniform(0.3, 1.0))
    if kind == "widening":
        return 0.3 + 0.7 * place
    return 1.0 - 0.7 * place


def solids(count: int, depth: int = 8, size: int = 32, seed: int = 0):
    """`count` volumes of the synthetic solids.

    Args:
        count: volumes to make (the classes in turn, so every class has count / 4).
        depth: slices per volume (default 8; at least 4).
        size: slice side in voxels (default 32; at least 16).
        seed: the volumes are a function of it.

    Returns:
        (volumes uint16 [count, depth, size, size], labels int32 [count]), labels indexing
        `CLASS_NAMES`.

    Raises:
        ValueError: fewer than 4 slices, or slices smaller than 16 voxels.
    """
    if depth < 4 or size < 16:
        raise ValueError(f"solids need at least 4 slices of 16 voxels, got {depth} slices of "
                         f"{size}")
    rng = np.random.default_rng(seed)
    rows, cols = np.mgrid[:size, :size]
    volumes = np.empty((count, depth, size, size), np.uint16)
    labels = np.arange(count, dtype=np.int32) % len(CLASS_NAMES)
    for index, label in enumerate(labels):
        largest = rng.uniform(0.22, 0.42) * size
        centre = rng.uniform(largest, size - largest, 2)
        radii = largest * _profile(CLASS_NAMES[label], depth, rng)
        inside = np.hypot(rows - centre[0], cols - centre[1])[None] <= radii[:, None, None]
        volume = rng.normal(BACKGROUND, NOISE, (depth, size, size))
        volume += inside * rng.uniform(1.0, 2.5) * NOISE
        volumes[index] = np.clip(volume, 0, 65535).astype(np.uint16)
    return volumes, labels
