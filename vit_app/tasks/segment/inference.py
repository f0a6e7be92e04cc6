"""The segment task's inference part: a class for every pixel.

`vit predict` writes each image's mask and overlay at its own size (`segment_predict`);
`vit evaluate` gives mIoU, pixel accuracy and IoU per class at the masks' own resolution
(`segmentation_eval`); `vit serve` answers `class_ids` per pixel and its page draws the mask.

An exported file is judged by what the user ships it for. It passes when it names Keras' class
on the pixels where Keras is decisive (its top class leads the runner-up by at least
`DECISIVE_MARGIN` in probability) at the format's bar, and, on labelled images, neither its
mIoU nor any class's IoU falls below Keras' by more than `SCORE_MARGINS` plus the validation
set's sampling noise (a file scoring better is never refused; a set of fewer than
`MIN_JUDGED_IMAGES` images does not judge scores). Near-tied pixels (a thin membrane's
edge, a class boundary) may flip under float16 or int8 rounding without changing what the mask
is worth: they alone never fail a file, and a float file is called a bug only when decisive
pixels disagree.
"""

from __future__ import annotations

import argparse

import numpy as np

from vit_app.data import specs

from vit_app.data import training_data
from vit_app.images import palette
from vit_app.tasks.segment.data import sources as segmentation
from vit_app.inference import evaluate as evaluation
from vit_app.tasks.segment import evaluate as segmentation_eval
from vit_app.tasks.segment import predict as segment_predict
from vit_app.inference.predict import table
from vit_app.inference.inference_task import (InferenceTask, judged_images, percent,
                                              percent_or_blank, sampling_noise,
                                              score_failure)
from vit_keras.tasks.segment import scores as segmentation_scores

PAGE_TOP_K = 5  # classes the page lists, by the share of pixels they cover
# A pixel is decisive where Keras' top class leads the runner-up by this much probability:
# rounding (float16 weights, int8) moves a logit by hundredths to tenths, so a lead this size
# is not what it flips.
DECISIVE_MARGIN = 0.1
# How far from Keras' a file's mIoU and each class's IoU may be, in IoU (0.005 = half a point):
# float files, then int8 ones.
SCORE_MARGINS = {"float": (0.005, 0.01), "int8": (0.01, 0.02)}


class Segment(InferenceTask):
    """See the module docstring."""

    name = "segment"
    logits_rank = 4
    agreement = "pixels"
    agreement_column = "pixel agreement"
    score_column = "mIoU"
    summary_kind = "pixel "
    summary_score = "mIoU"
    verb = "Segmenting"

    def agreement_cell(self, entry: dict) -> str:
        """Top-1 agreement of every pixel, and of the decisive ones where they were judged."""
        decisive = entry.get("decisive_agreement")
        return super().agreement_cell(entry) + (
            "" if decisive is None else f" (decisive {percent(decisive)})")

    def score_cell(self, entry: dict) -> str:
        return percent_or_blank(entry.get("mIoU"))

    def predict(self, model, readable, args: argparse.Namespace) -> tuple[list[dict], str]:
        rows = segment_predict.segment_files(model, readable, args.top_k, args.batch_size,
                                             args.masks, args.overwrite)
        return rows, (f"{table(rows, score='share')}\nmasks and overlays: {args.masks}/ "
                      "(<image>.png, <image>_overlay.png)")

    def export_examples(self, spec: str, trained_on: tuple, rule, input_size: tuple):
        """Images and their masks resized whole; a model fed images at their own size was
        trained on crops of them, so it is checked on tiles at that resolution, as `vit
        train` checks it."""
        tiles_or_pairs = segmentation.take_tiles if rule.native else segmentation.take_pairs

        def take(source, count):
            return tiles_or_pairs(source, input_size, count)

        return segmentation.open_segmentation_data(spec, *trained_on), take

    def evaluate(self, model, args: argparse.Namespace) -> tuple[dict, list[str]]:
        if args.few_shot is not None:
            raise ValueError(f"--few-shot fits classifiers; {args.model} is a segmenter: "
                             "leave --few-shot out")
        specs.refuse_other_tasks_data(args.data, self.name, model=args.model)
        source = segmentation.load_segmentation_source(args.data, training_data.evaluation_subset(
            args.data), val_split=0.0)
        results = segmentation_eval.evaluate(model, source, min(args.batch_size, 64),
                                             args.image_size)
        evaluation.name_classes(results, evaluation.class_names_for(
            args.model, args.labels, source.class_names))
        size = results["image_size"]
        at = ("their own size" if size == "native" else f"{size[0]}x{size[1]}")
        where = (f"{args.model} on {args.data}: {results['examples']} images at {at}, scored "
                 "at the masks' own size")
        return results, segmentation_eval.report_lines(results, where)

    def label_scores(self, logits, labels) -> dict:
        """{'accuracy': None, 'mIoU', 'pixel_accuracy'} of the masks (255 ignored)."""
        if labels is None:
            return {"accuracy": None}
        found = segmentation_scores.scores(segmentation_scores.confusion_matrix(
            labels, logits.argmax(-1), logits.shape[-1]))
        return {"accuracy": None, "mIoU": _number(found["mIoU"]),
                "pixel_accuracy": _number(found["pixel_accuracy"])}

    def file_agreement(self, logits, keras_logits, labels, image_hw=None) -> dict:
        """The decisive pixels' agreement (`decisive_agreement`, and their share of all
        pixels, `decisive_pixels`); on labelled images, how far the file's mIoU and its
        worst class IoU are from Keras' (`mIoU_delta`, `class_iou_delta`: file - Keras), how
        much each of Keras' scores moves with the choice of images (`mIoU_noise`,
        `class_iou_noise`) and whether there are enough images to judge them."""
        logits, keras_logits = np.asarray(logits), np.asarray(keras_logits)
        decisive = _lead(keras_logits) >= DECISIVE_MARGIN
        same = logits.argmax(-1) == keras_logits.argmax(-1)
        columns = {"decisive_agreement": float(same[decisive].mean()) if decisive.any()
                   else 1.0, "decisive_pixels": float(decisive.mean())}
        if labels is not None:
            columns.update(_score_deltas(_confusions(labels, logits),
                                         _confusions(labels, keras_logits)))
        return columns

    def check(self, entry: dict, bar: float, quantization: str | None) -> tuple[str | None, bool]:
        """Decisive pixels at the bar (else the file computes something else), then no score
        worse than Keras' by more than `SCORE_MARGINS` and the set's sampling noise (else near
        ties flipped enough to matter)."""
        decisive = entry["decisive_agreement"]
        if decisive < bar:
            return (f"decisive pixel agreement with the Keras model {percent(decisive)} < "
                    f"{percent(bar)} (pixels where Keras' class leads by >= "
                    f"{DECISIVE_MARGIN:g} in probability)", True)
        kind = "int8" if quantization in ("dynamic_int8", "int8") else "float"
        margins = dict(zip(("mIoU", "class_iou"), zip(("mIoU", "a class's IoU"),
                                                      SCORE_MARGINS[kind])))
        return score_failure(entry, margins, kind, f"decisive pixels {percent(decisive)}"), False

    def near_tie_advice(self) -> str:
        return ("the file agrees where the model is sure, but its near-tied pixels flip enough "
                "to change the scores: ship the float32 file, or train until the model is "
                "surer of its pixels")

    def answer(self, model, kind: str, inputs, outputs: dict) -> dict:
        """Class ids per pixel: the per-pixel scores would be `classes` times larger (a list
        of one array per image where the model segments each at its own size)."""
        logits = outputs["logits"]
        if isinstance(logits, list):
            return {"class_ids": [np.argmax(one, axis=-1).astype(np.int32) for one in logits]}
        return {"class_ids": np.argmax(logits, axis=-1).astype(np.int32)}

    def page_answer(self, name: str, model, outputs: dict) -> dict:
        """The classes by pixel share, and the mask at the model's size with a colour per
        class (the palette of `vit predict --masks`)."""
        class_ids = outputs["class_ids"][0]
        names = model.class_names
        shares = np.bincount(class_ids.ravel(), minlength=len(names)) / class_ids.size
        top = [{"index": int(i), "label": names[i], "share": float(shares[i])}
               for i in np.argsort(-shares, kind="stable")[:PAGE_TOP_K] if shares[i] > 0]
        mask = {"rows": int(class_ids.shape[0]), "cols": int(class_ids.shape[1]),
                "values": class_ids.ravel().tolist(),
                "colours": palette(len(names))[:len(names)].tolist()}
        return {"model": name, "top": top, "drawing": "mask", "mask": mask,
                "caption": "Each pixel's class, one colour per class (the first class, "
                           "background, left clear).",
                "score_of": "of the pixels", "empty": "no class."}

    def serving_outputs(self, height: int, width: int, num_classes: int) -> dict:
        return {"class_ids": ("DT_INT32", [-1, height, width])}


def _lead(logits: np.ndarray) -> np.ndarray:
    """Per pixel, the top class's probability minus the runner-up's."""
    shifted = logits - logits.max(-1, keepdims=True)
    probabilities = np.exp(shifted)
    probabilities /= probabilities.sum(-1, keepdims=True)
    top_two = np.sort(probabilities, axis=-1)[..., -2:]
    return top_two[..., 1] - top_two[..., 0]


def _confusions(labels, logits) -> np.ndarray:
    """One confusion matrix per image [N, classes, classes] of its argmax against its mask."""
    classes = logits.shape[-1]
    return np.stack([segmentation_scores.confusion_matrix(mask, values.argmax(-1), classes)
                     for mask, values in zip(labels, logits)])


def _score_deltas(file_confusions: np.ndarray, keras_confusions: np.ndarray) -> dict:
    """A file's mIoU and worst class IoU against Keras' (file - Keras), with how much each
    difference moves over bootstrap resamples of the images (`sampling_noise`)."""
    def deltas(indices):
        ours, theirs = (segmentation_scores.scores(confusions[indices].sum(0))
                        for confusions in (file_confusions, keras_confusions))
        return {"mIoU": ours["mIoU"] - theirs["mIoU"],
                "class_iou": np.asarray(ours["iou"]) - np.asarray(theirs["iou"])}

    found = deltas(np.arange(len(keras_confusions)))
    class_deltas = np.where(np.isnan(found["class_iou"]), 0.0, found["class_iou"])
    worst = int(np.argmin(class_deltas))  # NaN: a class absent from both

    def judged_deltas(indices):
        picked = deltas(indices)
        return {"mIoU": picked["mIoU"], "class_iou": picked["class_iou"][worst]}

    noise = sampling_noise(judged_deltas, len(keras_confusions))
    return {"mIoU_delta": float(found["mIoU"]),
            "class_iou_delta": float(class_deltas[worst]),
            **{f"{name}_noise": noise.get(name, 0.0) for name in ("mIoU", "class_iou")},
            **judged_images(len(keras_confusions))}


def _number(value):
    return None if value is None or np.isnan(value) else float(value)


TASK = Segment()
