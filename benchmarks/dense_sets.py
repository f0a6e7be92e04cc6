"""Offline segmentation sets shaped like real dense work, beside the digit and shape scenes.

`make_membranes`: grayscale slices of cells packed like tissue under an electron microscope,
their masks the thin membranes between them (1-3 px, about a tenth of the pixels): Voronoi
cells with their own brightness and texture, dark organelles inside them that are not
membrane, blur and noise. A thin, rare class at its own resolution, which a model that shrinks
the slices loses.

    python benchmarks/dense_sets.py membranes OUT [--count 24] [--size 512] [--seed 0] [--bits 16]

writes OUT/images/*.png (16-bit *.tif with --bits 16), OUT/masks/*.png (0 = cell, 255 = membrane: binary masks, as most
annotation and microscopy tools save them) and OUT/classes.txt, the layout `vit train --task
segment --data folder:OUT` reads.

`make_voc_photos`: photographs (scikit-image's sample photos) with a cat pasted in at 36-72 px,
Pascal VOC boxes beside: a user's first detection folder.

    python benchmarks/dense_sets.py photos OUT [--count 300] [--seed 0]
"""

from __future__ import annotations

import argparse
import os

import numpy as np

CELL_SIDE = 64  # typical cell diameter in pixels at size 512
MEMBRANE_HALF_WIDTH = (0.6, 1.6)  # half the membrane's width, pixels, drawn per slice
# A 16-bit slice's counts for black and white: a 12-bit camera's range above its dark level,
# stored in 16 bits (scaled by 1/257 as 8-bit files are, it would be 15 levels of near black).
TWELVE_BIT_COUNTS = (180, 3900)


def make_membranes(folder: str, count: int, seed: int, size: int = 512, bits: int = 8) -> str:
    """Writes `count` membrane slices of `size` x `size` px into `folder`.

    Args:
        folder: where images/, masks/ and classes.txt go (created).
        count: slices.
        seed: the random seed (the same seed gives the same files).
        size: side in pixels.
        bits: 8 (PNG slices) or 16 (TIFF slices of a 12-bit camera's counts, as microscopes
            write them: `TWELVE_BIT_COUNTS`).

    Returns:
        The `folder:` data spec.
    """
    from PIL import Image

    if bits not in (8, 16):
        raise ValueError(f"bits must be 8 or 16, got {bits}")
    rng = np.random.default_rng(seed)
    for name in ("images", "masks"):
        os.makedirs(os.path.join(folder, name), exist_ok=True)
    for index in range(count):
        image, mask = membrane_slice(rng, size)
        if bits == 8:
            Image.fromarray(image).save(os.path.join(folder, "images", f"{index:04d}.png"))
        else:
            dark, full = TWELVE_BIT_COUNTS
            counts = (dark + image.astype(np.float32) / 255 * (full - dark)).astype(np.uint16)
            Image.fromarray(counts).save(os.path.join(folder, "images", f"{index:04d}.tif"),
                                         compression="tiff_lzw")
        Image.fromarray(mask * np.uint8(255)).save(os.path.join(folder, "masks",
                                                                f"{index:04d}.png"))
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


PHOTO_BACKGROUNDS = ("astronaut", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field",
                     "retina")


def make_voc_photos(folder: str, count: int, seed: int) -> str:
    """Writes `count` photographs of 200x150 px (crops of scikit-image's sample photos) with
    one to three pictures of Chelsea the cat pasted in at 36-72 px, apart, as a Pascal VOC
    folder (JPEGImages/, Annotations/; one class, no classes.txt). Returns the `folder:` spec."""
    from PIL import Image
    from skimage import data

    rng = np.random.default_rng(seed)
    backgrounds = [getattr(data, name)() for name in PHOTO_BACKGROUNDS]
    cat = Image.fromarray(data.chelsea()[20:280, 90:350])
    os.makedirs(os.path.join(folder, "JPEGImages"))
    os.makedirs(os.path.join(folder, "Annotations"))
    for index in range(count):
        photo = backgrounds[index % len(backgrounds)]
        top, left = (int(rng.integers(0, side - size)) for side, size in
                     zip(photo.shape[:2], (150, 200)))
        canvas = Image.fromarray(photo[top:top + 150, left:left + 200])
        boxes = []
        for _ in range(int(rng.integers(1, 4))):
            side = int(rng.integers(36, 73))
            x0, y0 = int(rng.integers(0, 200 - side)), int(rng.integers(0, 150 - side))
            if any(x0 < b[2] + 2 and b[0] < x0 + side + 2 and y0 < b[3] + 2 and
                   b[1] < y0 + side + 2 for b in boxes):
                continue
            canvas.paste(cat.resize((side, side), Image.BILINEAR), (x0, y0))
            boxes.append((x0, y0, x0 + side, y0 + side))
        canvas.save(os.path.join(folder, "JPEGImages", f"{index:04d}.jpg"), quality=90)
        objects = "".join(f"<object><name>cat</name><bndbox><xmin>{x0 + 1}</xmin><ymin>{y0 + 1}"
                          f"</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
                          for x0, y0, x1, y1 in boxes)
        with open(os.path.join(folder, "Annotations", f"{index:04d}.xml"), "w") as handle:
            handle.write(f"<annotation><filename>{index:04d}.jpg</filename><size><width>200"
                         f"</width><height>150</height><depth>3</depth></size>{objects}"
                         "</annotation>")
    return f"folder:{folder}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["membranes", "photos"])
    parser.add_argument("output")
    parser.add_argument("--count", type=int, help="default: 24 slices, 300 photographs")
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--bits", type=int, default=8, choices=[8, 16],
                        help="membranes: 8-bit PNG or 16-bit TIFF slices (default 8)")
    args = parser.parse_args()
    if args.kind == "photos":
        print(make_voc_photos(args.output, args.count or 300, args.seed))
    else:
        print(make_membranes(args.output, args.count or 24, args.seed, args.size, args.bits))


if __name__ == "__main__":
    main()
