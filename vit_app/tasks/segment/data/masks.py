"""Segmentation folders: `DIR/images/` and `DIR/masks/` pair by file stem; a mask is a
single-channel PNG or TIFF of class ids (8 or 16 bits) or a palette PNG (its indices are the
class ids, as Pascal VOC ships them); 255 marks pixels to ignore; `DIR/classes.txt`
(optional) names the classes in order, one per line.

A folder whose every mask holds only 0 and 255 is read as binary masks, as most tools save
them: 255 is the foreground (class 1), not "ignore". Read the VOC way, such a folder would have
no class but the background to learn; the run says how it read them.

Every pair is checked before training starts (a run that dies hours in is the worst outcome):
a missing or extra mask is named, and so is an image and mask of different sizes, an RGB mask
that is no palette and a class id beyond the classes.
"""

from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from vit_app import images
from vit_app.tasks.segment.data import IMAGES_DIR, MASKS_DIR, is_segmentation_folder
from vit_app.paths import IMAGE_EXTENSIONS, is_image_name
from vit_keras.tasks.segment.scores import IGNORE

CLASSES_FILE = "classes.txt"
MAX_LISTED = 20
# palette, 8-bit, 1-bit and 16/32-bit class ids (a TIFF's 16-bit ids in either byte order)
MASK_MODES = ("P", "L", "1", "I;16", "I;16L", "I;16B", "I")
BINARY_CLASSES = ["background", "foreground"]


@dataclasses.dataclass(frozen=True)
class MaskSummary:
    """What the checked masks of a folder hold.

    Attributes:
        largest_id: the largest class id (-1 when every pixel is ignored).
        binary: every mask holds only 0 and 255 (and some 255): binary masks, whose 255 is
            the foreground (class 1).
    """

    largest_id: int
    binary: bool = False


def _by_stem(folder: str) -> dict[str, str]:
    return {os.path.splitext(name)[0]: os.path.join(folder, name)
            for name in sorted(os.listdir(folder)) if is_image_name(name)}


def _listing(names) -> str:
    names = sorted(names)
    more = f" ... and {len(names) - MAX_LISTED} more" if len(names) > MAX_LISTED else ""
    return ", ".join(names[:MAX_LISTED]) + more


def pair_files(path: str) -> tuple[list[str], list[str]]:
    """The (image, mask) files of a segmentation folder, paired by stem, sorted.

    Raises:
        ValueError: the folder layout is not DIR/images + DIR/masks, it holds no image, or an
            image has no mask or a mask no image (both listed by stem).
    """
    if not is_segmentation_folder(path):
        raise ValueError(f"segmentation data {path!r}: expected the folders {path}/{IMAGES_DIR}/ "
                         f"and {path}/{MASKS_DIR}/ holding images and masks of the same file "
                         "stems (photo_1.jpg and photo_1.png)")
    images = _by_stem(os.path.join(path, IMAGES_DIR))
    masks = _by_stem(os.path.join(path, MASKS_DIR))
    if not images:
        raise ValueError(f"segmentation data {path!r}: {path}/{IMAGES_DIR}/ holds no "
                         f"{'/'.join(IMAGE_EXTENSIONS)} files")
    problems = []
    if set(images) - set(masks):
        problems.append(f"images without a mask in {MASKS_DIR}/: "
                        f"{_listing(set(images) - set(masks))}")
    if set(masks) - set(images):
        problems.append(f"masks without an image in {IMAGES_DIR}/: "
                        f"{_listing(set(masks) - set(images))}")
    if problems:
        raise ValueError(f"segmentation data {path!r}: every image needs one mask of the same "
                         "stem; " + "; ".join(problems))
    stems = sorted(images)
    return [images[stem] for stem in stems], [masks[stem] for stem in stems]


def read_mask(path: str, binary: bool = False) -> np.ndarray:
    """A mask file -> uint8 [height, width] class ids (a palette PNG's indices).

    Args:
        path: the mask file.
        binary: read 255 as the foreground, class 1 (`MaskSummary.binary`), not as "ignore".

    Raises:
        ValueError: an unreadable file, an RGB(A) mask, or ids above 255.
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as mask:
            mode = mask.mode
            values = np.asarray(mask)
    except (OSError, UnidentifiedImageError) as error:
        raise ValueError(f"mask {path}: cannot be read ({error})") from None
    if mode not in MASK_MODES:
        raise ValueError(f"mask {path} is a {mode} image: expected a single-channel PNG or "
                         "TIFF of class ids or a palette PNG (an RGB mask is no palette: map its "
                         "colours to class ids first)")
    if values.size and values.max() > 255:
        raise ValueError(f"mask {path} holds the id {int(values.max())}: expected class ids "
                         f"0..254 and {IGNORE} = ignore")
    values = values.astype(np.uint8)
    return (values == IGNORE).astype(np.uint8) if binary else values


def _pair_problem(image_path: str, mask_path: str) -> tuple[str | None, int, set[int]]:
    """(what is wrong with one pair or None, the mask's largest class id or -1, which of 0
    and 255 it holds when it holds nothing else, else {-1})."""
    from PIL import Image

    why = images.file_problem(image_path)
    if why:
        return f"{image_path}: {why}", -1, {-1}
    try:
        mask = read_mask(mask_path)
    except ValueError as error:
        return str(error), -1, {-1}
    with Image.open(image_path) as image:
        width, height = image.size
    if mask.shape != (height, width):
        return (f"{mask_path}: the mask is {mask.shape[1]}x{mask.shape[0]}, its image "
                f"{width}x{height}: expected the same size"), -1, {-1}
    labelled = mask[mask != IGNORE]
    present = {int(value) for value in np.unique(mask)}
    return (None, int(labelled.max()) if labelled.size else -1,
            present if present <= {0, IGNORE} else {-1})


def check_pairs(image_files: list[str], mask_files: list[str]) -> MaskSummary:
    """Checks every pair (readable image, readable mask of its size).

    Returns:
        The largest class id found, and whether the masks are binary (`MaskSummary`).

    Raises:
        ValueError: listing every bad pair.
    """
    with images.bomb_warnings_silenced(), ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(_pair_problem, image_files, mask_files))
    problems = [why for why, _, _ in results if why]
    if problems:
        listing = "\n".join(f"  {why}" for why in problems[:MAX_LISTED])
        more = f"\n  ... and {len(problems) - MAX_LISTED} more" if len(problems) > MAX_LISTED \
            else ""
        raise ValueError(f"{len(problems)} of {len(image_files)} image/mask pairs cannot be "
                         f"used; fix or remove them before training:\n{listing}{more}")
    values = set().union(*(present for _, _, present in results))
    if -1 not in values and IGNORE in values:
        return MaskSummary(largest_id=1, binary=True)
    return MaskSummary(largest_id=max(largest for _, largest, _ in results))


def binary_note(path: str) -> str:
    """The line a run prints for a folder of binary masks."""
    return (f"masks: every mask in {path}/{MASKS_DIR}/ holds only 0 and {IGNORE}: read as "
            f"binary masks, {IGNORE} = foreground (class 1), not VOC's {IGNORE} = ignore (a "
            "mask with any other value keeps VOC's reading)")


def class_names(path: str, largest_id: int, binary: bool = False) -> list[str]:
    """The class names: `classes.txt` when the folder has one, else `BINARY_CLASSES` for binary
    masks, else 'class_<i>' up to the largest id found (at least two classes).

    Raises:
        ValueError: a mask holds an id beyond the classes of classes.txt.
    """
    listed = os.path.join(path, CLASSES_FILE)
    if not os.path.isfile(listed):
        if binary:
            return list(BINARY_CLASSES)
        return [f"class_{index}" for index in range(max(largest_id + 1, 2))]
    with open(listed, encoding="utf-8") as handle:
        names = [line.strip() for line in handle if line.strip()]
    if largest_id >= len(names):
        raise ValueError(f"segmentation data {path!r}: a mask holds the class id {largest_id}, "
                         f"and {CLASSES_FILE} names {len(names)} classes (ids 0..{len(names) - 1}"
                         f", {IGNORE} = ignore): add the missing names or fix the masks")
    return names
