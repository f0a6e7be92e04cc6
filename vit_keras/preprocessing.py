"""How images become model inputs for a set of weights: `Preprocessing` travels with the weights.

Every release was trained on pixels prepared one way: the official ViTs and SigLIP on [-1, 1]
(mean = std = 0.5), DeiT and DINOv2 on ImageNet statistics, CLIP on its own. A model carries its
`Preprocessing` beside its `ViTConfig` (`model.preprocessing`, saved as its own entry of the
`.keras` file and of `export.json`); `preprocess_input(images, model=...)`, `vit predict`,
`vit serve`, `vit evaluate`, `vit train` and the exported graphs all read it there.

The resize rule of each crop mode, for a model input of (height, width):
- 'squash' (the official evaluation): the whole image is resized to (height, width).
- 'center' (timm's evaluation transform): the shorter side is resized to
  floor(side / crop_fraction), the longer one keeping the aspect ratio, then the centre
  (height, width) is cut out.
- 'native' (a segmenter trained on crops at the images' own resolution, taking any size):
  images keep their own size; `vit predict`, `vit evaluate` and `vit serve` segment them whole
  or in overlapping windows (`vit_keras.tasks.segment.windows`). Where a fixed size is needed
  all the same (an export's sample images), the whole image is resized, as 'squash'.
Means and standard deviations apply to pixels scaled to [0, 1].
"""

from __future__ import annotations

import dataclasses
import math
import numbers

INTERPOLATIONS = ("bilinear", "bicubic", "nearest")
# Largest image decoded anywhere (width x height, PIL's bomb limit): training data, `vit
# predict`, `vit serve` and a SavedModel's serve_bytes. A few-kB PNG can declare 20000x20000
# pixels, which would take 1.2 GB to decode.
MAX_IMAGE_PIXELS = 89_478_485
CROP_MODES = ("squash", "center", "native")


def _triple(name: str, values) -> tuple[float, float, float]:
    if isinstance(values, numbers.Real) and not isinstance(values, bool):
        values = (values,) * 3
    try:
        result = tuple(float(value) for value in values)
    except (TypeError, ValueError):
        result = ()
    if len(result) != 3:
        raise ValueError(f"preprocessing {name} must be a number or 3 numbers (R, G, B), got "
                         f"{values!r}")
    return result


@dataclasses.dataclass(frozen=True)
class Preprocessing:
    """The input preparation a set of weights was trained with.

    Attributes:
        mean: per-channel (R, G, B) mean of pixels scaled to [0, 1].
        std: per-channel standard deviation, all positive.
        interpolation: 'bilinear' (official), 'bicubic' (timm, CLIP, DINOv2) or 'nearest'.
            Downscaling is antialiased, as PIL does.
        crop_fraction: 'center' mode: the fraction of the resized shorter side kept (timm's
            `crop_pct`, e.g. 0.875); 1.0 keeps all of it.
        crop_mode: 'squash' (resize the whole image to the model's size), 'center' (resize
            the shorter side, then cut out the centre) or 'native' (images at their own
            size); see the module docstring.
    """

    mean: tuple[float, float, float] = (0.5, 0.5, 0.5)
    std: tuple[float, float, float] = (0.5, 0.5, 0.5)
    interpolation: str = "bilinear"
    crop_fraction: float = 1.0
    crop_mode: str = "squash"

    def __post_init__(self):
        object.__setattr__(self, "mean", _triple("mean", self.mean))
        object.__setattr__(self, "std", _triple("std", self.std))
        if min(self.std) <= 0:
            raise ValueError(f"preprocessing std must be positive, got {self.std}")
        if self.interpolation not in INTERPOLATIONS:
            raise ValueError(f"preprocessing interpolation must be one of {INTERPOLATIONS}, got "
                             f"{self.interpolation!r}")
        if self.crop_mode not in CROP_MODES:
            raise ValueError(f"preprocessing crop_mode must be one of {CROP_MODES}, got "
                             f"{self.crop_mode!r}")
        fraction = self.crop_fraction
        if isinstance(fraction, bool) or not isinstance(fraction, numbers.Real) or \
                not 0.0 < fraction <= 1.0:
            raise ValueError(f"preprocessing crop_fraction must be in (0, 1], got {fraction!r}")
        object.__setattr__(self, "crop_fraction", float(fraction))

    def to_dict(self) -> dict:
        """A JSON-friendly dict; `Preprocessing.from_dict` inverts it."""
        data = dataclasses.asdict(self)
        data.update(mean=list(self.mean), std=list(self.std))
        return data

    @classmethod
    def from_dict(cls, data) -> "Preprocessing":
        """Builds one from `to_dict` output.

        Args:
            data: a dict of the fields, or a `Preprocessing` (returned as it is).

        Returns:
            The `Preprocessing`.

        Raises:
            ValueError: not a dict, unknown fields or invalid values.
        """
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            raise ValueError(f"preprocessing must be a Preprocessing or a dict of its fields, got "
                             f"{data!r}")
        fields = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise ValueError(f"unknown preprocessing field(s) {unknown}; expected some of "
                             f"{sorted(fields)}")
        return cls(**data)

    def check_for(self, config) -> "Preprocessing":
        """This rule, checked against the model it prepares images for (a `ViTConfig`).

        Raises:
            ValueError: per-channel values on a model that is not RGB, or images kept at
                their own size ('native') for a model of one fixed size.
        """
        channels = config.channels
        if channels != 3 and (len(set(self.mean)) > 1 or len(set(self.std)) > 1):
            raise ValueError(f"a {channels}-channel model needs one preprocessing mean and "
                             f"std for every channel, got mean={self.mean}, std={self.std} "
                             "(per-channel values are for RGB)")
        if self.native and not config.dynamic_image_size:
            raise ValueError("preprocessing crop 'native' keeps images at their own size, which "
                             "needs a model taking any size (dynamic_image_size=True); got a "
                             f"model of {config.image_hw[0]}x{config.image_hw[1]} only")
        return self

    @property
    def resizes_whole(self) -> bool:
        """Whether an image resized to a fixed size keeps all of it ('squash', and 'native'
        where a fixed size is needed)."""
        return self.crop_mode != "center"

    @property
    def native(self) -> bool:
        """Whether images keep their own size (a segmenter trained at their resolution)."""
        return self.crop_mode == "native"

    def describe(self) -> str:
        """A short human-readable summary, e.g. 'mean 0.5, std 0.5, bilinear, squash'."""
        def numbers_of(values):
            return (f"{values[0]:g}" if len(set(values)) == 1
                    else "(" + ", ".join(f"{value:g}" for value in values) + ")")

        crop = (f"centre crop {self.crop_fraction:g}" if self.crop_mode == "center"
                else self.crop_mode)
        return f"mean {numbers_of(self.mean)}, std {numbers_of(self.std)}, " \
               f"{self.interpolation}, {crop}"


OFFICIAL = Preprocessing()
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


# Preprocessing by name, for a weights file that does not say what it expects (`vit ...
# --preprocessing NAME`): the official [-1, 1] (Inception-style), timm's ImageNet default
# (DeiT, most ImageNet-1k classifiers) and OpenAI CLIP's.
NAMED = {
    "inception": OFFICIAL,
    "official": OFFICIAL,
    "imagenet": Preprocessing(IMAGENET_MEAN, IMAGENET_STD, "bicubic", 0.875, "center"),
    "clip": Preprocessing(CLIP_MEAN, CLIP_STD, "bicubic", 1.0, "center"),
}
PREPROCESSING_SYNTAX = ("a name (inception = the official [-1, 1], imagenet, clip), then or "
                        "instead KEY=VALUE changes separated by commas: mean=R/G/B, std=R/G/B "
                        "(of pixels in [0, 1]), interpolation=bilinear|bicubic|nearest, "
                        "crop=FRACTION (resize the shorter side, keep the centre) or "
                        "crop=squash (resize the whole image); e.g. 'imagenet,crop=1.0'")


def parse_preprocessing(text: str) -> Preprocessing:
    """The `Preprocessing` a command line names (`PREPROCESSING_SYNTAX`).

    Args:
        text: 'imagenet', 'clip', 'inception', 'imagenet,crop=1.0' or
            'mean=0.5/0.5/0.5,std=0.5/0.5/0.5,interpolation=bicubic,crop=squash' (changes of
            the official rule).

    Returns:
        The `Preprocessing`.

    Raises:
        ValueError: an unknown name or key, or a bad value (the message gives the syntax).
    """
    items = [item.strip() for item in text.split(",") if item.strip()]
    base = OFFICIAL
    if items and "=" not in items[0]:
        name = items.pop(0).lower()
        if name not in NAMED:
            raise ValueError(f"preprocessing {text!r}: unknown name {name!r}; expected "
                             f"{PREPROCESSING_SYNTAX}")
        base = NAMED[name]
    fields = base.to_dict()
    for item in items:
        key, _, value = item.partition("=")
        key, value = key.strip().lower(), value.strip()
        if key in ("mean", "std"):
            parts = [_number(part, text) for part in value.split("/")]
            fields[key] = parts[0] if len(parts) == 1 else tuple(parts)
        elif key == "interpolation":
            fields[key] = value
        elif key == "crop" and value.lower() in CROP_MODES:
            fields.update(crop_mode=value.lower(), crop_fraction=1.0)
        elif key == "crop":
            fields.update(crop_mode="center", crop_fraction=_number(value, text))
        else:
            raise ValueError(f"preprocessing {text!r}: unknown key {key!r}; expected "
                             f"{PREPROCESSING_SYNTAX}")
    return Preprocessing.from_dict(fields)


def _number(value: str, text: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise ValueError(f"preprocessing {text!r}: {value!r} is not a number") from None


def resize_plan(height: int, width: int, target, preprocessing: Preprocessing):
    """Where an image of (height, width) is resized to and cropped, for a model input `target`.

    Args:
        height, width: the decoded image's size.
        target: the model's (height, width).
        preprocessing: the weights' rule.

    Returns:
        ((resized height, resized width), (top, left)) of the crop of size `target`.
    """
    out_h, out_w = target
    fraction = preprocessing.crop_fraction
    resized = (math.floor(out_h / fraction), math.floor(out_w / fraction))
    if _keeps_aspect(target, preprocessing):
        # timm (torchvision's Resize(int)): the shorter side to floor(size / crop_pct), the
        # longer one truncated so the aspect ratio is kept.
        short = resized[0]
        resized = ((short, int(short * width / height)) if height <= width
                   else (int(short * height / width), short))
    return resized, (int(round((resized[0] - out_h) / 2.0)),
                     int(round((resized[1] - out_w) / 2.0)))


def _keeps_aspect(target, preprocessing: Preprocessing) -> bool:
    """'center' mode on a square input keeps the aspect ratio; on a non-square input timm
    resizes both sides (by the crop fraction), as 'squash' does, then crops."""
    return preprocessing.crop_mode == "center" and target[0] == target[1]


def normalize(images, preprocessing: Preprocessing = OFFICIAL):
    """RGB pixels in 0..255 -> model inputs: (pixels / 255 - mean) / std, float32.

    Args:
        images: array or tensor [..., 3] (any leading shape), values in [0, 255].
        preprocessing: the weights' rule (default: the official [-1, 1]).

    Returns:
        float32 tensor of the same shape.
    """
    from keras import ops

    images = ops.cast(images, "float32")
    if preprocessing.mean == OFFICIAL.mean and preprocessing.std == OFFICIAL.std:
        return (images - 127.5) / 127.5  # [-1, 1], bit for bit as before
    mean, scale = pixel_mean_and_scale(preprocessing)
    return (images - ops.convert_to_tensor(mean, "float32")) * \
        ops.convert_to_tensor(scale, "float32")


def pixel_mean_and_scale(preprocessing: Preprocessing):
    """The normalisation in 0..255 units: (pixels - mean) * scale.

    Args:
        preprocessing: the weights' rule.

    Returns:
        (mean, scale): floats when every channel shares them (so they also fit a 1-channel
        model), else lists of 3.
    """
    mean = [255.0 * value for value in preprocessing.mean]
    scale = [1.0 / (255.0 * value) for value in preprocessing.std]
    if len(set(mean)) == 1 and len(set(scale)) == 1:
        return mean[0], scale[0]
    return mean, scale


def decode_image(encoded, channels: int = 3):
    """Encoded JPEG/PNG/BMP/GIF bytes -> uint8 [height, width, channels] (a GIF's first frame),
    as PIL decodes them (what timm's transforms read): a JPEG through the accurate integer
    DCT, which TensorFlow's default (the fast one) misses by a level on average. TensorFlow
    ops: it runs in tf.data and in exported graphs."""
    import tensorflow as tf

    def jpeg():
        return tf.io.decode_jpeg(encoded, channels=channels, dct_method="INTEGER_ACCURATE")

    def other():
        return tf.io.decode_image(encoded, channels=channels, expand_animations=False)

    image = tf.cond(tf.io.is_jpeg(encoded), jpeg, other)
    image.set_shape([None, None, channels])
    return image


def resize_image(image, size, preprocessing: Preprocessing = OFFICIAL):
    """One decoded image [h, w, c] -> float32 [height, width, c] in 0..255, by the rule of
    `preprocessing` (TensorFlow ops: it runs in tf.data and in exported graphs).

    Args:
        image: uint8 or float tensor [h, w, c]; its size may be unknown until run time.
        size: the model's (height, width).
        preprocessing: the weights' rule.

    Returns:
        The resized (and cropped) image, clipped to [0, 255].
    """
    import tensorflow as tf

    out_h, out_w = size
    image = tf.cast(image, tf.float32)
    cropped = not (preprocessing.resizes_whole and preprocessing.crop_fraction == 1.0)
    resized_hw, offsets = (out_h, out_w), None
    if cropped:
        resized_hw, offsets = _dynamic_plan(tf.shape(image)[0], tf.shape(image)[1], size,
                                            preprocessing)
    if preprocessing.interpolation == "bicubic":
        image = _resize_as_pil(image, resized_hw)
    else:
        image = tf.image.resize(image, resized_hw, method=preprocessing.interpolation,
                                antialias=preprocessing.interpolation != "nearest")
    if cropped:
        image = tf.slice(image, [offsets[0], offsets[1], 0], [out_h, out_w, -1])
        image = tf.ensure_shape(image, [out_h, out_w, None])
    return tf.clip_by_value(image, 0.0, 255.0)


def _resize_as_pil(image, size):
    """Bicubic resize exactly as PIL does it, which timm's transforms run: PIL's fixed-point
    resampling (`pil_coefficients`), the width first, then the height, each pass giving 8-bit
    values. Sums of 8-bit pixels times 22-bit coefficients are exact in float64."""
    import tensorflow as tf

    image = tf.round(tf.cast(image, tf.float64))
    image = _pil_pass(image, size[1], axis=1)
    image = _pil_pass(image, size[0], axis=0)
    return tf.cast(image, tf.float32)


def _pil_pass(image, out_size, axis: int):
    """One of PIL's two passes along `axis` (0: rows, 1: columns) of [h, w, c] float64."""
    import tensorflow as tf

    indices, weights = pil_coefficients(tf.shape(image)[axis], out_size)
    rounding = float(1 << (PIL_PRECISION_BITS - 1))

    def add_tap(tap, total):
        taken = tf.gather(image, indices[:, tap], axis=axis)
        weight = weights[:, tap]
        weight = weight[None, :, None] if axis == 1 else weight[:, None, None]
        return tap + 1, total + taken * weight

    shape = tf.tensor_scatter_nd_update(tf.shape(image), [[axis]], [out_size])
    _, total = tf.while_loop(lambda tap, _: tap < tf.shape(weights)[1], add_tap,
                             (tf.constant(0), tf.fill(shape, tf.constant(rounding, tf.float64))))
    return tf.clip_by_value(tf.floor(total / float(1 << PIL_PRECISION_BITS)), 0.0, 255.0)


PIL_PRECISION_BITS = 22  # Pillow's Resample.c for 8-bit images: 32 - 8 - 2


def _bicubic(x):
    """Pillow's bicubic filter (a = -0.5), its operations in its order."""
    import tensorflow as tf

    x = tf.abs(x)
    a = -0.5
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return tf.where(x < 1.0, near, tf.where(x < 2.0, far, tf.zeros_like(x)))


def pil_coefficients(in_size, out_size):
    """Pillow's resampling taps for one axis (`precompute_coeffs`, then its 8-bit fixed point).

    Args:
        in_size, out_size: int32 scalars (tensors or ints).

    Returns:
        (indices int32 [out, taps] of the input pixels, clipped into range; weights float64
        [out, taps], the integer coefficients, 0 for unused taps).
    """
    import tensorflow as tf

    in_f = tf.cast(in_size, tf.float64)
    scale = in_f / tf.cast(out_size, tf.float64)
    filterscale = tf.maximum(scale, 1.0)
    support = 2.0 * filterscale
    taps = tf.cast(tf.math.ceil(support), tf.int32) * 2 + 1
    center = (tf.cast(tf.range(out_size), tf.float64) + 0.5) * scale
    first = tf.maximum(tf.floor(center - support + 0.5), 0.0)
    last = tf.minimum(tf.floor(center + support + 0.5), in_f)
    offsets = tf.cast(tf.range(taps), tf.float64)
    positions = first[:, None] + offsets[None, :]
    used = positions < last[:, None]
    weights = tf.where(used, _bicubic((positions - center[:, None] + 0.5) * (1.0 / filterscale)),
                       tf.zeros_like(positions))
    total = tf.foldl(lambda running, column: running + column, tf.transpose(weights),
                     initializer=tf.zeros_like(center))  # summed in Pillow's order
    weights = weights / tf.where(total != 0.0, total, tf.ones_like(total))[:, None]
    fixed = weights * float(1 << PIL_PRECISION_BITS)
    weights = tf.where(fixed < 0, -tf.floor(0.5 - fixed), tf.floor(0.5 + fixed))
    indices = tf.cast(tf.minimum(positions, in_f - 1.0), tf.int32)
    return indices, tf.where(used, weights, tf.zeros_like(weights))


def _dynamic_plan(height, width, size, preprocessing: Preprocessing):
    """`resize_plan` with the image size as run-time int32 tensors."""
    import tensorflow as tf

    (fixed_h, fixed_w), _ = resize_plan(1, 1, size, preprocessing)
    if _keeps_aspect(size, preprocessing):
        short = tf.constant(fixed_h, tf.float64)
        h, w = tf.cast(height, tf.float64), tf.cast(width, tf.float64)
        resized = tf.cast(tf.stack([tf.where(h <= w, short, tf.floor(short * h / w)),
                                    tf.where(h <= w, tf.floor(short * w / h), short)]), tf.int32)
    else:
        resized = tf.constant([fixed_h, fixed_w], tf.int32)
    excess = tf.cast(resized - tf.constant(list(size), tf.int32), tf.float64)
    offsets = tf.cast(tf.round(excess / 2.0), tf.int32)
    return resized, (offsets[0], offsets[1])
