"""A user's microscopy folder as it comes: 16-bit TIFF slices of 512x512 px (a 12-bit camera's
counts) whose class is the thin membrane between cells, in binary masks of 0 and 255
(`benchmarks/dense_sets.py`), trained with no flag but the task, the folders and (here) one
epoch. The small-data rule trains them as 128 px crops at their own resolution and says why;
each file built (float TFLite, both int8 files) is written or refused by the gate's verdict,
and `vit predict` segments a slice at its own size. How well the membranes are found (92-96%
membrane IoU measured) is `benchmarks/segmentation.py --only membranes`' check."""

import json
import subprocess

import numpy as np
import pytest
from PIL import Image
from runs import dense_sets, vit_command, vit_env

FORMATS = ["tflite", "tflite_int8", "onnx_int8"]


# The plumbing at the size promised, on as few slices as hold it: the files whose building
# depends on the size are built, calibrated and checked at 512 px (the float TFLite file, and
# both int8 files calibrated on the training slices); every format of a segmenter is
# tests/test_segmentation_deploy.py's at a small size.
@pytest.mark.slow  # 5 slices of 512 px made, trained one epoch, exported in three formats
def test_a_folder_of_large_grayscale_slices_trains_with_no_flags(tmp_path):
    train = dense_sets().make_membranes(str(tmp_path / "train"), 4, seed=0, bits=16)
    val = dense_sets().make_membranes(str(tmp_path / "val"), 1, seed=1, bits=16)
    output = tmp_path / "run"
    finished = subprocess.run(vit_command("train", "--task", "segment", "--data", train,
                                          "--val-data", val, "--output", output,
                                          "--no-inspect", "--epochs", "1", "--formats",
                                          ",".join(FORMATS)),
                              cwd=tmp_path, env=vit_env(), capture_output=True, text=True,
                              timeout=900)
    assert finished.returncode in (0, 3), finished.stdout[-3000:] + finished.stderr[-3000:]
    assert "recipe: digits_segment adapted to 4 images of 512x512 px" in finished.stdout
    assert "why: images of 512x512 px keep their resolution" in finished.stdout
    assert "holds only 0 and 255: read as binary masks, 255 = foreground" in finished.stdout
    metrics = json.loads((output / "metrics.json").read_text())
    assert 0 <= metrics["val_class_iou"]["membrane"] <= 1, metrics["val_class_iou"]
    report = json.loads((output / "export.json").read_text())
    assert finished.returncode == (3 if report["failed"] else 0)
    assert list(report["formats"]) == FORMATS and (output / "model.keras").exists()
    for name, entry in report["formats"].items():
        where = output / ("" if entry["passed"] else "rejected") / entry["file"]
        assert where.exists() and entry["passed"] == (name not in report["failed"]), name
    assert report["formats"]["tflite"]["passed"], report["formats"]["tflite"]  # float: exact
    masks = tmp_path / "masks"
    slice_path = tmp_path / "val" / "images" / "0000.tif"
    from vit import cli  # in this process: a second process start and model load add nothing

    assert cli.main(["predict", "--model", str(output / "model.keras"), str(slice_path),
                     "--masks", str(masks)]) == 0
    mask = np.asarray(Image.open(masks / "0000.png"))
    truth = np.asarray(Image.open(tmp_path / "val" / "masks" / "0000.png"))
    assert mask.shape == truth.shape == (512, 512)
    assert set(np.unique(mask)) <= {0, 1}
