"""One clip from a file or folder, as uint8 [frames, height, width, 3]: video files decoded by
OpenCV (the fastest of the libraries measured: benchmarks/video_decode.py), folders of frame
images by Pillow, volumes (`.npy`, `.npz`, NIfTI through nibabel) read depth first, their
intensities stretched to 0..255 as images of more than 8 bits are, slices repeated to RGB.

Every reader raises ValueError naming the file and what was expected of it.
"""

from __future__ import annotations

import os
import re
import tempfile

import cv2
import nibabel
import numpy as np

from vit_app import images
from vit_app.paths import is_image_name
from vit_app.tasks.clip.data import VIDEO_EXTENSIONS, clip_kind

VOLUME_AXES = "depth x height x width (x 1 or 3 channels)"


def read_clip(path: str) -> np.ndarray:
    """A clip's frames (or a volume's slices, depth first), uint8 [frames, height, width, 3]."""
    kind = clip_kind(path)
    if kind == "video":
        return read_video(path)
    if kind == "frames":
        return read_frames(path)
    if kind == "volume":
        return volume_to_frames(read_volume(path), path)
    raise ValueError(f"{path}: not a clip; expected a video ({', '.join(VIDEO_EXTENSIONS)}), a "
                     "volume (.npy, .npz, .nii, .nii.gz) or a folder of frame images")


def read_video(path: str, max_frames: int | None = None) -> np.ndarray:
    """Every frame of a video file, RGB; ValueError past `max_frames` (None: no limit)."""
    capture, frames = cv2.VideoCapture(path), []
    try:
        while True:
            ok, frame = capture.read()
            if not ok:
                break
            if max_frames is not None and len(frames) == max_frames:
                raise ValueError(f"{path}: more than {max_frames} frames; at most "
                                 f"{max_frames} are read from it")
            frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB) if frame.ndim == 3 else
                          cv2.cvtColor(frame, cv2.COLOR_GRAY2RGB))
    finally:
        capture.release()
    if not frames:
        raise ValueError(f"{path}: no frame could be decoded (expected a video file FFmpeg "
                         "reads; is it complete?)")
    return np.stack(frames)


def _natural_key(name: str):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name.lower())]


def read_frames(folder: str) -> np.ndarray:
    """A folder's frame images in natural order (frame_2 before frame_10), all one size."""
    names = sorted((name for name in os.listdir(folder) if is_image_name(name)),
                   key=_natural_key)
    frames = []
    for name in names:
        path = os.path.join(folder, name)
        try:
            frames.append(images.decode_on_host(images.read_file(path)))
        except Exception as error:
            raise ValueError(f"{path}: not a readable frame image ({error})") from None
    sizes = sorted({frame.shape[:2] for frame in frames})
    if len(sizes) > 1:
        raise ValueError(f"{folder}: frames of {len(sizes)} sizes ({sizes[0]} and {sizes[-1]}); "
                         "expected every frame of a clip at one size")
    return np.stack(frames)


def read_volume(path: str) -> np.ndarray:
    """A volume file's array, depth first: `.npy` and `.npz` as stored (depth x height x
    width), NIfTI's (x, y, z) turned to (z, y, x): its slices along the scanner's third axis."""
    name = path.lower()
    try:
        if name.endswith((".nii", ".nii.gz")):
            data = np.asanyarray(nibabel.load(path).dataobj)
            if data.ndim == 4 and data.shape[3] == 1:
                data = data[..., 0]
            return np.transpose(data, (2, 1, 0)) if data.ndim == 3 else data
        if name.endswith(".npz"):
            with np.load(path, allow_pickle=False) as arrays:
                if len(arrays.files) != 1:
                    raise ValueError(f"{path}: holds {len(arrays.files)} arrays "
                                     f"({', '.join(arrays.files[:5])}); expected one volume")
                return arrays[arrays.files[0]]
        return np.load(path, allow_pickle=False)
    except ValueError:
        raise
    except Exception as error:
        raise ValueError(f"{path}: not a readable volume ({type(error).__name__}: {error})") \
            from None


def volume_to_frames(volume: np.ndarray, path: str) -> np.ndarray:
    """A volume's slices as RGB frames, its intensities stretched to 8 bits over the whole
    volume (`vit_app.images.stretch_to_8_bits`)."""
    if volume.ndim == 4 and volume.shape[-1] in (1, 3):
        channels = volume.shape[-1]
    elif volume.ndim == 3:
        channels, volume = 1, volume[..., None]
    else:
        raise ValueError(f"{path}: an array of shape {tuple(volume.shape)}; expected a volume "
                         f"of {VOLUME_AXES}")
    if volume.shape[0] < 2:
        raise ValueError(f"{path}: {volume.shape[0]} slice of {volume.shape[1]}x"
                         f"{volume.shape[2]}; expected a volume of {VOLUME_AXES}")
    if volume.dtype != np.uint8:
        volume = images.stretch_to_8_bits(volume)
    return np.repeat(volume, 3, axis=-1) if channels == 1 else volume


# A file's kind by its first bytes, for files that come without a name (`vit serve`'s
# requests): (what it starts with, at which offset, the extension it is read as).
SIGNATURES = ((b"\x93NUMPY", 0, ".npy"), (b"PK\x03\x04", 0, ".npz"),
              (b"\x1f\x8b", 0, ".nii.gz"), (b"n+1\0", 344, ".nii"), (b"ftyp", 4, ".mp4"),
              (b"\x1aE\xdf\xa3", 0, ".webm"), (b"GIF8", 0, ".gif"), (b"AVI ", 8, ".avi"))
MAX_CLIP_FRAMES = 4096  # frames read from a file of no name; a longer one is refused


def extension_of(data: bytes) -> str | None:
    """The extension a clip file's bytes are read as ('.mp4', '.nii.gz'...), None when they
    start as no video or volume this task reads."""
    for start, offset, extension in SIGNATURES:
        if data[offset:offset + len(start)] == start:
            return extension
    return None


def read_clip_bytes(data: bytes, what: str) -> np.ndarray:
    """`read_clip` of a file's bytes (a request's), its kind told by its first bytes.

    Args:
        data: the file's bytes.
        what: how messages name it ('instance 0:').

    Raises:
        ValueError: naming `what`: no known kind, unreadable, or a video of more than
            `MAX_CLIP_FRAMES` frames.
    """
    extension = extension_of(data)
    if extension is None:
        raise ValueError(f"{what} not a video (MP4, WebM, AVI, GIF) or volume (.npy, .npz, "
                         f"NIfTI) by its first bytes {data[:8]!r}")
    with tempfile.TemporaryDirectory(prefix="vit-clip-") as folder:
        path = os.path.join(folder, "clip" + extension)
        with open(path, "wb") as file:
            file.write(data)
        try:
            if clip_kind(path) == "video":
                return read_video(path, MAX_CLIP_FRAMES)
            return read_clip(path)
        except ValueError as error:
            raise ValueError(str(error).replace(path + ":", what, 1)) from None
