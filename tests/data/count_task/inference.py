"""The count task's inference part: how many dots each image holds.

`vit predict` prints and writes each image's count and estimate; `vit evaluate` scores the
share of exact counts and the mean absolute error; `vit serve` answers `count` and `estimate`
and its page draws the count with the task's own script (`drawing.js`). An exported file
passes when its rounded counts are Keras' at the format's bar.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from count_task.data import sources
from vit_app.data import specs, training_data
from vit_app.inference.inference_task import InferenceTask, percent, percent_or_blank


def counts_of(estimates) -> np.ndarray:
    """Whole counts (never below 0) of estimates [batch, 1] or [batch]."""
    return np.round(np.maximum(np.asarray(estimates, np.float64).reshape(-1), 0)).astype(int)


def count_scores(estimates, true_counts) -> dict:
    """The share of exact counts and the mean absolute error of the estimates."""
    estimates, true_counts = np.asarray(estimates).reshape(-1), np.asarray(true_counts)
    return {"exact": float((counts_of(estimates) == true_counts).mean()),
            "mae": float(np.abs(estimates - true_counts).mean())}


class Count(InferenceTask):
    """See the module docstring."""

    name = "count"
    agreement = "counts"
    agreement_column = "count agreement"
    score_column = "exact counts"
    summary_kind = "count "
    summary_score = "exact counts"
    verb = "Counting"

    def agreement_cell(self, entry: dict) -> str:
        return percent(entry["count_agreement"])

    def score_cell(self, entry: dict) -> str:
        return percent_or_blank(entry.get("exact"))

    def predict(self, model, readable, args: argparse.Namespace) -> tuple[list[dict], str]:
        rows = []
        for start in range(0, len(readable), args.batch_size):
            batch = readable[start:start + args.batch_size]
            estimates = model.predict_encoded([data for _, data in batch])["logits"][:, 0]
            rows += [{"file": path, "count": int(count), "estimate": float(estimate)}
                     for (path, _), count, estimate in zip(batch, counts_of(estimates),
                                                            estimates)]
        return rows, "\n".join(f"{row['file']}: {row['count']} dots (estimate "
                               f"{row['estimate']:.{args.decimals}f})" for row in rows)

    def output_records(self, rows: list[dict]) -> tuple[list[str], list[list], list[dict]]:
        return (["file", "count", "estimate"],
                [[row["file"], row["count"], f"{row['estimate']:.6f}"] for row in rows], rows)

    def evaluate(self, model, args: argparse.Namespace) -> tuple[dict, list[str]]:
        specs.refuse_other_tasks_data(args.data, self.name, model=args.model)
        source = sources.load_count_source(args.data, training_data.evaluation_subset(args.data))
        pictures, true_counts = sources.labelled_images(source, model.image_size)
        estimates = np.concatenate([
            model.predict(pictures[start:start + args.batch_size])["logits"][:, 0]
            for start in range(0, len(pictures), args.batch_size)])
        results = {"examples": len(true_counts), **count_scores(estimates, true_counts)}
        return results, [f"{args.model} on {args.data}: {len(true_counts)} images",
                         f"exact counts {percent(results['exact'])}, mean absolute error "
                         f"{results['mae']:.3f} dots"]

    def export_examples(self, spec: str, trained_on: tuple, rule, input_size: tuple):
        def take(source, count):
            return sources.labelled_images(source, input_size, count)

        return sources.open_count_data(spec, *trained_on), take

    def checked_labels(self, labels, images) -> np.ndarray:
        labels = np.asarray(labels, np.float32).reshape(-1)
        if len(labels) != len(images):
            raise ValueError(f"got {len(labels)} counts for {len(images)} images")
        return labels

    def label_scores(self, logits, labels) -> dict:
        return {"accuracy": None} if labels is None else \
            {"accuracy": None, **count_scores(logits, labels)}

    def file_agreement(self, logits, keras_logits, labels, image_hw=None) -> dict:
        """How often the file's rounded counts are Keras', and its largest difference in
        estimate."""
        return {"count_agreement": float((counts_of(logits) == counts_of(keras_logits)).mean()),
                "largest_difference": float(np.abs(np.asarray(logits) -
                                                   np.asarray(keras_logits)).max())}

    def check(self, entry: dict, bar: float, quantization: str | None):
        agreement = entry["count_agreement"]
        if agreement >= bar:
            return None, False
        return (f"{self.agreement_column} with the Keras model {percent(agreement)} < "
                f"{percent(bar)}", True)

    def answer(self, model, kind: str, inputs, outputs: dict) -> dict:
        estimates = np.asarray(outputs["logits"], np.float32)[:, 0]
        return {"count": counts_of(estimates).astype(np.int32), "estimate": estimates}

    def page_answer(self, name: str, model, outputs: dict) -> dict:
        count = int(outputs["count"][0])
        return {"model": name, "top": [{"label": f"{count} dots", "share": 1.0}],
                "drawing": self.name, "count": count,
                "estimate": float(outputs["estimate"][0]),
                "caption": "How many dots the model counts.", "empty": "no answer."}

    def page_script(self) -> str:
        return os.path.join(os.path.dirname(__file__), "drawing.js")

    def serving_outputs(self, height: int, width: int, num_classes: int) -> dict:
        return {"count": ("DT_INT32", [-1]), "estimate": ("DT_FLOAT", [-1])}


TASK = Count()
