"""`vit predict` and `vit evaluate` with a detector (`vit train --task detect`'s model.keras or
any of its exported files): boxes in pixels of each image as given.

Each image is resized whole to the model's input; the boxes come back as fractions of it and
are scaled to the image's own size (`vit_keras.tasks.detect.boxes.decode`). Per image, into the
`--drawn` folder (unless `--no-drawn`): `<stem>_boxes.png`, the image with each box drawn in
its class's colour and labelled with its class and score; an existing file there is kept unless
`--overwrite` (`vit_app.inference.written_files`). The table gives each image's boxes, best
first.
"""

from __future__ import annotations

import io
import os

import numpy as np

from vit_app.tasks.detect.data.sources import labelled_images, to_model_size
from vit_app.images import palette, pixel_size
from vit_app.tasks.detect import evaluate as detection_eval
from vit_app.inference.written_files import image_stems, refuse_to_overwrite
from vit_keras import atomic
from vit_keras.tasks.detect import boxes as detection_boxes

LINE_WIDTH = 2


def _detections(outputs: np.ndarray, sizes, min_score: float) -> list[dict]:
    """`decode` of [batch, queries, classes + 4] probabilities (sigmoids: back to logits)."""
    probabilities = np.clip(np.asarray(outputs, np.float64), 1e-12, 1 - 1e-12)
    logits = np.log(probabilities / (1 - probabilities))
    return detection_boxes.decode(logits, sizes, min_score=min_score)


def detect_files(model, readable, batch_size: int, min_score: float, folder: str | None,
                 overwrite: bool = False) -> list[dict]:
    """Every image's boxes scoring at least `min_score`, and its drawn copy in `folder` (none
    when None); rows [{'file', 'width', 'height', 'drawn', 'boxes': [{'class', 'score',
    'box'}]}], 'drawn' None without a folder.

    Raises:
        ValueError: a drawn copy it would write exists and `overwrite` is off (nothing
            written).
    """
    classes = model.num_classes - detection_boxes.BOX_CHANNELS
    names, colours = model.class_names, palette(classes + 1)[1:]
    drawn_files = iter([None] * len(readable))
    if folder is not None:
        planned = [os.path.join(folder, f"{stem}_boxes.png") for stem in image_stems(readable)]
        refuse_to_overwrite(planned, "--drawn", folder, overwrite)
        atomic.makedirs(folder)
        drawn_files = iter(planned)
    rows = []
    for start in range(0, len(readable), batch_size):
        batch = readable[start:start + batch_size]
        sizes = [pixel_size(data)[::-1] for _, data in batch]
        outputs = model.predict_encoded([data for _, data in batch])["probabilities"]
        for (path, data), (height, width), found in zip(
                batch, sizes, _detections(outputs, sizes, min_score)):
            boxes = [{"class": names[class_id], "score": float(score),
                      "box": [round(float(value), 2) for value in box]}
                     for box, score, class_id in zip(found["boxes"], found["scores"],
                                                     found["classes"])]
            drawn = next(drawn_files)
            if drawn is not None:
                draw_boxes(drawn, data, found, names, colours)
            rows.append({"file": path, "width": width, "height": height, "drawn": drawn,
                         "boxes": boxes})
    return rows


def draw_boxes(path: str, image_bytes: bytes, found: dict, names, colours) -> None:
    """The image with each box outlined in its class's colour, labelled 'class score', written
    whole as PNG."""
    from PIL import Image, ImageDraw

    with Image.open(io.BytesIO(image_bytes)) as image:
        picture = image.convert("RGB")
    pen = ImageDraw.Draw(picture)
    for box, score, class_id in zip(found["boxes"], found["scores"], found["classes"]):
        colour = tuple(int(value) for value in colours[class_id % len(colours)])
        pen.rectangle([float(value) for value in box], outline=colour, width=LINE_WIDTH)
        label = f"{names[class_id]} {score:.2f}"
        left, top = float(box[0]), max(0.0, float(box[1]) - 11)
        pen.rectangle(pen.textbbox((left, top), label), fill=colour)
        pen.text((left, top), label, fill=(0, 0, 0))
    buffer = io.BytesIO()
    picture.save(buffer, format="PNG")
    atomic.write_bytes(path, buffer.getvalue())


def table(rows: list[dict]) -> str:
    """One line per box (file, class, score, x0 y0 x1 y1), or per image without any."""
    lines = []
    for row in rows:
        if not row["boxes"]:
            lines.append(f"{row['file']}  (no box)")
        for box in row["boxes"]:
            corners = " ".join(f"{value:.1f}" for value in box["box"])
            lines.append(f"{row['file']}  {box['class']}  {box['score']:.4f}  {corners}")
    return "\n".join(lines)


def output_records(rows: list[dict]):
    """`--output`'s records: (CSV header, CSV rows: one per box, file, class, score, x0, y0,
    x1, y1 in pixels, and a row with the file alone for an image without any; JSON
    predictions: per image its size, drawn copy and boxes)."""
    header = ["file", "class", "score", "x0", "y0", "x1", "y1"]
    csv_rows = []
    for row in rows:
        if not row["boxes"]:
            csv_rows.append([row["file"], "", "", "", "", "", ""])
        csv_rows += [[row["file"], box["class"], f"{box['score']:.6f}",
                      *(f"{value:.2f}" for value in box["box"])] for box in row["boxes"]]
    return header, csv_rows, rows


def evaluate(model, source, batch_size: int) -> dict:
    """COCO's scores of a loaded detector on every image of `source` at its own size
    (`detection_eval.coco_scores`), with the AP per class by name."""
    found_images, ground_truth = labelled_images(source)
    classes = model.num_classes - detection_boxes.BOX_CHANNELS
    outputs = []
    for start in range(0, len(found_images), batch_size):
        batch = np.stack([to_model_size(image, model.image_size).numpy()
                          for image in found_images[start:start + batch_size]])
        outputs.append(model.predict(batch)["probabilities"])
    sizes = [image.shape[:2] for image in found_images]
    detections = _detections(np.concatenate(outputs), sizes, 0.0)
    detections = [{key: values[:detection_eval.MAX_DETECTIONS] for key, values in image.items()}
                  for image in detections]
    names = model.class_names[:classes]
    return detection_eval.coco_scores(ground_truth, detections, sizes, names)
