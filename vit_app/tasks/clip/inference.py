"""The clip task's inference part: a class per clip or volume.

An exported file is checked on its top-1 agreement with Keras on held-out windows (as a
classifier's on images). `vit predict` reads videos, frame folders and volumes and gives each
clip's top-k classes, `vit evaluate` the top-1 on a clip data spec, `vit serve` answers a
request's video and volume files and the page shows the frames the model saw; each averages
the probabilities of `clip.views` windows spread over each clip (the run's preset, from the
config.json beside the model).
"""

from __future__ import annotations

import argparse
import base64
import io
import os

import numpy as np
from PIL import Image

from vit_app.data import specs, training_data
from vit_app.inference import evaluate as evaluation
from vit_app.inference import run_config
from vit_app.inference.inference_task import InferenceTask, page_top
from vit_app.inference.predict import table
from vit_app.tasks.clip import inspect as clip_inspect
from vit_app.tasks.clip.data import readers, sources


class ClipTask(InferenceTask):
    """See the module docstring."""

    name = "clip"
    verb = "Classifying"
    input_noun = "clip"
    reads_served_files = True

    def label_scores(self, logits, labels) -> dict:
        if labels is None:
            return {"accuracy": None}
        return {"accuracy": float((logits.argmax(-1) == labels).mean())}

    def export_examples(self, spec: str, trained_on: tuple, rule, input_size: tuple):
        """Each clip's middle window of the model's frames (the section's default stride), and
        its class id."""
        frames, *image_hw = input_size
        windows = sources.Windows(frames=frames)

        def take(source, count):
            return sources.labelled_clips(source, image_hw, windows, count)

        return sources.open_clip_data(spec, *trained_on, windows=windows), take

    def read_inputs(self, paths: list[str]) -> tuple[list[tuple[str, object]], list]:
        """Each clip's frames (`readers.read_clip`), and (path, why) of each unreadable one."""
        readable, skipped = [], []
        for path in paths:
            try:
                readable.append((path, readers.read_clip(path)))
            except ValueError as error:
                skipped.append((path, str(error)))
        return readable, skipped

    def predict(self, model, readable, args: argparse.Namespace) -> tuple[list[dict], str]:
        """Each clip's top-k classes, its windows' probabilities averaged."""
        windows, views = model_windows(model)
        scores = clip_scores(model, [clip for _, clip in readable], windows, views,
                             args.batch_size)
        names, rows = model.class_names, []
        for (path, _), clip_scores_ in zip(readable, scores):
            best = np.argsort(-clip_scores_, kind="stable")[:args.top_k]
            rows.append({"file": path,
                         "top": [(names[index], float(clip_scores_[index])) for index in best]})
        return rows, table(rows)

    def evaluate(self, model, args: argparse.Namespace) -> tuple[dict, list[str]]:
        """Top-1 of each clip's windows' probabilities averaged, on `--data`."""
        specs.refuse_other_tasks_data(args.data, self.name, model=args.model)
        windows, views = model_windows(model)
        source = sources.load_clip_source(args.data, training_data.evaluation_subset(args.data),
                                          windows=windows)
        scores = clip_scores(model, source, windows, views, args.batch_size)
        labels = np.asarray(source.arrays[1])
        names = evaluation.class_names_for(args.model, args.labels, source.class_names)
        results = {"top1": float(np.mean(scores.argmax(-1) == labels)),
                   "examples": int(len(labels)), "views": views, "classes": names}
        return results, [f"{args.model} on {args.data}: {len(labels)} clips, {views} windows of "
                         f"{windows.frames} frames {windows.stride} apart each, scores averaged",
                         f"top-1 {100 * results['top1']:.2f}%"]


    def served_inputs(self, model, files: list[bytes]) -> tuple[np.ndarray, int]:
        """Each file's `clip.views` windows, [files x views, frames, height, width, 3]."""
        windows, views = model_windows(model)
        clips = [readers.read_clip_bytes(data, f"instance {index}:")
                 for index, data in enumerate(files)]
        batches = window_batches(model.input_shape[1:3], clips, windows, views, len(clips))
        return np.concatenate(list(batches)).reshape(-1, *model.input_shape), views

    def page_picture(self, inputs: np.ndarray, rows: int) -> dict:
        """The middle window's frames side by side, as a PNG."""
        strip = np.concatenate(list(inputs[rows // 2]), axis=1)
        encoded = io.BytesIO()
        Image.fromarray(np.clip(np.round(strip), 0, 255).astype(np.uint8)).save(encoded, "PNG")
        return {"picture": "data:image/png;base64," +
                base64.b64encode(encoded.getvalue()).decode("ascii")}

    def page_answer(self, name: str, model, outputs: dict) -> dict:
        windows, views = model_windows(model)
        return {"model": name, "top": page_top(outputs["probabilities"][0], model.class_names), "drawing": "labels", "heatmap": None,
                "caption": f"The {windows.frames} frames of the clip's middle window, "
                           f"{windows.stride} apart, as the model saw them; the scores are "
                           f"those of {views} windows spread over the clip, averaged.",
                "empty": "no class."}

    def page_features(self, model) -> dict:
        return {"heatmap": False, "input_noun": self.input_noun,
                "frames": int(model.input_shape[0]),
                "accept": "video/*,.npy,.npz,.nii,.gz",
                "hint": "A video (MP4, WebM, AVI, GIF) or a volume (.npy, .npz, NIfTI)."}


    def inspect_inputs(self, model, model_path: str, paths: list[str]):
        """Each clip's middle window (the run's stride, the model's frames); a clip that
        cannot be read is named in a ValueError."""
        readable, skipped = self.read_inputs(paths)
        if skipped:
            raise ValueError("cannot read " + "; ".join(why for _, why in skipped))
        windows, _ = run_windows(model.frames, model_path)
        clips = [clip for _, clip in readable]
        batches = window_batches(model.inputs[0].shape[2:4], clips, windows, 1, len(clips))
        return np.concatenate(list(batches))[:, 0], [os.path.basename(path.rstrip("/"))
                                                     for path, _ in readable]

    def inspect(self, model, inputs, output_dir: str, names: list[str], discard_ratio: float,
                head_fusion: str) -> dict:
        """Where and when the model looks in each clip (`clip_inspect.inspect_clips`)."""
        names = names or [f"clip {index}" for index in range(len(inputs))]
        return clip_inspect.inspect_clips(model, inputs, output_dir, names, discard_ratio,
                                          head_fusion)


def model_windows(model) -> tuple[sources.Windows, int]:
    """The windows a loaded model takes (`run_windows` of its input's frames and its file)
    and the views averaged."""
    return run_windows(int(model.input_shape[0]), model.path)


def run_windows(frames: int, model_path: str) -> tuple[sources.Windows, int]:
    """Windows of `frames` frames with the stride and short-clip rule of the run's
    config.json beside `model_path` (else the defaults), and the views averaged."""
    section = run_config.read(model_path).get("preset", {}).get("clip", {})
    windows = sources.Windows(frames=frames, **{key: section[key] for key in ("stride", "short")
                                                if key in section})
    return windows, int(section.get("views", 3))


def clip_scores(model, clips, windows: sources.Windows, views: int, batch_size: int):
    """float32 [clips, classes]: each clip's `views` windows' probabilities averaged.

    Args:
        model: a loaded clip model (`vit_app.inference.classifier.Classifier`).
        clips: a `ClipSource`, or a list of uint8 [frames, height, width, 3] clips.
        windows, views: the windows, and how many spread over each clip.
        batch_size: clips per model call.
    """
    averaged = []
    for batch in window_batches(model.input_shape[1:3], clips, windows, views, batch_size):
        probabilities = model.predict(batch.reshape(-1, *batch.shape[2:]))["probabilities"]
        averaged.append(np.asarray(probabilities).reshape(len(batch), views, -1).mean(1))
    return np.concatenate(averaged)


def window_batches(size, clips, windows: sources.Windows, views: int, batch_size: int):
    """Each clip's `views` windows at `size` (height, width), float32 0..255 [clips, views,
    frames, height, width, 3], `batch_size` clips at a time (arguments as `clip_scores`')."""
    size = tuple(size)
    if not isinstance(clips, sources.ClipSource):
        stacked, lengths = sources.stack_clips(clips, size, 2 * windows.span)
        clips = sources.clip_source("clips", [], stacked, lengths,
                                    np.zeros(len(lengths), np.int32))
    for batch, _ in sources.eval_windows(clips, size, windows, views).batch(batch_size):
        yield np.asarray(batch, np.float32)


TASK = ClipTask()
