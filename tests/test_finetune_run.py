"""`vit train --finetune` end to end on digits: a LoRA run killed and resumed equals an
uninterrupted one; its export equals the merged Keras model, which equals the pre-trained
weights plus `lora.npz`; a probe and the class subsets."""

import json

import keras
import numpy as np
import pytest
from helpers import random_pixels

import vit_keras
from training import callbacks, run
from training.presets import get_preset

TINY_MODEL = dict(image_size=8, patch_size=4, hidden_size=16, mlp_dim=32, num_heads=2,
                  num_layers=1)


def _preset(changes):
    """digits_tiny on `TINY_MODEL`, 2 epochs, with `changes` ('SECTION.FIELD': value)."""
    base = get_preset("digits_tiny").replace(
        schedule={"epochs": 2, "batch_size": 64, "warmup_epochs": 0},
        loop={"eval_every": 1, "mixed_precision": ""}, augment={"translate": 0.0, "zoom": 0.0},
        model=TINY_MODEL)
    return base.with_values(changes)


@pytest.fixture(scope="module")
def upstream():
    """A model pre-trained on the digits 0-4 (one epoch: enough to have weights to adapt),
    trained once for every worker and run (`artifacts.shared`)."""
    from artifacts import shared

    preset = _preset({"schedule.epochs": 1, "data.classes": "0,1,2,3,4"})

    def build(folder):
        run.train(preset, output=str(folder / "run"), strategy="default", export=False,
                  inspect=False)
        keras.backend.clear_session(free_memory=False)

    return str(shared("finetune-upstream", preset, build) / "run" / "model.keras")


class _Killed(Exception):
    """Stands in for a SIGKILL right after a mid-epoch backup."""


def _load(path):
    return keras.saving.load_model(path, safe_mode=True, compile=False)


@pytest.mark.slow
def test_lora_run_killed_and_resumed_equals_uninterrupted(tmp_path, upstream, monkeypatch):
    preset = _preset({"data.classes": "5,6,7,8,9", "finetune.weights": upstream,
                      "finetune.mode": "lora", "finetune.lora_rank": 2, "loop.backup_every": 5})
    options = dict(strategy="default", export=False, inspect=False)
    run.train(preset, output=str(tmp_path / "whole"), **options)
    original = callbacks.ResumableBackup.save

    def save_then_die(self, epoch, step):
        original(self, epoch, step)
        if epoch == 1 and step > 0:   # inside the second epoch
            raise _Killed

    monkeypatch.setattr(callbacks.ResumableBackup, "save", save_then_die)
    with pytest.raises(_Killed):
        run.train(preset, output=str(tmp_path / "killed"), **options)
    monkeypatch.undo()
    state = json.loads((tmp_path / "killed" / "backup" / "state.json").read_text())
    assert state["lora"] == f"ckpt-{state['global_step']}.lora.npz"
    run.train(preset, output=str(tmp_path / "killed"), resume=True, **options)
    for whole, resumed in zip(_load(str(tmp_path / "whole" / "model.keras")).get_weights(),
                              _load(str(tmp_path / "killed" / "model.keras")).get_weights()):
        np.testing.assert_allclose(whole, resumed, atol=1e-6)
    with np.load(tmp_path / "whole" / "lora.npz") as a, \
            np.load(tmp_path / "killed" / "lora.npz") as b:
        assert a.files == b.files
        for name in a.files:
            if not name.startswith("__"):
                np.testing.assert_allclose(a[name], b[name], atol=1e-6, err_msg=name)


@pytest.mark.slow
def test_lora_export_equals_the_merged_model_and_the_adapters(tmp_path, upstream, capsys):
    preset = _preset({"schedule.epochs": 1, "data.classes": "5,6,7,8,9",
                      "finetune.weights": upstream, "finetune.mode": "lora",
                      "finetune.lora_rank": 2, "finetune.lora_targets": "query,value,mlp"})
    run.train(preset, output=str(tmp_path), strategy="default", inspect=False)
    assert "finetune lora (rank 2 on query,value,mlp; the head):" in capsys.readouterr().out
    merged = _load(str(tmp_path / "model.keras"))
    images = random_pixels(merged, batch=5)
    expected = np.asarray(merged(vit_keras.preprocess_input(images)))
    # The pre-trained weights plus lora.npz are the fine-tuned model.
    rebuilt = vit_keras.VisionTransformer(merged.config)
    vit_keras.load_weights(rebuilt, upstream, skip_head=True)
    vit_keras.load_lora_weights(rebuilt, str(tmp_path / "lora.npz"))
    np.testing.assert_allclose(np.asarray(rebuilt(vit_keras.preprocess_input(images))),
                               expected, atol=1e-5)
    # The exported SavedModel gives the merged model's logits.
    import tensorflow as tf

    serving = tf.saved_model.load(str(tmp_path / "saved_model")).signatures["serving_default"]
    exported = serving(images=tf.constant(images))["logits"].numpy()
    np.testing.assert_allclose(exported, expected, atol=1e-4)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["finetune"] == "lora" and 0 < metrics["trainable_weights"] < \
        metrics["total_weights"]


@pytest.mark.slow
def test_probe_fits_the_head_once_and_writes_a_normal_model(tmp_path, upstream):
    preset = _preset({"data.classes": "5,6,7,8,9", "finetune.weights": upstream,
                      "finetune.mode": "probe"})
    run.train(preset, output=str(tmp_path), strategy="default", export=False,
              inspect=False)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert 0 <= metrics["val_top1"] <= 1 and metrics["best_epoch"] == 1
    assert metrics["probe_l2"] > 0 and metrics["train_images_per_second"] > 0
    assert (tmp_path / "labels.txt").read_text().split() == ["5", "6", "7", "8", "9"]
    model = _load(str(tmp_path / "model.keras"))
    upstream_model = _load(upstream)
    for name in ("embedding", "encoderblock_0"):   # the backbone is the pre-trained one
        for a, b in zip(model.get_layer(name).get_weights(),
                        upstream_model.get_layer(name).get_weights()):
            np.testing.assert_array_equal(a, b)


def test_unknown_class_is_refused_naming_the_known_ones(tmp_path):
    with pytest.raises(ValueError, match=r"unknown: \['11'\]; known: \['0', '1'"):
        run.train(_preset({"data.classes": "1,11"}), output=str(tmp_path), strategy="default",
                  export=False, inspect=False)
