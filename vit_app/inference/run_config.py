"""What `vit export` reads from the config.json `vit train` wrote next to a model: its
activation and the data it was trained on, from a preset in sections or the flat preset of a
run of an earlier version.
"""

from __future__ import annotations

import json
import os

DATA_FIELDS = ("data", "val_data", "val_split", "seed")


def read(model_path: str) -> dict:
    """The config.json `vit train` wrote next to the model; {} when there is none."""
    path = os.path.join(os.path.dirname(os.path.abspath(model_path)), "config.json")
    if not os.path.exists(path):
        return {}
    with open(path) as handle:
        return json.load(handle)


def training_data(model_path: str) -> dict:
    """The data fields of the run that wrote the model.

    Args:
        model_path: the model file; its config.json is beside it.

    Returns:
        {'data', 'val_data', 'val_split', 'seed'}, the ones set only; {} without config.json.
    """
    preset = read(model_path).get("preset", {})
    data = preset.get("data")
    if isinstance(data, dict):  # a preset in sections
        fields = {"data": data.get("train"), "val_data": data.get("val"),
                  "val_split": data.get("val_split"), "seed": preset.get("seed")}
    else:  # the flat preset of a run of an earlier version
        fields = {key: preset.get(key) for key in DATA_FIELDS}
    return {key: value for key, value in fields.items() if value not in (None, "")}
