"""A user's microscopy folder as it comes: 24 grayscale slices of 512x512 px whose class is the
thin membrane between cells (`benchmarks/dense_sets.py`), trained with no flag but the task and
the folders. The run ends well (exit 0, every file written, none rejected: near-tied membrane
edges never fail an export) and `vit predict` writes each mask at the slice's own size."""

import importlib.util
import os
import subprocess

import numpy as np
import pytest
from PIL import Image
from runs import REPO, vit_command, vit_env


def _dense_sets():
    spec = importlib.util.spec_from_file_location(
        "dense_sets", os.path.join(REPO, "benchmarks", "dense_sets.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow  # 30 slices made, trained, exported in six formats and predicted: ~90 s
def test_a_folder_of_large_grayscale_slices_trains_with_no_flags(tmp_path):
    dense_sets = _dense_sets()
    train = dense_sets.make_membranes(str(tmp_path / "train"), 24, seed=0)
    val = dense_sets.make_membranes(str(tmp_path / "val"), 6, seed=1)
    output = tmp_path / "run"
    finished = subprocess.run(vit_command("train", "--task", "segment", "--data", train,
                                          "--val-data", val, "--output", output,
                                          "--no-inspect"),
                              cwd=tmp_path, env=vit_env(), capture_output=True, text=True,
                              timeout=600)
    assert finished.returncode == 0, finished.stdout[-3000:] + finished.stderr[-3000:]
    assert "recipe: digits_segment adapted to 24 images of 512x512 px" in finished.stdout
    for name in ("model.keras", "saved_model", "model.tflite", "model_fp16.tflite",
                 "model_int8.tflite", "model.onnx", "model_int8.onnx", "export.json"):
        assert (output / name).exists(), name
    assert not (output / "rejected").exists()
    masks = tmp_path / "masks"
    slice_path = tmp_path / "val" / "images" / "0000.png"
    predicted = subprocess.run(vit_command("predict", "--model", output / "model.keras",
                                           slice_path, "--masks", masks),
                               cwd=tmp_path, env=vit_env(), capture_output=True, text=True,
                               timeout=300)
    assert predicted.returncode == 0, predicted.stderr[-3000:]
    mask = np.asarray(Image.open(masks / "0000.png"))
    assert mask.shape[:2] == (512, 512)
