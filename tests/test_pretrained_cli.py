"""`vit predict --weights`, `vit weights list/fetch` and `vit train --weights` with named
releases, served by a loopback mirror of the vit_models bucket."""

import os

import numpy as np
import pytest
from PIL import Image

import vit_keras
from helpers import randomize_weights, vit_predict
from vit import cli
from vit_app.images import load_files
from vit_app.inference.classifier import scores_from_logits
from training.objective import get_objective
from training.presets.command_line import resolve_preset
from vit_keras import pretrained
from vit_keras.checkpoints import save_npz
from vit_keras.pretrained import registry
from weights_server import serving

TI16_RELEASE = ("augreg-in21k+imagenet2012-224", "Ti/16")  # 224 px, 1000 classes


@pytest.fixture(scope="module")
def ti16_file(tmp_path_factory):
    """A real-size ViT-Ti/16 with random weights and an ImageNet-1k head, as an official .npz."""
    path = str(tmp_path_factory.mktemp("ti16") / "ti16.npz")
    model = vit_keras.ViTTi16()
    randomize_weights(model, seed=1, stddev=0.05)
    save_npz(model, path)
    return path


@pytest.fixture
def mirror(ti16_file, tmp_path, monkeypatch):
    """The Ti/16 file served under its release path; an empty KERAS_HOME."""
    release = pretrained.find(*TI16_RELEASE)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    with serving() as server:
        monkeypatch.setenv(registry.BASE_URL_VARIABLE, server.url)
        with open(ti16_file, "rb") as file:
            server.files["/" + release.path] = file.read()
        yield server, release


@pytest.mark.slow
def test_vit_predict_prints_the_imagenet_top5_of_named_weights(mirror, ti16_file, tmp_path,
                                                               capsys):
    image_path = str(tmp_path / "photo.png")
    pixels = np.random.default_rng(0).integers(0, 256, (160, 200, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(image_path)
    status, predictions = vit_predict([image_path, "--weights", TI16_RELEASE[0], "--model",
                                       "Ti/16"], tmp_path)
    assert status == 0 and [row["file"] for row in predictions] == [image_path]
    model = vit_keras.ViTTi16(weights=ti16_file)
    images = load_files([image_path], 224) / 127.5 - 1.0
    probabilities = scores_from_logits(np.asarray(model(images), np.float64))
    expected = vit_keras.decode_predictions(probabilities, top=5)[0]
    top = predictions[0]["top"]
    assert len(top) == 5
    for shown, (_, name, probability) in zip(top, expected):
        assert shown["class"] == name and shown["score"] == pytest.approx(probability, abs=1e-5)


def test_vit_weights_list_shows_the_registry_and_what_is_cached(mirror, capsys):
    _, release = mirror
    assert cli.main(["weights", "list", "--model", "Ti/16"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0].split() == ["model", "weights", "px", "classes", "pre_logits", "size",
                               "cached"]
    table = {row.split()[1]: row.split() for row in rows[1:4]}
    assert table[TI16_RELEASE[0]] == ["Ti/16", TI16_RELEASE[0], "224", "1000", "no", "?", "no"]
    assert cli.main(["weights", "fetch", TI16_RELEASE[0], "--model", "ViT-Ti_16"]) == 0
    assert capsys.readouterr().out.strip() == release.cache_path
    assert cli.main(["weights", "list", "--model", "Ti/16"]) == 0
    cached_row = [row.split() for row in capsys.readouterr().out.splitlines()
                  if TI16_RELEASE[0] in row.split()][0]
    size_mib = f"{os.path.getsize(release.cache_path) / 2**20:.0f}"
    assert cached_row[-3:] == [size_mib, "MiB", "yes"]


@pytest.mark.parametrize("argv, message", [
    (["imagenet21k", "--model", "Ti/16"], "there are no 'imagenet21k' weights for ViT-Ti/16"),
    (["augreg-in21K", "--model", "Ti/16"], "did you mean 'augreg-in21k'?"),
    (["no_such_file.npz"], "'no_such_file.npz' is neither a weight name"),
])
def test_vit_weights_fetch_of_something_unknown_is_one_error_line(argv, message, capsys):
    assert cli.main(["weights", "fetch", *argv]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("vit weights: error: ") and message in error and "\n" not in error


def test_vit_predict_refuses_a_release_whose_head_was_zeroed(tmp_path, capsys):
    image_path = str(tmp_path / "photo.png")
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(image_path)
    assert cli.main(["predict", image_path, "--weights", "imagenet21k", "--model", "B/16"]) == 2
    error = capsys.readouterr().err
    assert "'imagenet21k' head of ViT-B/16 is all zeros" in error and "augreg-in21k" in error


def test_vit_train_starts_from_a_named_release(mirror, ti16_file):
    """The classifier `vit train --weights NAME` builds holds the release's encoder, with its
    position embedding resized to the training resolution and a new head."""
    args = cli.build_parser().parse_args(
        ["train", "--config", "digits_tiny", "--model", "Ti/16", "--image-size", "32",
         "--set", "model.classifier=token", "--weights", TI16_RELEASE[0]])
    preset = resolve_preset(args)
    objective = get_objective(preset)
    model = objective.build(objective.model_config(num_classes=10))
    source = vit_keras.ViTTi16(weights=ti16_file)
    for name in ("embedding", "encoderblock_11", "encoder_norm"):
        for trained, released in zip(model.get_layer(name).weights,
                                     source.get_layer(name).weights):
            np.testing.assert_array_equal(np.asarray(trained), np.asarray(released))
    assert model.output_shape == (None, 10)
    assert model.get_layer("posembed_input").weights[0].shape == (1, 2 * 2 + 1, 192)


@pytest.mark.parametrize("argv, message", [
    (["--config", "digits_tiny", "--weights", "augreg-in21k"], "add --model B/16"),
    (["--config", "digits_tiny", "--model", "Ti/16", "--weights", "imagenet21k"],
     "no 'imagenet21k' weights for ViT-Ti/16"),
    (["--model", "Ti/16", "--weights", "augreg-in21k", "--set", "model.classifier=gap"],
     "trained with classifier='token'; --set model.classifier=gap.*drop that --set"),
])
def test_vit_train_checks_a_weight_name_before_reading_data(argv, message):
    args = cli.build_parser().parse_args(["train", *argv])
    with pytest.raises(ValueError, match=message):
        resolve_preset(args)


def test_a_named_release_sets_up_its_model_and_the_fine_tuning_recipe():
    """The README's line as written: the release fixes the pooling and the image size, and the
    official fine-tuning recipe replaces the default job's from-scratch one; what the user
    set stays, and a --config keeps its own recipe and image size."""
    from training.presets import command_line, get_preset

    def resolved(*argv):
        return resolve_preset(cli.build_parser().parse_args(["train", *argv]))

    preset = resolved("--model", "B/16", "--weights", "augreg-in21k", "--data",
                      "folder:~/pets", "--finetune", "lora")
    recipe = get_preset(command_line.RECIPE_PRESET)
    assert (preset.model.classifier, preset.model.image_size) == ("token", 224)
    assert preset.optim == recipe.optim and preset.augment == recipe.augment
    assert preset.schedule.epochs == recipe.schedule.epochs
    assert (preset.schedule.warmup_steps, preset.schedule.warmup_epochs) == (0, 1.0)
    assert preset.finetune.mode == "lora" and preset.model.drop_path_rate == 0.0
    assert "optim.lr = 0.01  (--weights (fine-tuning recipe))" in preset.resolution()
    mine = resolved("--model", "S/16", "--weights", "augreg-in21k", "--image-size", "384",
                    "--lr", "0.003", "--set", "augment.flip=false")
    assert (mine.model.image_size, mine.optim.lr, mine.augment.flip) == (384, 0.003, False)
    configured = resolved("--config", "digits_tiny", "--model", "Ti/16", "--weights",
                          "augreg-in21k")
    assert configured.optim == get_preset("digits_tiny").optim
    assert configured.model.classifier == "token" and configured.model.image_size == 16
    assert resolved("--config", "finetune_384", "--weights",
                    "augreg-in21k").model.image_size == 384
    scratch = resolved("--model", "B/16")
    assert scratch.optim == get_preset("digits_tiny").optim


@pytest.mark.slow  # a ViT-Ti/16 at 224 px traced for training (about a minute on 2 cores)
def test_the_readmes_fine_tuning_line_trains_a_folder(mirror, tmp_path):
    """`vit train --model M --weights NAME --data folder:DIR --finetune lora`, as the README
    writes it (a Ti/16 for the B/16), runs to its end at the release's size and pooling."""
    import json

    for label in ("cat", "dog"):
        (tmp_path / "pets" / label).mkdir(parents=True)
        for index in range(8):
            pixels = np.random.default_rng(index).integers(0, 255, (40, 48, 3), np.uint8)
            Image.fromarray(pixels).save(tmp_path / "pets" / label / f"{index}.jpg")
    output = tmp_path / "run"
    assert cli.main(["train", "--model", "Ti/16", "--weights", TI16_RELEASE[0], "--data",
                     f"folder:{tmp_path / 'pets'}", "--finetune", "lora", "--epochs", "1",
                     "--no-export", "--no-inspect", "--output", str(output)]) == 0
    config = json.loads((output / "config.json").read_text())
    model = config["preset"]["model"]
    assert (model["classifier"], model["image_size"]) == ("token", 224)
    assert config["preset"]["optim"]["optimizer"] == "sgd"
    assert config["preset"]["finetune"]["mode"] == "lora"


def test_imagenet21k_heads_score_with_a_sigmoid():
    logits = np.linspace(-3, 3, 21843)[None]
    np.testing.assert_allclose(scores_from_logits(logits), 1 / (1 + np.exp(-logits)))
    logits_1k = np.linspace(-3, 3, 1000)[None]
    np.testing.assert_allclose(scores_from_logits(logits_1k).sum(), 1.0)
