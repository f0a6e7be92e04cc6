"""The locality options for small data: the convolutional stem (Xiao et al. 2021), shifted
patch tokenization and locality self-attention (Lee et al. 2021), each against a NumPy
reference of its paper's definition, on every backend (tests/test_backends.py)."""

import numpy as np
import pytest
from helpers import random_images, randomize_weights, to_numpy

import keras
import vit_keras
from vit_keras import ViTConfig, VisionTransformer
from vit_keras.core.attention import MultiHeadSelfAttention
from vit_keras.core.stems import (ConvStem, ShiftedPatchEmbedding, conv_stem_widths,
                                  shift_diagonally)


def _layer_norm(x, gamma, beta, epsilon):
    mean = x.mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(x.var(-1, keepdims=True) + epsilon) * gamma + beta


def _conv3x3_stride2_same(x, kernel):
    """TensorFlow's SAME padding for stride 2 on even sides: one row/column at the bottom and
    right, none at the top and left."""
    padded = np.pad(x, ((0, 0), (0, 1), (0, 1), (0, 0)))
    rows, cols = x.shape[1] // 2, x.shape[2] // 2
    out = np.zeros((x.shape[0], rows, cols, kernel.shape[-1]))
    for i in range(rows):
        for j in range(cols):
            window = padded[:, 2 * i:2 * i + 3, 2 * j:2 * j + 3, :]
            out[:, i, j] = np.einsum("bpqc,pqcd->bd", window, kernel)
    return out


def test_config_validates_the_locality_options():
    base = dict(image_size=32, patch_size=8, hidden_size=32, mlp_dim=64, num_heads=4,
                num_layers=1)
    with pytest.raises(ValueError, match="stem must be one of"):
        ViTConfig(**base, stem="convolutional")
    with pytest.raises(ValueError, match="power of two >= 2"):
        ViTConfig(**dict(base, image_size=24, patch_size=6), stem="conv")
    with pytest.raises(ValueError, match="expected an even patch_size, got 3"):
        ViTConfig(**dict(base, image_size=24, patch_size=3), stem="shifted_patches")
    with pytest.raises(ValueError, match="expected a multiple of 4, got 30"):
        ViTConfig(**dict(base, hidden_size=30, num_heads=3), stem="conv")
    with pytest.raises(ValueError, match="a hybrid"):
        ViTConfig(**dict(base, patch_size=1), resnet_layers=(), stem="conv")
    with pytest.raises(ValueError, match="locality_attention must be True or False"):
        ViTConfig(**base, locality_attention="yes")
    config = ViTConfig(**base, stem="conv", locality_attention=True)
    assert ViTConfig.from_dict(config.to_dict()) == config
    assert vit_keras.config.variant_of(vit_keras.get_variant("S/16", stem="conv")) is None


def test_conv_stem_widths_follow_the_paper():
    # ViT_C-1GF's stem (Xiao et al., Table 1 / Appendix): 24, 48, 96, 192 for D=192, P=16.
    assert conv_stem_widths(192, 16) == [24, 48, 96, 192]
    assert conv_stem_widths(384, 16) == [48, 96, 192, 384]
    assert conv_stem_widths(64, 4) == [32, 64]


def test_conv_stem_equals_its_definition():
    stem = ConvStem(hidden_size=6, patch_size=4)
    images = np.random.default_rng(0).normal(size=(2, 8, 8, 3)).astype("float32")
    stem.build(images.shape)
    randomize_weights(stem.weights, seed=1, stddev=0.5)
    features = images.astype("float64")
    for conv, norm in zip(stem.convs, stem.norms):
        features = _conv3x3_stride2_same(features, to_numpy(conv.kernel))
        features = (features - to_numpy(norm.moving_mean)) / np.sqrt(
            to_numpy(norm.moving_variance) + norm.epsilon) * to_numpy(norm.gamma) + \
            to_numpy(norm.beta)
        features = np.maximum(features, 0.0)
    expected = features @ to_numpy(stem.projection.kernel) + to_numpy(stem.projection.bias)
    tokens = to_numpy(stem(images, training=False))
    assert tokens.shape == (2, 4, 6)
    np.testing.assert_allclose(tokens, expected.reshape(2, 4, 6), atol=1e-4)


def test_shift_diagonally_moves_the_image_half_a_patch_each_way():
    image = np.arange(1, 17, dtype="float32").reshape(1, 4, 4, 1)
    shifted = to_numpy(shift_diagonally(image, 1))[0]
    assert shifted.shape == (4, 4, 5)
    np.testing.assert_array_equal(shifted[..., 0], image[0, ..., 0])
    padded = np.pad(image[0, ..., 0], 1)
    for channel, (rows, cols) in enumerate([(slice(0, 4), slice(0, 4)),
                                            (slice(0, 4), slice(2, 6)),
                                            (slice(2, 6), slice(0, 4)),
                                            (slice(2, 6), slice(2, 6))], start=1):
        np.testing.assert_array_equal(shifted[..., channel], padded[rows, cols])
    assert shifted[0, 0, 1] == 0 and shifted[1, 1, 1] == image[0, 0, 0, 0]  # down-right


def test_shifted_patch_embedding_equals_its_definition():
    layer = ShiftedPatchEmbedding(hidden_size=5, patch_size=2)
    images = np.random.default_rng(0).normal(size=(2, 4, 6, 3)).astype("float32")
    layer.build(images.shape)
    randomize_weights(layer.weights, seed=2, stddev=0.5)
    padded = np.pad(images, ((0, 0), (1, 1), (1, 1), (0, 0)))
    stack = np.concatenate([images, padded[:, :4, :6], padded[:, :4, 2:],
                            padded[:, 2:, :6], padded[:, 2:, 2:]], axis=-1)  # [2, 4, 6, 15]
    patches = np.stack([stack[:, r:r + 2, c:c + 2].reshape(2, -1)
                        for r in range(0, 4, 2) for c in range(0, 6, 2)], axis=1)
    normed = _layer_norm(patches, to_numpy(layer.norm.gamma), to_numpy(layer.norm.beta), 1e-5)
    expected = normed @ to_numpy(layer.projection.kernel) + to_numpy(layer.projection.bias)
    np.testing.assert_allclose(to_numpy(layer(images)), expected, atol=1e-4)


def test_locality_attention_equals_its_definition():
    layer = MultiHeadSelfAttention(num_heads=2, locality=True)
    tokens = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    layer.build(tokens.shape)
    randomize_weights(layer.weights, seed=3, stddev=0.5)
    assert to_numpy(layer.temperature).shape == (2,)
    q, k, v = (np.einsum("btd,dnh->btnh", tokens, to_numpy(p.kernel)) + to_numpy(p.bias)
               for p in (layer.query, layer.key, layer.value))
    logits = np.einsum("btnh,bsnh->bnts", q, k) * to_numpy(layer.temperature)[:, None, None]
    logits[:, :, np.arange(5), np.arange(5)] = -np.inf
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    attended = np.einsum("bnts,bsnh->btnh", probs, v)
    expected = np.einsum("btnh,nhd->btd", attended, to_numpy(layer.out.kernel)) + \
        to_numpy(layer.out.bias)
    outputs, scores = layer(tokens, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(outputs), expected, atol=1e-4)
    assert np.abs(np.diagonal(to_numpy(scores), axis1=2, axis2=3)).max() == 0.0
    # Only the first queries (a class-token head's last block): the same rows.
    np.testing.assert_allclose(to_numpy(layer(tokens, num_queries=2)), expected[:, :2], atol=1e-4)
    with pytest.raises(ValueError, match="needs self-attention"):
        layer(tokens[:, :1], context=tokens)


@pytest.mark.parametrize("queries", [1, 2, 5])
def test_own_keys_are_left_out_and_put_back_exactly(queries):
    """The export-safe masking: only reshapes, slices and pads, no constant logit."""
    from vit_keras.core.attention import with_own_keys_zeroed, without_own_keys

    logits = np.random.default_rng(0).normal(size=(2, 3, queries, 5)).astype("float32")
    dropped = to_numpy(without_own_keys(logits))
    keep = ~np.eye(queries, 5, dtype=bool)
    np.testing.assert_array_equal(dropped, logits[:, :, keep].reshape(2, 3, queries, 4))
    restored = to_numpy(with_own_keys_zeroed(dropped))
    np.testing.assert_array_equal(restored, np.where(keep, logits, 0.0))


def test_the_temperature_starts_at_the_usual_scale():
    config = ViTConfig(image_size=16, patch_size=4, hidden_size=32, mlp_dim=32, num_heads=2,
                       num_layers=1, locality_attention=True)
    attention = VisionTransformer(config).get_layer("encoderblock_0").attention
    np.testing.assert_allclose(to_numpy(attention.temperature), [0.25, 0.25])


@pytest.mark.parametrize("stem", ["conv", "shifted_patches"])
def test_an_any_size_model_with_a_locality_stem_matches_the_fixed_one(tiny_config, stem):
    config = tiny_config.replace(stem=stem, locality_attention=True)
    fixed = randomize_weights(VisionTransformer(config), seed=4, stddev=0.2)
    flexible = VisionTransformer(config.replace(dynamic_image_size=True))
    flexible.set_weights(fixed.get_weights())
    images = random_images(config)
    np.testing.assert_allclose(to_numpy(flexible(images)), to_numpy(fixed(images)), atol=1e-5)
    assert to_numpy(flexible(random_images((48, 40, 3)))).shape == (2, config.num_classes)


@pytest.mark.parametrize("stem", ["conv", "shifted_patches"])
def test_quantize_and_lora_reach_the_stems_projection(tiny_config, stem):
    config = tiny_config.replace(stem=stem)
    model = VisionTransformer(config)
    model.enable_lora(2, targets=("embedding", "query"))
    assert model.get_layer("embedding").projection.lora_enabled
    quantized = VisionTransformer(config)
    quantized.quantize("int8")
    assert quantized.get_layer("embedding").projection.quantization_mode == "int8"
    assert to_numpy(quantized(random_images(config))).shape == (2, config.num_classes)


def test_npz_round_trip_and_official_files_are_refused(tiny_config, tmp_path):
    from vit_keras.checkpoints import save_npz

    config = tiny_config.replace(stem="conv", locality_attention=True)
    source = randomize_weights(VisionTransformer(config), seed=5, stddev=0.2)
    save_npz(source, str(tmp_path / "conv.npz"))
    with np.load(tmp_path / "conv.npz", allow_pickle=False) as archive:
        names = set(archive.files)
    assert {"embedding/conv_0/kernel", "embedding/bn_2/var", "embedding/projection/kernel",
            "Transformer/encoderblock_1/MultiHeadDotProductAttention_1/temperature"} <= names
    target = VisionTransformer(config)
    vit_keras.load_weights(target, str(tmp_path / "conv.npz"), skip_head=False)
    images = random_images(config)
    np.testing.assert_array_equal(to_numpy(target(images)), to_numpy(source(images)))
    save_npz(VisionTransformer(tiny_config), str(tmp_path / "official.npz"))
    with pytest.raises(ValueError, match="embedding/conv_0/kernel"):
        vit_keras.load_weights(VisionTransformer(config), str(tmp_path / "official.npz"))


@pytest.mark.slow
def test_conv_stem_batch_norm_learns_its_statistics_in_fit(tiny_config):
    config = tiny_config.replace(stem="conv")
    model = VisionTransformer(config)
    norm = model.get_layer("embedding").norms[0]
    before = to_numpy(norm.moving_mean).copy()
    model.compile(keras.optimizers.Adam(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(random_images(config, batch=8), np.arange(8) % 5, batch_size=4, verbose=0)
    assert np.abs(to_numpy(norm.moving_mean) - before).max() > 0
