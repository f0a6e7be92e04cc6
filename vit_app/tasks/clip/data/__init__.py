"""The clip task's data, read without a framework: the built-in `moving-sprites` (a sprite
moving left, right, up or down: `motion`, whose classes only motion tells apart), and class
folders of clips: video files, folders of frames, and volumes (`.npy`/`.npz`, NIfTI).

A clip folder is laid out as an image classifier's (one folder per class), each entry of a
class folder one clip: a video file, a volume file or a folder of frame images. An image file
where a clip should be is refused by name: a clip has several frames.
"""

from __future__ import annotations

import os

from vit_app.data.specs import TaskData
from vit_app.paths import is_image_name

BUILT_IN = "moving-sprites"
VIDEO_EXTENSIONS = (".mp4", ".avi", ".webm", ".gif", ".mov", ".mkv", ".m4v", ".mpg", ".mpeg")
VOLUME_EXTENSIONS = (".npy", ".npz", ".nii", ".nii.gz")
CLIP_FILES = "a video (" + ", ".join(VIDEO_EXTENSIONS) + "), a volume (" + \
    ", ".join(VOLUME_EXTENSIONS) + ") or a folder of frame images"


def clip_kind(path: str) -> str | None:
    """'video', 'volume' or 'frames' (a folder holding image files), or None for anything
    else."""
    name = path.lower()
    if os.path.isdir(path):
        return "frames" if any(is_image_name(entry) for entry in os.listdir(path)) else None
    if name.endswith(VOLUME_EXTENSIONS):
        return "volume"
    if name.endswith(VIDEO_EXTENSIONS):
        return "video"
    return None


def clip_classes(folder: str) -> dict[str, list[str]]:
    """{class name: its clips' paths}, classes and clips in sorted order.

    Raises:
        ValueError: an entry of a class folder that is no clip (an image file named as such),
            or a class folder without clips, naming each.
    """
    classes, problems = {}, []
    for name in sorted(os.listdir(folder)):
        class_dir = os.path.join(folder, name)
        if not os.path.isdir(class_dir) or name.startswith("."):
            continue
        clips = []
        for entry in sorted(os.listdir(class_dir)):
            path = os.path.join(class_dir, entry)
            if entry.startswith("."):
                continue
            if clip_kind(path):
                clips.append(path)
            elif is_image_name(entry):
                problems.append(f"{path}: a single image; a clip is {CLIP_FILES}")
            else:
                problems.append(f"{path}: not a clip; expected {CLIP_FILES}")
        if not clips:
            problems.append(f"{class_dir}: no clips; expected {CLIP_FILES}")
        classes[name] = clips
    if problems:
        listing = "\n".join(f"  {problem}" for problem in problems[:20])
        more = f"\n  ... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise ValueError(f"clip data {folder}: {len(problems)} entries cannot be used; fix or "
                         f"remove them before training:\n{listing}{more}")
    return classes


def recognises(path: str) -> bool:
    """Whether a folder's class folders hold clips, by its first class folder's first entry
    (an animated .gif alone does not tell: image classes may be .gif files too)."""
    if not os.path.isdir(path):
        return False
    for name in sorted(os.listdir(path)):
        class_dir = os.path.join(path, name)
        if os.path.isdir(class_dir) and not name.startswith("."):
            entries = sorted(entry for entry in os.listdir(class_dir) if not entry.startswith("."))
            first = os.path.join(class_dir, entries[0]) if entries else ""
            return bool(first) and not first.lower().endswith(".gif") and \
                clip_kind(first) is not None
    return False


def check(kind: str, argument: str, path: str, min_classes: int) -> None:
    """The built-in sprites, or a folder of class folders of clips."""
    if kind == BUILT_IN:
        return
    if kind != "folder":
        raise ValueError(f"clip data {kind}:{argument}: expected {BUILT_IN!r} or 'folder:DIR' "
                         f"of class folders, each holding clips ({CLIP_FILES})")
    classes = clip_classes(path)
    if len(classes) < min_classes:
        raise ValueError(f"clip data {argument!r}: expected at least {min_classes} class "
                         f"folders of clips, found {len(classes)}")


DATA = TaskData(noun="clip", labels="a class per clip", built_in=BUILT_IN, check=check,
                recognises=recognises)
