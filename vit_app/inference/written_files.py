"""The files `vit predict` writes beside its table (a segmenter's masks and overlays, a
detector's drawn copies), named after each image: never written over a file that is already
there unless the user says so.

Run from inside a data folder, `vit predict images/ --model ...` would otherwise replace
`masks/<stem>.png`, the folder's own ground truth, with predictions.
"""

from __future__ import annotations

import os

MAX_LISTED = 5


def unique_stem(path: str, taken: set) -> str:
    """The file's stem, numbered when two images of the run share it."""
    stem = os.path.splitext(os.path.basename(path))[0]
    candidate, number = stem, 1
    while candidate in taken:
        number += 1
        candidate = f"{stem}_{number}"
    taken.add(candidate)
    return candidate


def image_stems(readable) -> list[str]:
    """Each image's stem in the files written for it, in the order of `readable` ((path,
    bytes) pairs): two images of the same stem get `_2`, `_3`..."""
    taken: set = set()
    return [unique_stem(path, taken) for path, _ in readable]


def refuse_to_overwrite(planned: list[str], option: str, folder: str, overwrite: bool) -> None:
    """Checks, before anything is written, that none of the `planned` files exists.

    Args:
        planned: the files the command would write.
        option: the flag that names their folder ('--masks').
        folder: that folder.
        overwrite: the user's `--overwrite`: existing files may be replaced.

    Raises:
        ValueError: naming the files that exist and the ways out.
    """
    existing = [path for path in planned if os.path.exists(path)]
    if not existing or overwrite:
        return
    listed = ", ".join(os.path.basename(path) for path in existing[:MAX_LISTED])
    more = f" and {len(existing) - MAX_LISTED} more" if len(existing) > MAX_LISTED else ""
    raise ValueError(f"{option} {folder}: {len(existing)} of the {len(planned)} files this "
                     f"run would write exist already ({listed}{more}); nothing was written: "
                     f"choose another folder ({option} DIR) or pass --overwrite to replace them")
