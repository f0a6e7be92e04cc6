"""Boxes as users have them in a folder: COCO JSON, YOLO text files or Pascal VOC XML.

`read_folder(DIR)` finds the format by what the folder holds, reads every annotation, checks it
against its image and returns the image paths, their boxes (float32 [n, max_objects, 5]: x0,
y0, x1, y1 in pixels, class id; class -1 pads) and the class names. Every problem is named with
its file, all of them at once, before any training:

- an annotation naming an image that is not there, or an image that cannot be read;
- a box outside its image (by more than `EDGE_TOLERANCE` px) or of no area;
- a class that is not in the class list;
- an annotation file that does not parse.

Images without objects are allowed (a YOLO image without a label file, an empty file, a VOC
file without objects, a COCO image without annotations).

Layouts:
    COCO   DIR/*.json (one file with 'images', 'annotations' and 'categories'); the images
           where their `file_name` says, relative to DIR/images/, DIR/ or the JSON's folder.
    YOLO   DIR/images/ + DIR/labels/<stem>.txt ('class cx cy w h' per line, in fractions of
           the image) + the class names: DIR/classes.txt (one per line), or `names` in
           DIR/data.yaml or DIR/dataset.yaml.
    VOC    DIR/images/ or DIR/JPEGImages/ + DIR/annotations/ or DIR/Annotations/<stem>.xml;
           the classes are the names the files use (sorted), or DIR/classes.txt.
"""

from __future__ import annotations

import glob
import json
import os
import xml.etree.ElementTree as ElementTree

import numpy as np
import yaml

from vit_app import images
from vit_app.tasks.detect.data import box_layout, no_boxes
from vit_app.paths import IMAGE_EXTENSIONS

EDGE_TOLERANCE = 1.0   # px a box may reach past its image's edge (rounding): clipped to it
MAX_LISTED = 20
PAD_CLASS = -1
IMAGE_FOLDERS = ("images", "JPEGImages")
VOC_FOLDERS = ("annotations", "Annotations")
YOLO_NAME_FILES = ("data.yaml", "dataset.yaml")
CLASSES_FILE = "classes.txt"


class Annotations:
    """What a folder's annotation files say, before the checks: the image files, each image's
    boxes (a list of (x0, y0, x1, y1, class id) in pixels) and the class names, with the
    problems found while reading (file, why)."""

    def __init__(self, layout: str):
        self.layout = layout
        self.files: list[str] = []
        self.boxes: list[list[tuple]] = []
        self.sizes: list[tuple[int, int] | None] = []   # (height, width) the file states
        self.class_names: list[str] = []
        self.problems: list[tuple[str, str]] = []

    def add(self, path: str, boxes: list[tuple], size=None) -> None:
        self.files.append(path)
        self.boxes.append(boxes)
        self.sizes.append(size)


def layout_of(path: str) -> str:
    """'coco', 'yolo' or 'voc': the format the folder's files are in (`box_layout`).

    Raises:
        ValueError: the folder holds none of them (the layouts are named).
    """
    layout = box_layout(path)
    if layout is None:
        raise ValueError(no_boxes(path))
    return layout


def _coco_files(path: str) -> list[str]:
    return [name for name in sorted(glob.glob(os.path.join(path, "*.json")))
            if box_layout(path) == "coco" and _names_coco(name)]


def _names_coco(name: str) -> bool:
    try:
        with open(name, encoding="utf-8") as stream:
            head = stream.read(1 << 16)
    except (OSError, UnicodeDecodeError):
        return False
    return '"annotations"' in head or '"images"' in head


def _image_folder(path: str) -> str:
    for name in IMAGE_FOLDERS:
        if os.path.isdir(os.path.join(path, name)):
            return os.path.join(path, name)
    raise ValueError(f"{path}: expected the images in {' or '.join(IMAGE_FOLDERS)}/ beside "
                     "the annotations")


def _images_by_stem(folder: str) -> dict[str, str]:
    found = {}
    for name in sorted(os.listdir(folder)):
        stem, extension = os.path.splitext(name)
        if extension.lower() in IMAGE_EXTENSIONS:
            found.setdefault(stem, os.path.join(folder, name))
    return found


def _listing(problems: list[tuple[str, str]]) -> str:
    lines = [f"  {path}: {why}" for path, why in problems[:MAX_LISTED]]
    if len(problems) > MAX_LISTED:
        lines.append(f"  ... and {len(problems) - MAX_LISTED} more")
    return "\n".join(lines)


# --- COCO ------------------------------------------------------------------------------------

def _coco_image_path(path: str, json_folder: str, file_name: str) -> str:
    for folder in (os.path.join(path, "images"), path, json_folder):
        candidate = os.path.join(folder, file_name)
        if os.path.isfile(candidate):
            return candidate
    return os.path.join(path, "images", file_name)


def read_coco(path: str) -> Annotations:
    """The one COCO JSON file of `path` (see the module docstring)."""
    found = _coco_files(path)
    if len(found) > 1:
        raise ValueError(f"{path} holds {len(found)} COCO JSON files ({', '.join(found)}): "
                         "expected one per folder (put each split in a folder of its own)")
    annotations = Annotations("coco")
    try:
        with open(found[0], encoding="utf-8") as stream:
            document = json.load(stream)
        categories = sorted(document["categories"], key=lambda category: category["id"])
        listed = {image["id"]: image for image in document["images"]}
        objects = document["annotations"]
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(f"{found[0]}: not a COCO detection file ({error!r}): expected "
                         "'images', 'annotations' and 'categories'") from None
    class_of = {category["id"]: index for index, category in enumerate(categories)}
    annotations.class_names = [str(category.get("name", category["id"])) for category in categories]
    boxes = {image_id: [] for image_id in listed}
    for number, item in enumerate(objects):
        where = f"{found[0]} annotation {item.get('id', number)}"
        if item.get("image_id") not in listed:
            annotations.problems.append((where, f"names image_id {item.get('image_id')!r}, "
                                                "which 'images' does not list"))
        elif item.get("category_id") not in class_of:
            annotations.problems.append((where, f"category_id {item.get('category_id')!r} is "
                                                f"not in 'categories' ({sorted(class_of)})"))
        elif not item.get("iscrowd"):
            x, y, width, height = (float(value) for value in item["bbox"])
            boxes[item["image_id"]].append((x, y, x + width, y + height,
                                            class_of[item["category_id"]]))
    folder = os.path.dirname(found[0])
    for image_id, image in listed.items():
        size = (image["height"], image["width"]) if "height" in image and "width" in image \
            else None
        annotations.add(_coco_image_path(path, folder, image["file_name"]), boxes[image_id],
                        size)
    return annotations


# --- YOLO ------------------------------------------------------------------------------------

def _yolo_names(path: str) -> list[str]:
    listed = os.path.join(path, CLASSES_FILE)
    if os.path.isfile(listed):
        with open(listed, encoding="utf-8") as stream:
            return [line.strip() for line in stream if line.strip()]
    for name in YOLO_NAME_FILES:
        if os.path.isfile(os.path.join(path, name)):
            with open(os.path.join(path, name), encoding="utf-8") as stream:
                names = (yaml.safe_load(stream) or {}).get("names")
            if isinstance(names, dict):
                return [str(names[key]) for key in sorted(names)]
            if isinstance(names, list):
                return [str(name) for name in names]
            raise ValueError(f"{os.path.join(path, name)}: expected 'names' as a list or a "
                             "{id: name} mapping")
    raise ValueError(f"{path}: YOLO labels need their class names: a {CLASSES_FILE} (one name "
                     f"per line, line n = class n) or 'names' in {' or '.join(YOLO_NAME_FILES)}")


def _yolo_boxes(label_file: str, num_classes: int, annotations: Annotations) -> list[tuple]:
    """The file's rows as (cx, cy, w, h, class) in fractions; problems go to `annotations`."""
    rows = []
    with open(label_file, encoding="utf-8") as stream:
        for number, line in enumerate(stream, 1):
            fields = line.split()
            if not fields:
                continue
            try:
                values = [float(field) for field in fields]
            except ValueError:
                values = []
            if len(values) != 5 or values[0] != int(values[0]):
                annotations.problems.append((f"{label_file}:{number}", "expected 'class cx cy "
                                             f"w h' (5 numbers), got {line.strip()!r}"))
            elif not 0 <= values[0] < num_classes:
                annotations.problems.append((f"{label_file}:{number}", f"class {int(values[0])} "
                                             f"is not one of the {num_classes} named"))
            else:
                rows.append((*values[1:], int(values[0])))
    return rows


def read_yolo(path: str) -> Annotations:
    """`DIR/images/` + `DIR/labels/` (see the module docstring); boxes in fractions until the
    image sizes are known (`_to_pixels`)."""
    annotations = Annotations("yolo")
    annotations.class_names = _yolo_names(path)
    by_stem = _images_by_stem(_image_folder(path))
    labels = os.path.join(path, "labels")
    for label_file in sorted(glob.glob(os.path.join(labels, "*.txt"))):
        stem = os.path.splitext(os.path.basename(label_file))[0]
        if stem not in by_stem and os.path.getsize(label_file):
            annotations.problems.append((label_file, f"has no image {stem}.* in "
                                                     f"{_image_folder(path)}"))
    for stem, image in by_stem.items():
        label_file = os.path.join(labels, f"{stem}.txt")
        rows = _yolo_boxes(label_file, len(annotations.class_names), annotations) \
            if os.path.isfile(label_file) else []
        annotations.add(image, rows)
    return annotations


# --- Pascal VOC ------------------------------------------------------------------------------

def _voc_objects(xml_file: str) -> tuple[list[tuple], tuple[int, int] | None]:
    root = ElementTree.parse(xml_file).getroot()
    size = root.find("size")
    stated = None
    if size is not None and size.findtext("height") and size.findtext("width"):
        stated = (int(float(size.findtext("height"))), int(float(size.findtext("width"))))
    objects = []
    for item in root.iter("object"):
        box = item.find("bndbox")
        if box is None:
            raise ValueError("an <object> without <bndbox>")
        corners = [float(box.findtext(name)) for name in ("xmin", "ymin", "xmax", "ymax")]
        # VOC's pixel indices are 1-based and inclusive: xmin 1 is the first column.
        objects.append((corners[0] - 1, corners[1] - 1, corners[2], corners[3],
                        (item.findtext("name") or "").strip()))
    return objects, stated


def read_voc(path: str) -> Annotations:
    """`DIR/images/` or `DIR/JPEGImages/` + `DIR/Annotations/*.xml` (see the module
    docstring)."""
    annotations = Annotations("voc")
    by_stem = _images_by_stem(_image_folder(path))
    folder = next(os.path.join(path, name) for name in VOC_FOLDERS
                  if os.path.isdir(os.path.join(path, name)))
    parsed = {}
    for xml_file in sorted(glob.glob(os.path.join(folder, "*.xml"))):
        stem = os.path.splitext(os.path.basename(xml_file))[0]
        try:
            parsed[stem] = _voc_objects(xml_file)
        except (ElementTree.ParseError, ValueError, TypeError) as error:
            annotations.problems.append((xml_file, f"does not parse as VOC XML ({error})"))
            continue
        if stem not in by_stem:
            annotations.problems.append((xml_file, f"has no image {stem}.* in "
                                                   f"{_image_folder(path)}"))
    listed = os.path.join(path, CLASSES_FILE)
    if os.path.isfile(listed):
        with open(listed, encoding="utf-8") as stream:
            annotations.class_names = [line.strip() for line in stream if line.strip()]
    else:
        annotations.class_names = sorted({name for objects, _ in parsed.values()
                                          for *_, name in objects})
    class_of = {name: index for index, name in enumerate(annotations.class_names)}
    for stem, image in by_stem.items():
        objects, stated = parsed.get(stem, ([], None))
        unknown = sorted({name for *_, name in objects if name not in class_of})
        if unknown:
            annotations.problems.append((os.path.join(folder, f"{stem}.xml"), f"class "
                                         f"{', '.join(map(repr, unknown))} is not in {listed}"))
        annotations.add(image, [(*corners, class_of[name]) for *corners, name in objects
                                if name in class_of], stated)
    return annotations


# --- checks ----------------------------------------------------------------------------------

READERS = {"coco": read_coco, "yolo": read_yolo, "voc": read_voc}


def _image_sizes(files: list[str]) -> list[tuple[int, int] | str]:
    """Each file's (height, width) from its header, or why it cannot be used."""
    from concurrent.futures import ThreadPoolExecutor

    def size_of(path: str):
        if not os.path.isfile(path):
            return "is named by an annotation but does not exist"
        why = images.file_problem(path)
        if why:
            return why
        with open(path, "rb") as stream:
            width, height = images.pixel_size(stream.read())
        return height, width

    with images.bomb_warnings_silenced(), ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(size_of, files))


def _checked_boxes(path: str, boxes: list[tuple], height: int, width: int,
                   problems: list) -> np.ndarray:
    """[n, 5] pixel boxes inside the image (clipped within `EDGE_TOLERANCE`); each box out of
    it or of no area is a problem named with its image."""
    kept = []
    for x0, y0, x1, y1, class_id in boxes:
        outside = (x0 < -EDGE_TOLERANCE or y0 < -EDGE_TOLERANCE or
                   x1 > width + EDGE_TOLERANCE or y1 > height + EDGE_TOLERANCE)
        if outside or x1 <= x0 or y1 <= y0:
            why = "reaches outside the image" if outside else "has no area"
            problems.append((path, f"box ({x0:g}, {y0:g}, {x1:g}, {y1:g}) {why} of "
                                   f"{width}x{height} px (x0, y0, x1, y1 in pixels)"))
            continue
        kept.append((max(x0, 0.0), max(y0, 0.0), min(x1, width), min(y1, height), class_id))
    return np.asarray(kept, np.float32).reshape(-1, 5)


def read_folder(path: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """A folder of images and their boxes, checked (see the module docstring).

    Returns:
        (image paths [n], float32 boxes [n, max_objects, 5] in pixels with class -1 padding,
        the class names).

    Raises:
        ValueError: no known layout, or problems (each named with its file).
    """
    path = os.path.expanduser(path.rstrip("/"))
    if not os.path.isdir(path):
        raise ValueError(f"detection data folder {path!r} does not exist")
    annotations = READERS[layout_of(path)](path)
    problems = list(annotations.problems)
    if not annotations.class_names:
        problems.append((path, "names no class (no object in any annotation, and no "
                               f"{CLASSES_FILE})"))
    per_image = []
    for file, boxes, stated, found in zip(annotations.files, annotations.boxes,
                                          annotations.sizes, _image_sizes(annotations.files)):
        if isinstance(found, str):
            problems.append((file, found))
            continue
        if stated is not None and tuple(stated) != tuple(found):
            problems.append((file, f"is {found[1]}x{found[0]} px, its annotation says "
                                   f"{stated[1]}x{stated[0]}"))
            continue
        if annotations.layout == "yolo":
            boxes = [((cx - w / 2) * found[1], (cy - h / 2) * found[0], (cx + w / 2) * found[1],
                      (cy + h / 2) * found[0], class_id) for cx, cy, w, h, class_id in boxes]
        per_image.append(_checked_boxes(file, boxes, *found, problems))
    if problems:
        raise ValueError(f"{len(problems)} problems in the {annotations.layout.upper()} boxes of "
                         f"{path}; fix them before training:\n{_listing(problems)}")
    if not per_image:
        raise ValueError(f"{path}: no images found for its {annotations.layout.upper()} boxes")
    most = max(1, max(len(boxes) for boxes in per_image))
    padded = np.full((len(per_image), most, 5), PAD_CLASS, np.float32)
    for index, boxes in enumerate(per_image):
        padded[index, :len(boxes)] = boxes
    return np.asarray(annotations.files), padded, list(annotations.class_names)
