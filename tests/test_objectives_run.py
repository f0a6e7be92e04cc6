"""Masked patch prediction and DeiT distillation go through the one `vit train` pipeline: under
MirroredStrategy over two logical CPUs, a run killed with SIGKILL and resumed ends with the
weights of the uninterrupted run, and writes the same outputs as a classification run
(segmentation's run of the same kind: tests/test_segmentation_data.py)."""

import json
import os
import subprocess

import numpy as np
import pytest
from runs import kill_after_backup, start_vit

TINY = ["--set", "model.image_size=8", "--set", "model.patch_size=4",
        "--set", "model.hidden_size=16", "--set", "model.mlp_dim=32",
        "--set", "model.num_heads=2", "--set", "model.num_layers=1",
        "--epochs", "2", "--batch-size", "32", "--strategy", "mirrored", "--no-export",
        "--set", "loop.backup_every=4", "--set", "loop.eval_every=1", "--seed", "3"]


def _vit(args, output, **kwargs):
    """`vit train ARGS --output OUTPUT` on two logical CPUs, in the folder holding `output`."""
    return start_vit(["train", *args, "--output", output], os.path.dirname(output),
                     two_cpus=True, **kwargs)


def _kill_after_a_backup(args, output, min_step=10):
    """Starts `vit train`, SIGKILLs it once a mid-run backup exists; returns that backup."""
    victim = _vit(args, output, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    state = kill_after_backup(victim, output, min_step)
    assert not (output / "model.keras").exists()
    return state


def _weights(path):
    import keras

    import vit_keras  # noqa: F401  (registers the layers)

    return keras.saving.load_model(str(path), safe_mode=True, compile=False).get_weights()


def _killed_and_resumed_equals_uninterrupted(tmp_path, args):
    reference = _vit(args, tmp_path / "ref", stdout=subprocess.PIPE,
                     stderr=subprocess.STDOUT, text=True)
    victim_dir = tmp_path / "victim"
    state = _kill_after_a_backup(args, victim_dir)
    resumed = _vit([*args, "--resume"], victim_dir, stdout=subprocess.PIPE,
                   stderr=subprocess.STDOUT, text=True)
    resumed_log = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, resumed_log[-3000:]
    assert f"continuing at epoch {state['epoch'] + 1}, step {state['step']}" in resumed_log
    assert "MirroredStrategy x2" in resumed_log
    reference_log = reference.communicate(timeout=300)[0]
    assert reference.returncode == 0, reference_log[-3000:]
    for a, b in zip(_weights(tmp_path / "ref" / "model.keras"),
                    _weights(victim_dir / "model.keras")):
        np.testing.assert_allclose(a, b, atol=1e-5)      # same batches, same updates
    for name in ("metrics.json", "history.csv", "config.json", "best.weights.h5", "labels.txt"):
        assert (victim_dir / name).exists(), name
    assert not (victim_dir / "backup").exists()
    history = (victim_dir / "history.csv").read_text().splitlines()
    assert len(history) == 3                              # header + one row per epoch
    return json.loads((victim_dir / "metrics.json").read_text())


@pytest.mark.slow
def test_mpp_mirrored_killed_and_resumed(tmp_path):
    args = ["--config", "mpp_digits", *TINY, "--set", "model.classifier=token"]
    metrics = _killed_and_resumed_equals_uninterrupted(tmp_path, args)
    assert metrics["objective"] == "mpp" and metrics["replicas"] == 2
    assert 0.0 <= metrics["val_mpp_accuracy"] <= 1.0
    assert (tmp_path / "victim" / "encoder.npz").exists()
    assert (tmp_path / "victim" / "inspect" / "inspect.json").exists()


@pytest.mark.slow
def test_deit_mirrored_killed_and_resumed(tmp_path):
    import keras

    teacher = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Conv2D(4, 3),
                                keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)])
    teacher.save(tmp_path / "teacher.keras")
    args = ["--config", "deit_distill", *TINY, "--set", f"objective.teacher={tmp_path / 'teacher.keras'}"]
    metrics = _killed_and_resumed_equals_uninterrupted(tmp_path, args)
    assert metrics["objective"] == "distill" and metrics["replicas"] == 2
    assert 0.0 <= metrics["val_top1"] <= 1.0 and "teacher_val_top1" in metrics
    import vit_keras

    student = keras.saving.load_model(str(tmp_path / "victim" / "model.keras"), safe_mode=True)
    assert vit_keras.config_from_model(student).distilled
