"""Writes legacy_0.1_map.keras and legacy_0.1_map_io.npz: a tiny MAP-head ViT saved by the
release before the model core used Keras' own EinsumDense layers (commit b50ccd4), and its
outputs on two images.

    git worktree add /tmp/vit_keras_0.1 b50ccd4
    PYTHONPATH=/tmp/vit_keras_0.1 python tests/data/make_legacy_keras.py
"""

import os

import numpy as np

from vit_keras import ViTConfig, VisionTransformer

HERE = os.path.dirname(os.path.abspath(__file__))

config = ViTConfig(image_size=16, patch_size=8, hidden_size=16, mlp_dim=32, num_heads=2,
                   num_layers=1, num_classes=3, classifier="map", representation_size=8,
                   head_bias_init=-1.0)
model = VisionTransformer(config)
rng = np.random.default_rng(0)
for variable in model.weights:
    variable.assign(rng.normal(0, 0.2, variable.shape).astype(variable.dtype))
images = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
model.save(os.path.join(HERE, "legacy_0.1_map.keras"))
np.savez(os.path.join(HERE, "legacy_0.1_map_io.npz"), images=images,
         outputs=model.predict(images, verbose=0))
