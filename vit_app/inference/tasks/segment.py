"""The segment task's inference part: a class for every pixel.

`vit predict` writes each image's mask and overlay at its own size (`segment_predict`);
`vit evaluate` gives mIoU, pixel accuracy and IoU per class at the masks' own resolution
(`segmentation_eval`); `vit serve` answers `class_ids` per pixel and its page draws the mask;
an exported file is checked pixel by pixel against Keras.
"""

from __future__ import annotations

import argparse

import numpy as np

from vit_app.data import segmentation, sources
from vit_app.inference import evaluate as evaluation, segment_predict, segmentation_eval
from vit_app.inference.predict import table
from vit_app.inference.tasks import InferenceTask
from vit_keras import segmentation_scores

PAGE_TOP_K = 5  # classes the page lists, by the share of pixels they cover


class Segment(InferenceTask):
    """See the module docstring."""

    name = "segment"
    logits_rank = 4
    agreement = "pixels"
    agreement_column = "pixel agreement"
    score_column = "mIoU"
    label_kind = "masks"
    verb = "Segmenting"

    def predict(self, model, readable, args: argparse.Namespace) -> tuple[list[dict], str]:
        rows = segment_predict.segment_files(model, readable, args.top_k, args.batch_size,
                                             args.masks)
        return rows, (f"{table(rows, score='share')}\nmasks and overlays: {args.masks}/ "
                      "(<image>.png, <image>_overlay.png)")

    def evaluate(self, model, args: argparse.Namespace) -> tuple[dict, list[str]]:
        if args.few_shot is not None:
            raise ValueError(f"--few-shot fits classifiers; {args.model} is a segmenter: "
                             "leave --few-shot out")
        source = segmentation.load_segmentation_source(args.data, sources.evaluation_subset(
            args.data), val_split=0.0)
        results = segmentation_eval.evaluate(model, source, min(args.batch_size, 64),
                                             args.image_size)
        evaluation.name_classes(results, evaluation.class_names_for(
            args.model, args.labels, source.class_names))
        height, width = results["image_size"]
        where = (f"{args.model} on {args.data}: {results['examples']} images at "
                 f"{height}x{width}, scored at the masks' own size")
        return results, segmentation_eval.report_lines(results, where)

    def label_scores(self, logits, labels) -> dict:
        """{'accuracy': None, 'mIoU', 'pixel_accuracy'} of the masks (255 ignored)."""
        if labels is None:
            return {"accuracy": None}
        found = segmentation_scores.scores(segmentation_scores.confusion_matrix(
            labels, logits.argmax(-1), logits.shape[-1]))
        return {"accuracy": None, "mIoU": _number(found["mIoU"]),
                "pixel_accuracy": _number(found["pixel_accuracy"])}

    def answer(self, model, kind: str, inputs, outputs: dict) -> dict:
        """Class ids per pixel: the per-pixel scores would be `classes` times larger."""
        return {"class_ids": np.argmax(outputs["logits"], axis=-1).astype(np.int32)}

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
                "colours": segment_predict.palette(len(names))[:len(names)].tolist()}
        return {"model": name, "top": top, "mask": mask, "heatmap": None,
                "heatmap_unavailable": None}

    def serving_outputs(self, height: int, width: int, num_classes: int) -> dict:
        return {"class_ids": ("DT_INT32", [-1, height, width])}


def _number(value):
    return None if value is None or np.isnan(value) else float(value)


TASK = Segment()
