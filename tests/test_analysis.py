"""vit_keras.analysis: attention maps, rollout, attention distance, posemb similarity, filters,
few-shot. Hand-made cases with known answers, and checks that the probe reads the model's own
weights."""

import itertools
import math

import numpy as np
import pytest
from helpers import random_images, to_numpy

from vit_keras import VisionTransformer, analysis



def _zero_queries_and_keys(model, num_layers):
    """Makes every logit 0, so every attention row is uniform."""
    for index in range(num_layers):
        attention = model.get_layer(f"encoderblock_{index}").attention
        for weight in (attention.query.kernel, attention.query.bias, attention.key.kernel,
                       attention.key.bias):
            weight.assign(np.zeros(weight.shape, "float32"))


def _mean_pairwise_centre_distance(rows, cols, patch):
    centres = [((r + 0.5) * patch, (c + 0.5) * patch) for r in range(rows) for c in range(cols)]
    total = sum(math.dist(a, b) for a, b in itertools.product(centres, centres))
    return total / len(centres) ** 2


def test_attention_maps_shapes_and_rows_sum_to_one(tiny_config):
    model = VisionTransformer(tiny_config)
    maps = analysis.attention_maps(model, random_images(tiny_config, batch=3), batch_size=2)
    assert len(maps) == tiny_config.num_layers
    for layer in maps:
        assert layer.shape == (3, tiny_config.num_heads, 17, 17)
        assert layer.dtype == np.float32
        np.testing.assert_allclose(layer.sum(axis=-1), 1.0, atol=1e-5)


def test_probe_shares_the_model_weights(tiny_config):
    model = VisionTransformer(tiny_config)
    probe = analysis.AttentionProbe(model)
    model_variables = {id(weight) for weight in model.weights}
    assert probe.weights and all(id(weight) in model_variables for weight in probe.weights)

    images = random_images(tiny_config, batch=2)
    before = analysis.attention_maps(model, images)
    kernel = model.get_layer("encoderblock_0").attention.query.kernel
    kernel.assign(to_numpy(kernel) * 3.0)
    after = analysis.attention_maps(model, images)
    assert np.abs(after[0] - before[0]).max() > 1e-3


def test_bad_images_are_rejected(tiny_config):
    model = VisionTransformer(tiny_config)
    with pytest.raises(ValueError, match="model's input"):
        analysis.attention_maps(model, np.zeros((2, 16, 16, 3), "float32"))


@pytest.mark.parametrize("image_size", [32, (32, 48)])
def test_uniform_attention_distance_is_mean_pairwise_distance(tiny_config, image_size):
    config = tiny_config.replace(image_size=image_size)
    model = VisionTransformer(config)
    _zero_queries_and_keys(model, config.num_layers)
    images = random_images(config, batch=2)

    maps = analysis.attention_maps(model, images)
    np.testing.assert_allclose(maps[0], 1.0 / config.seq_len, rtol=1e-5)
    distances = analysis.mean_attention_distance(model, images)
    expected = _mean_pairwise_centre_distance(*config.grid_size, config.patch_size)
    assert distances.shape == (config.num_layers, config.num_heads)
    np.testing.assert_allclose(distances, expected, rtol=1e-5)


def test_uniform_attention_rollout_is_uniform_over_patches(tiny_config):
    model = VisionTransformer(tiny_config)
    _zero_queries_and_keys(model, tiny_config.num_layers)
    rollout = analysis.attention_rollout(model, random_images(tiny_config, batch=2))
    assert rollout.shape == (2, 4, 4)
    # ((U + I) / 2)^L = (1 - 2^-L) U + 2^-L I, so the class row gives each patch (1 - 2^-L) / T.
    expected = (1 - 2.0 ** -tiny_config.num_layers) / tiny_config.seq_len
    np.testing.assert_allclose(rollout, expected, rtol=1e-5)


def test_rollout_of_identity_attention_is_uniform():
    identity = np.broadcast_to(np.eye(5), (1, 2, 5, 5))
    rollout = analysis.rollout_from_attention([identity, identity])
    np.testing.assert_allclose(rollout, 0.0)          # no mixing: the class row keeps to itself
    rollout = analysis.rollout_from_attention([identity], has_class_token=False)
    np.testing.assert_allclose(rollout, 0.2)          # gap: every token counted once, equally


def test_rollout_hand_case_head_fusion_and_discard():
    # Class token (0) attends fully to patch 2 in head 0, to itself in head 1.
    attention = np.zeros((1, 2, 4, 4))
    attention[:, :, np.arange(4), np.arange(4)] = 1.0
    attention[0, 0, 0] = [0, 0, 1, 0]
    mean = analysis.rollout_from_attention([attention], head_fusion="mean")
    # mean head row [0.5, 0, 0.5, 0] + identity, renormalised: [0.75, 0, 0.25, 0].
    np.testing.assert_allclose(mean, [[0.0, 0.25, 0.0]], atol=1e-7)
    maximum = analysis.rollout_from_attention([attention], head_fusion="max")
    np.testing.assert_allclose(maximum, [[0.0, 1 / 3, 0.0]], atol=1e-7)
    minimum = analysis.rollout_from_attention([attention], head_fusion="min")
    np.testing.assert_allclose(minimum, [[0.0, 0.0, 0.0]], atol=1e-7)
    # Discarding the weakest 90% of 16 weights keeps only the top one or two entries.
    uniform = np.full((1, 1, 4, 4), 0.25)
    uniform[0, 0, 0] = [0.1, 0.1, 0.7, 0.1]
    kept = analysis.rollout_from_attention([uniform], discard_ratio=0.9)
    assert kept[0].argmax() == 1 and kept[0][0] == 0 and kept[0][2] == 0
    with pytest.raises(ValueError, match="head_fusion"):
        analysis.rollout_from_attention([attention], head_fusion="median")
    with pytest.raises(ValueError, match="discard_ratio"):
        analysis.rollout_from_attention([attention], discard_ratio=1.0)


def test_attention_distance_of_a_known_pattern():
    # 2x2 grid of 8-px patches; each patch looks at its right neighbour (8 px) or, in the last
    # column, at itself (0 px): mean 4 px. The class column must not count.
    grid, patch = (2, 2), 8
    attention = np.zeros((1, 1, 5, 5))
    attention[0, 0, 0] = 0.2
    for query, key in {1: 2, 2: 2, 3: 4, 4: 4}.items():
        attention[0, 0, query, key] = 0.5
        attention[0, 0, query, 0] = 0.5
    distances = analysis.mean_attention_distance_from_attention([attention, attention], grid,
                                                                patch)
    np.testing.assert_allclose(distances, [[4.0], [4.0]])
    np.testing.assert_allclose(analysis.patch_centre_distances(grid, patch)[0],
                               [0, 8, 8, 8 * math.sqrt(2)])


def test_position_similarity_of_a_row_column_embedding(tiny_config):
    model = VisionTransformer(tiny_config)
    rows, cols = tiny_config.grid_size
    embedding = np.zeros((1, tiny_config.seq_len, tiny_config.hidden_size), "float32")
    embedding[0, 0] = np.random.default_rng(0).normal(size=tiny_config.hidden_size)  # class row
    for index in range(rows * cols):
        row, col = divmod(index, cols)
        embedding[0, 1 + index, row] = 1.0            # one-hot row, then one-hot column
        embedding[0, 1 + index, rows + col] = 1.0
    model.get_layer("posembed_input").pos_embedding.assign(embedding)

    similarity = analysis.position_embedding_similarity(model)
    assert similarity.shape == (rows, cols, rows, cols)
    same_row = np.arange(rows)[:, None, None, None] == np.arange(rows)[None, None, :, None]
    same_col = np.arange(cols)[None, :, None, None] == np.arange(cols)[None, None, None, :]
    np.testing.assert_allclose(similarity, (same_row * 1.0 + same_col * 1.0) / 2.0, atol=1e-6)


def test_filter_pca_finds_known_components_and_is_orthonormal():
    size, channels, width = 4, 3, 64
    rng = np.random.default_rng(0)
    basis, _ = np.linalg.qr(rng.normal(size=(size * size * channels, 2)))
    # Centred, uncorrelated coefficients: variances 9 and 1 along the two basis directions.
    coefficients = rng.normal(size=(width, 2))
    coefficients -= coefficients.mean(axis=0)
    coefficients, _ = np.linalg.qr(coefficients)
    strong, weak = 3.0 * coefficients[:, 0], 1.0 * coefficients[:, 1]
    kernel = (np.outer(basis[:, 0], strong) + np.outer(basis[:, 1], weak)).reshape(
        size, size, channels, width)
    components, explained = analysis.principal_filters(kernel + 0.5, k=2)  # offset is centred away
    assert components.shape == (2, size, size, channels)
    flat = components.reshape(2, -1)
    assert abs(flat[0] @ basis[:, 0]) == pytest.approx(1.0, abs=1e-5)
    assert abs(flat[1] @ basis[:, 1]) == pytest.approx(1.0, abs=1e-5)
    assert explained.sum() == pytest.approx(1.0, abs=1e-5)

    random_kernel = rng.normal(size=(size, size, channels, width))
    components, explained = analysis.principal_filters(random_kernel, k=28)
    flat = components.reshape(28, -1)
    np.testing.assert_allclose(flat @ flat.T, np.eye(28), atol=1e-5)
    assert np.all(np.diff(explained) <= 1e-7)
    with pytest.raises(ValueError, match="k must be"):
        analysis.principal_filters(random_kernel, k=49)


def test_embedding_filters_of_a_model(tiny_config):
    model = VisionTransformer(tiny_config)
    filters = analysis.embedding_filters(model, k=10)
    assert filters.shape == (10, 8, 8, 3)


def test_overlay_blends_a_heat_map():
    image = np.full((16, 16, 3), 100.0)
    attention_map = np.zeros((2, 2))
    attention_map[0, 0] = 1.0
    blended = analysis.overlay(image, attention_map, alpha=1.0)
    assert blended.shape == (16, 16, 3) and blended.dtype == np.uint8
    hot, cold = blended[0, 0].astype(int), blended[15, 15].astype(int)
    assert hot[0] > hot[2] and cold[2] > cold[0]      # red where attended, blue elsewhere
    np.testing.assert_array_equal(analysis.overlay(image, attention_map, alpha=0.0), 100)
    grey = analysis.overlay(np.zeros((8, 8, 1)), np.ones((2, 2)), alpha=0.5)
    assert grey.shape == (8, 8, 3)


def test_few_shot_on_separable_features_is_perfect():
    rng = np.random.default_rng(0)
    centres = rng.normal(0, 5.0, (5, 64))

    def sample(per_class):
        labels = np.repeat(np.arange(5), per_class)
        return centres[labels] + rng.normal(0, 0.3, (len(labels), 64)), labels

    train, test = sample(30), sample(20)
    accuracy = analysis.few_shot_from_features(*train, *test, shots=(1, 5, 25))
    assert accuracy == {1: 1.0, 5: 1.0, 25: 1.0}
    with pytest.raises(ValueError, match="31-shot"):
        analysis.few_shot_from_features(*train, *test, shots=(31,))


def _digits(count):
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = np.kron(digits.images[:count], np.ones((4, 4)))[..., None] * (255.0 / 16.0)
    return np.repeat(images, 3, axis=-1).astype("float32"), digits.target[:count]


def test_few_shot_on_digits_beats_chance_with_random_features(tiny_config):
    # Even an untrained ViT's frozen features separate digits better than chance (10%); a trained
    # one does much better (next test).
    model = VisionTransformer(tiny_config.replace(num_classes=10))
    images, labels = _digits(700)
    inputs = (images - 127.5) / 127.5
    accuracy = analysis.few_shot(model, (inputs[:400], labels[:400]),
                                 (inputs[400:], labels[400:]), shots=(1, 10), trials=3)
    assert accuracy[10] > 0.2 and accuracy[10] > accuracy[1]


@pytest.mark.slow
def test_few_shot_on_a_trained_models_features_beats_chance_widely(trained_tiny):
    """The shared tiny classifier's held-out digits (five classes, chance 20%): 10-shot on its
    frozen features, which classify them at about 95% top-1."""
    model = trained_tiny.model()
    inputs = trained_tiny.held_out / 127.5 - 1.0
    labels = trained_tiny.labels
    accuracy = analysis.few_shot(model, (inputs[:100], labels[:100]),
                                 (inputs[100:], labels[100:]), shots=(10,), trials=3)
    assert accuracy[10] > 0.5
