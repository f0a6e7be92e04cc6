"""Exact multi-label scores of a whole evaluated set: mAP, F1 and cross-entropy, in NumPy.

The mAP is that of scikit-learn's `average_precision_score`. Classes without a positive example
in the evaluated data have no average precision; they are left out of the mAP (as in Pascal VOC
and timm's validation). The macro F1 likewise averages the classes whose F1 is defined (with a
positive, or a positive prediction): scikit-learn's `f1_score(average='macro',
zero_division=np.nan)`.
"""

from __future__ import annotations

import numpy as np
from keras import ops

THRESHOLD = 0.5  # a class is predicted present when sigmoid(logit) > THRESHOLD


def average_precision(targets: np.ndarray, scores: np.ndarray) -> float:
    """The average precision of one class: sum over score thresholds of (R_n - R_n-1) P_n.

    Args:
        targets: [n]; an example is positive where its target is > 0.5.
        scores: [n], any increasing function of the probability (logits keep apart what a
            float32 sigmoid would round to the same 1.0); tied scores form one threshold.

    Returns:
        The average precision, or nan when there is no positive example.
    """
    order = np.argsort(-np.asarray(scores, np.float64), kind="stable")
    ranked = np.asarray(scores, np.float64)[order]
    hits = np.cumsum(np.asarray(targets)[order] > 0.5)
    if not len(hits) or hits[-1] == 0:
        return float("nan")
    last_of_ties = np.r_[np.flatnonzero(np.diff(ranked)), len(ranked) - 1]
    true_positives = hits[last_of_ties]
    precision = true_positives / (last_of_ties + 1)
    recall = true_positives / true_positives[-1]
    return float(np.sum(np.diff(recall, prepend=0.0) * precision))


def mean_average_precision(targets: np.ndarray, scores: np.ndarray) -> tuple[float, np.ndarray]:
    """The mAP over the classes with a positive example, and each class's average precision.

    Args:
        targets: multi-hot [n, classes].
        scores: [n, classes] (see `average_precision`).

    Returns:
        (mAP, or nan when no class has a positive; float64 [classes], nan where undefined).
    """
    per_class = np.array([average_precision(targets[:, index], scores[:, index])
                          for index in range(targets.shape[1])])
    defined = per_class[~np.isnan(per_class)]
    return (float(defined.mean()) if len(defined) else float("nan")), per_class


def f1_scores(targets: np.ndarray, logits: np.ndarray) -> tuple[float, float]:
    """(micro F1, macro F1) of the predictions sigmoid(logits) > `THRESHOLD`.

    Args:
        targets: multi-hot [n, classes] (positive where > 0.5).
        logits: [n, classes].

    Returns:
        Micro F1 (every decision pooled) and macro F1 (the mean over the classes with a positive
        or a positive prediction); each nan when nothing is positive or predicted.
    """
    positive = np.asarray(targets) > 0.5
    predicted = np.asarray(logits, np.float64) > np.log(THRESHOLD / (1.0 - THRESHOLD))
    true_pos = (positive & predicted).sum(axis=0)
    errors = (positive ^ predicted).sum(axis=0)  # false positives + false negatives
    denominators = 2 * true_pos + errors
    micro = 2 * true_pos.sum() / denominators.sum() if denominators.sum() else float("nan")
    defined = denominators > 0
    macro = (2 * true_pos[defined] / denominators[defined]).mean() if defined.any() \
        else float("nan")
    return float(micro), float(macro)


def sigmoid_cross_entropy(targets: np.ndarray, logits: np.ndarray) -> float:
    """Mean binary cross-entropy of sigmoid(logits) over examples and classes."""
    logits = np.asarray(logits, np.float64)
    return float(np.mean(np.logaddexp(0.0, logits) - np.asarray(targets) * logits))


def report(targets: np.ndarray, logits: np.ndarray) -> dict:
    """The exact multi-label scores of `logits` against multi-hot `targets` ([n, classes]).

    Returns:
        {'mAP', 'f1_micro', 'f1_macro', 'cross_entropy', 'classes_scored': the classes in the
        mAP, 'average_precision': a list per class (None where undefined)}.
    """
    mean, per_class = mean_average_precision(targets, logits)
    micro, macro = f1_scores(targets, logits)
    return {"mAP": mean, "f1_micro": micro, "f1_macro": macro,
            "cross_entropy": sigmoid_cross_entropy(targets, logits),
            "classes_scored": int((~np.isnan(per_class)).sum()),
            "average_precision": [None if np.isnan(value) else float(value)
                                  for value in per_class]}


def predictions(model, dataset) -> tuple[np.ndarray, np.ndarray]:
    """(float64 logits, float32 targets) of `model` on every batch of (images, targets)."""
    logits, targets = [], []
    for images, batch_targets in dataset:
        logits.append(np.asarray(ops.convert_to_numpy(model(images, training=False)), np.float64))
        targets.append(np.asarray(batch_targets, np.float32))
    return np.concatenate(logits), np.concatenate(targets)
