"""Bad weight files: each case raises a clear ValueError and leaves the model untouched."""

import re

import numpy as np
import pytest
from helpers import to_numpy
from safetensors.numpy import save_file

import vit_keras
from vit_keras import load_weights
from vit_keras.checkpoints import save_npz

BLOCK = "Transformer/encoderblock_0/"


@pytest.fixture
def model(tiny_config):
    return vit_keras.VisionTransformer(tiny_config)


@pytest.fixture
def good_npz(model, tmp_path):
    path = str(tmp_path / "good.npz")
    save_npz(model, path)
    with np.load(path, allow_pickle=False) as archive:
        return path, {name: archive[name] for name in archive.files}


def write(tmp_path, name, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def snapshot(model):
    return [to_numpy(variable).copy() for variable in model.weights]


def assert_fails(model, path, pattern):
    before = snapshot(model)
    with pytest.raises(ValueError, match=pattern):
        load_weights(model, path)
    assert all(np.array_equal(a, b) for a, b in zip(before, snapshot(model)))


def test_missing_file(model, tmp_path):
    assert_fails(model, str(tmp_path / "absent.npz"), "does not exist")


def test_random_bytes(model, tmp_path):
    data = np.random.default_rng(0).bytes(4096)
    assert_fails(model, write(tmp_path, "noise.bin", data), "not a weight file")


def test_truncated_npz(model, good_npz, tmp_path):
    data = open(good_npz[0], "rb").read()
    assert_fails(model, write(tmp_path, "cut.npz", data[: len(data) // 2]),
                 "truncated or corrupt .npz")


def test_npz_with_pickled_objects_is_refused(model, good_npz, tmp_path):
    path = str(tmp_path / "pickle.npz")
    tensors = dict(good_npz[1], extra=np.array([{"a": 1}], dtype=object))
    np.savez(path, **tensors)  # numpy pickles object arrays
    assert_fails(model, path, "pickle")


def test_npz_with_a_string_array(model, good_npz, tmp_path):
    path = str(tmp_path / "strings.npz")
    np.savez(path, **dict(good_npz[1], note=np.array(["hello"])))
    assert_fails(model, path, "'note' has dtype <U5, expected a number type")


def test_empty_npz(model, tmp_path):
    path = str(tmp_path / "empty.npz")
    np.savez(path)
    assert_fails(model, path, "holds no tensors")


def test_truncated_safetensors(model, tmp_path):
    path = str(tmp_path / "w.safetensors")
    save_file({"patch_embed.proj.weight": np.ones((32, 3, 8, 8), np.float32)}, path)
    data = open(path, "rb").read()
    assert_fails(model, write(tmp_path, "cut.safetensors", data[:-100]),
                 "truncated or corrupt .safetensors")


def test_safetensors_with_a_broken_header(model, tmp_path):
    header = b'{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]'  # no closing }
    data = len(header).to_bytes(8, "little") + header + b"\0" * 8
    assert_fails(model, write(tmp_path, "bad.safetensors", data),
                 "truncated or corrupt .safetensors")


def test_unknown_layout(model, tmp_path):
    path = str(tmp_path / "other.npz")
    np.savez(path, weights=np.ones(3, np.float32))
    assert_fails(model, path, r"not a ViT checkpoint of a known layout.*found \['weights'\]")


def test_missing_key(model, good_npz, tmp_path):
    tensors = dict(good_npz[1])
    del tensors[f"{BLOCK}LayerNorm_2/scale"]
    path = str(tmp_path / "missing.npz")
    np.savez(path, **tensors)
    assert_fails(model, path, re.escape("missing from the checkpoint (1):\n    "
                                        f"{BLOCK}LayerNorm_2/scale: expected (32,)"))


def test_extra_key(model, good_npz, tmp_path):
    path = str(tmp_path / "extra.npz")
    np.savez(path, **dict(good_npz[1], **{"Transformer/encoderblock_2/LayerNorm_0/scale":
                                           np.ones(32, np.float32)}))
    assert_fails(model, path, re.escape("unexpected in the checkpoint (1):\n    "
                                        "Transformer/encoderblock_2/LayerNorm_0/scale: "
                                        "found (32,)"))


def test_mis_shaped_key(model, good_npz, tmp_path):
    tensors = dict(good_npz[1])
    tensors[f"{BLOCK}MlpBlock_3/Dense_0/kernel"] = np.ones((32, 48), np.float32)
    path = str(tmp_path / "shape.npz")
    np.savez(path, **tensors)
    assert_fails(model, path, re.escape(f"{BLOCK}MlpBlock_3/Dense_0/kernel: expected (32, 64), "
                                        "found (32, 48)"))


def test_every_problem_is_listed_at_once(model, good_npz, tmp_path):
    tensors = dict(good_npz[1])
    del tensors["cls"]
    tensors["surprise"] = np.zeros(2, np.float32)
    tensors["embedding/bias"] = np.zeros(31, np.float32)
    path = str(tmp_path / "all.npz")
    np.savez(path, **tensors)
    with pytest.raises(ValueError) as error:
        load_weights(model, path)
    message = str(error.value)
    assert "cls: expected (1, 1, 32)" in message and "surprise: found (2,)" in message
    assert "embedding/bias: expected (32,), found (31,)" in message
    assert "nothing was loaded" in message


def test_gap_checkpoint_into_token_model(tiny_config, tmp_path):
    path = str(tmp_path / "gap.npz")
    save_npz(vit_keras.VisionTransformer(tiny_config.replace(classifier="gap")), path)
    assert_fails(vit_keras.VisionTransformer(tiny_config), path, "cls: expected")


def test_not_a_vit_model(good_npz):
    import keras

    inputs = keras.Input((4,))
    with pytest.raises(ValueError, match="not built by VisionTransformer"):
        load_weights(keras.Model(inputs, keras.layers.Dense(2)(inputs)), good_npz[0])


@pytest.mark.parametrize("weights, pattern", [
    (3, "weights must be None, a weight name"),
    ("imagenet", "'imagenet' does not exist: expected the path.*a released weight name")])
def test_constructor_rejects_what_is_not_a_file(weights, pattern):
    with pytest.raises(ValueError, match=pattern):
        vit_keras.ViTTi16(weights=weights, input_shape=(32, 32, 3), patch_size=8,
                          hidden_size=32, mlp_dim=64, num_heads=4, num_layers=1)
