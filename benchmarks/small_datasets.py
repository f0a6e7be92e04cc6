"""Small labelled image sets built offline from installed packages, for benchmarks/small_data.py.

- `digits`: scikit-learn's 1797 8x8 digits (0..16 scaled to 0..255), grey.
- `glyphs`: the digits 0-9 drawn in the 22 TrueType fonts matplotlib ships (DejaVu Sans, Serif
  and Mono, STIX, Computer Modern; upright, bold, italic), at random sizes, angles and offsets,
  28x28 grey: an MNIST-like set of 3000 images.
- `shapes`: ten shapes (circle, ring, triangle, square, pentagon, hexagon, star, cross,
  crescent, half disc) in random colours, sizes, angles and places on noisy backgrounds, 32x32
  RGB, 4000 images.
- `photos`: real colour photographs, ten classes, one per photograph that scikit-image and
  scikit-learn ship (an astronaut, a cat, a coffee cup, the Hubble deep field, a stained tissue
  slide, a motorcycle, a retina, a rocket, a Chinese temple, a flower). An example is a square
  crop of 12-30% of the photograph's shorter side, at a random place, randomly mirrored, with
  brightness and contrast jittered by up to 20%, resized to `size` px. Training crops come from
  the first 70% of each photograph (along its longer side), test crops from the other 30%, so a
  model must recognise parts of a scene it never saw, not crops overlapping its training crops.
- `faces`: scikit-image's `lfw_subset`, 100 faces from Labeled Faces in the Wild and 100
  patches of the same photographs without one, 25x25 grey: 200 real photographs.

Each set is made from a seed, split stratified into train/test (the photos: by region) and
written as PNG folders `<root>/<name>/{train,test}/<class>/<index>.png`, the layout
`vit train --data folder:` reads.
"""

from __future__ import annotations

import math
import os

import numpy as np
from PIL import Image, ImageDraw, ImageFilter, ImageFont

SHAPES = ("circle", "ring", "triangle", "square", "pentagon", "hexagon", "star", "cross",
          "crescent", "half_disc")
GLYPH_FONTS = ("DejaVuSans", "DejaVuSans-Bold", "DejaVuSans-Oblique", "DejaVuSans-BoldOblique",
               "DejaVuSansMono", "DejaVuSansMono-Bold", "DejaVuSansMono-Oblique",
               "DejaVuSansMono-BoldOblique", "DejaVuSerif", "DejaVuSerif-Bold",
               "DejaVuSerif-Italic", "DejaVuSerif-BoldItalic", "STIXGeneral", "STIXGeneralBol",
               "STIXGeneralItalic", "STIXGeneralBolIta", "cmr10", "cmb10", "cmss10", "cmtt10",
               "cmti10", "DejaVuSansDisplay")


def digits() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """scikit-learn's digits as ([n, 8, 8] uint8, labels, class names)."""
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    images = np.round(images.reshape(-1, 8, 8) * (255.0 / 16.0)).astype(np.uint8)
    return images, labels, [str(label) for label in range(10)]


def _font_files() -> list[str]:
    import matplotlib

    folder = os.path.join(matplotlib.get_data_path(), "fonts", "ttf")
    return [os.path.join(folder, f"{name}.ttf") for name in GLYPH_FONTS]


def glyphs(count: int = 3000, seed: int = 0, size: int = 28) -> tuple[np.ndarray, np.ndarray,
                                                                         list[str]]:
    """Digits drawn in matplotlib's fonts as ([n, size, size] uint8, labels, class names)."""
    rng = np.random.default_rng(seed)
    fonts = _font_files()
    labels = np.arange(count) % 10
    rng.shuffle(labels)
    images = np.stack([_glyph(str(label), fonts[rng.integers(len(fonts))], rng, size)
                       for label in labels])
    return images, labels, [str(label) for label in range(10)]


def _glyph(text: str, font_file: str, rng: np.random.Generator, size: int) -> np.ndarray:
    canvas = 3 * size
    font = ImageFont.truetype(font_file, int(rng.integers(int(1.5 * size), int(2.2 * size))))
    image = Image.new("L", (canvas, canvas), 0)
    draw = ImageDraw.Draw(image)
    left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
    offset = rng.normal(0, 0.06 * canvas, 2)
    draw.text(((canvas - right - left) / 2 + offset[0], (canvas - bottom - top) / 2 + offset[1]),
              text, fill=255, font=font)
    image = image.rotate(float(rng.uniform(-15, 15)), resample=Image.BILINEAR)
    pixels = np.asarray(image.resize((size, size), Image.LANCZOS), np.float32)
    pixels = pixels * rng.uniform(0.7, 1.0) + rng.normal(0, 8, pixels.shape)
    return np.clip(pixels, 0, 255).astype(np.uint8)


def shapes(count: int = 4000, seed: int = 0, size: int = 32) -> tuple[np.ndarray, np.ndarray,
                                                                        list[str]]:
    """Ten shapes on noisy backgrounds as ([n, size, size, 3] uint8, labels, class names)."""
    rng = np.random.default_rng(seed)
    labels = np.arange(count) % len(SHAPES)
    rng.shuffle(labels)
    images = np.stack([_shape(SHAPES[label], rng, size) for label in labels])
    return images, labels, list(SHAPES)


def _polygon(corners: int, centre, radius: float, angle: float, inner: float | None = None):
    points = []
    steps = corners * (2 if inner else 1)
    for index in range(steps):
        r = radius if inner is None or index % 2 == 0 else radius * inner
        theta = angle + 2 * math.pi * index / steps
        points.append((centre[0] + r * math.cos(theta), centre[1] + r * math.sin(theta)))
    return points


def _shape(name: str, rng: np.random.Generator, size: int) -> np.ndarray:
    scale = 4  # drawn 4x larger, then down-sampled: smooth edges
    canvas = size * scale
    background = rng.integers(0, 256, 3)
    colour = tuple(int(c) for c in (background + rng.integers(80, 176, 3)) % 256)
    image = Image.new("RGB", (canvas, canvas), tuple(int(c) for c in background))
    draw = ImageDraw.Draw(image)
    radius = rng.uniform(0.22, 0.42) * canvas
    centre = rng.uniform(radius, canvas - radius, 2)
    _draw_shape(draw, name, centre, radius, rng.uniform(0, 2 * math.pi), colour,
                tuple(int(c) for c in background))
    image = image.filter(ImageFilter.GaussianBlur(scale / 2)).resize((size, size), Image.BOX)
    pixels = np.asarray(image, np.float32) + rng.normal(0, 12, (size, size, 3))
    return np.clip(pixels, 0, 255).astype(np.uint8)


def _draw_shape(draw, name, centre, radius, angle, colour, background) -> None:
    x, y = centre
    box = (x - radius, y - radius, x + radius, y + radius)
    corners = {"triangle": 3, "square": 4, "pentagon": 5, "hexagon": 6}
    if name in corners:
        draw.polygon(_polygon(corners[name], centre, radius, angle), fill=colour)
    elif name == "circle":
        draw.ellipse(box, fill=colour)
    elif name == "ring":
        draw.ellipse(box, fill=colour)
        inner = 0.55 * radius
        draw.ellipse((x - inner, y - inner, x + inner, y + inner), fill=background)
    elif name == "star":
        draw.polygon(_polygon(5, centre, radius, angle, inner=0.45), fill=colour)
    elif name == "cross":
        arm = 0.3 * radius
        for theta in (angle, angle + math.pi / 2):
            dx, dy = math.cos(theta), math.sin(theta)
            draw.polygon([(x + radius * dx - arm * dy, y + radius * dy + arm * dx),
                          (x + radius * dx + arm * dy, y + radius * dy - arm * dx),
                          (x - radius * dx + arm * dy, y - radius * dy - arm * dx),
                          (x - radius * dx - arm * dy, y - radius * dy + arm * dx)], fill=colour)
    elif name == "crescent":
        draw.ellipse(box, fill=colour)
        shift = 0.5 * radius
        cx, cy = x + shift * math.cos(angle), y + shift * math.sin(angle)
        draw.ellipse((cx - radius, cy - radius, cx + radius, cy + radius), fill=background)
    else:  # half_disc
        degrees = math.degrees(angle)
        draw.pieslice(box, degrees, degrees + 180, fill=colour)


PHOTOS = (("skimage", "astronaut"), ("skimage", "chelsea"), ("skimage", "coffee"),
          ("skimage", "hubble_deep_field"), ("skimage", "immunohistochemistry"),
          ("skimage", "stereo_motorcycle"), ("skimage", "retina"), ("skimage", "rocket"),
          ("sklearn", "china.jpg"), ("sklearn", "flower.jpg"))
PHOTO_TRAIN_REGION = 0.7   # of each photograph's longer side; the rest is the test region
PHOTO_CROP_SIDES = (0.12, 0.30)   # of the shorter side
PHOTO_JITTER = 0.2


def _photographs() -> list[tuple[str, np.ndarray]]:
    """(name, uint8 [h, w, 3]) of each photograph in `PHOTOS`."""
    import skimage.data
    from sklearn.datasets import load_sample_image

    loaded = []
    for package, name in PHOTOS:
        pixels = getattr(skimage.data, name)() if package == "skimage" else \
            load_sample_image(name)
        if isinstance(pixels, tuple):  # the stereo pair and its disparity: the left view
            pixels, name = pixels[0], "motorcycle"
        loaded.append((name.split(".")[0], np.asarray(pixels)[..., :3]))
    return loaded


def photos(count: int = 600, seed: int = 0, size: int = 64, test_fraction: float = 0.25
           ) -> tuple[np.ndarray, np.ndarray, list[str], np.ndarray]:
    """Crops of real photographs (see the module docstring) as ([n, size, size, 3] uint8,
    labels, class names, test mask): `count` training crops and `count * test_fraction /
    (1 - test_fraction)` test crops, classes balanced."""
    rng = np.random.default_rng(seed)
    pictures = _photographs()
    test_count = int(round(count * test_fraction / (1 - test_fraction)))
    images, labels, tested = [], [], []
    for is_test, total in ((False, count), (True, test_count)):
        for index in range(total):
            label = index % len(pictures)
            images.append(_photo_crop(pictures[label][1], rng, size, is_test))
            labels.append(label)
            tested.append(is_test)
    return (np.stack(images), np.array(labels), [name for name, _ in pictures],
            np.array(tested))


def _photo_crop(picture: np.ndarray, rng: np.random.Generator, size: int,
                test_region: bool) -> np.ndarray:
    """One jittered, maybe mirrored square crop from the training or the test region."""
    height, width = picture.shape[:2]
    along_width = width >= height
    long_side = width if along_width else height
    cut = int(long_side * PHOTO_TRAIN_REGION)
    start, stop = (cut, long_side) if test_region else (0, cut)
    short_side = min(height, width)
    side = int(short_side * rng.uniform(*PHOTO_CROP_SIDES))
    side = min(side, stop - start)
    offset_long = int(rng.integers(start, stop - side + 1))
    offset_short = int(rng.integers(0, short_side - side + 1))
    top, left = (offset_short, offset_long) if along_width else (offset_long, offset_short)
    crop = Image.fromarray(picture[top:top + side, left:left + side])
    crop = crop.resize((size, size), Image.BICUBIC)
    if rng.random() < 0.5:
        crop = crop.transpose(Image.FLIP_LEFT_RIGHT)
    pixels = np.asarray(crop).astype(np.float32)
    mean = pixels.mean()
    contrast = 1 + rng.uniform(-PHOTO_JITTER, PHOTO_JITTER)
    brightness = 1 + rng.uniform(-PHOTO_JITTER, PHOTO_JITTER)
    return np.clip((pixels - mean) * contrast + mean * brightness, 0, 255).astype(np.uint8)


def faces() -> tuple[np.ndarray, np.ndarray, list[str]]:
    """scikit-image's `lfw_subset`: 100 faces from Labeled Faces in the Wild and 100 patches of
    the same photographs without a face, 25x25 grey, as ([200, 25, 25] uint8, labels, class
    names)."""
    import skimage.data

    pixels = np.asarray(skimage.data.lfw_subset())
    images = np.round(pixels * 255).astype(np.uint8)
    labels = np.repeat([0, 1], len(images) // 2)  # the first half are the faces
    return images, labels, ["face", "not_face"]


BUILDERS = {"digits": digits, "glyphs": glyphs, "shapes": shapes, "photos": photos,
            "faces": faces}


def split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Stratified (train, test) indices."""
    from sklearn.model_selection import train_test_split

    indices = np.arange(len(labels))
    train, test = train_test_split(indices, test_size=test_fraction, stratify=labels,
                                   random_state=seed)
    return np.sort(train), np.sort(test)


def write_folders(root: str, images: np.ndarray, labels: np.ndarray, class_names: list[str],
                  test_fraction: float = 0.25, seed: int = 0, parts=None) -> tuple[str, str]:
    """Writes a stratified split (or `parts`: given (train, test) indices) as train/ and
    test/ PNG folders; returns both paths."""
    folders = []
    for part, indices in zip(("train", "test"), parts or split(labels, test_fraction, seed)):
        folder = os.path.join(root, part)
        for index in indices:
            class_folder = os.path.join(folder, class_names[labels[index]])
            os.makedirs(class_folder, exist_ok=True)
            Image.fromarray(images[index]).save(os.path.join(class_folder, f"{index:05d}.png"))
        folders.append(folder)
    return folders[0], folders[1]
