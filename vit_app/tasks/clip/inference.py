"""The clip task's inference part: a class per clip or volume.

An exported file is checked on its top-1 agreement with Keras on held-out windows (as a
classifier's on images). `vit evaluate`, `predict` and `serve` take image models so far and
say so for a clip model.
"""

from __future__ import annotations

import argparse


from vit_app.inference.inference_task import InferenceTask
from vit_app.tasks.clip.data import sources


class ClipTask(InferenceTask):
    """See the module docstring."""

    name = "clip"
    verb = "Classifying"

    def label_scores(self, logits, labels) -> dict:
        if labels is None:
            return {"accuracy": None}
        return {"accuracy": float((logits.argmax(-1) == labels).mean())}

    def export_examples(self, spec: str, trained_on: tuple, rule):
        """Each clip's middle window of the section's default frames and stride, and its class
        id."""
        windows = sources.Windows()

        def take(source, image_hw, count):
            return sources.labelled_clips(source, image_hw, windows, count)

        return sources.open_clip_data(spec, *trained_on, windows=windows), take

    def evaluate(self, model, args: argparse.Namespace) -> tuple[dict, list[str]]:
        raise ValueError(f"{args.model} is a clip model: `vit evaluate` takes image models so "
                         "far; its run's metrics.json holds its validation scores")

    def predict(self, model, readable, args: argparse.Namespace) -> tuple[list[dict], str]:
        raise ValueError("a clip model: `vit predict` takes image models so far; load "
                         "model.keras and call it on clips (docs/clips.md)")


TASK = ClipTask()
