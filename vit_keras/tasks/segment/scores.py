"""Segmentation scores, exact: a confusion matrix summed over every labelled pixel of a data
set, then mean IoU, per-class IoU and pixel accuracy from it (as mmsegmentation and the VOC
devkit compute them: IoU_c = TP / (TP + FP + FN), the mean over the classes that occur in the
labels or the predictions). Pixels labelled `IGNORE` (255, VOC's boundary) count nowhere.
NumPy only, so every runtime and format is scored the same way.
"""

from __future__ import annotations

import numpy as np

IGNORE = 255


def confusion_matrix(labels, predictions, num_classes: int, ignore: int = IGNORE) -> np.ndarray:
    """Counts of (true class, predicted class) over the pixels not labelled `ignore`.

    Args:
        labels: integer class ids, any shape.
        predictions: integer class ids of the same shape.
        num_classes: the number of classes.
        ignore: the label of pixels left out.

    Returns:
        [num_classes, num_classes] int64; rows are the true classes.

    Raises:
        ValueError: shapes differ, or a label (other than `ignore`) or prediction is outside
            0..num_classes-1.
    """
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if labels.shape != predictions.shape:
        raise ValueError(f"labels have shape {labels.shape} and predictions {predictions.shape}: "
                         "expected the same shape")
    kept = labels != ignore
    labels, predictions = labels[kept].astype(np.int64), predictions[kept].astype(np.int64)
    for what, values in (("label", labels), ("prediction", predictions)):
        if values.size and (values.min() < 0 or values.max() >= num_classes):
            bad = values[(values < 0) | (values >= num_classes)][0]
            raise ValueError(f"{what} {bad} is outside the {num_classes} classes "
                             f"0..{num_classes - 1} (and {ignore} = ignore)")
    flat = labels * num_classes + predictions
    return np.bincount(flat, minlength=num_classes ** 2).reshape(num_classes, num_classes)


def scores(confusion: np.ndarray) -> dict:
    """mIoU, pixel accuracy and per-class IoU of a confusion matrix.

    Args:
        confusion: [classes, classes] counts (rows true, columns predicted).

    Returns:
        {'mIoU': mean IoU over the classes present in the labels or the predictions,
         'pixel_accuracy': correct / labelled pixels, 'mean_accuracy': mean per-class recall
         over the classes present in the labels, 'iou': per-class IoU (NaN where a class is
         absent from both), 'pixels': labelled pixels per class}.
    """
    confusion = np.asarray(confusion, dtype=np.float64)
    true_positive = np.diag(confusion)
    labelled = confusion.sum(axis=1)
    union = labelled + confusion.sum(axis=0) - true_positive
    with np.errstate(divide="ignore", invalid="ignore"):
        iou = np.where(union > 0, true_positive / union, np.nan)
        recall = np.where(labelled > 0, true_positive / labelled, np.nan)
    total = confusion.sum()
    return {"mIoU": _mean(iou), "pixel_accuracy": float(true_positive.sum() / total)
            if total else float("nan"), "mean_accuracy": _mean(recall),
            "iou": iou.tolist(), "pixels": labelled.astype(np.int64).tolist()}


def _mean(values: np.ndarray) -> float:
    present = values[~np.isnan(values)]
    return float(present.mean()) if present.size else float("nan")
