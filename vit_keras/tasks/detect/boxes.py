"""Boxes in NumPy: a detector's outputs -> boxes, scores and classes, and the IoU between boxes.

A `ViTDetector` gives per query [class logits, box logits (cx, cy, w, h before a sigmoid, in
fractions of its input)] (`vit_keras.tasks.detect.model`). `decode` turns them into each
image's best detections in pixels of the original image, as DETR's post-processing with a sigmoid
classifier does (Deformable DETR): the top scores over every (query, class) pair, so one query
may name two classes when it is unsure. Boxes are [x0, y0, x1, y1] throughout.

This module imports no framework.
"""

from __future__ import annotations

import numpy as np

BOX_CHANNELS = 4


def sigmoid(values: np.ndarray) -> np.ndarray:
    """The logistic function, without overflow warnings for large negative logits."""
    values = np.asarray(values, np.float64)
    return np.exp(-np.logaddexp(0.0, -values))


def cxcywh_to_xyxy(boxes: np.ndarray) -> np.ndarray:
    """[..., 4] centre and size -> corners."""
    boxes = np.asarray(boxes, np.float64)
    centre, size = boxes[..., :2], boxes[..., 2:]
    return np.concatenate([centre - size / 2, centre + size / 2], axis=-1)


def xyxy_to_cxcywh(boxes: np.ndarray) -> np.ndarray:
    """[..., 4] corners -> centre and size."""
    boxes = np.asarray(boxes, np.float64)
    return np.concatenate([(boxes[..., :2] + boxes[..., 2:]) / 2,
                           boxes[..., 2:] - boxes[..., :2]], axis=-1)


def within_image(boxes: np.ndarray, width: float = 1.0, height: float = 1.0) -> np.ndarray:
    """[..., 4] corners -> the same boxes cut to the image [0, width] x [0, height] (a box's
    centre and size come from sigmoids, its corners may still cross the border)."""
    return np.clip(np.asarray(boxes, np.float64), 0, [width, height, width, height])


def iou_matrix(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """[n, 4] and [m, 4] corner boxes -> [n, m] intersection over union (0 for empty boxes)."""
    first, second = np.asarray(first, np.float64), np.asarray(second, np.float64)
    top_left = np.maximum(first[:, None, :2], second[None, :, :2])
    bottom_right = np.minimum(first[:, None, 2:], second[None, :, 2:])
    intersection = np.prod(np.clip(bottom_right - top_left, 0, None), axis=-1)
    area = lambda boxes: np.prod(np.clip(boxes[:, 2:] - boxes[:, :2], 0, None), axis=-1)
    union = area(first)[:, None] + area(second)[None, :] - intersection
    return np.divide(intersection, union, out=np.zeros_like(union), where=union > 0)


def decode(outputs: np.ndarray, image_hw, max_detections: int = 100,
           min_score: float = 0.0) -> list[dict]:
    """A detector's outputs -> each image's detections.

    Args:
        outputs: [batch, queries, classes + 4].
        image_hw: (height, width) in pixels the boxes are scaled to (the original image's:
            the model sees each image resized whole), or a list of one per image.
        max_detections: the most detections per image (the best scores over every query and
            class).
        min_score: detections scoring below it are dropped.

    Returns:
        Per image {'boxes': float [n, 4] x0 y0 x1 y1 in pixels, clipped to the image,
        'scores': [n], 'classes': int [n]}, best first.
    """
    outputs = np.asarray(outputs, np.float64)
    sizes = image_hw if isinstance(image_hw, list) else [image_hw] * len(outputs)
    found = []
    for values, (height, width) in zip(outputs, sizes):
        scores = sigmoid(values[:, :-BOX_CHANNELS])
        order = np.argsort(-scores, axis=None, kind="stable")[:max_detections]
        queries, classes = np.unravel_index(order, scores.shape)
        keep = scores[queries, classes] >= min_score
        queries, classes = queries[keep], classes[keep]
        boxes = cxcywh_to_xyxy(sigmoid(values[queries, -BOX_CHANNELS:]))
        boxes = within_image(boxes * [width, height, width, height], width, height)
        found.append({"boxes": boxes, "scores": scores[queries, classes],
                      "classes": classes.astype(np.int64)})
    return found


def matched_pairs(first: dict, second: dict, min_iou: float,
                  pixels: float = 0.0) -> tuple[int, int]:
    """How many of `first`'s detections `second` repeats: greedily, best score first, a box of
    the same class not taken yet, at IoU >= `min_iou` or with every side within `pixels` of
    the first's; (matched, len(first))."""
    if not len(first["boxes"]):
        return 0, 0
    overlaps = iou_matrix(first["boxes"], second["boxes"]) if len(second["boxes"]) else \
        np.zeros((len(first["boxes"]), 0))
    if pixels > 0 and len(second["boxes"]):
        moved = np.abs(first["boxes"][:, None] - second["boxes"][None]).max(axis=-1)
        overlaps = np.where(moved <= pixels, np.maximum(overlaps, min_iou), overlaps)
    same_class = first["classes"][:, None] == second["classes"][None, :]
    overlaps = np.where(same_class, overlaps, 0.0)
    taken = np.zeros(overlaps.shape[1], bool)
    matched = 0
    for row in np.argsort(-first["scores"], kind="stable"):
        candidates = np.where(taken, -1.0, overlaps[row])
        if candidates.size and candidates.max() >= min_iou:
            taken[int(candidates.argmax())] = True
            matched += 1
    return matched, len(first["boxes"])
