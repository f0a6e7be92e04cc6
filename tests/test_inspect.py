"""`vit inspect` and vit_keras.analysis.plots: PNGs written with the expected pixel sizes, inspect.json,
the complexity table."""

import json
import os

import numpy as np
import pytest
from PIL import Image

from vit import cli
from vit_app.images import load_files
from vit_app.inference.inspect import FIGURES, inspect_model
from vit_keras import VisionTransformer
from vit_keras.analysis import plots

EXPECTED_SIZES = {  # (width, height) in pixels at 100 dpi
    "attention_distance": (500, 400),
    "position_similarity": (600, 520),
    "filters": (700, 440),                      # 28 components in 4 rows of 7
}


def _pixels(config, count):
    height, width = config.image_hw
    rng = np.random.default_rng(0)
    return rng.uniform(0, 255, (count, height, width, config.channels)).astype("float32")


def _check_png(path, size):
    assert os.path.getsize(path) > 2000
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size == size
        assert np.asarray(image.convert("L")).std() > 5     # not a blank canvas


def test_inspect_model_writes_figures_and_numbers(tiny_config, tmp_path):
    model = VisionTransformer(tiny_config)
    output = tmp_path / "inspect"
    summary = inspect_model(model, _pixels(tiny_config, 3), str(output),
                            image_names=["a.png", "b.png", "c.png"])

    for name, size in dict(EXPECTED_SIZES, rollout=(600, 440)).items():
        _check_png(summary["figures"][name], size)
    with open(output / "inspect.json") as handle:
        numbers = json.load(handle)
    assert numbers["images"] == ["a.png", "b.png", "c.png"]
    assert np.array(numbers["rollout"]["maps"]).shape == (3, 4, 4)
    assert np.array(numbers["mean_attention_distance_px"]["per_head"]).shape == (2, 4)
    assert np.array(numbers["position_embedding_similarity"]["cosine"]).shape == (4, 4, 4, 4)
    assert len(numbers["embedding_filters"]["explained_variance"]) == 28
    assert numbers["complexity"]["params"] == model.count_params()
    assert len(numbers["predicted_class"]) == 3
    assert sorted(os.listdir(output)) == sorted([*FIGURES.values(), "inspect.json"])


def test_inspect_model_handles_gap_and_grey_models(tiny_config, tmp_path):
    config = tiny_config.replace(classifier="gap", channels=1, hidden_size=16, num_heads=2)
    summary = inspect_model(VisionTransformer(config), _pixels(config, 1), str(tmp_path))
    assert len(summary["embedding_filters"]["explained_variance"]) == 16   # min(28, D)
    _check_png(summary["figures"]["rollout"], (200, 440))


def test_vit_inspect_command_on_a_saved_model(tiny_config, tmp_path, capsys):
    model_path = str(tmp_path / "model.keras")
    VisionTransformer(tiny_config).save(model_path)
    image_paths = []
    for index, pixels in enumerate(_pixels(tiny_config.replace(image_size=48), 2)):
        image_paths.append(str(tmp_path / f"img{index}.png"))
        Image.fromarray(pixels.astype(np.uint8)).save(image_paths[-1])

    assert cli.main(["inspect", "--model", model_path, *image_paths]) == 0
    output = tmp_path / "inspect"                              # default: beside the model
    assert sorted(os.listdir(output)) == sorted([*FIGURES.values(), "inspect.json"])
    assert "rollout.png" in capsys.readouterr().out
    assert cli.main(["inspect", "--model", model_path]) == 2   # no image given


def test_vit_inspect_complexity_prints_a_table(capsys):
    assert cli.main(["inspect", "--complexity", "B/16", "--image-size", "224", "384"]) == 0
    out = capsys.readouterr().out
    assert "17.56" in out and "55.48" in out and "384x384" in out


def test_load_files_resizes_and_converts(tmp_path):
    path = str(tmp_path / "x.png")
    Image.fromarray(np.full((10, 20, 3), 200, np.uint8)).save(path)
    rgb = load_files([path], (16, 8), channels=3)
    grey = load_files([path], (16, 8), channels=1)
    assert rgb.shape == (1, 16, 8, 3) and grey.shape == (1, 16, 8, 1)
    np.testing.assert_allclose(rgb, 200, atol=1e-3)
    np.testing.assert_allclose(grey, 200, atol=0.5)
    with pytest.raises(ValueError, match="does not exist"):
        load_files([str(tmp_path / "missing.png")], (16, 8))


def test_plots_reject_bad_shapes_and_leave_no_temp_files(tmp_path):
    with pytest.raises(ValueError, match="layers, heads"):
        plots.plot_attention_distance(np.zeros(3), str(tmp_path / "d.png"))
    with pytest.raises(ValueError, match="rows, cols, rows, cols"):
        plots.plot_position_similarity(np.zeros((2, 3, 3, 2)), str(tmp_path / "s.png"))
    with pytest.raises(ValueError, match="same n"):
        plots.plot_rollout(np.zeros((2, 8, 8, 3)), np.zeros((1, 2, 2)), str(tmp_path / "r.png"))
    plots.plot_filters(np.random.default_rng(0).normal(size=(3, 4, 4, 1)),
                       str(tmp_path / "f.png"))
    assert os.listdir(tmp_path) == ["f.png"]


@pytest.mark.parametrize("options", [
    dict(distilled=True), dict(num_register_tokens=2, posemb="sincos2d", classifier="gap"),
    dict(posemb="learn2d", classifier="map"), dict(resnet_layers=(1,), patch_size=1)],
    ids=["deit", "registers+sincos", "learn2d+map", "hybrid"])
def test_attention_maps_cover_every_token_of_every_option(tiny_config, options):
    """The probe composes tokens as the model does: one row per token of `config.seq_len`."""
    from vit_keras import analysis

    config = tiny_config.replace(**options)
    model = VisionTransformer(config)
    images = _pixels(config, 2) / 127.5 - 1.0
    maps = analysis.attention_maps(model, images)
    assert len(maps) == config.num_layers
    for block in maps:
        assert block.shape == (2, config.num_heads, config.seq_len, config.seq_len)
        np.testing.assert_allclose(block.sum(axis=-1), 1.0, atol=1e-5)
    tokens = analysis.AttentionProbe(model).tokens(images)
    reference = model.get_layer("encoderblock_0").input
    assert tokens.shape[1] == reference.shape[1] == config.seq_len
    assert analysis.attention_rollout(model, images).shape == (2, *config.grid_size)
    assert analysis.mean_attention_distance(model, images).shape == (config.num_layers,
                                                                     config.num_heads)
