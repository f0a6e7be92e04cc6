"""`vit predict`: the top-k classes of image files by a trained model (.keras, a SavedModel
directory, .tflite or .onnx) or an architecture with pretrained weights, loaded as a
`vit_app.inference.classifier.Classifier`; what it writes is the model's task's
(`vit_app.inference.inference_task`: a classifier's top-k classes, a segmenter's masks). The
flags are `vit.commands.predict`'s; the folders and patterns among the images were expanded to
their files by its `check`.

The images go through the model in batches; a file that cannot be used (not an image, corrupt,
too large, unreadable) is skipped and listed at the end, and the command fails only when no
file could be used. The table, and `--output` (.csv or .json), give each image's top-k classes.
"""

from __future__ import annotations

import argparse
import csv
import io
import json

from vit_app import console
from vit_app.images import pixel_size
from vit_app.inference import classifier
from vit_app.inference import inference_task as tasks
from vit_keras import atomic

OUTPUT_KINDS = (".csv", ".json")


def load_classifier(args: argparse.Namespace):
    """The `vit_app.inference.classifier.Classifier` that --model, --tflite or --onnx names."""
    return classifier.load(args.tflite or args.onnx or args.model, args.weights, args.labels,
                           args.preprocessing)


def small_images(readable, patch: int | None) -> list[str]:
    """Warnings for images smaller than one patch on a side: the model sees them upsampled
    to its input size, a few pixels stretched over every patch."""
    if not patch:
        return []
    warnings = []
    for path, data in readable:
        width, height = pixel_size(data)
        if min(width, height) < patch:
            warnings.append(f"warning: {path} is {width}x{height} px, smaller than one "
                            f"{patch}x{patch} patch: it is upsampled, and its prediction "
                            "rests on a few pixels")
    return warnings


def table(rows: list[dict], score: str = "score") -> str:
    """A header, then one line per image: the file, then its top-k classes and scores (a
    segmenter's: pixel shares, `score='share'`), best first, in aligned columns."""
    top_k = max(len(row["top"]) for row in rows)
    header = ["file"] + [title for rank in range(1, top_k + 1)
                         for title in (f"top-{rank}", score)]
    lines = [header] + [[row["file"]] + [cell for name, score in row["top"]
                                         for cell in (name, f"{score:.4f}")] for row in rows]
    widths = [max(len(line[column]) for line in lines if column < len(line))
              for column in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip()
                     for line in lines)


def write_predictions(path: str, rows: list[dict], skipped, task) -> None:
    """`rows` as CSV (the task's columns, `InferenceTask.output_records`; skipped files apart,
    in the JSON only) or JSON ({'predictions': [...], 'skipped': [...]}), written whole or not
    at all."""
    header, csv_rows, predictions = task.output_records(rows)
    if path.lower().endswith(".json"):
        data = {"predictions": predictions,
                "skipped": [{"file": file, "error": why} for file, why in skipped]}
        text = json.dumps(data, indent=2) + "\n"
    else:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(header)
        writer.writerows(csv_rows)
        text = buffer.getvalue()
    atomic.write_bytes(path, text.encode())


def run(args: argparse.Namespace) -> int:
    """Runs `vit predict`."""
    model = load_classifier(args)
    task = tasks.get(model.task)
    readable, skipped = task.read_inputs(args.images)
    if not readable:
        raise ValueError(f"none of the {len(args.images)} files is a usable {task.input_noun}: "
                         + "; ".join(why for _, why in skipped))
    rows, printed = task.predict(model, readable, args)
    console.say(printed)
    for warning in small_images(readable, model.patch_size) if task.input_noun == "image" \
            else []:
        console.say(warning, error=True)
    if args.output:
        write_predictions(args.output, rows, skipped, task)
    summary = f"{len(rows)} {task.input_noun}s predicted" + (f" (written to {args.output})"
                                                 if args.output else "")
    if skipped:
        summary += f", {len(skipped)} skipped:\n" + "\n".join(f"  {why}" for _, why in skipped)
    if len(rows) + len(skipped) > 1 or args.output:
        console.say(summary, error=bool(skipped))
    return 0
