"""The constant box: what a detector that never looks at the image scores.

For each class, one box in every image at the mean of that class's training boxes (centre and
size in fractions of the image), scored by the class's share of the training objects. With one
class it is one box per image at the training set's mean box. On photographs whose objects
fill the middle of the frame it scores well at IoU 0.5, so a detector that does not beat it on
both mAP and mAP@0.5 has learned nothing the box statistics do not give: `vit train` and `vit
evaluate` say so in their table and their last line.
"""

from __future__ import annotations

import numpy as np

from vit_app.tasks.detect import evaluate as detection_eval
from vit_app.tasks.detect.data import sources
from vit_keras.tasks.detect import boxes as detection_boxes

COMPARED = (("mAP", "mAP"), ("mAP50", "mAP@0.5"))   # (score key, how the table names it)


def mean_boxes(objects: np.ndarray, num_classes: int) -> list[tuple[int, float, np.ndarray]]:
    """Each class's constant box.

    Args:
        objects: the training objects, [n, 5] (class, cx, cy, w, h in fractions).
        num_classes: the classes the detector scores.

    Returns:
        (class id, score = its share of the objects, mean box cx, cy, w, h) for each class
        with an object, most frequent first.
    """
    objects = np.asarray(objects, np.float64).reshape(-1, 5)
    found = []
    for class_id in range(num_classes):
        members = objects[objects[:, 0] == class_id, 1:]
        if len(members):
            found.append((class_id, len(members) / len(objects), members.mean(axis=0)))
    return sorted(found, key=lambda entry: -entry[1])


def detections(boxes: list, image_sizes) -> list[dict]:
    """`mean_boxes`' boxes in every image, in pixels of its own size, as `decode` gives a
    detector's."""
    classes = np.asarray([class_id for class_id, _, _ in boxes], np.int64)
    scores = np.asarray([score for _, score, _ in boxes], np.float64)
    corners = detection_boxes.cxcywh_to_xyxy(
        np.asarray([box for _, _, box in boxes], np.float64).reshape(-1, 4))
    return [{"boxes": detection_boxes.within_image(corners * [width, height, width, height],
                                                   width, height),
             "scores": scores, "classes": classes} for height, width in image_sizes]


def scores(train_objects, ground_truth, image_sizes, class_names: list[str]) -> dict:
    """COCO's mAP and mAP@0.5 of the constant boxes of `train_objects` (see `mean_boxes`) on
    images with `ground_truth` (per image [n, 5] pixel corners and class) at `image_sizes`."""
    found = detections(mean_boxes(train_objects, len(class_names)), list(image_sizes))
    result = detection_eval.coco_scores(ground_truth, found, image_sizes, class_names)
    return {key: result[key] for key, _ in COMPARED}


def source_scores(train_source, eval_source) -> dict:
    """`scores` of `train_source`'s constant boxes on `eval_source` (both in-memory detection
    sources: nothing is decoded)."""
    ground_truth = [boxes[boxes[:, 4] >= 0] for boxes in np.asarray(eval_source.arrays[1])]
    return scores(sources.object_fractions(train_source), ground_truth,
                  [tuple(size) for size in sources.image_sizes(eval_source)],
                  eval_source.class_names)


def _nothing_to_find(baseline: dict) -> bool:
    """Images without objects: the constant box scores None, and there is no verdict."""
    return all(baseline[key] is None for key, _ in COMPARED)


def shortfall(model_scores: dict, baseline: dict) -> str | None:
    """What the detector fails to beat, or None when it beats the constant box on every
    score of `COMPARED` (a tie is not a win) or there is nothing to beat (images without
    objects score None)."""
    if _nothing_to_find(baseline):
        return None
    lost = [f"{label} {100 * (model_scores[key] or 0):.2f}% <= "
            f"{100 * (baseline[key] or 0):.2f}%"
            for key, label in COMPARED if (model_scores[key] or 0) <= (baseline[key] or 0)]
    if not lost:
        return None
    return (f"the detector does not beat a constant box ({', '.join(lost)}): a box at the "
            "training boxes' mean place and size in every image scores as well; train "
            "longer, at a larger --image-size, or from pre-trained --weights "
            "(docs/detection.md)")


def beats(model_scores: dict, baseline: dict) -> bool | None:
    """Whether the detector beats the constant box (see `shortfall`); None where there is no
    object to find."""
    if _nothing_to_find(baseline):
        return None
    return shortfall(model_scores, baseline) is None


def table_cell(model_scores: dict, baseline: dict) -> str:
    """The constant box's scores and the detector's lead over them, in points."""
    parts = [f"{label} {100 * (baseline[key] or 0):.2f}% "
             f"({100 * ((model_scores[key] or 0) - (baseline[key] or 0)):+.2f} points)"
             for key, label in COMPARED]
    if _nothing_to_find(baseline):
        return "n/a (no object to find)"
    verdict = "beaten" if shortfall(model_scores, baseline) is None else "NOT BEATEN"
    return f"{', '.join(parts)}: {verdict}"
