"""`export_model` (called by `vit train`) and the `vit export` command."""

import json

import numpy as np
import pytest
from helpers import random_pixels, randomize_weights

from vit import cli
from vit_app.inference.export import command as export_command
from vit_keras import VisionTransformer


def _model(config):
    model = VisionTransformer(config)
    randomize_weights(model.get_layer("head"), seed=1, stddev=0.3)
    return model


@pytest.mark.slow  # every format's latency on a trained model; the default tier: the console run
def test_export_model_writes_every_format_and_a_report(trained_tiny, tmp_path):
    report = export_command.export_model(
        trained_tiny.model(), str(tmp_path), representative_images=trained_tiny.train[:100],
        eval_images=trained_tiny.held_out, eval_labels=trained_tiny.labels, latency_runs=3)
    written = {path.name for path in tmp_path.iterdir()} | {
        path.name for path in (tmp_path / "rejected").glob("*")}
    assert written - {"rejected"} == {"saved_model", "model.tflite", "model_fp16.tflite",
                                      "model_int8.tflite", "model.onnx", "model_int8.onnx",
                                      "export.json"}
    assert json.loads((tmp_path / "export.json").read_text()) == report
    assert report["eval_examples"] == 200 and report["latency"]["threads"] == 2
    formats = report["formats"]
    # The gate's contract, whatever the int8 rounding of this machine's tiny model does:
    # float files pass (exact up to rounding), an int8 file passes exactly at its bar.
    assert report["failed"] == [name for name, entry in formats.items() if not entry["passed"]]
    assert tuple(formats) == export_command.DEFAULT_FORMATS
    assert formats["saved_model"]["max_abs_logit_diff"] <= 1e-5
    assert formats["saved_model"]["latency_ms"] is None
    assert formats["tflite"]["max_abs_logit_diff"] <= 1e-4
    assert formats["onnx"]["max_abs_logit_diff"] <= 1e-4
    assert formats["tflite_fp16"]["max_abs_logit_diff"] <= 2e-2
    keras_accuracy = report["keras"]["accuracy"]
    assert 0 <= keras_accuracy <= 1
    for name in ("saved_model", "tflite", "onnx"):
        assert formats[name]["top1_agreement"] == 1.0 and formats[name]["passed"]
        assert formats[name]["accuracy"] == keras_accuracy
    for name in ("saved_model", "tflite", "tflite_fp16", "onnx"):
        assert formats[name]["min_agreement"] == 0.999
    for name in ("tflite_fp16", "tflite_int8", "onnx_int8"):
        entry = formats[name]
        assert entry["passed"] == (entry["top1_agreement"] >= entry["min_agreement"]), name
        assert (tmp_path / entry["file"]).exists() == entry["passed"], name
    for name in ("tflite_int8", "onnx_int8"):
        assert formats[name]["min_agreement"] == 0.98
    for name, entry in formats.items():
        assert entry["size_bytes"] > 0
        if name != "saved_model" and entry["passed"]:
            assert entry["latency_ms"] > 0
    assert formats["tflite_int8"]["size_bytes"] < formats["tflite"]["size_bytes"]
    assert formats["onnx_int8"]["size_bytes"] < formats["onnx"]["size_bytes"]
    assert formats["onnx"]["fused_layer_norms"] == 2 * trained_tiny.config.num_layers + 1
    assert {"QuantizeLinear", "DequantizeLinear"} <= set(formats["onnx_int8"]["ops"])
    assert "| tflite_int8 |" in export_command.format_report(report)
    assert "(>= 98.00%)" in export_command.format_report(report)


def test_an_int8_file_below_its_bar_is_refused_and_the_others_are_written(trained_tiny,
                                                                          tmp_path):
    """Calibrated on black images, the int8 files lose the model: they go to rejected/, an
    older file of their name is removed, every other file is written."""
    model = trained_tiny.model()
    formats = ("tflite", "tflite_int8", "onnx", "onnx_int8")
    (tmp_path / "model_int8.tflite").write_bytes(b"an earlier export")
    black = np.zeros((16, *trained_tiny.held_out.shape[1:]), np.float32)
    report = export_command.export_model(
        model, str(tmp_path), formats=formats, representative_images=black,
        eval_images=trained_tiny.held_out, eval_labels=trained_tiny.labels, latency_runs=1)
    assert report["failed"] == ["tflite_int8", "onnx_int8"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "export.json", "model.onnx", "model.tflite", "rejected"]
    assert sorted(p.name for p in (tmp_path / "rejected").iterdir()) == [
        "model_int8.onnx", "model_int8.tflite"]
    entry = report["formats"]["tflite_int8"]
    assert not entry["passed"] and entry["top1_agreement"] < 0.98
    assert entry["rejected_file"] == "rejected/model_int8.tflite"
    assert "--int8-float-ops" in entry["advice"] and entry["latency_ms"] is None
    table = export_command.format_report(report)
    assert "FAILED (< 98.00%)" in table and table.count("ok (>= 99.90%)") == 2
    assert json.loads((tmp_path / "export.json").read_text())["failed"] == report["failed"]
    # A later export that passes (its bar moved: how close int8 comes is not the point here)
    # publishes the file and clears its rejected copy.
    export_command.export_model(model, str(tmp_path), formats=("tflite_int8",),
                                representative_images=trained_tiny.train[:10],
                                eval_images=trained_tiny.held_out, latency_runs=1,
                                min_agreement=0.0)
    assert (tmp_path / "model_int8.tflite").exists()
    assert not (tmp_path / "rejected" / "model_int8.tflite").exists()


def test_a_format_whose_converter_fails_is_a_failed_row_and_the_others_are_written(
        trained_tiny, tmp_path, monkeypatch):
    """A converter that raises (an operator it has no form for) fails its file alone: a
    FAILED row with the converter's reason, no stale file under its name, the other formats
    written and checked, export.json written."""
    from vit_app.inference.export import report as export_report
    from vit_keras import export

    def no_onnx(*args, **kwargs):
        raise RuntimeError("No Op registered for Frobnicate\n==> Context: node 7")

    monkeypatch.setattr(export, "onnx", no_onnx)
    (tmp_path / "model.onnx").write_bytes(b"an earlier export")
    report = export_command.export_model(
        trained_tiny.model(), str(tmp_path), formats=("tflite", "onnx"),
        eval_images=trained_tiny.held_out, eval_labels=trained_tiny.labels, latency_runs=1)
    assert report["failed"] == ["onnx"]
    entry = report["formats"]["onnx"]
    assert not entry["passed"] and entry["written"] is False
    assert entry["failure"] == ("could not be written (RuntimeError: No Op registered for "
                                "Frobnicate ==> Context: node 7)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export.json", "model.tflite"]
    assert report["formats"]["tflite"]["passed"]
    assert "| onnx | | | | | | FAILED (not written) |" in export_command.format_report(report)
    assert ("model.onnx", "FAILED (not written)") in export_report.summary_rows(report)
    assert export_report.failure_line("onnx", entry).startswith(
        "export: onnx FAILED: could not be written (RuntimeError: No Op registered")
    assert json.loads((tmp_path / "export.json").read_text())["failed"] == ["onnx"]


def test_vit_export_exits_3_after_writing_the_files_that_pass(trained_tiny, tmp_path, capsys):
    """--calibration-images 1 on a black first image: a bad int8 file, refused by the CLI."""
    model_path = tmp_path / "run" / "model.keras"
    model_path.parent.mkdir()
    trained_tiny.model().save(model_path)
    images = np.concatenate([np.zeros_like(trained_tiny.held_out[:1]), trained_tiny.held_out])
    np.savez(tmp_path / "data.npz", images=images.astype("uint8"),
             labels=np.concatenate([[0], trained_tiny.labels]))

    def export(*options, formats="tflite,tflite_int8"):
        return cli.main(["export", "--model", str(model_path), "--formats", formats,
                         "--data", str(tmp_path / "data.npz"), "--latency-runs", "1", *options])

    assert export("--calibration-images", "1") == 3
    captured = capsys.readouterr()
    assert "| tflite_int8 |" in captured.out and "FAILED (< 98.00%)" in captured.out
    assert "tflite_int8 FAILED: top-1 agreement" in captured.err
    assert "rejected/model_int8.tflite" in captured.err and "exit status 3" in captured.err
    assert (model_path.parent / "model.tflite").exists()
    assert not (model_path.parent / "model_int8.tflite").exists()
    # The bar is the user's to move: at 0 the same file is written.
    assert export("--calibration-images", "1", "--min-agreement", "int8=0",
                  formats="tflite_int8") == 0
    assert (model_path.parent / "model_int8.tflite").exists()
    assert export("--min-agreement", "int8=high") == 2
    assert "--min-agreement must be a fraction" in capsys.readouterr().err
    assert export("--min-agreement", "coreml=0.5") == 2
    assert "min_agreement keys must be formats" in capsys.readouterr().err


def test_min_agreements_per_format():
    thresholds = export_command.min_agreements(export_command.FORMATS)
    assert thresholds["saved_model"] == thresholds["tflite_fp16"] == 0.999
    assert thresholds["tflite_dynamic_int8"] == thresholds["onnx_int8"] == 0.98
    chosen = export_command.min_agreements(
        export_command.FORMATS, export_command.parse_min_agreement("int8=0.9,onnx_int8=0.5"))
    assert chosen["tflite_int8"] == 0.9 and chosen["onnx_int8"] == 0.5
    assert chosen["tflite"] == 0.999
    assert set(export_command.min_agreements(("tflite",), 0.5).values()) == {0.5}
    with pytest.raises(ValueError, match=r"min_agreement must be a fraction in \[0, 1\]"):
        export_command.min_agreements(("tflite",), 1.5)


def test_export_model_refuses_int8_without_images_before_writing(tiny_config, tmp_path):
    with pytest.raises(ValueError, match="tflite_int8, onnx_int8.*need representative_images"):
        export_command.export_model(_model(tiny_config), str(tmp_path / "out"))
    with pytest.raises(ValueError, match="formats must be a non-empty subset"):
        export_command.export_model(_model(tiny_config), str(tmp_path / "out"), formats="coreml")
    assert not (tmp_path / "out").exists()


def test_vit_export_command(trained_tiny, tmp_path, capsys):
    model_path = tmp_path / "run" / "model.keras"
    model_path.parent.mkdir()
    trained_tiny.model().save(model_path)
    data = tmp_path / "data.npz"
    np.savez(data, images=trained_tiny.held_out.astype("uint8"), labels=trained_tiny.labels)
    argv = ["export", "--model", str(model_path), "--formats", "tflite,tflite_int8",
            "--latency-runs", "2"]
    assert cli.main(argv) == 2  # int8 needs calibration data
    assert "tflite_int8 needs --data" in capsys.readouterr().err
    assert cli.main(argv + ["--data", "nonsense:x"]) == 2
    assert "data spec 'nonsense:x' not understood" in capsys.readouterr().err
    # The flags are what is tested here, not how close per-tensor int8 stays: no bar.
    assert cli.main(argv + ["--data", str(data), "--int8-float-ops", "batch_matmul,softmax",
                            "--int8-per-tensor", "--min-agreement", "int8=0"]) == 0
    assert "| tflite_int8 |" in capsys.readouterr().out
    report = json.loads((model_path.parent / "export.json").read_text())
    assert set(report["formats"]) == {"tflite", "tflite_int8"}
    assert report["formats"]["tflite_int8"]["float_ops"] == ["BATCH_MATMUL", "SOFTMAX"]
    assert report["formats"]["tflite_int8"]["per_channel"] is False
    assert report["eval_examples"] == 200 and report["keras"]["accuracy"] is not None
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


def test_on_random_images_only_float_files_are_held_to_a_bar(trained_tiny, tmp_path):
    """Without any images the export compares on noise: the int8 agreement there says nothing
    about the task, so only the float file is checked."""
    report = export_command.export_model(trained_tiny.model(), str(tmp_path),
                                         formats=("tflite", "tflite_dynamic_int8"),
                                         latency_runs=1)
    formats = report["formats"]
    assert formats["tflite"]["min_agreement"] == 0.999 and formats["tflite"]["passed"]
    assert formats["tflite_dynamic_int8"]["min_agreement"] is None
    assert formats["tflite_dynamic_int8"]["passed"] and report["failed"] == []
    assert "| not checked |" in export_command.format_report(report)


def test_one_table_holds_every_formats_facts():
    from vit_app.inference.export.formats import EXPORT_FORMATS

    assert export_command.FORMATS == tuple(EXPORT_FORMATS)
    assert export_command.DEFAULT_FORMATS == ("saved_model", "tflite", "tflite_fp16",
                                              "tflite_int8", "onnx", "onnx_int8")
    assert export_command.CALIBRATED_FORMATS == ("tflite_int8", "onnx_int8")
    files = [entry.file for entry in EXPORT_FORMATS.values()]
    assert files == ["saved_model", "model.tflite", "model_fp16.tflite",
                     "model_dynamic_int8.tflite", "model_int8.tflite", "model.onnx",
                     "model_dynamic_int8.onnx", "model_int8.onnx", "keras_hub_preset"]
    assert [name for name, entry in EXPORT_FORMATS.items() if entry.kind == "int8"] == [
        "tflite_dynamic_int8", "tflite_int8", "onnx_dynamic_int8", "onnx_int8"]
    assert not EXPORT_FORMATS["saved_model"].timed and EXPORT_FORMATS["onnx"].timed
    assert not EXPORT_FORMATS["keras_hub_preset"].timed
    assert EXPORT_FORMATS["keras_hub_preset"].kind == "float"
    assert "--int8-float-ops" in EXPORT_FORMATS["tflite_int8"].advice
    assert "bug" in EXPORT_FORMATS["tflite_fp16"].advice


def test_export_options_are_checked_and_frozen():
    import dataclasses

    from vit_app.inference.export.formats import tflite_arguments

    options = export_command.ExportOptions(formats="tflite, tflite_int8",
                                           int8_float_ops=["SOFTMAX"], image_size=[40, 16])
    assert options.formats == ("tflite", "tflite_int8") and options.image_size == (40, 16)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.formats = ("onnx",)
    with pytest.raises(ValueError, match="activation must be one of"):
        export_command.ExportOptions(activation="relu")
    with pytest.raises(ValueError, match="formats must be a non-empty subset"):
        export_command.ExportOptions(formats="")
    assert tflite_arguments("tflite", int8_per_channel=False, int8_float_ops=("SOFTMAX",)) == {
        "quantization": None, "num_calibration_images": 300, "float_ops": (),
        "per_channel": True, "keep_tensor_names": False, "image_size": None}
    assert tflite_arguments("tflite_int8", int8_per_channel=False)["per_channel"] is False
    with pytest.raises(ValueError, match="must be a TFLite format"):
        tflite_arguments("onnx")


@pytest.mark.parametrize("preset", [
    {"data": {"train": "digits", "val": "", "val_split": 0.2}, "seed": 3},
    {"data": "digits", "val_data": "", "val_split": 0.2, "seed": 3},  # an earlier, flat preset
])
def test_the_training_data_is_read_from_either_config_json_form(preset, tmp_path):
    from vit_app.inference import run_config

    (tmp_path / "config.json").write_text(json.dumps({"preset": preset,
                                                      "activation": "sigmoid"}))
    model_path = str(tmp_path / "model.keras")
    assert run_config.training_data(model_path) == {"data": "digits", "val_split": 0.2,
                                                    "seed": 3}
    assert run_config.read(model_path)["activation"] == "sigmoid"
    assert run_config.training_data(str(tmp_path / "elsewhere" / "model.keras")) == {}
