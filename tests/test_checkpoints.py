"""save_npz / load_weights: round trips, every official-family layout, head handling."""

import logging
import os
import re

import numpy as np
import pytest
from helpers import random_images, randomize_weights, to_numpy
from safetensors.numpy import load_file, save_file

import vit_keras
from vit_keras import load_weights
from vit_keras.checkpoints import resize_position_embedding, save_npz

DATA = os.path.join(os.path.dirname(__file__), "data")
POSEMB = "Transformer/posembed_input/pos_embedding"


def random_model(config, seed=0, **kwargs):
    """A model whose every weight (head included) is random and non-zero."""
    return randomize_weights(vit_keras.VisionTransformer(config, **kwargs), seed=seed, stddev=0.2)


def weights_by_path(model):
    return {variable.path: to_numpy(variable) for variable in model.weights}


def read_npz(path):
    with np.load(path, allow_pickle=False) as archive:
        return {name: archive[name] for name in archive.files}


@pytest.mark.parametrize("changes", [
    {}, {"classifier": "gap"}, {"representation_size": 16},
    {"image_size": (32, 48), "classifier": "gap", "representation_size": 8},
], ids=["token", "gap", "pre_logits", "non_square_gap_pre_logits"])
def test_round_trip_is_exact(tiny_config, tmp_path, changes):
    config = tiny_config.replace(**changes)
    source = random_model(config)
    path = str(tmp_path / "model.npz")
    save_npz(source, path)
    target = vit_keras.VisionTransformer(config)
    load_weights(target, path, skip_head=False)
    expected, loaded = weights_by_path(source), weights_by_path(target)
    assert expected.keys() == loaded.keys()
    for name in expected:
        assert np.array_equal(expected[name], loaded[name]), name
    images = random_images(source, seed=100)
    assert np.array_equal(to_numpy(source(images)), to_numpy(target(images)))
    assert os.listdir(tmp_path) == ["model.npz"]  # the temp file was renamed away


def test_saved_file_uses_the_released_names_and_shapes(tiny_config, tmp_path):
    path = str(tmp_path / "vit.npz")
    save_npz(random_model(tiny_config.replace(representation_size=16)), path)
    tensors = read_npz(path)
    block = "Transformer/encoderblock_1/"
    expected = {
        "embedding/kernel": (8, 8, 3, 32), "embedding/bias": (32,), "cls": (1, 1, 32),
        POSEMB: (1, 17, 32), f"{block}LayerNorm_0/scale": (32,),
        f"{block}MultiHeadDotProductAttention_1/query/kernel": (32, 4, 8),
        f"{block}MultiHeadDotProductAttention_1/value/bias": (4, 8),
        f"{block}MultiHeadDotProductAttention_1/out/kernel": (4, 8, 32),
        f"{block}LayerNorm_2/bias": (32,), f"{block}MlpBlock_3/Dense_0/kernel": (32, 64),
        f"{block}MlpBlock_3/Dense_1/kernel": (64, 32), "Transformer/encoder_norm/scale": (32,),
        "pre_logits/kernel": (32, 16), "head/kernel": (16, 5), "head/bias": (5,),
    }
    for name, shape in expected.items():
        assert tensors[name].shape == shape and tensors[name].dtype == np.float32, name
    assert len(tensors) == 2 + 1 + 1 + 2 * 16 + 2 + 2 + 2  # embedding cls posemb blocks norm..


def test_save_replaces_an_existing_file(tiny_config, tmp_path):
    path = tmp_path / "vit.npz"
    path.write_bytes(b"old")
    save_npz(random_model(tiny_config), str(path))
    assert "cls" in read_npz(str(path))


def test_save_of_a_foreign_model_raises_and_writes_nothing(tmp_path):
    import keras

    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    with pytest.raises(ValueError, match="not built by VisionTransformer"):
        save_npz(model, str(tmp_path / "x.npz"))
    assert os.listdir(tmp_path) == []


# ---- the other official-family layouts, made from our own save_npz output ----------------

LINEN = {"MultiHeadDotProductAttention_1": "MultiHeadDotProductAttention_0",
         "LayerNorm_2": "LayerNorm_1", "MlpBlock_3": "MlpBlock_0"}


def to_linen(tensors):
    """Released names -> Linen-numbered names (only inside encoder blocks)."""
    def rename(name):
        parts = name.split("/")
        if len(parts) > 2 and parts[1].startswith("encoderblock_"):
            parts[2] = LINEN.get(parts[2], parts[2])
        return "/".join(parts)
    return {rename(name): value for name, value in tensors.items()}


def to_big_vision(tensors, scanned=False):
    """Released layout -> big_vision: `params/` prefix, Linen names, top-level posemb without
    the class-token row (its value folded into `cls`: big_vision adds the posemb before
    prepending the class token), optionally all blocks stacked in `encoderblock/`."""
    tensors = to_linen(tensors)
    posemb = tensors.pop(POSEMB)
    if "cls" in tensors:
        tensors["cls"] = tensors["cls"] + posemb[:, :1]
        posemb = posemb[:, 1:]
    tensors["pos_embedding"] = posemb
    if scanned:
        blocks = sorted({name.split("/")[1] for name in tensors if "encoderblock_" in name})
        stacked = {}
        for name in [n for n in tensors if n.startswith("Transformer/encoderblock_0/")]:
            rest = name[len("Transformer/encoderblock_0/"):]
            stacked[f"Transformer/encoderblock/{rest}"] = np.stack(
                [tensors[f"Transformer/{block}/{rest}"] for block in blocks])
        tensors = {n: v for n, v in tensors.items() if "encoderblock_" not in n}
        tensors.update(stacked)
    return {f"params/{name}": value for name, value in tensors.items()}


def with_opt_target(tensors):
    result = {f"opt/target/{name}": value for name, value in tensors.items()}
    result["opt/state/step"] = np.array(7)  # not a weight: ignored
    return result


@pytest.mark.parametrize("layout", [to_linen, with_opt_target, to_big_vision,
                                    lambda t: to_big_vision(t, scanned=True)],
                         ids=["linen", "opt_target", "big_vision", "big_vision_scanned"])
@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_every_official_layout_gives_the_same_logits(tiny_config, tmp_path, layout,
                                                     classifier):
    config = tiny_config.replace(classifier=classifier, representation_size=16)
    source = random_model(config)
    original = str(tmp_path / "original.npz")
    save_npz(source, original)
    variant = str(tmp_path / "variant.npz")
    np.savez(variant, **layout(read_npz(original)))
    target = vit_keras.VisionTransformer(config)
    load_weights(target, variant, skip_head=False)
    images = random_images(source, seed=100)
    np.testing.assert_allclose(to_numpy(target(images)), to_numpy(source(images)),
                               rtol=0, atol=1e-6)


def test_big_vision_file_resizes_at_a_new_resolution(tiny_config, tmp_path):
    source = random_model(tiny_config)
    original = str(tmp_path / "original.npz")
    save_npz(source, original)
    big_vision = str(tmp_path / "bv.npz")
    np.savez(big_vision, **to_big_vision(read_npz(original)))
    target = vit_keras.VisionTransformer(tiny_config.replace(image_size=48))
    load_weights(target, big_vision)
    posemb = to_numpy(target.get_layer("posembed_input").pos_embedding)
    grid = resize_position_embedding(read_npz(original)[POSEMB][:, 1:], 6, False)
    assert np.array_equal(posemb[:, 1:], grid) and not posemb[0, 0].any()


# ---- resolution change ---------------------------------------------------------------------

def test_constructor_weights_at_a_new_resolution_resizes_the_posemb(tiny_config, tmp_path):
    source = random_model(tiny_config)  # 32 px: a 4x4 grid
    path = str(tmp_path / "vit.npz")
    save_npz(source, path)
    model = vit_keras.ViTTi16(weights=path, input_shape=(48, 64, 3), classes=5, patch_size=8,
                              hidden_size=32, mlp_dim=64, num_heads=4, num_layers=2)
    loaded = to_numpy(model.get_layer("posembed_input").pos_embedding)
    original = to_numpy(source.get_layer("posembed_input").pos_embedding)
    assert np.array_equal(loaded, resize_position_embedding(original, (6, 8), True))
    assert np.array_equal(to_numpy(model.get_layer("head").kernel),
                          to_numpy(source.get_layer("head").kernel))


def test_non_square_checkpoint_grid_cannot_be_resized(tiny_config, tmp_path):
    path = str(tmp_path / "vit.npz")
    save_npz(random_model(tiny_config.replace(image_size=(32, 48))), path)
    target = vit_keras.VisionTransformer(tiny_config)
    with pytest.raises(ValueError, match=re.escape(f"{POSEMB}: expected (1, 17, 32), "
                                                   "found (1, 25, 32)")):
        load_weights(target, path)


# ---- head handling -------------------------------------------------------------------------

@pytest.fixture
def saved(tiny_config, tmp_path):
    """(path, source model) of a saved tiny token model with pre_logits (rep 16), 5 classes."""
    source = random_model(tiny_config.replace(representation_size=16))
    path = str(tmp_path / "vit.npz")
    save_npz(source, path)
    return path, source


def test_new_classes_skip_the_head_with_a_log(tiny_config, saved, caplog):
    path, source = saved
    target = vit_keras.VisionTransformer(tiny_config.replace(representation_size=16,
                                                             num_classes=3))
    with caplog.at_level(logging.WARNING, logger="vit_keras.checkpoints"):
        load_weights(target, path)
    assert "head/kernel" in caplog.text and "head shapes differ" in caplog.text
    assert not to_numpy(target.get_layer("head").kernel).any()  # still its zeros init
    assert np.array_equal(to_numpy(target.get_layer("pre_logits").kernel),
                          to_numpy(source.get_layer("pre_logits").kernel))
    with pytest.raises(ValueError, match=r"head/kernel: expected \(16, 3\), found \(16, 5\)"):
        load_weights(target, path, skip_head=False)


def test_model_without_pre_logits_drops_pre_logits_and_head(tiny_config, saved, caplog):
    path, source = saved
    target = vit_keras.VisionTransformer(tiny_config)
    with caplog.at_level(logging.WARNING, logger="vit_keras.checkpoints"):
        load_weights(target, path)
    assert "pre_logits/kernel" in caplog.text and "drop-head" in caplog.text
    assert np.array_equal(to_numpy(target.get_layer("embedding").projection.kernel),
                          to_numpy(source.get_layer("embedding").projection.kernel))
    with pytest.raises(ValueError, match=r"pre_logits/kernel: found \(32, 16\)"):
        load_weights(target, path, skip_head=False)


def test_skip_head_true_always_skips(tiny_config, saved):
    path, source = saved
    target = vit_keras.VisionTransformer(tiny_config.replace(representation_size=16))
    load_weights(target, path, skip_head=True)
    assert not to_numpy(target.get_layer("head").kernel).any()
    assert np.array_equal(to_numpy(target.get_layer("pre_logits").kernel),
                          to_numpy(source.get_layer("pre_logits").kernel))


def test_headless_model_loads_the_trunk(tiny_config, saved):
    path, source = saved
    target = vit_keras.VisionTransformer(tiny_config.replace(representation_size=16),
                                         include_top=False, pooling="token")
    load_weights(target, path)
    images = random_images(source, seed=100)
    import keras

    trunk = keras.Model(source.inputs[0], source.get_layer("pre_logits").output)
    np.testing.assert_allclose(to_numpy(target(images)), to_numpy(trunk(images)), atol=1e-6)


def test_skip_head_must_be_a_bool_or_none(tiny_config, saved):
    with pytest.raises(ValueError, match="skip_head"):
        load_weights(vit_keras.VisionTransformer(tiny_config), saved[0], skip_head="yes")


# ---- timm / Hugging Face name variants (from the committed parity files) -------------------

def parity(name):
    with np.load(os.path.join(DATA, "parity_vectors.npz"), allow_pickle=False) as archive:
        return archive[f"{name}/images"], archive[f"{name}/outputs"]


TIMM_TOKEN = vit_keras.ViTConfig(image_size=32, patch_size=8, hidden_size=32, mlp_dim=64,
                                 num_heads=4, num_layers=2, num_classes=7)


def test_timm_no_embed_class_layout(tmp_path):
    """timm's no_embed_class keeps no class-token row in pos_embed; a zero row is equivalent."""
    weights = load_file(os.path.join(DATA, "timm_token.safetensors"))
    weights["cls_token"] = weights["cls_token"] + weights["pos_embed"][:, :1]
    weights["pos_embed"] = np.ascontiguousarray(weights["pos_embed"][:, 1:])
    path = str(tmp_path / "no_embed_class.safetensors")
    save_file(weights, path)
    model = vit_keras.VisionTransformer(TIMM_TOKEN)
    load_weights(model, path, skip_head=False)
    images, logits = parity("timm_token")
    assert np.abs(to_numpy(model(images)) - logits).max() <= 2e-5


def test_timm_fc_norm_is_reported_as_unsupported(tmp_path):
    weights = load_file(os.path.join(DATA, "timm_token.safetensors"))
    weights["fc_norm.weight"] = np.ones(32, np.float32)
    path = str(tmp_path / "fc_norm.safetensors")
    save_file(weights, path)
    with pytest.raises(ValueError, match=r"unexpected in the checkpoint \(1\):\n\s+"
                                         r"fc_norm.weight: found \(32,\)"):
        load_weights(vit_keras.VisionTransformer(TIMM_TOKEN), path)


# transformers 4.x names (the files on the Hub) of the 5.x names our vectors were saved with.
HF_V4_NAMES = [("layers.", "encoder.layer."),
               (".attention.q_proj.", ".attention.attention.query."),
               (".attention.k_proj.", ".attention.attention.key."),
               (".attention.v_proj.", ".attention.attention.value."),
               (".attention.o_proj.", ".attention.output.dense."),
               (".mlp.fc1.", ".intermediate.dense."), (".mlp.fc2.", ".output.dense.")]


def test_hugging_face_4x_names(tmp_path):
    weights = load_file(os.path.join(DATA, "hf_classifier.safetensors"))
    renamed = {}
    for name, value in weights.items():
        for new, old in HF_V4_NAMES:
            name = name.replace(new, old)
        renamed[name] = value
    assert "vit.encoder.layer.1.attention.attention.query.weight" in renamed
    path = str(tmp_path / "hf4.safetensors")
    save_file(renamed, path)
    model = vit_keras.VisionTransformer(vit_keras.ViTConfig(
        image_size=32, patch_size=8, hidden_size=40, mlp_dim=80, num_heads=2, num_layers=2,
        num_classes=6))
    load_weights(model, path, skip_head=False)
    images, logits = parity("hf_classifier")
    assert np.abs(to_numpy(model(images)) - logits).max() <= 2e-5
