"""The clip task's data, read without a framework: the built-in `moving-sprites` (a sprite
moving left, right, up or down: `motion`, whose classes only motion tells apart), and class
folders of clips: video files, folders of frames, and volumes (`.npy`/`.npz`, NIfTI).

A clip folder is laid out as an image classifier's (one folder per class), each entry of a
class folder one clip: a video file, a volume file or a folder of frame images. An image file
where a clip should be is refused by name: a clip has several frames.
"""

from __future__ import annotations

import glob
import os

from vit_app.data.specs import TaskData
from vit_app.paths import GLOB_CHARACTERS, is_image_name

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
        raise ValueError(f"clip data {folder}: {len(problems)} entries cannot be used; fix or "
                         f"remove them before training:\n{listing(problems)}")
    return classes


def listing(problems: list[str], shown: int = 20) -> str:
    """The first `shown` problems, one indented line each, and how many more there are."""
    lines = "\n".join(f"  {problem}" for problem in problems[:shown])
    return lines + (f"\n  ... and {len(problems) - shown} more" if len(problems) > shown else "")


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


def clips_in(path: str) -> list[str]:
    """The clips a folder holds: itself when it is a folder of frames, else its videos,
    volumes and frame folders, searched recursively, in sorted order."""
    if clip_kind(path) == "frames":
        return [path]
    found = []
    for entry in sorted(os.listdir(path)):
        inner = os.path.join(path, entry)
        if entry.startswith("."):
            continue
        if os.path.isdir(inner):
            found.extend(clips_in(inner))
        elif clip_kind(inner):
            found.append(inner)
    return found


def expand_clips(arguments: list[str]) -> list[str]:
    """The clips `vit predict`'s arguments name, in order: a file as it is (checked when it is
    read), a folder's clips (`clips_in`), a glob pattern's matching clips.

    Raises:
        ValueError: naming each argument that holds no clip.
    """
    found, empty = [], []
    for argument in (os.path.expanduser(argument) for argument in arguments):
        if os.path.isdir(argument):
            clips = clips_in(argument)
        elif os.path.exists(argument):
            clips = [argument]
        elif any(character in argument for character in GLOB_CHARACTERS):
            clips = [clip for match in sorted(glob.glob(argument, recursive=True))
                     for clip in (clips_in(match) if os.path.isdir(match) else
                                  [match] if clip_kind(match) else [])]
        else:
            clips = []
        found.extend(clips)
        if not clips:
            empty.append(argument)
    if empty:
        raise ValueError(f"no clips at {', '.join(empty)}: expected {CLIP_FILES}, folders "
                         "holding them, or glob patterns")
    return found


DATA = TaskData(noun="clip", labels="a class per clip", built_in=BUILT_IN, check=check,
                recognises=recognises, expand_inputs=expand_clips)
