import math

import keras
import numpy as np
import pytest
from helpers import (dtype_name, random_images, randomize_weights, run_model_saving_test,
                     run_serialization_test, to_numpy, variant_params)

import vit_keras
from vit_keras import VARIANTS, ViTConfig, VisionTransformer, config_from_model


def closed_form_params(config: ViTConfig) -> int:
    """The parameter count of the official model, from the issue's closed form."""
    d, m, p, c, k = (config.hidden_size, config.mlp_dim, config.patch_size, config.channels,
                     config.num_classes)
    tokens = config.seq_len
    count = p * p * c * d + d  # patch embedding
    count += d if config.classifier == "token" else 0  # cls
    count += tokens * d  # posemb
    count += config.num_layers * (4 * d * d + 2 * d * m + 9 * d + m)
    count += 2 * d  # final norm
    if config.representation_size:
        count += d * config.representation_size + config.representation_size
        d = config.representation_size
    return count + d * k + k


@pytest.mark.parametrize("variant", variant_params(sorted(VARIANTS), VARIANTS))
def test_parameter_count_matches_closed_form(variant):
    config = VARIANTS[variant]
    # Variables made in a stateless scope stay uninitialised: no memory, only shapes.
    with keras.StatelessScope(initialize_variables=False):
        assert VisionTransformer(config).count_params() == closed_form_params(config)


def test_headline_counts():
    with keras.StatelessScope(initialize_variables=False):
        assert vit_keras.ViTB16().count_params() == 86_567_656
        assert vit_keras.ViTTi16().count_params() == 5_717_416


def test_pre_logits_counted(tiny_config):
    config = tiny_config.replace(representation_size=24)
    assert VisionTransformer(config).count_params() == closed_form_params(config)


def test_keras_file_round_trip_safe_mode(tmp_path, tiny_config):
    model = VisionTransformer(tiny_config.replace(representation_size=16))
    # Non-zero weights everywhere (the head starts at zero), so outputs depend on all of them.
    randomize_weights(model, stddev=0.1)
    images = random_images(tiny_config)
    loaded = run_model_saving_test(model, images, tmp_path)
    np.testing.assert_array_equal(model.predict(images, verbose=0),
                                  loaded.predict(images, verbose=0))
    assert config_from_model(loaded) == tiny_config.replace(representation_size=16)


def test_every_layer_config_round_trips(tiny_config):
    model = VisionTransformer(tiny_config.replace(dropout_rate=0.1, gelu_approximate=False))
    custom = [layer for layer in model.layers if type(layer).__module__.startswith("vit_keras")]
    assert {type(layer).__name__ for layer in custom} >= {
        "PatchEmbedding", "ClassToken", "PositionEmbedding", "EncoderBlock", "TokenPooling"}
    nested = [model.get_layer("encoderblock_0").attention, model.get_layer("encoderblock_0").mlp]
    for layer in custom + nested:
        run_serialization_test(layer)


def test_non_square_input():
    config = ViTConfig(image_size=(64, 96), patch_size=16, hidden_size=32, mlp_dim=64,
                       num_heads=2, num_layers=1, num_classes=3)
    model = VisionTransformer(config)
    assert model.get_layer("posembed_input").pos_embedding.shape == (1, 25, 32)
    assert model(random_images(config)).shape == (2, 3)
    features = VisionTransformer(config, include_top=False)
    assert features(random_images(config)).shape == (2, 25, 32)


def test_include_top_false_pooling(tiny_config):
    images = random_images(tiny_config)
    assert VisionTransformer(tiny_config, include_top=False)(images).shape == (2, 17, 32)
    assert VisionTransformer(tiny_config, include_top=False, pooling="token")(images).shape == (2, 32)
    assert VisionTransformer(tiny_config, include_top=False, pooling="avg")(images).shape == (2, 32)
    with pytest.raises(ValueError, match="pooling must be one of"):
        VisionTransformer(tiny_config, include_top=False, pooling="max")
    with pytest.raises(ValueError, match="needs classifier='token'"):
        VisionTransformer(tiny_config.replace(classifier="gap"), include_top=False, pooling="token")


def test_gap_model_has_no_class_token(tiny_config):
    model = VisionTransformer(tiny_config.replace(classifier="gap"))
    names = {layer.name for layer in model.layers}
    assert "cls" not in names
    assert model.get_layer("posembed_input").pos_embedding.shape == (1, 16, 32)


def test_application_constructor_options():
    model = vit_keras.ViTS32(input_shape=(64, 96, 1), classes=7, num_layers=1,
                             classifier_activation="softmax")
    assert model.input_shape == (None, 64, 96, 1)
    outputs = model(np.zeros((1, 64, 96, 1), "float32"))
    assert outputs.shape == (1, 7)
    np.testing.assert_allclose(np.sum(to_numpy(outputs)), 1.0, rtol=1e-6)
    with pytest.raises(ValueError, match="input_shape must be"):
        vit_keras.ViTS32(input_shape=(64, 96))
    with pytest.raises(ValueError, match="not divisible by patch_size 32"):
        vit_keras.ViTS32(input_shape=(65, 96, 3))


def test_wrong_input_shapes_rejected(tiny_config):
    model = VisionTransformer(tiny_config)
    with pytest.raises(ValueError):
        model(np.zeros((1, 32, 32, 1), "float32"))
    with pytest.raises(ValueError):
        model(np.zeros((32, 32, 3), "float32"))


@pytest.mark.slow
def test_fit_lowers_loss(tiny_config):
    config = tiny_config.replace(num_classes=2)
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 64)
    images = rng.normal(0, 0.2, (64, 32, 32, 3)).astype("float32")
    images[labels == 1, :16] += 0.8  # a learnable signal: bright top half
    model = VisionTransformer(config)
    model.compile(keras.optimizers.Adam(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(images, labels, batch_size=16, epochs=8, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.slow
def test_mixed_bfloat16_trains_and_returns_float32(tiny_config):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = VisionTransformer(tiny_config)
    block = model.get_layer("encoderblock_0")
    assert block.compute_dtype == "bfloat16"
    assert dtype_name(block.attention.query.kernel) == "float32"
    assert model.get_layer("head").compute_dtype == "float32"
    model.compile(keras.optimizers.Adam(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    images, labels = random_images(tiny_config, batch=8), np.arange(8) % 5
    before = to_numpy(model.get_layer("embedding").projection.kernel).copy()
    # Two steps: the zero-initialised head blocks gradients to the trunk on the first one.
    losses = [model.train_on_batch(images, labels) for _ in range(2)]
    assert np.all(np.isfinite(losses))
    assert not np.array_equal(before, to_numpy(model.get_layer("embedding").projection.kernel))
    logits = model(images)
    assert dtype_name(logits) == "float32"
    _, scores = block.attention(keras.ops.ones((1, 17, 32), "bfloat16"),
                                return_attention_scores=True)
    assert dtype_name(scores) == "float32"  # softmax in float32
    norm = block.layer_norm_0(keras.ops.ones((1, 17, 32), "bfloat16") * 3)
    assert dtype_name(norm) == "bfloat16" and block.layer_norm_0.epsilon == 1e-6


def test_preprocess_input():
    pixels = np.array([0, 127.5, 255], "float32")
    np.testing.assert_allclose(to_numpy(vit_keras.preprocess_input(pixels)), [-1, 0, 1])
    assert dtype_name(vit_keras.preprocess_input(np.array([255], "uint8"))) == "float32"


def test_official_initialisation():
    config = VARIANTS["B/16"].replace(num_layers=1, head_bias_init=-10.0)
    model = VisionTransformer(config)
    np.testing.assert_array_equal(to_numpy(model.get_layer("cls").cls), 0)
    np.testing.assert_array_equal(to_numpy(model.get_layer("head").kernel), 0)
    np.testing.assert_array_equal(to_numpy(model.get_layer("head").bias), -10)
    assert abs(np.std(to_numpy(model.get_layer("posembed_input").pos_embedding)) - 0.02) < 1e-3
    block = model.get_layer("encoderblock_0")
    bias = to_numpy(block.mlp.dense_0.bias)
    assert 0 < np.std(bias) < 1e-5
    # Flax DenseGeneral xavier: fans over the flattened (768, 12*64) kernel.
    limit = math.sqrt(6 / (768 + 768))
    query = to_numpy(block.attention.query.kernel)
    assert query.shape == (768, 12, 64) and np.abs(query).max() <= limit
    assert abs(np.std(query) - limit / math.sqrt(3)) < 1e-3
    assert block.attention.out.kernel.shape == (12, 64, 768)
