"""`vit evaluate`: the model's task scores it on a data spec (`vit_app.inference.inference_task`),
with what every task's scores share: the class names and their rows. Each task's scores are its
own (`vit_app.tasks.<task>.evaluate`); the flags are `vit.commands.evaluate`'s.
"""

from __future__ import annotations

import argparse

from vit_app import console
from vit_app.inference import classifier, model_files
from vit_app.inference import inference_task as tasks
from vit_app.outputs import write_json


def run(args: argparse.Namespace) -> int:
    """Runs `vit evaluate`: the model's task scores it on the data."""
    model = classifier.load(args.model, labels_path=args.labels,
                            preprocessing=args.preprocessing)
    results, lines = tasks.get(model.task).evaluate(model, args)
    console.say("\n".join(lines))
    if args.output:
        write_json(args.output, {"model": args.model, "data": args.data, **results})
    return 0


def class_names_for(model_path: str, labels_path: str | None, fallback: list[str]) -> list[str]:
    """Class names from --labels, else labels.txt beside the model, else `fallback`."""
    return model_files.labels_beside(model_path, labels_path) or fallback


def name_classes(results: dict, names: list[str]) -> None:
    """Gives each row of `results['per_class']` its class name."""
    for row in results["per_class"]:
        row["name"] = names[row["class"]] if row["class"] < len(names) else str(row["class"])
