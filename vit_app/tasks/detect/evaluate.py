"""COCO's detection scores, from the field's own library (pycocotools' `COCOeval`), never
re-derived: mAP over IoU 0.50:0.95, mAP at 0.5 and 0.75, AP per size (small < 32^2 px,
medium, large > 96^2 px) and AP per class.

Ground truth and detections are in pixels of the images as stored. A model sees each image
resized whole, so its boxes are scaled back to the image's own size (`vit_keras.
detection_boxes.decode`).
"""

from __future__ import annotations

import contextlib
import copy as _copy
import io

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from vit_app.tasks.detect.data.sources import labelled_images, to_model_size
from vit_app.images import scale
from vit_keras.tasks.detect import boxes as detection_boxes

MAX_DETECTIONS = 100   # COCO's maxDets for the headline numbers
SIZES = ("small", "medium", "large")


def _coco_document(ground_truth, image_sizes, num_classes: int) -> dict:
    document = {"images": [], "annotations": [],
                "categories": [{"id": index + 1, "name": str(index)}
                               for index in range(num_classes)]}
    for image_id, (boxes, (height, width)) in enumerate(zip(ground_truth, image_sizes), 1):
        document["images"].append({"id": image_id, "height": int(height), "width": int(width)})
        for x0, y0, x1, y1, class_id in np.asarray(boxes, np.float64).reshape(-1, 5):
            if class_id < 0:
                continue
            document["annotations"].append({
                "id": len(document["annotations"]) + 1, "image_id": image_id,
                "category_id": int(class_id) + 1, "bbox": [x0, y0, x1 - x0, y1 - y0],
                "area": (x1 - x0) * (y1 - y0), "iscrowd": 0})
    return document


def _results(detections) -> list[dict]:
    found = []
    for image_id, image in enumerate(detections, 1):
        for (x0, y0, x1, y1), score, class_id in zip(image["boxes"], image["scores"],
                                                     image["classes"]):
            found.append({"image_id": image_id, "category_id": int(class_id) + 1,
                          "bbox": [float(x0), float(y0), float(x1 - x0), float(y1 - y0)],
                          "score": float(score)})
    return found


def _mean_precision(precision: np.ndarray):
    """The mean of COCOeval's precision entries that exist (-1 marks none), or None."""
    valid = precision[precision > -1]
    return float(valid.mean()) if valid.size else None


def evaluated(ground_truth, detections, image_sizes, num_classes: int) -> COCOeval:
    """pycocotools' evaluation of each image (`COCOeval.evaluate`), not yet accumulated:
    `accumulated_scores` turns it into scores, over every image or any resample of them.

    Args:
        ground_truth: per image, float [n, 5] pixel corners and class id (class -1 pads).
        detections: per image, `decode`'s {'boxes', 'scores', 'classes'}.
        image_sizes: per image, (height, width).
        num_classes: the classes scored.
    """
    document = _coco_document(ground_truth, image_sizes, num_classes)
    results = _results(detections)
    with contextlib.redirect_stdout(io.StringIO()):
        truth = COCO()
        truth.dataset = document
        truth.createIndex()
        found = truth.loadRes(results) if results else COCO()
        if not results:
            found.dataset = {**document, "annotations": []}
            found.createIndex()
        evaluation = COCOeval(truth, found, "bbox")
        evaluation.evaluate()
    return evaluation


def _resampled(evaluation: COCOeval, images) -> COCOeval:
    """A copy of `evaluation` over the images at positions `images` (repeats allowed, each
    repeat counted as another image), its per-image results reused."""
    counted = len(evaluation._paramsEval.imgIds)
    per_group = [evaluation.evalImgs[start:start + counted]
                 for start in range(0, len(evaluation.evalImgs), counted)]
    copy = _copy.copy(evaluation)
    copy.evalImgs = [group[index] for group in per_group for index in images]
    copy.params = _copy.deepcopy(evaluation.params)
    copy.params.imgIds = list(range(len(images)))
    copy._paramsEval = _copy.deepcopy(copy.params)
    return copy


def accumulated_scores(evaluation: COCOeval, class_names: list[str], images=None) -> dict:
    """`coco_scores` of an `evaluated` evaluation, over every image or over the images at
    positions `images` (a bootstrap resample: repeats allowed)."""
    if images is not None:
        evaluation = _resampled(evaluation, list(images))
    with contextlib.redirect_stdout(io.StringIO()):
        evaluation.accumulate()
    # precision: [IoU thresholds, recall points, classes, areas (all, small, medium, large),
    # max detections (1, 10, 100)]
    precision = evaluation.eval["precision"][..., -1]
    thresholds = list(np.round(evaluation.params.iouThrs, 2))
    scores = {"mAP": _mean_precision(precision[:, :, :, 0]),
              "mAP50": _mean_precision(precision[thresholds.index(0.5), :, :, 0]),
              "mAP75": _mean_precision(precision[thresholds.index(0.75), :, :, 0])}
    for index, size in enumerate(SIZES, 1):
        scores[f"AP_{size}"] = _mean_precision(precision[:, :, :, index])
    scores["class_ap"] = {name: _mean_precision(precision[:, :, index, 0])
                          for index, name in enumerate(class_names)}
    scores["objects"] = int(sum(len(evaluation.cocoGt.getAnnIds(imgIds=[image_id]))
                                for image_id in _image_ids(evaluation, images)))
    scores["images"] = len(evaluation.params.imgIds)
    return {key: (0.0 if value is None and key in ("mAP", "mAP50", "mAP75") and
                  scores["objects"] else value) for key, value in scores.items()}


def _image_ids(evaluation: COCOeval, images) -> list[int]:
    """The ground truth's image ids at positions `images` (every image's when None)."""
    ids = evaluation.cocoGt.getImgIds()
    return ids if images is None else [ids[index] for index in images]


def coco_scores(ground_truth, detections, image_sizes, class_names: list[str]) -> dict:
    """COCO's scores of `detections` against `ground_truth`.

    Args:
        ground_truth: per image, float [n, 5] pixel corners and class id (class -1 pads).
        detections: per image, `decode`'s {'boxes', 'scores', 'classes'}.
        image_sizes: per image, (height, width).
        class_names: the class names, index = class id.

    Returns:
        {'mAP', 'mAP50', 'mAP75', 'AP_small', 'AP_medium', 'AP_large' (None where the data
        has no object of that size), 'class_ap': {name: AP or None}, 'objects', 'images'}.
    """
    evaluation = evaluated(ground_truth, detections, image_sizes, len(class_names))
    return accumulated_scores(evaluation, class_names)


def score_outputs(outputs, ground_truth, image_sizes, class_names) -> dict:
    """`coco_scores` of a detector's raw outputs [images, queries, classes + 4], each image's
    boxes scaled to its own size."""
    detections = detection_boxes.decode(np.asarray(outputs), list(map(tuple, image_sizes)),
                                        MAX_DETECTIONS)
    return coco_scores(ground_truth, detections, image_sizes, class_names)


def model_inputs(images_list, size, preprocessing) -> np.ndarray:
    """Images of any size, each resized whole to `size` (height, width) and scaled as
    `preprocessing` says: float32 [images, height, width, 3]."""
    return np.stack([scale(to_model_size(image, size), preprocessing).numpy()
                     for image in images_list])


def keras_outputs(model, images_list, preprocessing, batch_size: int = 64) -> np.ndarray:
    """A Keras detector's last-block outputs (of every block's, for a model built with
    `all_layers`) on images of any size, each resized whole to the model's input."""
    inputs = model_inputs(images_list, model.config.image_hw, preprocessing)
    outputs = np.asarray(model.predict(inputs, batch_size=batch_size, verbose=0))
    return outputs[:, -1] if getattr(model, "all_layers", False) else outputs


def evaluate_keras(model, source, preprocessing) -> dict:
    """`coco_scores` of a Keras detector on every image of `source`, at its own size."""
    found_images, ground_truth = labelled_images(source)
    outputs = keras_outputs(model, found_images, preprocessing)
    sizes = [image.shape[:2] for image in found_images]
    return score_outputs(outputs, ground_truth, sizes, source.class_names)


def report(scores: dict) -> dict:
    """metrics.json's entries of `coco_scores`: val_mAP, val_mAP50, ... and the AP per class."""
    entries = {f"val_{key}": value for key, value in scores.items()
               if key not in ("class_ap", "objects", "images")}
    entries["val_class_ap"] = scores["class_ap"]
    entries["val_objects"] = scores["objects"]
    return entries


def report_lines(results: dict, where: str) -> list[str]:
    """The printed report of `coco_scores`: the headline scores, then AP per class."""
    def percent(value):
        return "n/a" if value is None else f"{100 * value:.2f}%"

    lines = [f"{where}", f"  mAP {percent(results['mAP'])}  mAP@0.5 {percent(results['mAP50'])}"
             f"  mAP@0.75 {percent(results['mAP75'])}  AP small/medium/large "
             + "/".join(percent(results[f"AP_{size}"]) for size in SIZES)]
    width = max([len(name) for name in results["class_ap"]] or [0])
    lines += [f"  {name:<{width}}  AP {percent(value):>8}"
              for name, value in results["class_ap"].items()]
    return lines
