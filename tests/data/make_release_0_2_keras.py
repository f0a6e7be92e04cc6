"""Writes release_0.2_classifier.keras, release_0.2_segmenter.keras and release_0.2_io.npz: a
tiny classifier and segmenter saved by release 0.2.0 (commit 60aaec8, where the preprocessing
was a field of `ViTConfig`), their outputs on two images and the preprocessing each recorded.
Later releases must load both files and give the same outputs.

    git worktree add /tmp/vit_keras_0.2 60aaec8
    PYTHONPATH=/tmp/vit_keras_0.2 python tests/data/make_release_0_2_keras.py
"""

import json
import os

import numpy as np

from vit_keras import ViTConfig, ViTSegmenter, VisionTransformer
from vit_keras.preprocessing import parse_preprocessing

HERE = os.path.dirname(os.path.abspath(__file__))


def _randomised(model, rng):
    for variable in model.weights:
        variable.assign(rng.normal(0, 0.2, variable.shape).astype(variable.dtype))
    return model


rng = np.random.default_rng(0)
classifier = _randomised(VisionTransformer(ViTConfig(
    image_size=16, patch_size=8, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=2,
    num_classes=3, preprocessing=parse_preprocessing("imagenet"))), rng)
segmenter = _randomised(ViTSegmenter(ViTConfig(
    image_size=16, patch_size=4, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=2,
    num_classes=4, classifier="gap", preprocessing=parse_preprocessing("clip,crop=0.9")),
    head="progressive", blocks=2, head_width=8, head_stages=2), rng)
images = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
classifier.save(os.path.join(HERE, "release_0.2_classifier.keras"))
segmenter.save(os.path.join(HERE, "release_0.2_segmenter.keras"))
np.savez(os.path.join(HERE, "release_0.2_io.npz"), images=images,
         classifier=classifier.predict(images, verbose=0),
         segmenter=segmenter.predict(images, verbose=0),
         preprocessing=json.dumps({
             "classifier": classifier.config.preprocessing.to_dict(),
             "segmenter": segmenter.config.preprocessing.to_dict()}))
