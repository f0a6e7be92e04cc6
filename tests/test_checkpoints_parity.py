"""Parity with implementations we did not write: timm and Hugging Face transformers.

tests/data/make_timm_vectors.py made the vectors with torch/timm/transformers (see its
docstring for what each reference is); here only our side runs, so CI needs none of them.
"""

import json
import os

import numpy as np
import pytest
from helpers import to_numpy

import vit_keras

DATA = os.path.join(os.path.dirname(__file__), "data")
TOLERANCE = 2e-5  # max abs logit difference, float32

with open(os.path.join(DATA, "parity_configs.json")) as _file:
    CASES = {name: case for name, case in json.load(_file).items() if not name.startswith("_")}


@pytest.fixture(scope="module")
def vectors():
    with np.load(os.path.join(DATA, "parity_vectors.npz"), allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


def build(case: dict):
    case = dict(case)
    case.pop("weights")
    include_top = case.pop("include_top", True)
    pooling = case.pop("pooling", None)
    config = vit_keras.ViTConfig(**case)
    return vit_keras.VisionTransformer(config, include_top=include_top, pooling=pooling)


@pytest.mark.parametrize("name", sorted(CASES))
def test_logits_match_reference(name, vectors):
    case = CASES[name]
    model = build(case)
    vit_keras.load_weights(model, os.path.join(DATA, case["weights"]), skip_head=False)
    outputs = to_numpy(model(vectors[f"{name}/images"]))
    reference = vectors[f"{name}/outputs"]
    assert outputs.shape == reference.shape
    assert np.abs(reference).max() > 0.1  # the reference is not trivially zero
    assert np.abs(outputs - reference).max() <= TOLERANCE
