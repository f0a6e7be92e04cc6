"""Max abs difference to timm / transformers of every family reference case, on the Keras
backend of KERAS_BACKEND (the references: tests/data/families, tools/make_family_references.py).

    for backend in tensorflow jax torch; do KERAS_BACKEND=$backend python benchmarks/family_parity.py; done
"""
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import keras  # noqa: E402
import test_families as tf_  # noqa: E402
vectors = dict(np.load(os.path.join(tf_.DATA, "parity.npz"), allow_pickle=False))
rows = []
for name in tf_.CASES:
    m = tf_.our_model(tf_.CONFIGS[name])
    rows.append((name, np.abs(keras.ops.convert_to_numpy(m(vectors[f"{name}/images"])) - vectors[f"{name}/outputs"]).max()))
m = tf_.our_model(tf_.CONFIGS["dinov2"], image_size=42)
rows.append(("dinov2_resized", np.abs(keras.ops.convert_to_numpy(m(vectors["dinov2_resized/images"])) - vectors["dinov2_resized/outputs"]).max()))
for name in tf_.HF_CASES:
    m = tf_.hf_model(tf_.CONFIGS[name])
    rows.append((name, np.abs(keras.ops.convert_to_numpy(m(vectors[f"{name}/images"])) - vectors[f"{name}/outputs"]).max()))
feat = 0.0
import vit_keras  # noqa: E402
for name in ["deit3", "dinov2_reg", "siglip", "clip", "gap_fc_norm"]:
    m = tf_.our_model(tf_.CONFIGS[name]); f = vit_keras.features(m, vectors[f"{name}/images"], blocks=[0, 1])
    for i in (0, 1):
        feat = max(feat, np.abs(f[f"block_{i}"] - vectors[f"{name}/grid_{i}"]).max())
rows.append(("features (5 cases, 2 blocks)", feat))
print(keras.backend.backend(), json.dumps({k: float(f"{v:.2e}") for k, v in rows}))
