"""Writes our own `.npz` files (save_npz) that make_timm_vectors.py loads through timm's reader.

Run in the project's environment, before make_timm_vectors.py:

    python tests/data/make_our_npz.py

It writes ours_token.npz and ours_gap.npz next to itself: tiny ViTs with random, non-zero
weights everywhere (head included), in the official release layout.
"""

import json
import os

import numpy as np

import vit_keras
from vit_keras.checkpoints import save_npz

HERE = os.path.dirname(os.path.abspath(__file__))

# Shared with make_timm_vectors.py through parity_configs.json.
CONFIGS = {
    "ours_token": dict(image_size=32, patch_size=8, hidden_size=36, mlp_dim=72, num_heads=3,
                       num_layers=2, num_classes=7, classifier="token"),
    "ours_gap": dict(image_size=[32, 48], patch_size=8, hidden_size=32, mlp_dim=64, num_heads=2,
                     num_layers=2, num_classes=5, classifier="gap"),
}


def random_model(config: dict, seed: int):
    model = vit_keras.VisionTransformer(vit_keras.ViTConfig(**config))
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        values = rng.normal(0.0, 0.2, size=variable.shape)
        if variable.path.endswith("gamma"):  # LayerNorm scales around 1
            values = 1.0 + 0.5 * values
        variable.assign(values.astype("float32"))
    return model


def main():
    for seed, (name, config) in enumerate(sorted(CONFIGS.items())):
        save_npz(random_model(config, seed), os.path.join(HERE, f"{name}.npz"))
    with open(os.path.join(HERE, "ours_configs.json"), "w") as file:
        json.dump(CONFIGS, file, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
