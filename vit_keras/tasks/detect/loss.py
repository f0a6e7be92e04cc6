"""DETR's set loss for a `ViTDetector`: each image's objects matched one-to-one to its queries
by the Hungarian algorithm, then a focal class loss on every query and L1 + GIoU box losses on
the matched ones, on every decoder block's outputs (the auxiliary losses).

Targets are [batch, max_objects, 5]: (class id, cx, cy, w, h in fractions of the model's
input), a class of -1 marks padding (an image may hold no object). The matching cost is the
loss's own terms (Deformable DETR's weights: class 2, L1 5, GIoU 2); SciPy's
`linear_sum_assignment` solves it on the host, called from inside the compiled step by each
backend's host-callback op (TensorFlow's `numpy_function`, JAX's `pure_callback`), so a
TensorFlow step runs without XLA (`jit_compile=False`: XLA cannot call the host on a CPU or
GPU).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops
from scipy.optimize import linear_sum_assignment

from vit_keras.core.initializers import PACKAGE

BOX_CHANNELS = 4
TARGET_CHANNELS = 1 + BOX_CHANNELS
FOCAL_ALPHA, FOCAL_GAMMA = 0.25, 2.0


def hungarian(cost: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """Each image's one-to-one matching of objects to queries at the least total cost.

    Args:
        cost: [batch, queries, objects] float.
        valid: [batch, objects] bool, False for padding.

    Returns:
        int32 [batch, queries]: the object each query is matched to, -1 for none.
    """
    cost = np.nan_to_num(np.asarray(cost, np.float64), nan=1e6, posinf=1e6, neginf=-1e6)
    assignment = np.full(cost.shape[:2], -1, np.int32)
    for index, (image_cost, image_valid) in enumerate(zip(cost, np.asarray(valid, bool))):
        objects = np.flatnonzero(image_valid)
        if objects.size:
            queries, chosen = linear_sum_assignment(image_cost[:, objects])
            assignment[index, queries] = objects[chosen]
    return assignment


def _host_hungarian(cost, valid):
    """`hungarian` called from inside the backend's compiled step."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        matched = tf.numpy_function(hungarian, [cost, valid], tf.int32, stateful=False)
        matched.set_shape(cost.shape[:2])
        return matched
    if backend == "jax":
        import jax

        shape = jax.ShapeDtypeStruct(cost.shape[:2], np.int32)
        return jax.pure_callback(hungarian, shape, cost, valid)
    return ops.convert_to_tensor(hungarian(ops.convert_to_numpy(cost),
                                           ops.convert_to_numpy(valid)), "int32")


def corners(boxes):
    """[..., 4] cx, cy, w, h -> x0, y0, x1, y1."""
    centre, size = boxes[..., :2], boxes[..., 2:]
    return ops.concatenate([centre - size / 2, centre + size / 2], axis=-1)


def _intersection_union(first, second):
    area = lambda boxes: ops.prod(ops.maximum(boxes[..., 2:] - boxes[..., :2], 0.0), axis=-1)
    top_left = ops.maximum(first[..., :2], second[..., :2])
    bottom_right = ops.minimum(first[..., 2:], second[..., 2:])
    intersection = ops.prod(ops.maximum(bottom_right - top_left, 0.0), axis=-1)
    return intersection, area(first) + area(second) - intersection


def iou(first, second):
    """IoU of corner boxes broadcast against each other ([..., 4] each -> [...])."""
    intersection, union = _intersection_union(first, second)
    return intersection / ops.maximum(union, 1e-7)


def generalized_iou(first, second):
    """GIoU (Rezatofighi et al. 2019) of corner boxes broadcast against each other
    ([..., 4] each -> [...])."""
    intersection, union = _intersection_union(first, second)
    hull = ops.prod(ops.maximum(ops.maximum(first[..., 2:], second[..., 2:]) -
                                ops.minimum(first[..., :2], second[..., :2]), 0.0), axis=-1)
    return intersection / ops.maximum(union, 1e-7) - (hull - union) / ops.maximum(hull, 1e-7)


def split_targets(y_true, num_classes: int):
    """Targets [batch, objects, 5] -> (one-hot classes [batch, objects, classes], zero for
    padding; boxes [batch, objects, 4]; valid [batch, objects])."""
    y_true = ops.cast(y_true, "float32")
    classes = ops.cast(ops.round(y_true[..., 0]), "int32")
    valid = classes >= 0
    present = ops.one_hot(ops.maximum(classes, 0), num_classes) * ops.cast(valid,
                                                                          "float32")[..., None]
    return present, y_true[..., 1:], valid


def _focal_terms(logits):
    """Per logit, the focal loss if its class were present, and if absent."""
    probabilities = ops.sigmoid(logits)
    present = FOCAL_ALPHA * (1 - probabilities) ** FOCAL_GAMMA * ops.softplus(-logits)
    absent = (1 - FOCAL_ALPHA) * probabilities ** FOCAL_GAMMA * ops.softplus(logits)
    return present, absent


@keras.saving.register_keras_serializable(package=PACKAGE)
class SetPredictionLoss(keras.losses.Loss):
    """DETR's loss (see the module docstring), summed over the decoder blocks given.

    Args:
        num_classes: object classes.
        class_weight: of the focal class loss, in the loss and the matching cost (default 2).
        l1_weight: of the L1 distance between matched boxes (cx, cy, w, h) (default 5).
        giou_weight: of 1 - GIoU of matched boxes (default 2).
        auxiliary_matches: queries matched to each object in every block but the last, whose
            matching stays one-to-one (default 1): more positives per object in training
            (one-to-many matching), while the boxes a detector returns keep no duplicates.
        name: the loss's name.

    Call args:
        y_true: [batch, max_objects, 5] targets (class id or -1, cx, cy, w, h).
        y_pred: a `ViTDetector`'s [batch, queries, classes + 4], or with `all_layers` its
            [batch, blocks, queries, classes + 4].
    """

    def __init__(self, num_classes: int, class_weight: float = 2.0, l1_weight: float = 5.0,
                 giou_weight: float = 2.0, auxiliary_matches: int = 1,
                 name: str = "set_prediction_loss", **kwargs):
        super().__init__(name=name, **kwargs)
        if auxiliary_matches < 1:
            raise ValueError(f"auxiliary_matches must be at least 1, got {auxiliary_matches}")
        self.auxiliary_matches = auxiliary_matches
        self.num_classes = num_classes
        self.class_weight = class_weight
        self.l1_weight = l1_weight
        self.giou_weight = giou_weight

    def call(self, y_true, y_pred):
        y_pred = ops.cast(y_pred, "float32")
        if len(y_pred.shape) == 3:
            y_pred = y_pred[:, None]
        targets = split_targets(y_true, self.num_classes)
        auxiliary = _repeated(targets, self.auxiliary_matches)
        last = y_pred.shape[1] - 1
        return sum(self._block_loss(y_pred[:, block], *(targets if block == last else auxiliary))
                   for block in range(last + 1))

    def _block_loss(self, outputs, present, target_boxes, valid):
        """One block's loss: match, then the focal, L1 and GIoU terms over the objects."""
        count = ops.maximum(ops.sum(ops.cast(valid, "float32")), 1.0)
        logits = outputs[..., :self.num_classes]
        boxes = ops.sigmoid(outputs[..., self.num_classes:])
        if_present, if_absent = _focal_terms(logits)
        cost = (self.class_weight * ops.einsum("bqc,bmc->bqm", if_present - if_absent, present)
                + self.l1_weight * ops.sum(ops.abs(boxes[:, :, None] - target_boxes[:, None]),
                                           axis=-1)
                - self.giou_weight * generalized_iou(corners(boxes)[:, :, None],
                                                     corners(target_boxes)[:, None]))
        matched = _host_hungarian(ops.stop_gradient(cost), valid)
        is_matched = ops.cast(matched >= 0, "float32")
        index = ops.maximum(matched, 0)[..., None]
        wanted = ops.take_along_axis(present, index, axis=1) * is_matched[..., None]
        class_loss = ops.sum(if_present * wanted + if_absent * (1 - wanted))
        matched_boxes = ops.take_along_axis(target_boxes, index, axis=1)
        l1 = ops.sum(ops.abs(boxes - matched_boxes) * is_matched[..., None])
        giou = ops.sum((1 - generalized_iou(corners(boxes), corners(matched_boxes))) *
                       is_matched)
        return (self.class_weight * class_loss + self.l1_weight * l1 +
                self.giou_weight * giou) / count

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes,
                "class_weight": self.class_weight, "l1_weight": self.l1_weight,
                "giou_weight": self.giou_weight, "auxiliary_matches": self.auxiliary_matches}


def _repeated(targets, times: int):
    """Each of `split_targets`' outputs with its objects repeated `times` times, so that the
    matching gives every object `times` queries (as many as there are queries)."""
    if times == 1:
        return targets
    return tuple(ops.concatenate([part] * times, axis=1) for part in targets)


@keras.saving.register_keras_serializable(package=PACKAGE)
class BoxF1(keras.metrics.Metric):
    """F1 of confident detections at an IoU, computed inside the step (COCO's mAP needs every
    image's ranked detections: `vit_app.tasks.detect.evaluate` gives it after training).

    A detection is a (query, class) pair scoring at least `min_score`. Precision: the share of
    detections that overlap an object of their class at IoU >= `min_iou`; recall: the share
    of objects that such a detection overlaps. Not one-to-one (two detections of one object
    both count as right), so it rewards duplicates that mAP punishes: a proxy that ranks
    epochs, not a score to publish.

    Args:
        num_classes: object classes.
        min_iou: the overlap that counts as found (default 0.5).
        min_score: the score that counts as a detection (default 0.5).
        name: the metric's name.
    """

    def __init__(self, num_classes: int, min_iou: float = 0.5, min_score: float = 0.5,
                 name: str = "box_f1", **kwargs):
        super().__init__(name=name, **kwargs)
        self.num_classes = num_classes
        self.min_iou = min_iou
        self.min_score = min_score
        self.counts = [self.add_variable(shape=(), initializer="zeros", name=name)
                       for name in ("right", "detections", "found", "objects")]

    def update_state(self, y_true, y_pred, sample_weight=None):
        y_pred = ops.cast(y_pred, "float32")
        if len(y_pred.shape) == 4:
            y_pred = y_pred[:, -1]
        present, target_boxes, valid = split_targets(y_true, self.num_classes)
        confident = ops.cast(ops.sigmoid(y_pred[..., :self.num_classes]) >= self.min_score,
                             "float32")
        boxes = ops.sigmoid(y_pred[..., self.num_classes:])
        overlaps = ops.cast(iou(corners(boxes)[:, :, None], corners(target_boxes)[:, None])
                            >= self.min_iou, "float32")
        # [batch, queries, classes]: an object of that class overlaps the query's box
        near_object = ops.minimum(ops.einsum("bqm,bmc->bqc", overlaps, present), 1.0)
        # [batch, objects]: a confident detection of its class overlaps it
        seen = ops.minimum(ops.einsum("bqm,bqc,bmc->bm", overlaps, confident, present), 1.0)
        for variable, value in zip(self.counts, (
                ops.sum(near_object * confident), ops.sum(confident), ops.sum(seen),
                ops.sum(ops.cast(valid, "float32")))):
            variable.assign_add(value)

    def result(self):
        right, detections, found, objects = self.counts
        precision = right / ops.maximum(detections, 1.0)
        recall = found / ops.maximum(objects, 1.0)
        return 2 * precision * recall / ops.maximum(precision + recall, 1e-7)

    def reset_state(self):
        for variable in self.counts:
            variable.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes,
                "min_iou": self.min_iou, "min_score": self.min_score}
