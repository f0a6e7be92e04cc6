"""Image files from what a user types: files, folders (searched recursively) and glob patterns,
read without any framework so that a mistyped path is answered at once.
"""

from __future__ import annotations

import glob
import os

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff")
GLOB_CHARACTERS = "*?["


def is_image_name(path: str) -> bool:
    """Whether `path` ends with one of `IMAGE_EXTENSIONS` (any case)."""
    return path.lower().endswith(IMAGE_EXTENSIONS)


def images_in_folder(folder: str) -> list[str]:
    """The image files under `folder` and its sub-folders, sorted; hidden entries skipped."""
    found = []
    for root, folders, files in os.walk(folder):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        found.extend(os.path.join(root, name) for name in sorted(files)
                     if is_image_name(name) and not name.startswith("."))
    return found


def expand_images(arguments: list[str]) -> list[str]:
    """The image files that `arguments` name, in order.

    Args:
        arguments: files (taken whatever their extension: a file named on purpose is checked
            when it is read), folders (their image files, recursively) and glob patterns
            ('photos/*.jpg', 'shots/**/*.png': their image files and folders).

    Returns:
        The file paths, in the order of the arguments (a file named twice comes twice: each
        argument is an image the user asked about).

    Raises:
        ValueError: an argument names nothing, or a folder or pattern holds no image file;
            the message names each such argument.
    """
    files, empty = [], []
    for argument in arguments:
        found = _expand_one(os.path.expanduser(argument))
        if not found:
            empty.append(argument)
        files.extend(found)
    if empty:
        raise ValueError("no image files at " + ", ".join(_why_empty(path) for path in empty)
                         + f": expected image files ({'/'.join(IMAGE_EXTENSIONS)}), folders "
                         "holding them, or glob patterns")
    return files


def _expand_one(argument: str) -> list[str]:
    if os.path.isdir(argument):
        return images_in_folder(argument)
    if os.path.exists(argument):
        return [argument]
    if not any(character in argument for character in GLOB_CHARACTERS):
        return []
    found = []
    for match in sorted(glob.glob(argument, recursive=True)):
        if os.path.isdir(match):
            found.extend(images_in_folder(match))
        elif is_image_name(match):
            found.append(match)
    return found


def _why_empty(argument: str) -> str:
    path = os.path.expanduser(argument)
    if os.path.isdir(path):
        return f"{argument!r} (a folder without image files)"
    if any(character in argument for character in GLOB_CHARACTERS):
        return f"{argument!r} (a pattern matching no image file)"
    return f"{argument!r} (does not exist)"
