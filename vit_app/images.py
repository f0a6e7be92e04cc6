"""The one image reader of `vit`: check, decode, resize and scale, for the training input
pipeline, evaluation, `vit predict`, `vit serve` and `vit inspect` alike.

The resize rule, everywhere: decode to RGB uint8 (grayscale and RGBA become RGB, a GIF gives its
first frame, a TIFF its first page; an image of more than 8 bits a sample, as microscopes and
scanners write them, is stretched from its own 1st to 99.8th percentile: `decode`), then resize
to the model's (height, width) in float32 0..255 by the rule its weights were made with
(`vit_keras.preprocessing.resize_image`: for the official weights a bilinear, antialiased,
half-pixel-centre resize of the whole image; for timm's DeiT-III, DINOv2, SigLIP and CLIP files
a bicubic resize of the shorter side and a centre crop), then normalise by the weights' mean and
std ([-1, 1] for the official ones). The SavedModel's `serve_bytes` signature decodes and
resizes the same way in its graph (`vit_keras.export.serving`), with the same pixel limit; in a
graph there is no PIL, so it reads JPEG, PNG, BMP and GIF, not TIFF.

timm's rules (bicubic) are PIL's: where files are decoded on the host (`decode_checked`:
`vit predict`, `vit serve`, `vit embed`), PIL itself decodes and resizes them, so the pixels
are those timm's own transform makes with the same Pillow. In graphs (tf.data, `serve_bytes`)
`vit_keras.preprocessing` reproduces PIL's decode and fixed-point resize in TensorFlow ops.

A file that cannot be used raises `ImageError`, whose `reason` says why in a word a caller can
act on (`vit serve` answers 413 for `too_large`, 400 for the others).
"""

from __future__ import annotations

import colorsys
import contextlib
import functools
import io
import os
import re
import warnings

import numpy as np
import tensorflow as tf

from vit_keras import preprocessing as rules
from vit_keras.preprocessing import MAX_IMAGE_PIXELS

# The rules PIL resizes by on the host, as timm does (the value: PIL's filter number)
PIL_INTERPOLATIONS = {"bicubic": 3}

# File signatures of the formats `decode` reads: TensorFlow's ops read the first five, PIL on the
# host the TIFFs (and PNGs of 16-bit samples: see `decode`).
SIGNATURES = {"jpeg": b"\xff\xd8\xff", "png": b"\x89PNG\r\n\x1a\n", "bmp": b"BM",
              "gif87": b"GIF87a", "gif89": b"GIF89a", "tiff_le": b"II*\x00", "tiff_be": b"MM\x00*"}
FORMATS = "JPEG, PNG, BMP, GIF or TIFF"
# An image of more than 8 bits a sample (16-bit, 32-bit integer or float: microscopy, medical
# scans) is stretched to 0..255 from these percentiles of its own pixels, the usual normalisation
# of microscopy: a 12-bit camera's frame stored in 16 bits would otherwise be 16 levels of near
# black, and a few hot pixels do not set the white.
HIGH_DEPTH_PERCENTILES = (1.0, 99.8)
HIGH_DEPTH_MODES = ("I", "F", "I;16", "I;16L", "I;16B", "I;16N")
PNG_BIT_DEPTH_AT = 24  # the bit depth's byte in a PNG: after the signature and IHDR's header
REASONS = ("unreadable", "not_an_image", "too_large", "corrupt", "channels")


class ImageError(ValueError):
    """An image that cannot be used.

    Attributes:
        reason: one of `REASONS`: `unreadable` (the file cannot be read), `not_an_image` (not
            JPEG/PNG/BMP/GIF/TIFF), `too_large` (over `MAX_IMAGE_PIXELS`), `corrupt` (broken or
            truncated), `channels` (a channel count the model cannot take).
    """

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def problem(data: bytes) -> tuple[str, str] | None:
    """Why `data` is not a readable JPEG/PNG/BMP/GIF/TIFF file, or None if it is.

    The format comes from the file's signature, the size from its header (a file declaring more
    than `MAX_IMAGE_PIXELS` pixels is refused before any decoding); the structure is verified
    by PIL, truncated JPEG/PNG files by their end markers. Call it inside
    `bomb_warnings_silenced()` (PIL warns about images between 1x and 2x its pixel limit, which
    this check refuses with its own message).

    Returns:
        (reason, message), the message a phrase that follows the file's name ("is a corrupt
        image (...)"), or None.
    """
    from PIL import Image

    if not data.startswith(tuple(SIGNATURES.values())):
        return "not_an_image", f"is not a {FORMATS} file"
    try:
        with warnings.catch_warnings():
            # PIL warns of a broken TIFF header's tags, the very faults refused below
            warnings.filterwarnings("ignore", category=UserWarning, module="PIL")
            image = Image.open(io.BytesIO(data))
        with image:
            width, height = image.size
            image.verify()
    except Image.DecompressionBombError as error:  # PIL refuses before reading the size out
        declared = re.search(r"\((\d+) pixels\)", str(error))
        return "too_large", (f"is too large ({declared.group(1) if declared else 'too many'} "
                             f"pixels declared); the limit is {MAX_IMAGE_PIXELS} pixels")
    except Exception as error:  # PIL raises many types for broken files
        return "corrupt", f"is a corrupt image ({type(error).__name__}: {error})"
    if width * height > MAX_IMAGE_PIXELS:
        return "too_large", (f"is too large ({width}x{height} = {width * height} pixels); the "
                             f"limit is {MAX_IMAGE_PIXELS} pixels")
    return _end_problem(data)


def _end_problem(data: bytes) -> tuple[str, str] | None:
    """PIL's verify reads neither the end markers nor BMP/GIF/TIFF pixels: check those here."""
    if data.startswith(SIGNATURES["jpeg"]) and b"\xff\xd9" not in data[-1024:]:
        return "corrupt", "is a truncated JPEG (no end-of-image marker)"
    if data.startswith(SIGNATURES["png"]) and b"IEND\xaeB`\x82" not in data[-1024:]:
        return "corrupt", "is a truncated PNG (no complete IEND chunk)"
    if read_on_host(data):  # a TIFF's strips are read only when decoded
        try:
            with warnings.catch_warnings():  # PIL warns of the very faults this refuses
                warnings.simplefilter("ignore")
                decode_on_host(data)
        except Exception as error:  # PIL raises many types for broken files
            return "corrupt", f"cannot be decoded ({type(error).__name__}: {error})"
    elif data.startswith((b"BM", b"GIF")):  # PIL reads BMP/GIF variants TensorFlow does not
        try:
            decode(tf.constant(data))
        except tf.errors.OpError as error:
            return "corrupt", ("cannot be decoded "
                               f"({error.message.split(' [Op:')[0].split('}} ')[-1]})")
    return None


def check(data: bytes, what: str = "the image") -> None:
    """Raises `ImageError` "`what` is not a JPEG, PNG, BMP, GIF or TIFF file", "... is too large
    (...)", "... is a corrupt image (...)" unless `data` is a readable image file."""
    with bomb_warnings_silenced():
        found = problem(data)
    if found:
        raise ImageError(f"{what} {found[1]}", found[0])


def file_problem(path: str) -> str | None:
    """Why the file at `path` is not a readable image (a phrase after its name), or None. Call
    it inside `bomb_warnings_silenced()`."""
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as error:
        return f"cannot be read ({error.strerror})"
    found = problem(data)
    return found[1] if found else None


def read_file(path: str) -> bytes:
    """The bytes of an image file, checked (`ImageError` names the file)."""
    if not os.path.isfile(path):
        raise ImageError(f"image file {path!r} does not exist", "unreadable")
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as error:
        raise ImageError(f"{path} cannot be read ({error.strerror})", "unreadable") from None
    check(data, path)
    return data


def pixel_size(data: bytes) -> tuple[int, int]:
    """(width, height) of a checked image file, from its header."""
    from PIL import Image

    with bomb_warnings_silenced(), Image.open(io.BytesIO(data)) as image:
        return image.size


@contextlib.contextmanager
def bomb_warnings_silenced():
    """PIL's DecompressionBombWarning silenced (this module refuses such images with its own
    message); enter it in one thread (warning filters are global)."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        yield


def decode(encoded: tf.Tensor) -> tf.Tensor:
    """Encoded JPEG/PNG/BMP/GIF/TIFF bytes -> uint8 [height, width, 3] (a GIF's first frame, a
    TIFF's first page), in TensorFlow ops (it runs in tf.data).

    TensorFlow's ops (`vit_keras.preprocessing.decode_image`) read JPEG, PNG, BMP and GIF; PIL
    reads, on the host, what they cannot or would read wrong: TIFF, and PNGs of 16-bit samples
    (which they would scale by 1/257). Such images go through `decode_on_host`, so a file of more
    than 8 bits a sample is stretched by `HIGH_DEPTH_PERCENTILES`.
    """
    image = tf.cond(_read_on_host_op(encoded),
                    lambda: tf.numpy_function(decode_on_host, [encoded], tf.uint8,
                                              stateful=False),
                    lambda: rules.decode_image(encoded))
    image.set_shape([None, None, 3])
    return image


def _read_on_host_op(encoded: tf.Tensor) -> tf.Tensor:
    """`read_on_host` in TensorFlow ops."""
    head = tf.strings.substr(tf.strings.join([encoded, b"\x00" * (PNG_BIT_DEPTH_AT + 1)]),
                             0, PNG_BIT_DEPTH_AT + 1)
    first_four = tf.strings.substr(head, 0, 4)
    tiff = tf.logical_or(tf.equal(first_four, SIGNATURES["tiff_le"]),
                         tf.equal(first_four, SIGNATURES["tiff_be"]))
    png16 = tf.logical_and(tf.equal(tf.strings.substr(head, 0, 8), SIGNATURES["png"]),
                           tf.equal(tf.strings.substr(head, PNG_BIT_DEPTH_AT, 1), b"\x10"))
    return tf.logical_or(tiff, png16)


def read_on_host(data: bytes) -> bool:
    """Whether `decode` reads `data` with PIL on the host: a TIFF, or a PNG of 16-bit samples."""
    return data.startswith((SIGNATURES["tiff_le"], SIGNATURES["tiff_be"])) or (
        data.startswith(SIGNATURES["png"]) and data[PNG_BIT_DEPTH_AT:PNG_BIT_DEPTH_AT + 1]
        == b"\x10")


def decode_on_host(data) -> np.ndarray:
    """Encoded bytes -> uint8 [height, width, 3], decoded by PIL (a TIFF's first page):
    `to_rgb8` of the image."""
    from PIL import Image

    if isinstance(data, np.ndarray):  # a string tensor, as tf.numpy_function passes it
        data = data.item()
    with bomb_warnings_silenced(), Image.open(io.BytesIO(data)) as image:
        return to_rgb8(image)


def to_rgb8(image) -> np.ndarray:
    """A PIL image -> uint8 [height, width, 3]: 8-bit images as PIL converts them to RGB (grey
    repeated, alpha dropped, a palette looked up); images of more than 8 bits a sample stretched
    from their own `HIGH_DEPTH_PERCENTILES` to 0..255, then repeated to RGB."""
    if image.mode not in HIGH_DEPTH_MODES:
        return np.asarray(image.convert("RGB"))
    return np.repeat(stretch_to_8_bits(np.asarray(image))[..., None], 3, axis=-1)


def stretch_to_8_bits(values: np.ndarray) -> np.ndarray:
    """Samples of any depth -> uint8: the `HIGH_DEPTH_PERCENTILES` of the finite values map to
    0 and 255, what lies outside is clipped (not-a-number to 0); a constant image is all 0."""
    values = values.astype(np.float64)
    finite = values[np.isfinite(values)]
    if not finite.size:
        return np.zeros(values.shape, np.uint8)
    low, high = np.percentile(finite, HIGH_DEPTH_PERCENTILES)
    if high <= low:  # most pixels equal: stretch the whole range instead
        low, high = finite.min(), finite.max()
    if high <= low:
        return np.zeros(values.shape, np.uint8)
    scaled = (np.nan_to_num(values, nan=low, posinf=high, neginf=low) - low) / (high - low)
    return np.round(np.clip(scaled, 0.0, 1.0) * 255.0).astype(np.uint8)


def decode_file(path: tf.Tensor) -> tf.Tensor:
    """An image file's path -> uint8 [height, width, 3]."""
    return decode(tf.io.read_file(path))


def image_hw(size) -> tuple[int, int]:
    """An image size given as an int (square) or (height, width), as (height, width)."""
    return (size, size) if isinstance(size, int) else (int(size[0]), int(size[1]))


def resize(image: tf.Tensor, size, preprocessing=rules.OFFICIAL) -> tf.Tensor:
    """Any uint8/float image [h, w, c] -> float32 [height, width, c] in 0..255, by the weights'
    rule (default: the official bilinear, antialiased, half-pixel-centre resize).

    Args:
        image: [h, w, c].
        size: the output size, an int (square) or (height, width).
        preprocessing: the weights' `Preprocessing`.
    """
    return rules.resize_image(image, image_hw(size), preprocessing)


def scale(images, preprocessing=rules.OFFICIAL):
    """0..255 -> model inputs: (pixels / 255 - mean) / std ([-1, 1] for the official weights),
    in TensorFlow ops (it runs in tf.data whatever the Keras backend).

    Args:
        images: float32 tensor or array [..., channels] in 0..255.
        preprocessing: the weights' rule.

    Returns:
        The normalised images.
    """
    if preprocessing.mean == rules.OFFICIAL.mean and preprocessing.std == rules.OFFICIAL.std:
        return images / 127.5 - 1.0
    mean, factor = rules.pixel_mean_and_scale(preprocessing)
    return (images - tf.constant(mean, tf.float32)) * tf.constant(factor, tf.float32)


def read_images(files, size, channels: int = 3, names=None,
                preprocessing=rules.OFFICIAL) -> np.ndarray:
    """Encoded image files -> float32 [n, height, width, channels] in 0..255, each checked,
    decoded and resized by the rule above.

    Args:
        files: each file's bytes.
        size: (height, width) (or an int) to resize to.
        channels: 3 (RGB) or 1 (grey: ITU-R 601 luma of the RGB image).
        names: what errors call each file (its path, "instance 3:"); default "image <i>".
        preprocessing: the weights' rule for the resize (and crop).

    Returns:
        The images, in the order of `files`.

    Raises:
        ImageError: a file that cannot be used, or a channel count other than 1 or 3.
    """
    names = names if names is not None else [f"image {index}" for index in range(len(files))]
    for data, name in zip(files, names):
        check(data, name)
    return decode_checked(files, size, channels, names, preprocessing)


def load_files(paths, size, channels: int = 3, preprocessing=rules.OFFICIAL) -> np.ndarray:
    """`read_images` of image files given by path (errors name the file)."""
    return decode_checked([read_file(path) for path in paths], size, channels, list(paths),
                          preprocessing)


def decode_checked(files, size, channels: int = 3, names=None,
                   preprocessing=rules.OFFICIAL) -> np.ndarray:
    """`read_images` for files that already passed `check` (a server checks each request's
    files as it parses them)."""
    if channels not in (1, 3):
        raise ImageError(f"images are read with 1 or 3 channels, the model wants {channels}",
                         "channels")
    if channels == 3 and preprocessing.interpolation in PIL_INTERPOLATIONS:
        decode_one = functools.partial(_decode_with_pil, size=image_hw(size),
                                       preprocessing=preprocessing)
    else:
        compiled = _compiled_decoder(image_hw(size), channels, preprocessing)

        def decode_one(data):
            return compiled(tf.constant(data)).numpy()
    images = []
    for index, data in enumerate(files):
        try:
            images.append(decode_one(data))
        except (tf.errors.OpError, OSError) as error:  # passed `check`, fails to decode
            name = names[index] if names is not None else f"image {index}"
            said = _op_error_text(error) if isinstance(error, tf.errors.OpError) else str(error)
            raise ImageError(f"{name} cannot be decoded ({said})", "corrupt") from None
    return np.stack(images).astype(np.float32)


def decode_native(data: bytes) -> np.ndarray:
    """One checked file -> float32 [height, width, 3] in 0..255 at its own size, by the one
    reader training uses (`decode`), so a model sees the pixels it was trained on."""
    return decode(tf.constant(data)).numpy().astype(np.float32)


def _decode_with_pil(data: bytes, size: tuple[int, int], preprocessing) -> np.ndarray:
    """One checked file -> float32 [height, width, 3], decoded, resized and cropped by PIL as
    timm's eval transform does (`torchvision`'s Resize and CenterCrop on a PIL image)."""
    from PIL import Image

    with bomb_warnings_silenced(), Image.open(io.BytesIO(data)) as image:
        rgb = Image.fromarray(to_rgb8(image))
    (height, width), (top, left) = rules.resize_plan(rgb.height, rgb.width, size, preprocessing)
    resized = rgb.resize((width, height), PIL_INTERPOLATIONS[preprocessing.interpolation])
    return np.asarray(resized, np.float32)[top:top + size[0], left:left + size[1]]


def _op_error_text(error: tf.errors.OpError) -> str:
    """What a TensorFlow op said (e.g. "Invalid PNG. Failed to initialize decoder."), without
    the graph's call stack and node names around it."""
    lines = [line.strip() for line in error.message.splitlines()]
    said = [line for line in lines if line and not line.startswith(("[[", "File ", "Detected at",
                                                                     "Graph execution error"))]
    text = said[-1] if said else error.message
    return re.sub(r"\s*\[Op:[^\]]*\].*$", "", re.sub(r"^\{\{[^}]*\}\}\s*", "", text))


def prepare_decoder(size, channels: int = 3, preprocessing=rules.OFFICIAL) -> None:
    """Traces and runs once the graph `decode_checked` runs for these arguments (about half a
    second, mostly TensorFlow optimising the graph on its first run), so that the first file
    does not wait for it."""
    blank = tf.io.encode_png(tf.zeros([2, 2, 3], tf.uint8))
    _compiled_decoder(image_hw(size), channels, preprocessing)(blank)


@functools.lru_cache(maxsize=16)
def _compiled_decoder(size: tuple[int, int], channels: int, preprocessing):
    """Encoded file -> float32 [height, width, channels] as one TensorFlow graph: the dozen
    eager ops of a decode and resize cost about ten times the graph's single call, which a
    server decoding every request pays."""

    @tf.function(input_signature=[tf.TensorSpec([], tf.string)])
    def decode_one(data):
        image = resize(decode(data), size, preprocessing)
        return tf.image.rgb_to_grayscale(image) if channels == 1 else image

    return decode_one


def palette(num_classes: int) -> np.ndarray:
    """uint8 [256, 3]: black for class 0 (background), well-spread hues for the others, grey
    for 255 (ignore)."""
    colours = np.zeros((256, 3), np.uint8)
    for index in range(1, num_classes):
        hue = (index * 0.618033988749895) % 1.0  # golden-ratio steps keep neighbours apart
        colours[index] = np.round(np.array(colorsys.hsv_to_rgb(hue, 0.75, 0.95)) * 255)
    colours[255] = (128, 128, 128)
    return colours
