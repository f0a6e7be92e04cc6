"""`export_model` (called by `vit train`) and the `vit export` command."""

import json

import numpy as np
import pytest
from helpers import random_pixels, randomize_weights

from vit import cli
from vit.inference import export as export_command
from vit_keras import VisionTransformer


def _model(config):
    model = VisionTransformer(config)
    randomize_weights(model.get_layer("head"), seed=1, stddev=0.3)
    return model


def test_export_model_writes_every_format_and_a_report(tiny_config, tmp_path):
    model = _model(tiny_config)
    images, labels = random_pixels(tiny_config, batch=16, seed=1), np.arange(16) % 5
    report = export_command.export_model(
        model, str(tmp_path), representative_images=random_pixels(tiny_config, batch=32),
        eval_images=images, eval_labels=labels, latency_runs=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["saved_model", "model.tflite", "model_fp16.tflite", "model_int8.tflite", "model.onnx",
         "model_int8.onnx", "export.json"])
    assert json.loads((tmp_path / "export.json").read_text()) == report
    assert report["eval_examples"] == 16 and report["latency"]["threads"] == 2
    formats = report["formats"]
    assert tuple(formats) == export_command.DEFAULT_FORMATS
    assert formats["saved_model"]["max_abs_logit_diff"] <= 1e-5
    assert formats["saved_model"]["latency_ms"] is None
    assert formats["tflite"]["max_abs_logit_diff"] <= 1e-4
    assert formats["onnx"]["max_abs_logit_diff"] <= 1e-4
    assert formats["tflite_fp16"]["max_abs_logit_diff"] <= 1e-2
    keras_accuracy = report["keras"]["accuracy"]
    for name in ("saved_model", "tflite", "tflite_fp16", "onnx"):
        assert formats[name]["top1_agreement"] == 1.0
        assert formats[name]["accuracy"] == keras_accuracy
    for name, entry in formats.items():
        assert entry["size_bytes"] > 0
        if name != "saved_model":
            assert entry["latency_ms"] > 0
    assert formats["tflite_int8"]["size_bytes"] < formats["tflite"]["size_bytes"]
    assert formats["onnx_int8"]["size_bytes"] < formats["onnx"]["size_bytes"]
    assert formats["onnx"]["fused_layer_norms"] == 2 * tiny_config.num_layers + 1
    assert {"QuantizeLinear", "DequantizeLinear"} <= set(formats["onnx_int8"]["ops"])


def test_export_model_refuses_int8_without_images_before_writing(tiny_config, tmp_path):
    with pytest.raises(ValueError, match="tflite_int8, onnx_int8.*need representative_images"):
        export_command.export_model(_model(tiny_config), str(tmp_path / "out"))
    with pytest.raises(ValueError, match="formats must be a non-empty subset"):
        export_command.export_model(_model(tiny_config), str(tmp_path / "out"), formats="coreml")
    assert not (tmp_path / "out").exists()


def test_vit_export_command(tiny_config, tmp_path, capsys):
    model_path = tmp_path / "run" / "model.keras"
    model_path.parent.mkdir()
    _model(tiny_config).save(model_path)
    data = tmp_path / "data.npz"
    np.savez(data, images=random_pixels(tiny_config, batch=24).astype("uint8"),
             labels=np.arange(24) % 5)
    argv = ["export", "--model", str(model_path), "--formats", "tflite,tflite_int8",
            "--latency-runs", "2"]
    assert cli.main(argv) == 2  # int8 needs calibration data
    assert "tflite_int8 needs --data" in capsys.readouterr().err
    assert cli.main(argv + ["--data", "nonsense:x"]) == 2
    assert "data spec 'nonsense:x' not understood" in capsys.readouterr().err
    assert cli.main(argv + ["--data", str(data), "--int8-float-ops", "batch_matmul,softmax",
                            "--int8-per-tensor"]) == 0
    assert "| tflite_int8 |" in capsys.readouterr().out
    report = json.loads((model_path.parent / "export.json").read_text())
    assert set(report["formats"]) == {"tflite", "tflite_int8"}
    assert report["formats"]["tflite_int8"]["float_ops"] == ["BATCH_MATMUL", "SOFTMAX"]
    assert report["formats"]["tflite_int8"]["per_channel"] is False
    assert report["eval_examples"] == 24 and report["keras"]["accuracy"] is not None
    assert (model_path.parent / "model_int8.tflite").exists()


def test_vit_export_evaluates_on_the_runs_own_validation_data(tiny_config, tmp_path, capsys):
    """A run trained with --val-data used all of its training folder: `vit export` reads the
    config.json and evaluates on the --val-data images, never on training images."""
    from PIL import Image

    for name, count in (("train", 6), ("test", 4)):
        for label in range(5):
            folder = tmp_path / name / str(label)
            folder.mkdir(parents=True)
            for index in range(count):
                Image.fromarray(random_pixels((8, 8), batch=1, seed=index)[0].astype("uint8")) \
                    .save(folder / f"{index}.png")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    _model(tiny_config).save(run_dir / "model.keras")
    preset = {"data": f"folder:{tmp_path / 'train'}", "val_data": f"folder:{tmp_path / 'test'}",
              "val_split": 0.1, "seed": 0}
    (run_dir / "config.json").write_text(json.dumps({"preset": preset}))
    assert cli.main(["export", "--model", str(run_dir / "model.keras"), "--formats", "tflite",
                     "--latency-runs", "1"]) == 0
    report = json.loads((run_dir / "export.json").read_text())
    assert report["eval_examples"] == 20          # the 5 x 4 --val-data images, not training's
