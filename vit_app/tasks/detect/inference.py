"""The detect task's inference part: boxes, each with a class and a score.

A detector's outputs are per query [class logits, box logits] (`vit_keras.tasks.detect.model`); its
`probabilities` (the sigmoid every format applies, `activation` 'sigmoid') are the class scores
and the box (cx, cy, w, h in fractions of the image). `vit predict` writes each image's boxes
(file, class, score, x0 y0 x1 y1 in pixels of the image as given) and a copy of the image with
them drawn (`detect_predict`); `vit evaluate` gives COCO's mAP, mAP@0.5, AP per size and per
class (`detection_eval`, pycocotools); `vit serve` answers every query's class scores and box
and its page draws the boxes scoring at least `PAGE_MIN_SCORE`.

An exported file is judged by the boxes it gives. It passes when it repeats Keras' detections
(each image's best, and every other scoring at least `CHECKED_SCORE`) at the format's bar: a
box of the same class at IoU >= `MATCH_IOU`, or with every side within `MATCH_PIXELS` of
Keras' in the model's input, among the file's detections scoring at least half as much
(greedily, best first; rounding moves a score, not a box's class or place). The pixel
tolerance is for small boxes: int8 rounding moves a side by a fraction of a pixel (the digit
boxes' int8 TFLite file: median 0.37 px, 95% under 0.67 px), which costs an 8 px wide box
more than 0.1 of IoU. On labelled images neither the file's mAP nor its mAP@0.5 may fall below Keras' by more than
`SCORE_MARGINS` plus the validation set's sampling noise (a file scoring better is never
refused; fewer than `MIN_JUDGED_IMAGES` images do not judge scores).
"""

from __future__ import annotations

import argparse
import hashlib

import numpy as np

from vit_app.data import specs

from vit_app.data import training_data
from vit_app.tasks.detect.data import sources as detection
from vit_app.tasks.detect import baseline
from vit_app.tasks.detect import evaluate as detection_eval
from vit_app.tasks.detect import predict as detect_predict
from vit_app.inference.inference_task import (InferenceTask, judged_images, percent,
                                              sampling_noise, score_failure)
from vit_keras.tasks.detect import boxes as detection_boxes

CHECKED_SCORE = 0.3   # Keras' detections the file must repeat (with each image's best)
MATCH_IOU = 0.9       # the overlap a repeated box must have, with the same class
MATCH_PIXELS = 1.0    # ... or the most any side may move, in pixels of the model's input
PAGE_MIN_SCORE = 0.3   # as `vit predict --min-score`: a focal loss keeps scores modest
# How far from Keras' a file's mAP and mAP@0.5 may be, in AP (0.01 = one point). An int8 file's
# mAP over IoU 0.5:0.95 may move 5 points: its thresholds up to 0.95 count the sub-pixel moves
# its int8 activations make (the digit boxes' full-integer TFLite file: -3.5 points, with every
# box repeated within a pixel and mAP@0.5 +0.1), while its mAP@0.5, whether it finds the same
# objects, keeps 2.
SCORE_MARGINS = {"float": {"mAP": 0.01, "mAP50": 0.01}, "int8": {"mAP": 0.05, "mAP50": 0.02}}
NOISE_DRAWS = 50   # bootstrap resamples of the validation images, each a COCO evaluation
NOMINAL_SIDE = 1000   # export scores: boxes in fractions, scaled alike (mAP ignores the scale)


def object_classes(model) -> int:
    """The classes a loaded detector scores (its outputs hold 4 box values beside them)."""
    return model.num_classes - detection_boxes.BOX_CHANNELS


class Detect(InferenceTask):
    """See the module docstring."""

    name = "detect"
    logits_rank = 3
    agreement = "boxes"
    agreement_column = "box agreement"
    score_column = "mAP"
    summary_kind = "box "
    verb = "Detecting"

    def agreement_cell(self, entry: dict) -> str:
        """The share of Keras' confident boxes the file repeats."""
        if entry.get("box_agreement") is None:
            return super().agreement_cell(entry)
        return f"{percent(entry['box_agreement'])} of {entry['keras_boxes']} boxes"

    def score_cell(self, entry: dict) -> str:
        value = entry.get("mAP")
        return "" if value is None else f"{percent(value)} mAP"

    def score_summary(self, entry: dict) -> str:
        return self.score_cell(entry)

    def predict(self, model, readable, args: argparse.Namespace) -> tuple[list[dict], str]:
        folder = None if args.no_drawn else args.drawn
        rows = detect_predict.detect_files(model, readable, args.batch_size, args.min_score,
                                           folder, args.overwrite)
        drawn = f"\nboxes drawn: {folder}/ (<image>_boxes.png)" if folder else ""
        return rows, detect_predict.table(rows) + drawn

    def output_records(self, rows: list[dict]):
        return detect_predict.output_records(rows)

    def export_examples(self, spec: str, trained_on: tuple, rule, input_size: tuple):
        """Images resized whole, their targets in fractions of them."""
        def take(source, count):
            return detection.take_examples(source, input_size, count)

        return detection.open_detection_data(spec, *trained_on), take

    def evaluate(self, model, args: argparse.Namespace) -> tuple[dict, list[str]]:
        if args.few_shot is not None:
            raise ValueError(f"--few-shot fits classifiers; {args.model} is a detector: leave "
                             "--few-shot out")
        specs.refuse_other_tasks_data(args.data, self.name, model=args.model)
        source = detection.load_detection_source(args.data, training_data.evaluation_subset(args.data),
                                                 val_split=0.0)
        names = model.class_names[:object_classes(model)]
        if len(source.class_names) != len(names):
            raise ValueError(f"{args.data} has {len(source.class_names)} classes, {args.model} "
                             f"detects {len(names)}: expected the data it was trained for")
        results = detect_predict.evaluate(model, source, args.batch_size)
        where = (f"{args.model} on {args.data}: {results['images']} images, "
                 f"{results['objects']} objects, each image resized whole and its boxes scored "
                 "at its own size")
        lines = detection_eval.report_lines(results, where)
        constant = baseline.source_scores(source, source)
        results["constant_box"] = constant
        results["beats_constant_box"] = baseline.beats(results, constant)
        lines.append("  constant box (each class's mean box on these images, in every image): "
                     + baseline.table_cell(results, constant))
        if results["beats_constant_box"] is False:
            lines.append(f"WARNING: {baseline.shortfall(results, constant)}")
        return results, lines

    def checked_labels(self, labels: np.ndarray, images: np.ndarray) -> np.ndarray:
        """Targets [N, max_objects, 5] float32 (class or -1, cx, cy, w, h in fractions), one
        per image."""
        if labels.ndim != 3 or labels.shape[-1] != 5 or len(labels) != len(images):
            raise ValueError(f"a detector's eval labels must be [{len(images)}, max_objects, 5] "
                             f"(class or -1, cx, cy, w, h in fractions), got shape "
                             f"{labels.shape}")
        return labels.astype(np.float32)

    def label_scores(self, logits, labels) -> dict:
        """{'accuracy': None, 'mAP', 'mAP50'} of the outputs against the targets (class, cx,
        cy, w, h in fractions), or {'accuracy': None} without labels."""
        if labels is None:
            return {"accuracy": None}
        found = _scores(logits, labels)
        return {"accuracy": None, "mAP": found["mAP"], "mAP50": found["mAP50"]}

    def file_agreement(self, logits, keras_logits, labels, image_hw=None) -> dict:
        """The share of Keras' checked detections the file repeats (`box_agreement`), how
        many there were (`keras_boxes`); on labelled images, how far the file's mAP and
        mAP@0.5 are from Keras' (`mAP_delta`, `mAP50_delta`: file - Keras)."""
        side = tuple(image_hw) if image_hw is not None else (NOMINAL_SIDE, NOMINAL_SIDE)
        theirs = [{key: values[:max(1, int((image["scores"] >= CHECKED_SCORE).sum()))]
                   for key, values in image.items()}
                  for image in detection_boxes.decode(np.asarray(keras_logits), side)]
        # The file's boxes down to half the lowest score checked: an early model's best box
        # may score under CHECKED_SCORE, and the file's copy of it must still be a candidate.
        lowest = min([CHECKED_SCORE, *(float(image["scores"][-1]) for image in theirs
                                       if len(image["scores"]))])
        ours = detection_boxes.decode(np.asarray(logits), side, min_score=lowest / 2)
        tolerance = MATCH_PIXELS if image_hw is not None else 0.0
        matched = [detection_boxes.matched_pairs(keras, file, MATCH_IOU, tolerance)
                   for keras, file in zip(theirs, ours)]
        repeated, total = (sum(column) for column in zip(*matched)) if matched else (0, 0)
        columns = {"box_agreement": repeated / total if total else 1.0, "keras_boxes": total}
        if labels is not None:
            columns.update(_score_deltas(np.asarray(logits), np.asarray(keras_logits),
                                         np.asarray(labels)))
        return columns

    def check(self, entry: dict, bar: float, quantization: str | None) -> tuple[str | None, bool]:
        """Keras' confident boxes repeated at the bar (else the file computes something else),
        then no score worse than Keras' by more than `SCORE_MARGINS` and the set's noise."""
        agreement = entry["box_agreement"]
        if agreement < bar:
            return (f"box agreement with the Keras model {percent(agreement)} < {percent(bar)} "
                    f"(Keras' best box per image and those scoring >= {CHECKED_SCORE:g}, "
                    f"repeated with the same class at IoU >= {MATCH_IOU:g} or within "
                    f"{MATCH_PIXELS:g} px)", True)
        kind = "int8" if quantization in ("dynamic_int8", "int8") else "float"
        margins = {name: (name, margin) for name, margin in SCORE_MARGINS[kind].items()}
        return score_failure(entry, margins, kind, f"Keras' boxes {percent(agreement)}"), False

    def near_tie_advice(self) -> str:
        return ("the file repeats the boxes Keras is sure of, but its low-scoring detections "
                "move enough to change the mAP: ship the float32 file, or train longer")

    def answer(self, model, kind: str, inputs, outputs: dict) -> dict:
        """Every query's class scores [batch, queries, classes] and box [batch, queries, 4]
        (cx, cy, w, h in fractions of the image, the box cut to the image)."""
        probabilities = np.asarray(outputs["probabilities"], np.float32)
        count = object_classes(model)
        boxes = detection_boxes.xyxy_to_cxcywh(detection_boxes.within_image(
            detection_boxes.cxcywh_to_xyxy(probabilities[..., count:])))
        return {"scores": probabilities[..., :count], "boxes": boxes.astype(np.float32)}

    def page_answer(self, name: str, model, outputs: dict) -> dict:
        """The boxes scoring at least `PAGE_MIN_SCORE`, corners in fractions of the image (cut
        to it), with their class names and scores."""
        scores, boxes = outputs["scores"][0], outputs["boxes"][0]
        names = model.class_names
        found = []
        for query, class_id in zip(*np.nonzero(scores >= PAGE_MIN_SCORE)):
            x0, y0, x1, y1 = detection_boxes.within_image(
                detection_boxes.cxcywh_to_xyxy(boxes[query]))
            found.append({"label": names[class_id], "score": float(scores[query, class_id]),
                          "box": [float(x0), float(y0), float(x1), float(y1)]})
        found.sort(key=lambda box: -box["score"])
        least = round(100 * PAGE_MIN_SCORE)
        return {"model": name, "top": [{"index": i, "label": box["label"],
                                        "probability": box["score"]}
                                       for i, box in enumerate(found)],
                "drawing": "boxes", "boxes": found,
                "caption": f"{len(found)} boxes scoring {least}% or more, each with its class "
                           "and score.",
                "empty": f"no box scores {least}% or more."}

    def page_features(self, model) -> dict:
        """No heatmap; the classes it detects (its outputs hold 4 box values beside them)."""
        return {"heatmap": False, "classes": object_classes(model)}

    def serving_outputs(self, height: int, width: int, num_classes: int) -> dict:
        classes = num_classes - detection_boxes.BOX_CHANNELS
        return {"scores": ("DT_FLOAT", [-1, -1, classes]), "boxes": ("DT_FLOAT", [-1, -1, 4])}


def _score_deltas(logits: np.ndarray, keras_logits: np.ndarray, labels: np.ndarray) -> dict:
    """A file's mAP and mAP@0.5 against Keras' (file - Keras); where one is lower than a float
    file may lose, how much that difference moves over bootstrap resamples of the images
    (`sampling_noise`: each image is evaluated once, and each resample accumulates those
    evaluations; run only when a verdict needs it)."""
    ours, theirs = _scores(logits, labels), _scores(keras_logits, labels)
    columns = {f"{key}_delta": ours[key] - theirs[key] for key in ("mAP", "mAP50")}
    lowest_margin = min(min(margins.values()) for margins in SCORE_MARGINS.values())
    if min(columns.values()) < -lowest_margin:
        file_evaluation, keras_evaluation = _evaluated(logits, labels), \
            _evaluated(keras_logits, labels)
        names = [str(index) for index in range(logits.shape[-1] - detection_boxes.BOX_CHANNELS)]

        def deltas(indices):
            file_scores, keras_scores = (
                detection_eval.accumulated_scores(evaluation, names, indices)
                for evaluation in (file_evaluation, keras_evaluation))
            return {key: (file_scores[key] or 0.0) - (keras_scores[key] or 0.0)
                    for key in ("mAP", "mAP50")}

        noise = sampling_noise(deltas, len(labels), NOISE_DRAWS)
        columns.update({f"{key}_noise": noise.get(key, 0.0) for key in ("mAP", "mAP50")})
    return {**columns, **judged_images(len(labels))}


# COCO's evaluation is the export check's slowest part, and the same outputs come back: a
# file's scores for its row and for its distance from Keras', Keras' own for every file, and
# (the resamples being seeded) Keras' on each bootstrap resample for every file judged by one.
_SCORED: dict[bytes, dict] = {}
_SCORED_KEPT = 4 * NOISE_DRAWS


def _scores(logits, labels) -> dict:
    """COCO's scores of outputs against targets in fractions, both scaled to a nominal image
    (remembered by content: see `_SCORED`)."""
    logits, labels = np.ascontiguousarray(logits), np.ascontiguousarray(labels, np.float64)
    key = hashlib.sha256(logits.tobytes() + str(logits.shape).encode() + labels.tobytes()
                         ).digest()
    if key not in _SCORED:
        if len(_SCORED) >= _SCORED_KEPT:
            del _SCORED[next(iter(_SCORED))]
        _SCORED[key] = _coco_scores(logits, labels)
    return dict(_SCORED[key])


def _coco_scores(logits, labels) -> dict:
    """`_scores`, computed."""
    classes = np.asarray(logits).shape[-1] - detection_boxes.BOX_CHANNELS
    found = detection_eval.accumulated_scores(_evaluated(logits, labels),
                                              [str(index) for index in range(classes)])
    return {key: (0.0 if found[key] is None else found[key]) for key in ("mAP", "mAP50")}


def _evaluated(logits, labels):
    """pycocotools' per-image evaluation of outputs against targets in fractions, both scaled
    to a nominal image (`detection_eval.evaluated`)."""
    side = NOMINAL_SIDE
    ground_truth = []
    for image in np.asarray(labels, np.float64):
        present = image[image[:, 0] >= 0]
        corners = detection_boxes.cxcywh_to_xyxy(present[:, 1:]) * side
        ground_truth.append(np.concatenate([corners, present[:, :1]], axis=-1))
    logits = np.asarray(logits)
    detections = detection_boxes.decode(logits, (side, side), detection_eval.MAX_DETECTIONS)
    return detection_eval.evaluated(ground_truth, detections, [(side, side)] * len(labels),
                                    logits.shape[-1] - detection_boxes.BOX_CHANNELS)


TASK = Detect()
