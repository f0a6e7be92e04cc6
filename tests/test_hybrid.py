"""Hybrid R+ViT: shapes and parameter counts of the official configs, timm parity, and the
official `.npz` layout of the ResNet weights."""

import json
import os

import numpy as np
import pytest
from helpers import random_images, to_numpy

import keras
import vit_keras
from vit_keras import HYBRID_VARIANTS, VisionTransformer, get_variant
from vit_keras.checkpoints import io

DATA = os.path.join(os.path.dirname(__file__), "data")

# timm 1.0.31, built offline: sum of parameter numel of vit_tiny_r_s16_p8_224,
# vit_small_r26_s32_224, vit_base_r26_s32_224, vit_base_r50_s16_224 (+ a 1000-class head,
# which timm's in21k-derived default leaves out: 768 * 1000 + 1000) and vit_large_r50_s32_224.
TIMM_PARAMS = {"R+Ti/16": 6_337_704, "R26+S/32": 36_431_912, "R26+B/32": 101_383_976,
               "R50+B/16": 97_890_112 + 769_000, "R50+L/32": 328_994_856}


def resnet_params(blocks, width=64, channels=3):
    """Weights of the BiT ResNet, counted from the architecture (GroupNorm: scale + bias)."""
    count = 7 * 7 * channels * width + 2 * width   # conv_root, gn_root
    inputs = width
    for stage, units in enumerate(blocks):
        features = width * 2 ** stage
        for unit in range(units):
            count += inputs * features + 9 * features * features + features * 4 * features
            count += 2 * (features + features + 4 * features)          # gn1, gn2, gn3
            if unit == 0:                                               # conv_proj, gn_proj
                count += inputs * 4 * features + 2 * 4 * features
            inputs = 4 * features
    return count, inputs


def hybrid_params(config):
    resnet, features = resnet_params(config.resnet_layers)
    d, m, p = config.hidden_size, config.mlp_dim, config.patch_size
    block = 4 * d + 4 * (d * d + d) + 2 * d * m + m + d
    return (resnet + p * p * features * d + d + d + config.seq_len * d + config.num_layers * block
            + 2 * d + d * config.num_classes + config.num_classes)


@pytest.mark.parametrize("name", sorted(HYBRID_VARIANTS))
def test_parameter_counts_and_shapes(name):
    config = HYBRID_VARIANTS[name]
    with keras.StatelessScope(initialize_variables=False):
        model = VisionTransformer(config)
        assert model.count_params() == hybrid_params(config) == TIMM_PARAMS[name]
        assert model.get_layer("posembed_input").output.shape == (None, config.seq_len,
                                                                  config.hidden_size)
    stride = {"R+Ti/16": 4, "R50+B/16": 16}.get(name, 32)
    grid = 224 // (stride * config.patch_size)
    assert config.resnet_stride == stride and config.grid_size == (grid, grid)
    assert config.seq_len == grid * grid + 1
    assert model.output_shape == (None, 1000)


def test_r50_feature_map_and_constructor():
    config = get_variant("R50+ViT-B_16")
    assert config.resnet_layers == (3, 4, 9) and config.patch_size == 1
    with keras.StatelessScope(initialize_variables=False):
        model = vit_keras.ViTR50B16(input_shape=(384, 384, 3), classes=10)
        assert model.get_layer("resnet").output.shape == (None, 24, 24, 1024)
        assert model.get_layer("posembed_input").output.shape == (None, 577, 768)
    with pytest.raises(ValueError, match="multiples of 16"):
        config.replace(image_size=200)


def _case():
    with open(os.path.join(DATA, "hybrid_deit_configs.json")) as file:
        case = dict(json.load(file)["timm_hybrid"])
    weights = os.path.join(DATA, case.pop("weights"))
    return vit_keras.ViTConfig(**case), weights


def test_matches_timm_hybrid():
    config, weights = _case()
    model = VisionTransformer(config)
    vit_keras.load_weights(model, weights, skip_head=False)
    with np.load(os.path.join(DATA, "hybrid_deit_vectors.npz"), allow_pickle=False) as vectors:
        images, reference = vectors["timm_hybrid/images"], vectors["timm_hybrid/outputs"]
    outputs = to_numpy(model(images))
    assert np.abs(reference).max() > 0.1
    assert np.abs(outputs - reference).max() < 5e-5


def test_official_npz_layout_round_trip(tmp_path):
    config, weights = _case()
    model = VisionTransformer(config)
    vit_keras.load_weights(model, weights, skip_head=False)
    path = str(tmp_path / "r_hybrid.npz")
    vit_keras.checkpoints.save_npz(model, path)
    _, tensors = io.read_tensors(path)
    # The names of the official vit_jax hybrid checkpoints (models_vit.py / models_resnet.py).
    assert tensors["conv_root/kernel"].shape == (7, 7, 3, 64)
    assert tensors["gn_root/scale"].shape == (64,)
    assert tensors["block1/unit1/conv2/kernel"].shape == (3, 3, 64, 64)
    assert tensors["block1/unit1/conv_proj/kernel"].shape == (1, 1, 64, 256)
    assert tensors["block1/unit1/gn_proj/bias"].shape == (256,)
    assert tensors["embedding/kernel"].shape == (1, 1, 256, 32)
    fresh = VisionTransformer(config)
    vit_keras.load_weights(fresh, path, skip_head=False)
    images = random_images(config, batch=1)
    np.testing.assert_array_equal(to_numpy(fresh(images)), to_numpy(model(images)))
    del tensors["block1/unit1/gn3/scale"]
    np.savez(str(tmp_path / "broken.npz"), **tensors)
    with pytest.raises(ValueError, match="block1/unit1/gn3/scale"):
        vit_keras.load_weights(fresh, str(tmp_path / "broken.npz"))
