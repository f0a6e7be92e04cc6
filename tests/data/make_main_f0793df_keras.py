"""Writes main_f0793df_{classifier,segmenter,detector}.keras and main_f0793df_io.npz: a tiny
classifier, skip-head segmenter and detector saved by main at commit f0793df (before the tasks
became folders, when the models lived in `vit_keras/segmentation.py` and
`vit_keras/detection.py`), their outputs on two images and the preprocessing each recorded.
Later commits must load the three files and give the same outputs.

    git worktree add /tmp/vit_f0793df f0793df
    PYTHONPATH=/tmp/vit_f0793df python tests/data/make_main_f0793df_keras.py
"""

import json
import os

import numpy as np

from vit_keras import ViTConfig, ViTDetector, ViTSegmenter, VisionTransformer
from vit_keras.preprocessing import parse_preprocessing

HERE = os.path.dirname(os.path.abspath(__file__))
PREFIX = "main_f0793df"


def _randomised(model, rng):
    for variable in model.weights:
        variable.assign(rng.normal(0, 0.2, variable.shape).astype(variable.dtype))
    return model


def _tiny(**fields) -> ViTConfig:
    return ViTConfig(image_size=16, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=2,
                     **fields)


rng = np.random.default_rng(0)
models = {
    "classifier": VisionTransformer(_tiny(patch_size=8, num_classes=3, classifier="map"),
                                    preprocessing=parse_preprocessing("imagenet")),
    "segmenter": ViTSegmenter(_tiny(patch_size=4, num_classes=4, classifier="gap"),
                              head="skip", head_width=8, head_stages=2,
                              preprocessing=parse_preprocessing("clip,crop=0.9")),
    "detector": ViTDetector(_tiny(patch_size=4, num_classes=2, classifier="gap"),
                            num_queries=4, decoder_layers=2, decoder_width=16,
                            decoder_heads=2),
}
images = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
outputs = {}
for kind, model in models.items():
    _randomised(model, rng).save(os.path.join(HERE, f"{PREFIX}_{kind}.keras"))
    outputs[kind] = model.predict(images, verbose=0)
np.savez(os.path.join(HERE, f"{PREFIX}_io.npz"), images=images, **outputs,
         preprocessing=json.dumps({kind: model.preprocessing.to_dict()
                                   for kind, model in models.items()}))
