"""`loop.keep`: with validation data a run's model.keras and exports hold the best validated
epoch's weights (the table says which epoch), `loop.keep=last` the last epoch's; the header
points to fine-tuning when a classifier trains from scratch on a few of the user's images."""

import json

import numpy as np
import pytest
from PIL import Image

from training import callbacks, run
from training.presets import get_preset
from vit_app import outputs

TINY_MODEL = dict(image_size=8, patch_size=4, hidden_size=16, mlp_dim=32, num_heads=2,
                  num_layers=1)
RANKING = {0: 0.2, 1: 0.9, 2: 0.1}  # the scores BestModel sees: epoch 2 is "best"


def _rank_epoch_two_best(monkeypatch):
    """BestModel ranks epochs by `RANKING`, whatever their real scores (which history.csv
    keeps), so that the best epoch is not the last."""
    original = callbacks.BestModel.on_epoch_end

    def ranked(self, epoch, logs=None):
        original(self, epoch, dict(logs or {}, **{self.monitor: RANKING[epoch]}))

    monkeypatch.setattr(callbacks.BestModel, "on_epoch_end", ranked)


@pytest.mark.parametrize("keep, kept", [("best", 2), ("last", 3)])
def test_the_run_keeps_the_best_validated_epoch_unless_told_the_last(tmp_path, monkeypatch,
                                                                     capsys, keep, kept):
    _rank_epoch_two_best(monkeypatch)
    preset = get_preset("digits_tiny").replace(schedule={"epochs": 3, "warmup_epochs": 1},
                                               loop={"eval_every": 1, "keep": keep},
                                               optim={"lr": 5e-3}).replace_model(**TINY_MODEL)
    assert run.train(preset, output=str(tmp_path), strategy="default", export=False,
                     inspect=False) == 0
    out = capsys.readouterr().out
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    history = outputs.read_history(str(tmp_path / "history.csv"))
    assert metrics["best_epoch"] == 2 and metrics["kept_epoch"] == kept
    # The final evaluation scores the kept weights: its loss is that epoch's validation loss.
    assert metrics["val_loss"] == pytest.approx(history["val_loss"][kept - 1], rel=1e-4)
    assert history["val_loss"][1] != pytest.approx(history["val_loss"][2], rel=1e-4)
    if keep == "best":
        assert "keep: the weights of epoch 2 of 3, the best validated" in out
        assert "| epoch 2 of 3: the best validated (--set loop.keep=last: the last)" in out
    else:
        assert "keep: the weights" not in out and "| epoch 3 of 3: the last " in out


def test_without_validation_the_last_epoch_is_kept(tmp_path, capsys):
    preset = get_preset("digits_tiny").replace(
        data={"train": _folder(tmp_path / "images", 4), "val_split": 0.0, "adapt": False},
        schedule={"epochs": 2, "warmup_epochs": 1, "batch_size": 4}, model=TINY_MODEL)
    assert run.train(preset, output=str(tmp_path / "run"), strategy="default", export=False,
                     inspect=False) == 0
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["kept_epoch"] == 2 and metrics["best_epoch"] is None
    assert "| epoch 2 of 2: the last " in capsys.readouterr().out


@pytest.mark.slow
def test_a_missing_best_weights_file_is_named(tmp_path, monkeypatch):
    _rank_epoch_two_best(monkeypatch)
    monkeypatch.setattr(callbacks.BestModel, "load", lambda *args: pytest.fail("loaded"))
    original = callbacks.BestModel.on_epoch_end

    def then_remove(self, epoch, logs=None):
        original(self, epoch, logs)
        if epoch == 2:
            (tmp_path / "best.weights.h5").unlink()

    monkeypatch.setattr(callbacks.BestModel, "on_epoch_end", then_remove)
    preset = get_preset("digits_tiny").replace(schedule={"epochs": 3, "warmup_epochs": 1},
                                               loop={"eval_every": 1}).replace_model(**TINY_MODEL)
    with pytest.raises(FileNotFoundError, match=r"best.weights.h5, epoch 2\) are missing; "
                                                r"run with --set loop.keep=last"):
        run.train(preset, output=str(tmp_path), strategy="default", export=False,
                  inspect=False)


def _folder(root, per_class: int):
    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        (root / label).mkdir(parents=True)
        for index in range(per_class):
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(
                root / label / f"{index}.png")
    return f"folder:{root}"


@pytest.mark.slow
def test_the_header_points_to_fine_tuning_for_a_few_images_from_scratch(tmp_path, capsys):
    data = _folder(tmp_path / "photos", 4)
    preset = get_preset("digits_tiny").replace(
        data={"train": data, "val_split": 0.0, "adapt": False},
        schedule={"epochs": 1, "warmup_epochs": 0, "batch_size": 4}, model=TINY_MODEL)
    assert run.train(preset, output=str(tmp_path / "run"), strategy="default", export=False,
                     inspect=False) == 0
    out = capsys.readouterr().out
    assert (f"hint: 8 training images are few for a ViT from scratch, which has to learn from "
            "the data the locality a CNN is built with; fine-tuning pre-trained weights is the "
            f"usual route: vit train --data {data} --model S/16 --weights augreg-in21k "
            "--finetune lora") in out


def test_no_hint_for_the_built_in_digits():
    from training import report
    from training.objective import get_objective

    class Setup:
        preset = get_preset("digits_tiny")
        objective = get_objective(preset)
        num_examples = 1437

    assert report.few_images_hint(Setup) == ""
    Setup.preset = Setup.preset.replace(data={"train": "folder:/photos"})
    hint = report.few_images_hint(Setup)
    assert hint.startswith("hint: 1437 training images")
    # The command it gives runs as written: the release sets up its model and recipe.
    from vit import cli
    from training.presets.command_line import resolve_preset

    command = hint.split("usual route: vit ")[1].split(" (")[0].split()
    preset = resolve_preset(cli.build_parser().parse_args(command))
    assert (preset.model.classifier, preset.model.image_size) == ("token", 224)
    Setup.num_examples = 2000
    assert report.few_images_hint(Setup) == ""
