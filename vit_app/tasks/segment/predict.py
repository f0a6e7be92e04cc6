"""`vit predict` with a segmenter (`vit train --task segment`'s model.keras): a class for every
pixel of each image, at the image's own size.

Each image goes through the model at its size; the class probabilities are resized bilinearly
to the image's original size and the most probable class is the pixel's. Per image, into the
`--masks` folder: `<stem>.png`, the class ids as a palette PNG (the form Pascal VOC ships and
`folder:` segmentation data takes back), and `<stem>_overlay.png`, the image with the classes
blended over it (background left clear). The table gives each image's classes by the share of
pixels they cover.
"""

from __future__ import annotations

import io
import os

import numpy as np
import tensorflow as tf

from vit_app.images import palette, pixel_size
from vit_app.inference.written_files import image_stems, refuse_to_overwrite
from vit_keras import atomic

OVERLAY_OPACITY = 0.5


def class_mask(probabilities: np.ndarray, height: int, width: int) -> np.ndarray:
    """[h, w, classes] probabilities at the model's size -> uint8 [height, width] class ids."""
    full = tf.image.resize(probabilities[None].astype(np.float32), (height, width),
                           method="bilinear")[0]
    return np.argmax(full.numpy(), axis=-1).astype(np.uint8)


def write_mask_files(folder: str, stem: str, image_bytes: bytes, mask: np.ndarray,
                     colours: np.ndarray) -> tuple[str, str]:
    """`<stem>.png` (palette PNG of the ids) and `<stem>_overlay.png`, each written whole."""
    from PIL import Image

    picture = Image.new("P", mask.shape[::-1])
    picture.putdata(mask.ravel().tolist())
    picture.putpalette(colours.ravel().tolist())
    with Image.open(io.BytesIO(image_bytes)) as image:
        rgb = np.asarray(image.convert("RGB"), np.float32)
    painted = colours[mask].astype(np.float32)
    alpha = np.where(mask[..., None] == 0, 0.0, OVERLAY_OPACITY)
    overlay = np.round(rgb * (1 - alpha) + painted * alpha).astype(np.uint8)
    paths = os.path.join(folder, f"{stem}.png"), os.path.join(folder, f"{stem}_overlay.png")
    for path, result in zip(paths, (picture, Image.fromarray(overlay))):
        buffer = io.BytesIO()
        result.save(buffer, format="PNG")
        atomic.write_bytes(path, buffer.getvalue())
    return paths


def planned_files(readable, folder: str) -> list[str]:
    """The masks and overlays `segment_files` writes for `readable` into `folder`."""
    return [os.path.join(folder, f"{stem}{suffix}.png") for stem in image_stems(readable)
            for suffix in ("", "_overlay")]


def segment_files(model, readable, top_k: int, batch_size: int, folder: str,
                  overwrite: bool = False) -> list[dict]:
    """Masks and overlays of every image; rows [{'file', 'top': [(class, pixel share)],
    'mask', 'overlay'}] for the table and `--output`.

    Raises:
        ValueError: a file it would write exists and `overwrite` is off (nothing written).
    """
    refuse_to_overwrite(planned_files(readable, folder), "--masks", folder, overwrite)
    names, colours = model.class_names, palette(model.num_classes)
    atomic.makedirs(folder)
    rows, stems = [], iter(image_stems(readable))
    for start in range(0, len(readable), batch_size):
        batch = readable[start:start + batch_size]
        probabilities = model.predict_encoded([data for _, data in batch])["probabilities"]
        for (path, data), scores in zip(batch, probabilities):
            width, height = pixel_size(data)
            mask = class_mask(np.asarray(scores), height, width)
            mask_path, overlay_path = write_mask_files(folder, next(stems), data, mask,
                                                       colours)
            shares = np.bincount(mask.ravel(), minlength=len(names)) / mask.size
            order = [index for index in np.argsort(-shares, kind="stable") if shares[index]]
            rows.append({"file": path, "mask": mask_path, "overlay": overlay_path,
                         "top": [(names[index], float(shares[index]))
                                 for index in order[:top_k]]})
    return rows
