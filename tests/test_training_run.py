"""`vit train` end to end: default preset (short), strategies, multi-worker, TPU error, resume.

Multi-device and multi-worker cases run in subprocesses: logical devices and collective
runtimes must be configured before TensorFlow initialises.
"""

import dataclasses
import json
import os
import re
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from runs import killed_run_resumes_exactly, vit_env
from helpers import assert_a_runs_export_and_stages, vit_predict
from vit import cli
from training import finish, run
from training.presets import get_preset

# A tiny custom ViT on digits: a few steps take well under a second.
TINY_MODEL = dict(image_size=8, patch_size=4, hidden_size=16, mlp_dim=32, num_heads=2,
                  num_layers=1)
TINY = ["--set", "model.image_size=8", "--set", "model.patch_size=4", "--set", "model.hidden_size=16",
        "--set", "model.mlp_dim=32", "--set", "model.num_heads=2", "--set", "model.num_layers=1",
        "--set", "augment.translate=0.1", "--set", "loop.eval_every=1"]


@pytest.mark.slow
def test_default_preset_short_run_writes_every_file(tmp_path, capsys):
    """digits_tiny shrunk to seconds (8 px, 16 tokens, 2 blocks, 8 epochs): the run's files
    and scores; what the whole default job reaches is `vit train`'s own table (CI runs it)."""
    preset = get_preset("digits_tiny").replace(
        schedule={"epochs": 8, "warmup_epochs": 1}, optim={"lr": 5e-3},
        augment={"translate": 0.0, "rotate": 0.0, "zoom": 0.0}, loop={"eval_every": 8},
        model={"image_size": 8, "patch_size": 2, "hidden_size": 32, "mlp_dim": 64,
               "num_layers": 2})
    assert run.train(preset, output=str(tmp_path), strategy="default", export=False,
                     inspect=False) == 0
    header = capsys.readouterr().out
    assert "data: train 1437 examples of digits (10 classes); validation 360 examples from " \
        "digits' 20% test split" in header
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert 0 <= metrics["val_top1"] <= 1
    assert (tmp_path / "labels.txt").read_text().split() == [str(i) for i in range(10)]
    for name in ("model.keras", "history.csv", "curves.png", "best.weights.h5", "config.json"):
        assert (tmp_path / name).exists(), name
    assert os.listdir(tmp_path / "logs")                 # TensorBoard events
    assert not (tmp_path / "backup").exists()            # removed after a complete run


def _run_whose_int8_file_fails() -> tuple[object, int, str, str]:
    """A 1-epoch float32 run of the tiny model with every export, its int8 TFLite file forced
    under its bar (a bar above 100%), shared by the tests that read it (`artifacts.shared`):
    (its folder, its exit status, what it printed, what it warned).

    float32: the run's evaluation and `vit evaluate` must agree to the image, which bfloat16
    rounding in two differently traced graphs does not promise on a one-epoch model."""
    import contextlib
    import io

    from artifacts import shared
    from vit_app.inference.export import command as export_command

    preset = get_preset("digits_tiny").replace(
        schedule={"epochs": 1}, loop={"eval_every": 1, "mixed_precision": ""}, model=TINY_MODEL)

    def build(folder):
        out, err = io.StringIO(), io.StringIO()
        with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            patch.setattr(export_command, "min_agreements", lambda formats, value=None: {
                name: 1.01 if name == "tflite_int8" else 0.0 for name in formats})
            status = run.train(preset, output=str(folder / "run"), strategy="default",
                               inspect=False)
        (folder / "log.json").write_text(json.dumps(
            {"status": status, "out": out.getvalue(), "err": err.getvalue()}))

    folder = shared("run-int8-refused", repr(preset), build)
    log = json.loads((folder / "log.json").read_text())
    return folder / "run", log["status"], log["out"], log["err"]


def test_an_export_that_fails_its_check_keeps_the_trained_run_and_exits_3():
    """The final table lists every exported file with its agreement; a file below its bar
    (forced here: int8's bar above 100%) is refused, the run's own files stay, status 3;
    every other default format is written, each stage timed."""
    output, status, out, err = _run_whose_int8_file_fails()
    assert status == finish.EXIT_EXPORT_FAILED == 3
    for name in ("model.keras", "metrics.json", "config.json", "model.tflite", "model.onnx",
                 "model_int8.onnx", "rejected/model_int8.tflite"):
        assert (output / name).exists(), name
    assert not (output / "model_int8.tflite").exists()
    assert "the training succeeded" in out
    for row in ("model.tflite", "model_int8.onnx", "saved_model"):
        assert re.search(rf"\| {re.escape(row)} +\| agreement [\d.]+%, top-1 [\d.]+%, ok", out)
    assert re.search(r"\| rejected/model_int8.tflite +\| agreement [\d.]+%, top-1 [\d.]+%, "
                     r"FAILED \(< 101.00%\)", out)
    assert "tflite_int8 FAILED: top-1 agreement" in err and "exit status 3" in err
    # The default tier's end-to-end run: every stage timed, every default format written.
    assert_a_runs_export_and_stages(output, out, refused=("tflite_int8",), int8_smaller=False)


class _Killed(Exception):
    """Stands in for a SIGKILL at a chosen instant of an in-process run."""


@pytest.mark.slow
def test_kill_right_after_the_last_backup_keeps_history_and_best_weights(tmp_path, monkeypatch):
    """The last epoch's backup is the last thing its epoch end writes: a run killed right after
    it resumes with nothing to train and still has every history row and the best weights."""
    from training import callbacks
    from vit_app import outputs

    preset = get_preset("digits_tiny").replace(schedule={"epochs": 2}, loop={"eval_every": 1},
                                               model=TINY_MODEL)
    original = callbacks.ResumableBackup.on_epoch_end

    def backup_then_die(self, epoch, logs=None):
        original(self, epoch, logs)
        if epoch + 1 == preset.schedule.epochs:
            raise _Killed

    monkeypatch.setattr(callbacks.ResumableBackup, "on_epoch_end", backup_then_die)
    with pytest.raises(_Killed):
        run.train(preset, output=str(tmp_path), strategy="default", export=False,
                  inspect=False)
    monkeypatch.undo()
    assert (tmp_path / "best.weights.h5").exists()
    assert run.train(preset, output=str(tmp_path), strategy="default", export=False,
                     inspect=False, resume=True) == 0
    history = outputs.read_history(str(tmp_path / "history.csv"))
    assert history["epoch"] == [0, 1]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    # The best score survives the resume: it is the best of the epochs run before the kill.
    assert metrics["best_val_accuracy"] == pytest.approx(max(history["val_accuracy"]))
    scores = history["val_accuracy"]  # the latest of equal best scores
    assert metrics["best_epoch"] == len(scores) - int(np.argmax(scores[::-1]))


def test_evaluate_and_predict_commands(tmp_path, capsys):
    from PIL import Image

    from vit_app.data import training_data

    output = _run_whose_int8_file_fails()[0]
    model = str(output / "model.keras")
    assert cli.main(["evaluate", "--model", model, "--data", "digits",
                     "--output", str(tmp_path / "eval.json")]) == 0
    report = json.loads((tmp_path / "eval.json").read_text())
    metrics = json.loads((output / "metrics.json").read_text())
    assert report["examples"] == 360 and len(report["per_class"]) == 10
    assert report["top1"] == pytest.approx(metrics["val_top1"], abs=1e-6)
    # One loss in every report: plain cross-entropy (the run trains with label smoothing 0.1).
    assert get_preset("digits_tiny").objective.label_smoothing > 0
    assert report["loss"] == pytest.approx(metrics["val_cross_entropy"], abs=1e-4)
    assert cli.main(["evaluate", "--model", model, "--data", "digits", "--few-shot", "1", "10",
                     "--block", "0", "--output", str(tmp_path / "few_shot.json")]) == 0
    few_shot = json.loads((tmp_path / "few_shot.json").read_text())
    assert few_shot["few_shot_block"] == 0 and sorted(few_shot["few_shot"]) == ["1", "10"]
    assert all(0 <= few_shot["few_shot"][shots] <= 1 for shots in ("1", "10"))
    assert cli.main(["evaluate", "--model", model, "--data", "digits", "--block", "0"]) == 2
    image, label = training_data.digits_arrays("test")[0][0], \
        training_data.digits_arrays("test")[1][0]
    Image.fromarray(image).save(tmp_path / "digit.png")
    Image.fromarray(image).save(tmp_path / "digit.tif")
    capsys.readouterr()
    status, predictions = vit_predict([str(tmp_path / "digit.png"), "--model", model,
                                       "--top-k", "3"], tmp_path)
    assert status == 0 and predictions[0]["file"].endswith("digit.png")
    _, from_tiff = vit_predict([str(tmp_path / "digit.tif"), "--model", model, "--top-k", "3"],
                               tmp_path)
    assert from_tiff[0]["top"] == predictions[0]["top"]  # a TIFF reads as the same pixels
    probabilities = [shown["score"] for shown in predictions[0]["top"]]
    assert len(probabilities) == 3
    assert probabilities == sorted(probabilities, reverse=True) and sum(probabilities) <= 1.0001
    assert cli.main(["predict", str(tmp_path / "missing.png"), "--model", model]) == 2
    assert capsys.readouterr().err.startswith("vit predict: error: ")


@pytest.mark.parametrize("data, objective, expected", [
    ("digits", "classify", "digits_tiny"),
    ("folder:~/pets", "classify", "pets_classify"),
    ("folder:/data/boxes/train/", "detect", "boxes_detect"),
    ("folder:my cells", "segment", "my_cells_segment"),
    ("csv:~/photos/train.csv", "multilabel", "photos_multilabel"),
    ("csv:/x/tags.csv", "classify", "tags_classify"),
    ("tfds:oxford_flowers102:train", "classify", "oxford_flowers102_classify"),
    ("tfrecord:gs://bucket/pets/train-*.tfrecord", "classify", "pets_classify"),
])
def test_a_run_on_your_data_is_named_after_it(data, objective, expected):
    """Without --output: the preset's name on its built-in data, else the data's and the
    objective's (a split's folder gives way to its parent)."""
    preset = get_preset("digits_tiny")
    preset = dataclasses.replace(
        preset, data=dataclasses.replace(preset.data, train=data),
        objective=dataclasses.replace(preset.objective, kind=objective))
    assert run.default_output(preset) == os.path.join(run.OUTPUT_ROOT, expected)


def test_tpu_strategy_without_tpu_fails_fast_and_clearly(monkeypatch, capsys):
    for name in ("COLAB_TPU_ADDR", "TPU_NAME"):
        monkeypatch.delenv(name, raising=False)
    started = time.perf_counter()
    status = cli.main(["train", "--strategy", "tpu", "--no-export", "--no-inspect"])
    assert status == 1
    assert "no TPU found" in capsys.readouterr().err
    assert time.perf_counter() - started < 10


MIRRORED_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np, tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import keras, vit_keras
    from training import pipeline, recipe
    from vit_app.tasks.classify.data import readers
    from training.presets import Preset
    from vit_keras import keras_compat
    # SGD: Adam's m / sqrt(v) would amplify float32 noise in near-zero gradients. The global
    # clip (1.0) is active in the last steps: it must see the summed gradient, not each replica's.
    preset = Preset().replace(
        optim={"optimizer": "sgd", "lr": 0.1, "weight_decay": 1e-4, "clipnorm": 1.0},
        schedule={"epochs": 1, "warmup_steps": 1}, objective={"label_smoothing": 0.1})
    config = vit_keras.ViTConfig(image_size=8, patch_size=4, hidden_size=16, mlp_dim=32,
                                 num_heads=2, num_layers=1, num_classes=10)
    source = readers.digits_source("train")
    results = {}
    for name, strategy in (("default", tf.distribute.get_strategy()),
                           ("mirrored", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]))):
        keras.utils.set_random_seed(0)
        with strategy.scope():
            model = vit_keras.VisionTransformer(config)
            model.compile(recipe.make_optimizer(preset, 4, model), recipe.make_loss(preset))
        if name == "mirrored":  # as `vit train` does: no batch consumed to build metrics
            keras_compat.build_without_peeking(
                model, (np.zeros((16, 8, 8, 3), "float32"), np.zeros((16, 10), "float32")))
        dataset = pipeline.train_dataset(source, 8, 32, Preset().replace(schedule={"epochs": 1}),
                                         steps_per_epoch=4)
        model.fit(dataset, epochs=1, steps_per_epoch=4, verbose=0)
        results[name] = (strategy.num_replicas_in_sync, model.get_weights())
    (n1, w1), (n2, w2) = results["default"], results["mirrored"]
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(w1, w2))
    scale = max(float(np.max(np.abs(a))) for a in w1)
    print(json.dumps({"replicas": [n1, n2], "max_abs_diff": diff, "scale": scale}))
""")


@pytest.mark.slow  # a fresh process training twice (about 12 s): with the multi-device runs
def test_mirrored_two_cpus_matches_default_strategy(tmp_path):
    result = subprocess.run([sys.executable, "-c", MIRRORED_SCRIPT], env=vit_env(),
                            capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["replicas"] == [1, 2]
    # Same global batch of 32 (2 x 16 per replica): float32 reduction order is the only
    # difference after 4 SGD-momentum steps; stated tolerance 1e-5 absolute on O(1) weights.
    assert report["max_abs_diff"] < 1e-5, report


@pytest.mark.slow
def test_sigkill_then_resume_equals_uninterrupted_run(tmp_path):
    common = ["train", "--epochs", "3", "--batch-size", "16", "--no-export", "--no-inspect",
              "--seed", "5", *TINY, "--set", "loop.backup_every=3", "--set", "loop.eval_every=3"]
    killed_run_resumes_exactly(common, tmp_path, min_step=9, total_steps=3 * 89)
