"""`.keras` files written by an earlier release load under `safe_mode` and compute what they
computed then, with the preprocessing they recorded (`tests/data/make_release_0_2_keras.py`
wrote them with release 0.2.0)."""

import json
import os

import keras
import numpy as np
import pytest
from helpers import to_numpy

from vit_keras import VisionTransformer, ViTSegmenter
from vit_keras.core.model import preprocessing_of
from vit_keras.preprocessing import Preprocessing

DATA = os.path.join(os.path.dirname(__file__), "data")


@pytest.mark.parametrize("kind, cls", [("classifier", VisionTransformer),
                                       ("segmenter", ViTSegmenter)])
def test_a_release_0_2_file_loads_with_its_outputs_and_preprocessing(kind, cls):
    model = keras.saving.load_model(os.path.join(DATA, f"release_0.2_{kind}.keras"),
                                    safe_mode=True)
    assert isinstance(model, cls)
    with np.load(os.path.join(DATA, "release_0.2_io.npz"), allow_pickle=False) as archive:
        np.testing.assert_allclose(to_numpy(model(archive["images"])), archive[kind], atol=1e-5)
        recorded = json.loads(str(archive["preprocessing"]))[kind]
    assert preprocessing_of(model) == Preprocessing.from_dict(recorded)
