"""Converts a `.keras` file of the earlier release into a `VisionTransformer` file:

    python -m vit_keras.convert OLD.keras NEW.keras

The earlier release kept the attention weights on the attention layer itself (`vars/0..7`:
query, key, value and out kernels and biases) and the patch embedding's on `PatchEmbedding`;
they now live in the `EinsumDense` sublayers `query`, `key`, `value`, `out` and `projection`.
The weights are moved to their new places, the model is rebuilt from the `ViTConfig` its layers
describe, and the file is written atomically.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import warnings
import zipfile

import keras

from vit_keras import atomic
from vit_keras.core.layer_config import config_from_layers
from vit_keras.core.model import VisionTransformer

_ATTENTION_PARTS = ("query", "key", "value", "out")


def _moved_paths(names: list[str]) -> dict[str, str]:
    """Old h5 dataset path -> new one, for the attention and patch-embedding variables."""
    groups = {}
    for name in names:
        group, _, index = name.rpartition("/vars/")
        if index:
            groups.setdefault(group, []).append(name)
    moved = {}
    for group, datasets in groups.items():
        leaf = group.rsplit("/", 1)[-1]
        if leaf == "attention" and len(datasets) == 8:
            for index in range(8):
                part = _ATTENTION_PARTS[index // 2]
                moved[f"{group}/vars/{index}"] = f"{group}/{part}/vars/{index % 2}"
        elif leaf.startswith("patch_embedding") and len(datasets) == 2:
            for index in range(2):
                moved[f"{group}/vars/{index}"] = f"{group}/projection/vars/{index}"
    return moved


def _rewrite_weights(data: bytes) -> bytes:
    """The weights file with the moved variables under their new paths (every group kept)."""
    import h5py

    datasets, groups = [], []
    with h5py.File(io.BytesIO(data), "r") as source:
        source.visititems(lambda name, item: (datasets if isinstance(item, h5py.Dataset)
                                              else groups).append(name))
        moved = _moved_paths(datasets)
        if not moved:
            raise ValueError("no weights of the earlier layout found: this file needs no "
                             "conversion (or is not a vit_keras model)")
        buffer = io.BytesIO()
        with h5py.File(buffer, "w") as target:
            for name in groups:
                target.require_group(name)
            for name in datasets:
                target.create_dataset(moved.get(name, name), data=source[name][()])
    return buffer.getvalue()


def _head_options(functional) -> dict:
    """include_top, pooling and classifier_activation of a functional ViT."""
    names = {layer.name for layer in functional.layers}
    options = {"include_top": "head" in names, "pooling": None,
               "classifier_activation": None, "name": functional.name}
    if "predictions" in names:
        options["classifier_activation"] = functional.get_layer("predictions").get_config()[
            "activation"]
    if not options["include_top"] and "pool" in names:
        pool = functional.get_layer("pool")
        options["pooling"] = "map" if type(pool).__name__ == "MAPHead" else pool.mode
    return options


def convert_keras_file(source: str, destination: str) -> None:
    """Converts a `.keras` file of the earlier release into a `VisionTransformer` file.

    Args:
        source: the old `.keras` file.
        destination: the new file (written to a temp file, then renamed).
    """

    with zipfile.ZipFile(source) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members["model.weights.h5"] = _rewrite_weights(members["model.weights.h5"])
    with tempfile.TemporaryDirectory() as folder:
        rewritten = os.path.join(folder, "rewritten.keras")
        with zipfile.ZipFile(rewritten, "w") as archive:
            for name, data in members.items():
                archive.writestr(name, data)
        with warnings.catch_warnings():
            # Keras 3.15 looks for a group the earlier files never had (no weights live there).
            warnings.filterwarnings("ignore", message="Skipping nested container")
            functional = keras.saving.load_model(rewritten, safe_mode=True)
    model = VisionTransformer(config_from_layers(functional), **_head_options(functional))
    for layer in functional.layers:
        if layer.weights:
            model.get_layer(layer.name).set_weights(layer.get_weights())
    atomic.save_model(model, destination)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m vit_keras.convert OLD.keras NEW.keras", file=sys.stderr)
        return 2
    convert_keras_file(*argv)
    print(json.dumps({"converted": argv[0], "written": argv[1]}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
