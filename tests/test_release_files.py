"""`.keras` files written by an earlier release load under `safe_mode` and compute what they
computed then, with the preprocessing they recorded (`tests/data/make_release_0_2_keras.py`
wrote them with release 0.2.0; `tests/data/make_main_f0793df_keras.py` with main before the
tasks became folders, when the models' modules had other names)."""

import json
import os

import keras
import numpy as np
import pytest
from helpers import to_numpy

from vit_keras import ViTDetector, VisionTransformer, ViTSegmenter
from vit_keras.core.model import preprocessing_of
from vit_keras.preprocessing import Preprocessing

DATA = os.path.join(os.path.dirname(__file__), "data")


CLASSES = {"classifier": VisionTransformer, "segmenter": ViTSegmenter, "detector": ViTDetector}


@pytest.mark.parametrize("written_by, kind", [
    ("release_0.2", "classifier"), ("release_0.2", "segmenter"),
    ("main_f0793df", "classifier"), ("main_f0793df", "segmenter"),
    ("main_f0793df", "detector")])
def test_an_earlier_file_loads_with_its_outputs_and_preprocessing(written_by, kind):
    model = keras.saving.load_model(os.path.join(DATA, f"{written_by}_{kind}.keras"),
                                    safe_mode=True)
    assert isinstance(model, CLASSES[kind])
    with np.load(os.path.join(DATA, f"{written_by}_io.npz"), allow_pickle=False) as archive:
        np.testing.assert_allclose(to_numpy(model(archive["images"])), archive[kind], atol=1e-5)
        recorded = json.loads(str(archive["preprocessing"]))[kind]
    assert preprocessing_of(model) == Preprocessing.from_dict(recorded)


@pytest.mark.parametrize("kind", ["classifier", "segmenter"])
def test_a_release_0_2_file_saved_again_keeps_its_preprocessing_apart(kind, tmp_path):
    """Release 0.2 kept the preprocessing inside the `ViTConfig`; saved by this release it is
    the model's own entry, beside the architecture, and loads back the same."""
    model = keras.saving.load_model(os.path.join(DATA, f"release_0.2_{kind}.keras"),
                                    safe_mode=True)
    saved = model.get_config()
    assert "preprocessing" not in saved["config"]
    assert Preprocessing.from_dict(saved["preprocessing"]) == model.preprocessing
    path = str(tmp_path / "again.keras")
    model.save(path)
    again = keras.saving.load_model(path, safe_mode=True)
    assert again.preprocessing == model.preprocessing and again.config == model.config


def test_a_release_0_2_config_dict_is_split_not_silently_read():
    """`ViTConfig.from_dict` refuses the old key with the way out; `split_preprocessing`
    takes it apart."""
    from vit_keras import ViTConfig
    from vit_keras.config import split_preprocessing

    old = dict(ViTConfig(image_size=16, patch_size=8).to_dict(),
               preprocessing={"mean": [0.4] * 3, "std": [0.2] * 3})
    with pytest.raises(ValueError, match="split_preprocessing"):
        ViTConfig.from_dict(old)
    config, rule = split_preprocessing(old)
    assert ViTConfig.from_dict(config) == ViTConfig(image_size=16, patch_size=8)
    assert rule == Preprocessing(mean=0.4, std=0.2)
    assert VisionTransformer(old).preprocessing == rule  # the model takes an old dict whole


@pytest.mark.parametrize("agreement, task", [("top-1", "classify"), ("pixels", "segment")])
def test_a_release_0_2_export_is_known_by_its_agreement(tmp_path, agreement, task):
    """Release 0.2's export.json recorded no task, only what its files agree on: each task's
    own `InferenceTask.agreement` names it."""
    from vit_app.inference import model_files

    (tmp_path / "export.json").write_text(json.dumps({"agreement": agreement}))
    assert model_files.task_beside(str(tmp_path / "model.tflite")) == \
        (task, str(tmp_path / "export.json"))
    (tmp_path / "export.json").write_text(json.dumps({"agreement": "nothing known"}))
    assert model_files.task_beside(str(tmp_path / "model.tflite"))[0] == "classify"
