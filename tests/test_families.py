"""DeiT-III, DINOv2 (registers, SwiGLU), SigLIP, CLIP and fc_norm models against timm's own.

The references are tiny timm models with random weights (tests/data/families, made by
tools/make_family_references.py in a venv with torch and timm): outputs, per-block features
(`forward_intermediates`), a position embedding resized by timm, timm's evaluation transforms on
scikit-image's photos, and a DeiT run end to end on a JPEG.
"""

import json
import os

import keras
import numpy as np
import pytest

from helpers import vit_predict
import vit_keras
from vit_keras import families, preprocessing
from vit_keras.checkpoints import processors as processor_files
from vit_keras.preprocessing import Preprocessing

DATA = os.path.join(os.path.dirname(__file__), "data", "families")
ATOL = 5e-5


def _json(name):
    with open(os.path.join(DATA, name)) as file:
        return json.load(file)


CONFIGS = _json("configs.json")
CASES = sorted(name for name in CONFIGS if not name.startswith(("_", "hf_"))
               and name != "dinov2_resized")
HF_CASES = sorted(name for name in CONFIGS if name.startswith("hf_"))


@pytest.fixture(scope="module")
def vectors():
    with np.load(os.path.join(DATA, "parity.npz"), allow_pickle=False) as data:
        return dict(data)


def our_config(case: dict, image_size=None) -> vit_keras.ViTConfig:
    """The `ViTConfig` of a reference case's timm flags."""
    pooling = {"token": "token", "avg": "gap", "map": "map"}[case["global_pool"]]
    return vit_keras.ViTConfig(
        image_size=image_size or case["img_size"], patch_size=case["patch_size"],
        hidden_size=case["embed_dim"], num_layers=case["depth"], num_heads=case["num_heads"],
        mlp_dim=case["mlp_hidden"], num_classes=max(case["num_classes"], 1),
        classifier=pooling, gelu_approximate=False, activation=case["act"],
        layer_scale_init=case["init_values"], num_register_tokens=case["reg_tokens"],
        pre_norm=case["pre_norm"], pooled_norm=case["fc_norm"],
        layer_norm_epsilon=case["eps"],
        projection_size=case["num_classes"] if case["head_bias_stored_as_zeros"] else None)


def our_model(case: dict, image_size=None):
    """Our model of a case with timm's weights loaded (bicubic posemb resize, as timm)."""
    config = our_config(case, image_size)
    headless = case["num_classes"] == 0 or config.projection_size is not None
    model = vit_keras.VisionTransformer(config, include_top=not headless,
                                        pooling=config.classifier if headless else None)
    from vit_keras.checkpoints.read import read_checkpoint
    from vit_keras.weights import assign_checkpoint

    path = os.path.join(DATA, case["weights"])
    checkpoint = read_checkpoint(path, config.num_heads, posemb_method="bicubic")
    assign_checkpoint(model, checkpoint, path, skip_head=False if not headless else None)
    return model


@pytest.mark.parametrize("name", CASES)
def test_outputs_equal_timm(name, vectors):
    model = our_model(CONFIGS[name])
    outputs = keras.ops.convert_to_numpy(model(vectors[f"{name}/images"], training=False))
    np.testing.assert_allclose(outputs, vectors[f"{name}/outputs"], atol=ATOL, rtol=0)


def test_position_embedding_resized_as_timm(vectors):
    """DINOv2's 2x2 grid at 3x3: timm's checkpoint_filter_fn (antialiased bicubic)."""
    model = our_model(CONFIGS["dinov2"], image_size=42)
    outputs = keras.ops.convert_to_numpy(model(vectors["dinov2_resized/images"]))
    np.testing.assert_allclose(outputs, vectors["dinov2_resized/outputs"], atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", ["deit3", "dinov2_reg", "siglip", "clip", "gap_fc_norm"])
def test_features_equal_forward_intermediates(name, vectors):
    model = our_model(CONFIGS[name])
    found = vit_keras.features(model, vectors[f"{name}/images"], blocks=[0, 1])
    for index in (0, 1):
        np.testing.assert_allclose(found[f"block_{index}"], vectors[f"{name}/grid_{index}"],
                                   atol=ATOL, rtol=0)
        prefix = vectors.get(f"{name}/prefix_{index}")
        expected = prefix if prefix is not None else np.zeros((2, 0, 32), np.float32)
        np.testing.assert_allclose(found[f"block_{index}_prefix"], expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", ["dinov2", "dinov2_reg"])
def test_normed_features_equal_timm(name, vectors):
    model = our_model(CONFIGS[name])
    found = vit_keras.features(model, vectors[f"{name}/images"], blocks=2, norm=True)
    for index in (0, 1):
        np.testing.assert_allclose(found[f"block_{index}"],
                                   vectors[f"{name}/grid_normed_{index}"], atol=ATOL, rtol=0)


def test_features_of_any_size_class_token_classifiers_see_every_token():
    """An any-size class-token classifier's last block is built for the class token only; its
    features still hold every patch (a headless twin with the same weights)."""
    config = vit_keras.ViTConfig(image_size=16, patch_size=8, hidden_size=8, mlp_dim=16,
                                 num_heads=2, num_layers=2, num_classes=3,
                                 dynamic_image_size=True)
    model = vit_keras.VisionTransformer(config)
    images = np.random.default_rng(0).normal(size=(1, 24, 16, 3)).astype(np.float32)
    found = vit_keras.features(model, images, blocks=[-1])
    assert found["block_1"].shape == (1, 3, 2, 8)
    headless = vit_keras.VisionTransformer(config, include_top=False)
    for layer in headless.layers:
        if layer.weights:
            layer.set_weights(model.get_layer(layer.name).get_weights())
    np.testing.assert_allclose(found["block_1"], vit_keras.features(
        headless, images, blocks=[-1])["block_1"], atol=1e-6)


@pytest.mark.slow
def test_family_parameter_counts_equal_the_formula():
    from vit_keras.analysis import complexity

    for spec in families.FAMILY_MODELS.values():
        config = spec.config.replace(num_layers=1)
        model = vit_keras.VisionTransformer(config)
        assert complexity.count_params(config) == model.count_params(), spec.name


def test_features_of_a_class_token_classifier_see_every_token(vectors):
    """A class-token head computes only the class token in the last block; the features of
    that block are still every token's (a headless twin with the same weights)."""
    case = CONFIGS["deit3"]
    model = our_model(case)
    assert model.get_layer("encoderblock_1").output.shape[1] == 1
    found = vit_keras.features(model, vectors["deit3/images"], blocks=1)
    np.testing.assert_allclose(found["block_1"], vectors["deit3/grid_1"], atol=ATOL, rtol=0)


@pytest.mark.parametrize("name", ["dinov2", "gap_fc_norm"])
def test_block_embedding_of_the_last_block_is_the_pooled_output(name, vectors):
    """Probing the last block gives what the model pools: the normed class token (DINOv2), or
    the mean of the patch tokens (normed after the mean for fc_norm, so only for 'token')."""
    from vit_keras.intermediates import block_embedding_model

    model = our_model(CONFIGS[name])
    images = vectors[f"{name}/images"]
    probe = keras.ops.convert_to_numpy(block_embedding_model(model, -1)(images))
    if name == "dinov2":
        np.testing.assert_allclose(probe, vectors[f"{name}/outputs"], atol=ATOL, rtol=0)
    else:
        np.testing.assert_allclose(probe, vectors[f"{name}/grid_1"].mean(axis=(1, 2)),
                                   atol=ATOL, rtol=0)


def test_block_indices_follow_timm():
    assert vit_keras.features_model.__module__ == "vit_keras.intermediates"
    from vit_keras.intermediates import block_indices

    assert block_indices(None, 4) == [0, 1, 2, 3]
    assert block_indices(2, 4) == [2, 3]
    assert block_indices([0, -1], 4) == [0, 3]
    with pytest.raises(ValueError, match="out of range for a model with 4 blocks"):
        block_indices([4], 4)
    with pytest.raises(ValueError, match="expected 1..4"):
        block_indices(5, 4)


# --- preprocessing ---------------------------------------------------------------------------

TIMM_CONFIGS = {name: cfg for name, cfg in _json("preprocessing.json").items()
                if not name.startswith("_")}


@pytest.mark.parametrize("name", sorted(TIMM_CONFIGS))
@pytest.mark.parametrize("photo", ["chelsea", "astronaut"])
def test_preprocessing_equals_timm_transform(name, photo):
    """Our resize and crop of a real photo within one grey level of timm's eval transform."""
    data = pytest.importorskip("skimage.data")
    import tensorflow as tf

    cfg = TIMM_CONFIGS[name]
    rule = processor_files.from_timm_config(cfg)
    size = tuple(cfg["input_size"][1:])
    with np.load(os.path.join(DATA, "preprocessing.npz"), allow_pickle=False) as arrays:
        expected = arrays[f"{name}/{photo}"].astype(np.float32)
    ours = preprocessing.resize_image(tf.constant(getattr(data, photo)()), size, rule).numpy()
    assert ours.shape == expected.shape
    assert np.abs(ours - expected).max() <= 1.0 + 1e-4
    # The normalisation: (pixels / 255 - mean) / std.
    normalized = keras.ops.convert_to_numpy(vit_keras.preprocess_input(expected,
                                                                       preprocessing=rule))
    np.testing.assert_allclose(normalized, (expected / 255 - np.array(cfg["mean"])) /
                               np.array(cfg["std"]), atol=1e-5)


def test_family_table_preprocessing_matches_timm_configs():
    assert len(TIMM_CONFIGS) == 4
    for name, cfg in TIMM_CONFIGS.items():
        architecture, _, tag = name.partition(".")
        assert families.FAMILY_MODELS[architecture].tags[tag] == \
            processor_files.from_timm_config(cfg), name


def test_official_preprocessing_is_unchanged():
    pixels = np.arange(0, 256, dtype=np.float32).reshape(1, 1, -1, 1).repeat(3, axis=-1)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(vit_keras.preprocess_input(pixels)),
                               (pixels - 127.5) / 127.5, atol=1e-7, rtol=0)


def test_preprocessing_is_validated_and_round_trips():
    rule = Preprocessing(mean=(0.1, 0.2, 0.3), std=0.5, interpolation="bicubic",
                         crop_fraction=0.875, crop_mode="center")
    assert Preprocessing.from_dict(rule.to_dict()) == rule
    for bad, message in [(dict(std=(1, 0, 1)), "std must be positive"),
                         (dict(mean=(1, 2)), "3 numbers"),
                         (dict(interpolation="lanczos"), "interpolation must be one of"),
                         (dict(crop_fraction=1.5), r"crop_fraction must be in \(0, 1\]"),
                         (dict(crop_mode="border"), "crop_mode must be one of")]:
        with pytest.raises(ValueError, match=message):
            Preprocessing(**bad)
    with pytest.raises(ValueError, match="unknown preprocessing field"):
        Preprocessing.from_dict({"means": 0.5})


def test_preprocessing_travels_with_the_model(tmp_path):
    """Beside the config, through .keras (safe_mode, its own entry of the file's config) and
    into every exported graph's input."""
    rule = families.IMAGENET_09
    config = vit_keras.ViTConfig(image_size=16, patch_size=8, hidden_size=8, mlp_dim=16,
                                 num_heads=2, num_layers=1, num_classes=3)
    model = vit_keras.VisionTransformer(config, preprocessing=rule)
    assert model.get_config()["preprocessing"] == rule.to_dict()
    assert "preprocessing" not in model.get_config()["config"]
    from helpers import randomize_weights

    randomize_weights(model, seed=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert loaded.preprocessing == rule
    pixels = np.random.default_rng(0).uniform(0, 255, (2, 16, 16, 3)).astype(np.float32)
    if keras.backend.backend() == "tensorflow":  # export graphs are TensorFlow's
        from vit_keras.export import graph

        logits_model, _ = graph.split_activation(graph.float32_model(loaded))
        exported = keras.ops.convert_to_numpy(graph.logits_function(logits_model)(pixels))
        direct = keras.ops.convert_to_numpy(
            loaded(vit_keras.preprocess_input(pixels, model=loaded)))
        np.testing.assert_allclose(exported, direct, atol=1e-5)
    official = keras.ops.convert_to_numpy(vit_keras.preprocess_input(pixels))
    ours = keras.ops.convert_to_numpy(vit_keras.preprocess_input(pixels, model=loaded))
    assert np.abs(official - ours).max() > 0.1  # the rule matters


# --- the family table and create_model ------------------------------------------------------


@pytest.mark.slow
def test_family_models_build_with_timm_parameter_counts():
    """Parameter counts of timm's models (timm 1.0.31, num_classes as released)."""
    expected = {"deit3_small_patch16_224": 22_059_880,
                "vit_base_patch16_siglip_224": 92_884_224,
                "vit_base_patch16_clip_quickgelu_224": 86_193_408}
    for name, count in expected.items():
        model = vit_keras.create_model(name)
        assert model.count_params() == count, name
        assert model.preprocessing == next(iter(families.FAMILY_MODELS[name].tags.values()))


def test_unknown_family_names_and_tags_are_refused():
    with pytest.raises(ValueError, match="has no weights 'in1k'; expected one of"):
        vit_keras.create_model("vit_small_patch14_dinov2.in1k")
    with pytest.raises(ValueError, match="unknown ViT variant"):
        vit_keras.create_model("vit_tiny_dinov5")


def test_create_model_from_a_timm_file(tmp_path, monkeypatch):
    """A family name + a timm-layout file: config from the table, size from the file, and
    CLIP's head stored by timm taken as the projection."""
    import safetensors.numpy

    case = CONFIGS["clip_quickgelu"]
    tensors = safetensors.numpy.load_file(os.path.join(DATA, case["weights"]))
    path = str(tmp_path / "model.safetensors")
    safetensors.numpy.save_file(tensors, path)
    table = families.FAMILY_MODELS["vit_base_patch16_clip_quickgelu_224"]
    small = table.config.replace(hidden_size=32, num_layers=2, num_heads=2, mlp_dim=128,
                                 patch_size=8, image_size=32, projection_size=16)
    monkeypatch.setitem(families.FAMILY_MODELS, "tiny_clip_for_test",
                        dataclass_replace(table, config=small, name="tiny_clip_for_test"))
    model = vit_keras.create_model("tiny_clip_for_test", weights=path)
    assert model.output_shape == (None, 16)
    assert model.preprocessing == families.CLIP_09
    with np.load(os.path.join(DATA, "parity.npz"), allow_pickle=False) as data:
        images, expected = data["clip_quickgelu/images"], data["clip_quickgelu/outputs"]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(images)), expected, atol=ATOL)
    tokens = vit_keras.create_model("tiny_clip_for_test", weights=path, pooling=None)
    assert tokens.output_shape == (None, 17, 32)  # pooling=None: the token sequence
    # A new head on top of the projection: the file's projection still loads into it.
    headed = vit_keras.create_model("tiny_clip_for_test", weights=path, include_top=True,
                                    projection_size=16, num_classes=3)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(
        headed.get_layer("projection").kernel), keras.ops.convert_to_numpy(
        model.get_layer("projection").kernel))


def dataclass_replace(value, **changes):
    import dataclasses

    return dataclasses.replace(value, **changes)


# --- end to end: vit predict and vit embed -------------------------------------------------


def _deit_e2e(tmp_path):
    """A tiny timm DeiT with timm's 32 px transform, as a .keras file `vit` reads."""
    reference = _json("deit_e2e.json")
    config = vit_keras.ViTConfig(image_size=32, patch_size=8, hidden_size=32, mlp_dim=128,
                                 num_heads=2, num_layers=2, num_classes=5,
                                 gelu_approximate=False)
    model = vit_keras.VisionTransformer(
        config, preprocessing=processor_files.from_timm_config(reference["cfg"]))
    vit_keras.load_weights(model, os.path.join(DATA, "deit_e2e.safetensors"), skip_head=False)
    path = str(tmp_path / "model.keras")
    model.save(path)
    return path, reference


def test_vit_predict_equals_timm_on_a_jpeg(tmp_path, capsys):
    """timm's transform + model on a JPEG vs `vit predict` (our decode, resize, crop and
    normalisation from the model's config)."""
    from vit import cli

    path, reference = _deit_e2e(tmp_path)
    image = os.path.join(DATA, "deit_e2e.jpg")
    capsys.readouterr()
    status, predictions = vit_predict([image, "--model", path, "--top-k", "5"], tmp_path)
    assert status == 0
    found = {int(shown["class"]): shown["score"] for shown in predictions[0]["top"]}
    expected = reference["probabilities"]
    assert sorted(found, key=found.get, reverse=True) == \
        sorted(range(5), key=lambda index: expected[index], reverse=True)
    for index, probability in found.items():
        assert probability == pytest.approx(expected[index], abs=2e-3)


def test_vit_embed_prints_and_saves_embeddings(tmp_path, capsys):
    from vit import cli
    from vit_keras.intermediates import block_embedding_model

    path, _ = _deit_e2e(tmp_path)
    image = os.path.join(DATA, "deit_e2e.jpg")
    output = str(tmp_path / "embeddings.npy")
    capsys.readouterr()
    assert cli.main(["embed", image, image, "--model", path, "--output", output]) == 0
    printed = capsys.readouterr().out
    assert "32 values, L2 norm" in printed and "saved 2x32 float32" in printed
    vectors = np.load(output, allow_pickle=False)
    assert vectors.shape == (2, 32) and np.allclose(vectors[0], vectors[1])
    assert cli.main(["embed", image, "--model", path, "--block", "0", "--output", output]) == 0
    model = keras.saving.load_model(path, safe_mode=True)
    from vit_app.images import load_files

    pixels = load_files([image], (32, 32), preprocessing=model.preprocessing)
    expected = block_embedding_model(model, 0)(vit_keras.preprocess_input(pixels, model=model))
    np.testing.assert_allclose(np.load(output, allow_pickle=False),
                               keras.ops.convert_to_numpy(expected), atol=1e-5)
    assert cli.main(["embed", image, "--model", "B/16"]) == 2  # no weights, no file


@pytest.mark.slow
def test_exported_graphs_resize_and_normalise_as_the_weights_expect(tmp_path):
    """SavedModel `serve_bytes` (decode, timm's resize and crop, normalisation in the graph)
    gives timm's probabilities on the JPEG; TFLite and ONNX normalise as the model does."""
    pytest.importorskip("tensorflow")
    if keras.backend.backend() != "tensorflow":
        pytest.skip("export runs on the TensorFlow backend")
    import tensorflow as tf

    from vit_keras import export

    path, reference = _deit_e2e(tmp_path)
    model = keras.saving.load_model(path, safe_mode=True)
    export.saved_model(model, str(tmp_path / "saved_model"))
    served = tf.saved_model.load(str(tmp_path / "saved_model")).signatures["serve_bytes"]
    with open(os.path.join(DATA, "deit_e2e.jpg"), "rb") as file:
        encoded = file.read()
    probabilities = served(image_bytes=tf.constant([encoded]))["probabilities"].numpy()[0]
    np.testing.assert_allclose(probabilities, reference["probabilities"], atol=2e-3)
    pixels = np.random.default_rng(1).uniform(0, 255, (3, 32, 32, 3)).astype(np.float32)
    expected = keras.ops.convert_to_numpy(model(vit_keras.preprocess_input(pixels, model=model)))
    export.tflite(model, str(tmp_path / "model.tflite"))
    export.onnx(model, str(tmp_path / "model.onnx"))
    for runner in (export.TFLiteModel(str(tmp_path / "model.tflite")),
                   export.ONNXModel(str(tmp_path / "model.onnx"))):
        np.testing.assert_allclose(runner(pixels), expected, atol=1e-4)


@pytest.mark.slow
def test_vit_train_fine_tunes_family_weights_with_their_preprocessing(tmp_path, monkeypatch):
    """`vit train --model NAME --weights FILE`: the family's architecture, pooling, registers and
    preprocessing, the timm file loaded (its head replaced), the rule recorded in the run."""
    from vit import cli
    from training import presets

    case = CONFIGS["dinov2_reg"]
    table = families.FAMILY_MODELS["vit_small_patch14_reg4_dinov2"]
    tiny = table.config.replace(hidden_size=32, num_layers=2, num_heads=2, mlp_dim=128,
                                image_size=28)
    monkeypatch.setitem(families.FAMILY_MODELS, "tiny_dinov2_reg",
                        dataclass_replace(table, config=tiny, name="tiny_dinov2_reg"))
    weights = os.path.join(DATA, case["weights"])
    assert cli.main(["train", "--model", "tiny_dinov2_reg", "--weights", weights,
                     "--set", "schedule.epochs=1", "--no-export", "--no-inspect",
                     "--output", str(tmp_path / "run")]) == 0
    recorded = json.loads((tmp_path / "run" / "config.json").read_text())
    assert recorded["preprocessing"] == families.IMAGENET_FULL.to_dict()  # the model's record
    assert recorded["preset"]["data"]["preprocessing"] == families.IMAGENET_FULL.to_dict()
    assert "preprocessing" not in recorded["model"]  # the architecture alone
    assert recorded["model"]["num_register_tokens"] == 4
    model = keras.saving.load_model(str(tmp_path / "run" / "model.keras"), safe_mode=True)
    assert model.preprocessing == families.IMAGENET_FULL
    assert presets.get_preset("digits_tiny").data.preprocessing == preprocessing.OFFICIAL


# --- Hugging Face transformers and big_vision files -----------------------------------------


def hf_model(case: dict):
    """Our model of a transformers reference case (pooled output, as its reference)."""
    act = case["act"]
    config = vit_keras.ViTConfig(
        image_size=case["image_size"], patch_size=case["patch_size"],
        hidden_size=case["hidden"], num_layers=case["layers"], num_heads=case["heads"],
        mlp_dim=case["intermediate"], num_classes=1, classifier=case["pooling"],
        gelu_approximate=act == "gelu_tanh",
        activation=act if act in ("quick_gelu", "swiglu") else "gelu",
        layer_scale_init=1.0 if case["layerscale"] else None,
        num_register_tokens=case["registers"], pre_norm=case["projection_dim"] is not None,
        layer_norm_epsilon=case["eps"], projection_size=case["projection_dim"])
    model = vit_keras.VisionTransformer(config, include_top=False, pooling=config.classifier)
    vit_keras.load_weights(model, os.path.join(DATA, case["weights"]))
    return model


@pytest.mark.parametrize("name", HF_CASES)
def test_transformers_files_equal_transformers(name, vectors):
    """DINOv2 (registers, SwiGLU), SigLIP and CLIP towers, alone or in a two-tower file."""
    model = hf_model(CONFIGS[name])
    outputs = keras.ops.convert_to_numpy(model(vectors[f"{name}/images"]))
    np.testing.assert_allclose(outputs, vectors[f"{name}/outputs"], atol=ATOL, rtol=0)


def test_big_vision_siglip_npz_equals_timm(vectors):
    """big_vision's two-tower `.npz`: the image tower under params/img/, text left out."""
    case = CONFIGS["siglip"]
    config = our_config(case)
    model = vit_keras.VisionTransformer(config, include_top=False, pooling="map")
    vit_keras.load_weights(model, os.path.join(DATA, "bigvision_siglip.npz"))
    outputs = keras.ops.convert_to_numpy(model(vectors["siglip/images"]))
    np.testing.assert_allclose(outputs, vectors["siglip/outputs"], atol=ATOL, rtol=0)


@pytest.mark.parametrize("family", ["dinov2", "siglip", "clip"])
def test_transformers_processors_equal_ours(family):
    """A `preprocessor_config.json` read into our rule: within one grey level of the
    processor's own output on a photo (transformers' PIL backend)."""
    data = pytest.importorskip("skimage.data")
    import tensorflow as tf

    processors = _json("hf_processors.json")
    rule = processor_files.from_hf_processor(processors[family])
    crop = processors[family].get("crop_size") or processors[family]["size"]
    with np.load(os.path.join(DATA, "preprocessing.npz"), allow_pickle=False) as arrays:
        expected = arrays[f"hf_{family}/chelsea"].astype(np.float32)
    ours = preprocessing.resize_image(tf.constant(data.chelsea()),
                                      (crop["height"], crop["width"]), rule).numpy()
    assert np.abs(ours - expected).max() <= 1.0 + 1e-4


def test_older_processor_files_with_int_sizes():
    """Older preprocessor_config.json files (OpenAI CLIP's) give sizes as ints."""
    rule = processor_files.from_hf_processor({"size": 224, "crop_size": 224, "resample": 3,
                                            "do_center_crop": True, "image_mean": [0.5] * 3,
                                            "image_std": [0.5] * 3})
    assert rule == Preprocessing(interpolation="bicubic", crop_fraction=1.0, crop_mode="center")


def test_per_channel_statistics_need_rgb():
    grey = vit_keras.ViTConfig(image_size=16, patch_size=8, hidden_size=8, mlp_dim=16,
                               num_heads=2, num_layers=1, channels=1)
    with pytest.raises(ValueError, match="1-channel model needs one preprocessing mean"):
        vit_keras.VisionTransformer(grey, preprocessing=families.IMAGENET_09)
    model = vit_keras.VisionTransformer(grey, preprocessing=dict(mean=0.4, std=0.2))
    with pytest.raises(ValueError, match="1-channel model needs one preprocessing mean"):
        model.set_preprocessing(families.IMAGENET_09)
    pixels = np.full((1, 16, 16, 1), 51.0, np.float32)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(
        vit_keras.preprocess_input(pixels, model=model)), np.full_like(pixels, -1.0), atol=1e-6)


def test_unreadable_processor_settings_are_refused():
    with pytest.raises(ValueError, match="resample=1: expected one of"):
        processor_files.from_hf_processor({"resample": 1, "size": {"shortest_edge": 8}})
    with pytest.raises(ValueError, match="size=.*expected"):
        processor_files.from_hf_processor({"size": {"longest_edge": 8}})


def test_preprocessing_beside_a_downloaded_file_wins(tmp_path, monkeypatch):
    """A Hub download keeps preprocessor_config.json (or timm's config.json) beside the
    weights: create_model takes the preprocessing from there."""
    import shutil

    processors = _json("hf_processors.json")
    shutil.copy(os.path.join(DATA, "hf_siglip.safetensors"), tmp_path / "model.safetensors")
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(processors["siglip"]))
    table = families.FAMILY_MODELS["vit_base_patch16_siglip_224"]
    tiny = table.config.replace(hidden_size=32, num_layers=2, num_heads=2, mlp_dim=128,
                                patch_size=8, image_size=32)
    monkeypatch.setitem(families.FAMILY_MODELS, "tiny_siglip",
                        dataclass_replace(table, config=tiny))
    model = vit_keras.create_model("tiny_siglip", weights=str(tmp_path / "model.safetensors"),
                                   gelu_approximate=True)
    assert model.preprocessing == processor_files.from_hf_processor(processors["siglip"])
    assert model.preprocessing.crop_mode == "squash"
    (tmp_path / "preprocessor_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="cannot read the preprocessing"):
        vit_keras.create_model("tiny_siglip", weights=str(tmp_path / "model.safetensors"))
