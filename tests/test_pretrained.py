"""Pretrained weights by name, without a network: the registry, the class names, the config a
constructor takes from its weights, and loading a release from a warm cache."""

import importlib.util
import os

import numpy as np
import pytest

import vit_keras
from helpers import assert_outputs_equal, random_images, randomize_weights
from vit_keras import pretrained
from vit_keras.checkpoints import save_npz
from vit_keras.config import variant_name
from vit_keras.pretrained import labels, registry

# A B/16 whose width, depth and MLP are tiny: the patch size (and so the release's posemb
# grid) stays, the file stays small.
TINY_B16 = dict(hidden_size=16, mlp_dim=32, num_heads=2, num_layers=1)
REFUSED_URL = "http://127.0.0.1:9"  # the discard port: nothing listens, connections are refused


def tiny_release_file(path, *, image_size, classes, pre_logits, seed=0):
    """Writes a random tiny-B/16 official-layout `.npz`; returns the model it holds."""
    model = vit_keras.ViTB16(input_shape=(image_size, image_size, 3), classes=classes,
                             representation_size=TINY_B16["hidden_size"] if pre_logits else None,
                             **TINY_B16)
    randomize_weights(model, seed=seed)
    save_npz(model, str(path))
    return model


@pytest.fixture
def keras_home(tmp_path, monkeypatch):
    """An empty Keras cache, and a weights URL that refuses connections (no network)."""
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "keras_home"))
    monkeypatch.setenv(registry.BASE_URL_VARIABLE, REFUSED_URL)
    return tmp_path / "keras_home"


def test_every_release_is_a_known_architecture_with_a_labelled_head():
    releases = pretrained.releases()
    assert len(releases) >= 40
    assert len({(r.variant, r.name) for r in releases}) == len(releases)
    assert len({r.path for r in releases}) == len(releases)
    for release in releases:
        assert variant_name(release.variant) == release.variant
        assert release.num_classes in labels.LABEL_FILES
        assert release.image_size in (224, 384)
        assert release.path.endswith(".npz") and not release.path.startswith("/")
        # The original ImageNet-21k files alone have pre_logits, and a zeroed head.
        assert release.pre_logits == (release.name == "imagenet21k")
        assert release.head_trained == (release.name != "imagenet21k")
    b16 = {r.name for r in releases if r.variant == "B/16"}
    assert b16 == set(pretrained.weight_names())


def test_release_urls_and_cache_paths_follow_the_environment(keras_home, monkeypatch):
    release = pretrained.find("imagenet21k+imagenet2012", "ViT-B_16")
    monkeypatch.delenv(registry.BASE_URL_VARIABLE)
    assert release.url == ("https://storage.googleapis.com/vit_models/"
                           "imagenet21k+imagenet2012/ViT-B_16.npz")
    monkeypatch.setenv(registry.BASE_URL_VARIABLE, "http://mirror.local/vit/")
    assert release.url == "http://mirror.local/vit/imagenet21k+imagenet2012/ViT-B_16.npz"
    assert release.cache_path == os.path.join(
        str(keras_home), "models", "vit_keras", "vit_models", "imagenet21k+imagenet2012",
        "ViT-B_16.npz")
    assert not release.cached


def test_unknown_release_lists_what_the_architecture_has():
    with pytest.raises(ValueError, match=r"no 'imagenet21k\+imagenet2012' weights for "
                       r"ViT-Ti/16.*'augreg-in21k'"):
        pretrained.find("imagenet21k+imagenet2012", "Ti/16")
    with pytest.raises(ValueError, match="unknown ViT variant 'X/7'"):
        pretrained.find("imagenet21k", "X/7")
    with pytest.raises(ValueError, match="say which architecture"):
        pretrained.weights_file("imagenet21k")


def test_imagenet_class_names_are_in_head_order():
    classes_1k = labels.imagenet_classes(1000)
    assert classes_1k[0] == ("n01440764", "tench")
    assert classes_1k[999][0] == "n15075141"
    wnids_1k = [wnid for wnid, _ in classes_1k]
    assert wnids_1k == sorted(set(wnids_1k)) and len(wnids_1k) == 1000
    tfds_spec = importlib.util.find_spec("tensorflow_datasets")
    tfds_labels = os.path.join(tfds_spec.submodule_search_locations[0], "datasets",
                               "imagenet2012", "labels.txt")
    with open(tfds_labels) as file:
        assert wnids_1k == file.read().split()
    wnids_21k = [wnid for wnid, _ in labels.imagenet_classes(21843)]
    assert len(wnids_21k) == 21843 and wnids_21k == sorted(set(wnids_21k))
    assert wnids_21k.index("n15093298") == 21839  # an index the official repository cites


def test_decode_predictions_returns_the_best_classes_first():
    scores = np.zeros((2, 1000), np.float32)
    scores[0, [1, 2, 3]] = [0.2, 0.7, 0.1]
    scores[1, 999] = 5.0
    decoded = vit_keras.decode_predictions(scores, top=3)
    assert [name for _, name, _ in decoded[0]] == ["great white shark", "goldfish", "tiger shark"]
    assert [score for _, _, score in decoded[0]] == pytest.approx([0.7, 0.2, 0.1])
    assert decoded[1][0] == ("n15075141", "toilet tissue", 5.0)
    one_hot = np.zeros((1, 21843), np.float32)
    one_hot[0, 21839] = 1.0
    top_21k = vit_keras.decode_predictions(one_hot, top=1)
    assert top_21k[0][0][0] == "n15093298"
    with pytest.raises(ValueError, match=r"heads of \[1000, 21843\] classes, got 10"):
        vit_keras.decode_predictions(np.zeros((1, 10)))
    with pytest.raises(ValueError, match=r"\[batch, classes\].*\(1000,\)"):
        vit_keras.decode_predictions(np.zeros(1000))


def test_constructor_takes_resolution_classes_and_pre_logits_from_the_weights(tmp_path):
    source = tiny_release_file(tmp_path / "w.npz", image_size=384, classes=21843,
                               pre_logits=True)
    model = vit_keras.ViTB16(weights=str(tmp_path / "w.npz"), **TINY_B16)
    assert model.input_shape == (None, 384, 384, 3) and model.output_shape == (None, 21843)
    assert model.get_layer("pre_logits").units == TINY_B16["hidden_size"]
    images = random_images(source, batch=2)
    assert_outputs_equal(model(images), source(images), atol=1e-6)


def test_constructor_overrides_win_over_the_weights(tmp_path):
    source = tiny_release_file(tmp_path / "w.npz", image_size=384, classes=21843, pre_logits=True)
    model = vit_keras.ViTB16(weights=str(tmp_path / "w.npz"), input_shape=(224, 224, 3),
                             classes=10, **TINY_B16)
    assert model.input_shape == (None, 224, 224, 3) and model.output_shape == (None, 10)
    assert "pre_logits" not in {layer.name for layer in model.layers}  # a new head, whole
    posemb = model.get_layer("posembed_input").weights[0]
    assert tuple(posemb.shape) == (1, 14 * 14 + 1, TINY_B16["hidden_size"])
    kept = vit_keras.ViTB16(weights=str(tmp_path / "w.npz"), classes=10,
                            representation_size=TINY_B16["hidden_size"], **TINY_B16)
    assert kept.input_shape == (None, 384, 384, 3)
    np.testing.assert_array_equal(np.asarray(kept.get_layer("pre_logits").weights[0]),
                                  np.asarray(source.get_layer("pre_logits").weights[0]))


def test_a_release_in_a_warm_cache_loads_with_no_network(keras_home):
    release = pretrained.find("imagenet21k", "B/16")
    os.makedirs(os.path.dirname(release.cache_path))
    source = tiny_release_file(release.cache_path, image_size=224, classes=21843,
                               pre_logits=True)
    model = vit_keras.ViTB16(weights="imagenet21k", **TINY_B16)  # the URL refuses connections
    images = random_images(source, batch=1)
    assert_outputs_equal(model(images), source(images), atol=1e-6)
    assert release.cached


def test_a_cached_file_that_is_not_the_release_is_refused(keras_home):
    release = pretrained.find("imagenet21k+imagenet2012", "B/16")
    os.makedirs(os.path.dirname(release.cache_path))
    tiny_release_file(release.cache_path, image_size=224, classes=1000, pre_logits=False)
    with pytest.raises(ValueError, match=r"is not the 'imagenet21k\+imagenet2012' release of "
                       r"ViT-B/16: expected .*'image_size': 384.*the file has .*'image_size': "
                       r"224.*delete it"):
        vit_keras.ViTB16(weights="imagenet21k+imagenet2012", **TINY_B16)


def test_load_weights_by_name_needs_an_official_architecture(keras_home, tiny_config):
    model = vit_keras.VisionTransformer(tiny_config)
    with pytest.raises(ValueError, match="is not one.*pass variant='B/16'"):
        vit_keras.load_weights(model, "imagenet21k")


def test_load_weights_by_name_with_an_explicit_variant(keras_home):
    release = pretrained.find("augreg-in21k", "B/16")
    os.makedirs(os.path.dirname(release.cache_path))
    source = tiny_release_file(release.cache_path, image_size=224, classes=21843,
                               pre_logits=False, seed=3)
    model = vit_keras.ViTB16(classes=21843, **TINY_B16)
    vit_keras.load_weights(model, "augreg-in21k", variant="B/16")
    images = random_images(source, batch=1)
    assert_outputs_equal(model(images), source(images), atol=1e-6)


@pytest.mark.parametrize("case, expected", [
    ("timm_token", dict(image_size=32, num_classes=7, classifier="token", distilled=False)),
    ("timm_gap", dict(num_classes=5, classifier="gap", distilled=False)),  # 4x6: not square
    ("timm_deit", dict(image_size=32, num_classes=6, classifier="token", distilled=True)),
    ("timm_hybrid", dict(image_size=32, num_classes=5, classifier="token", distilled=False)),
    ("hf_classifier", dict(image_size=32, num_classes=6, classifier="token", distilled=False)),
    ("big_vision", dict(image_size=32, num_classes=7, classifier="token", distilled=False)),
])
def test_trained_config_is_read_off_foreign_checkpoints(case, expected, tmp_path):
    """Class and distillation tokens, a posemb without the class-token row (big_vision), a
    hybrid's ResNet stride and a non-square grid all come out right."""
    import json

    from test_checkpoints import read_npz, to_big_vision
    from vit_keras.checkpoints import read_checkpoint
    from vit_keras.pretrained.trained import trained_config_fields

    data = os.path.join(os.path.dirname(__file__), "data")
    configs = {}
    for name in ("parity_configs.json", "hybrid_deit_configs.json"):
        with open(os.path.join(data, name)) as file:
            configs.update(json.load(file))
    source = "ours_token_in_timm" if case == "big_vision" else case
    fields = {key: value for key, value in configs[source].items()
              if key in vit_keras.ViTConfig.__dataclass_fields__}
    path = os.path.join(data, configs[source]["weights"])
    if case == "big_vision":
        path = str(tmp_path / "big_vision.npz")
        np.savez(path, **to_big_vision(read_npz(os.path.join(data, "ours_token.npz"))))
    config = vit_keras.ViTConfig(**fields)
    found = trained_config_fields(read_checkpoint(path, config.num_heads), config)
    assert found == {**expected, "representation_size": None}


def test_a_hybrid_release_loads_at_another_resolution(keras_home):
    """The posemb grid of a hybrid counts ResNet feature pixels (stride 4 for R+Ti/16)."""
    release = pretrained.find("augreg-in21k+imagenet2012", "R+Ti/16")
    os.makedirs(os.path.dirname(release.cache_path))
    tiny = dict(hidden_size=16, mlp_dim=32, num_heads=2, num_layers=1)
    source = vit_keras.ViTRTi16(input_shape=(384, 384, 3), **tiny)
    randomize_weights(source, seed=5)
    save_npz(source, release.cache_path)
    same = vit_keras.ViTRTi16(weights="augreg-in21k+imagenet2012", **tiny)
    images = random_images(source, batch=1)
    assert_outputs_equal(same(images), source(images), atol=1e-5)
    smaller = vit_keras.ViTRTi16(weights="augreg-in21k+imagenet2012", input_shape=(224, 224, 3),
                                 **tiny)
    posemb = smaller.get_layer("posembed_input").weights[0]
    assert tuple(posemb.shape) == (1, 7 * 7 + 1, 16)  # 224 / (8 x 4) = 7


def test_encoder_only_models_take_no_head_and_no_pre_logits(tmp_path, caplog):
    tiny_release_file(tmp_path / "w.npz", image_size=224, classes=21843, pre_logits=True)
    features = vit_keras.ViTB16(weights=str(tmp_path / "w.npz"), include_top=False,
                                pooling="token", **TINY_B16)
    assert features.output_shape == (None, TINY_B16["hidden_size"])
    assert "pre_logits" not in {layer.name for layer in features.layers}
    assert "not loading" not in caplog.text  # no warning about a head it never had


def test_a_misspelt_weight_name_is_caught():
    with pytest.raises(ValueError, match="did you mean 'imagenet21k'"):
        vit_keras.ViTB16(weights="imagenet21K", **TINY_B16)


def test_zeroed_release_heads_are_called_out(keras_home, caplog):
    release = pretrained.find("imagenet21k", "B/16")
    os.makedirs(os.path.dirname(release.cache_path))
    tiny_release_file(release.cache_path, image_size=224, classes=21843, pre_logits=True)
    vit_keras.ViTB16(weights="imagenet21k", **TINY_B16)
    assert "head of ViT-B/16 'imagenet21k' is all zeros" in caplog.text


def test_weights_argument_of_the_wrong_type_is_refused():
    with pytest.raises(ValueError, match="weights must be None, a weight name"):
        vit_keras.ViTB16(weights=42, **TINY_B16)

