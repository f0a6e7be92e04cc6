"""The clip task's sources: clips held in memory, and the windows of frames a model sees.

Every clip is read once, before training (`readers.read_clip`: every unreadable file is named
up front), its frames resized to one stored size (the clips' median size, its longest side at
most `store_side`) and its length cut to at most `max_frames` evenly spaced frames. A window
is `frames` frames `stride` apart: a random start in training (the temporal crop), evenly
spaced starts at evaluation (`views` windows whose scores `vit evaluate` averages). A clip
shorter than a window is stretched to it (frames repeated evenly) unless the rule is 'refuse'.
"""

from __future__ import annotations

import dataclasses

import cv2
import numpy as np
import tensorflow as tf

from vit_app import images
from vit_app.data.source import Source
from vit_app.data.specs import parse_spec
from vit_app.data.training_data import TrainingData, open_paired_data, split_indices
from vit_app.tasks.clip.data import BUILT_IN, clip_classes, listing, readers
from vit_app.tasks.clip.data.motion import CLASS_NAMES, moving_sprites
from vit_keras.preprocessing import OFFICIAL

BUILT_IN_SIZES = {"train": 2000, "val": 400}
BUILT_IN_FRAMES, BUILT_IN_SIDE = 8, 32


@dataclasses.dataclass(frozen=True)
class Windows:
    """How a clip becomes the model's input.

    Attributes:
        frames: frames per window (the model's).
        stride: frames between a window's frames in the clip (1: consecutive).
        short: a clip shorter than a window: 'stretch' (frames repeated evenly) or 'refuse'.
    """

    frames: int = 8
    stride: int = 1
    short: str = "stretch"

    @property
    def span(self) -> int:
        """Clip frames one window covers."""
        return (self.frames - 1) * self.stride + 1


def _stored_size(shapes, store_side: int) -> tuple[int, int]:
    height, width = (int(side) for side in np.median(np.array(shapes), axis=0))
    factor = min(1.0, store_side / max(height, width))
    return max(1, round(height * factor)), max(1, round(width * factor))


def _fit_length(clip: np.ndarray, max_frames: int) -> np.ndarray:
    if len(clip) <= max_frames:
        return clip
    return clip[np.round(np.linspace(0, len(clip) - 1, max_frames)).astype(int)]


def stack_clips(clips: list[np.ndarray], size: tuple[int, int], max_frames: int):
    """uint8 [n, longest, height, width, 3] (zero frames after each clip's end) and the int32
    lengths [n]."""

    clips = [_fit_length(clip, max_frames) for clip in clips]
    lengths = np.array([len(clip) for clip in clips], np.int32)
    stacked = np.zeros((len(clips), lengths.max(), *size, 3), np.uint8)
    for index, clip in enumerate(clips):
        for frame_index, frame in enumerate(clip):
            stacked[index, frame_index] = frame if frame.shape[:2] == size else cv2.resize(
                frame, size[::-1], interpolation=cv2.INTER_AREA)
    return stacked, lengths


def read_folder(path: str, windows: Windows, store_side: int):
    """(stacked clips, lengths, labels, class names, files) of a folder of class folders.

    Raises:
        ValueError: every clip that cannot be read, or is too short under the 'refuse' rule,
            named in one message.
    """
    classes = clip_classes(path)
    files = [file for clips in classes.values() for file in clips]
    labels = np.array([label for label, clips in enumerate(classes.values()) for _ in clips],
                      np.int32)
    clips, problems = [], []
    for file in files:
        try:
            clip = readers.read_clip(file)
        except ValueError as error:
            problems.append(str(error))
            continue
        if len(clip) < windows.span and windows.short == "refuse":
            problems.append(f"{file}: {len(clip)} frames, a window needs {windows.span} "
                            f"({windows.frames} frames {windows.stride} apart; "
                            "--set clip.short=stretch repeats frames to fill it)")
        clips.append(clip)
    if problems:
        raise ValueError(f"{len(problems)} of {len(files)} clips cannot be used; fix or remove "
                         f"them before training:\n{listing(problems)}")
    size = _stored_size([clip.shape[1:3] for clip in clips], store_side)
    stacked, lengths = stack_clips(clips, size, max_frames=2 * windows.span)
    return stacked, lengths, labels, list(classes), files


@dataclasses.dataclass
class ClipSource(Source):
    """A `Source` of clips in memory: its records are clip indices (`arrays`: the indices and
    the class ids), `decode` gives a clip's stored frames.

    Attributes:
        clips: uint8 [n, longest, height, width, 3], the stored frames.
        lengths: int32 [n], each clip's stored frames (the rest of its row is padding).
        files: each clip's file or folder (None for the built-in set).
    """

    clips: np.ndarray | None = None
    lengths: np.ndarray | None = None
    files: list[str] | None = None


def clip_source(spec: str, class_names, clips, lengths, labels, files=None) -> ClipSource:
    """A `ClipSource` of stacked clips, their lengths and class ids."""
    indices = np.arange(len(labels), dtype=np.int32)
    stored = tf.constant(clips)  # a NumPy array gathered from in tf.data is copied each time
    return ClipSource(spec=spec, class_names=list(class_names),
                      records=lambda: tf.data.Dataset.from_tensor_slices((indices, labels)),
                      decode=lambda index: tf.gather(stored, index),
                      num_examples=len(labels), arrays=(indices, labels), clips=clips,
                      lengths=lengths, files=files)


def load_clip_source(spec: str, subset: str = "train", val_split: float = 0.0, seed: int = 0,
                     windows: Windows = Windows(), store_side: int = 64) -> ClipSource:
    """The built-in sprites' `subset`, or a folder's clips (its seeded `val_split` held out as
    'val')."""
    kind, argument = parse_spec(spec)
    if kind == BUILT_IN:
        part = "train" if subset == "train" else "val"
        clips, labels = moving_sprites(BUILT_IN_SIZES[part], BUILT_IN_FRAMES, BUILT_IN_SIDE,
                                       seed={"train": 0, "val": 1}[part])
        lengths = np.full(len(labels), BUILT_IN_FRAMES, np.int32)
        return clip_source(spec, CLASS_NAMES, clips, lengths, labels.astype(np.int32))
    clips, lengths, labels, names, files = _read_cached(argument, windows, store_side)
    train, held_out = split_indices(labels, val_split, seed)
    picked = train if subset == "train" else held_out
    return clip_source(spec, names, clips[picked], lengths[picked], labels[picked],
                       [files[index] for index in picked])


_READ: dict = {}


def _read_cached(path, windows, store_side):
    """A folder is read once per process, though its training and held-out parts are two
    sources."""
    key = (path, windows, store_side)
    if key not in _READ:
        _READ.clear()
        _READ[key] = read_folder(path, windows, store_side)
    return _READ[key]


def open_clip_data(data: str, val_data: str = "", val_split: float = 0.1, seed: int = 0,
                   windows: Windows = Windows(), store_side: int = 64) -> TrainingData:
    """Training and validation sources, chosen as every task with labels of its own chooses
    them (`open_paired_data`)."""
    def load(spec, subset, split, split_seed):
        return load_clip_source(spec, subset, split, split_seed, windows, store_side)

    return open_paired_data(load, data, val_data, val_split, seed, BUILT_IN,
                            "its held-out part")


def window_indices(length, windows: Windows, start) -> tf.Tensor:
    """int32 [frames]: the clip frames of the window starting at `start` (a clip shorter than
    the window: its frames evenly stretched over it)."""
    length = tf.cast(length, tf.int32)
    steps = tf.range(windows.frames, dtype=tf.int32)
    inside = tf.cast(start, tf.int32) + steps * windows.stride
    stretched = tf.cast(tf.round(tf.cast(steps, tf.float32) * tf.cast(length - 1, tf.float32)
                                 / max(windows.frames - 1, 1)), tf.int32)
    return tf.where(length >= windows.span, inside, stretched)


def view_starts(length, windows: Windows, views: int) -> tf.Tensor:
    """int32 [views]: evenly spaced window starts over a clip (all 0 when it is no longer than
    a window)."""
    room = tf.maximum(tf.cast(length, tf.int32) - windows.span, 0)
    fractions = tf.linspace(0.0, 1.0, views) if views > 1 else tf.constant([0.5])
    return tf.cast(tf.round(fractions * tf.cast(room, tf.float32)), tf.int32)


def resized_window(source: Source, index, indices, size) -> tf.Tensor:
    """float32 [frames, height, width, 3] in 0..255: a clip's frames at `indices`, resized."""
    frames = tf.cast(tf.gather(source.decode(index), indices), tf.float32)
    if tuple(source.clips.shape[2:4]) == tuple(size):  # stored at the model's size
        return frames
    return tf.image.resize(frames, size, antialias=True)


def eval_windows(source: Source, size, windows: Windows, views: int = 1):
    """A dataset of (float32 [views, frames, height, width, 3] in 0..255, class id)."""
    size, lengths = images.image_hw(size), tf.constant(source.lengths)

    def prepare(index, label):
        length = lengths[index]
        starts = view_starts(length, windows, views)
        clips = tf.map_fn(lambda start: resized_window(
            source, index, window_indices(length, windows, start), size), starts,
            fn_output_signature=tf.float32)
        return clips, label

    return source.records().map(prepare, num_parallel_calls=tf.data.AUTOTUNE)


def eval_dataset(source: Source, size, batch_size: int, num_classes: int, windows: Windows,
                 drop_remainder: bool = False, max_examples: int | None = None,
                 preprocessing=OFFICIAL) -> tf.data.Dataset:
    """Validation batches of each clip's middle window: (model inputs, one-hot labels)."""
    dataset = eval_windows(source, size, windows).map(lambda clips, label: (
        images.scale(clips[0], preprocessing), tf.one_hot(label, num_classes)))
    if max_examples is not None:
        dataset = dataset.take(max_examples)
    return dataset.batch(batch_size, drop_remainder=drop_remainder).prefetch(2)


def labelled_clips(source: Source, size, windows: Windows, count: int | None = None):
    """Up to `count` middle windows (float32 0..255) and their class ids."""
    pairs = eval_windows(source, size, windows).take(-1 if count is None else count)
    clips, labels = [], []
    for window, label in pairs:
        clips.append(window[0].numpy())
        labels.append(int(label))
    return np.stack(clips), np.asarray(labels, np.int64)
