"""A user's microscopy folder as it comes: 24 grayscale slices of 512x512 px whose class is the
thin membrane between cells (`benchmarks/dense_sets.py`), trained with no flag but the task and
the folders. The small-data rule trains them as 128 px crops at their own resolution, and the
run ends well: the membranes are found on the whole validation slices (92% membrane IoU
measured), exit 0, every file written, none rejected, and `vit predict` segments a slice at its
own size."""

import importlib.util
import json
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


@pytest.mark.slow  # 30 slices made, trained (about 4,800 crops), exported in six formats: ~5 min
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
    assert "why: images of 512x512 px keep their resolution: 16 random 128 px crops" in \
        finished.stdout
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["val_class_iou"]["membrane"] > 0.8, metrics["val_class_iou"]
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
    truth = np.asarray(Image.open(tmp_path / "val" / "masks" / "0000.png"))
    assert mask.shape == truth.shape == (512, 512)
    assert (mask == truth).mean() > 0.97  # 99% measured
