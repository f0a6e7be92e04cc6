"""Models taking any image size (`dynamic_image_size`): position embeddings resampled per input.

At the stored size such a model equals the fixed-size model; at another size it equals a
fixed-size model built for that size whose weights were resized at load time (the official
rule), including on the timm reference vectors of tests/data.
"""

import json
import os

import keras
import numpy as np
import pytest
from helpers import BACKEND, random_images, randomize_weights, requires_tf, to_numpy

import vit_keras
from vit_keras import VisionTransformer
from vit_keras.core import grid_resize
from vit_keras import load_weights
from vit_keras.checkpoints import resize, save_npz
from vit_keras.core.model import config_from_model

DATA = os.path.join(os.path.dirname(__file__), "data")
TOLERANCE = 1e-5  # max abs logit difference, float32
OTHER_SIZES = [(48, 48), (40, 64), (16, 24)]  # larger, non-square, smaller than 32x32

OPTIONS = {
    "learn_token": {},
    "sincos2d": dict(posemb="sincos2d"),
    "learn2d_gap": dict(posemb="learn2d", classifier="gap"),
    "deit": dict(distilled=True),
    "map_registers": dict(classifier="map", num_register_tokens=2),
    "hybrid": dict(resnet_layers=(1,), patch_size=1),
}


def _pair(tiny_config, options, tmp_path):
    """A random fixed-size model, the same weights in a dynamic one, and their .npz."""
    config = tiny_config.replace(**options)
    fixed = randomize_weights(VisionTransformer(config), stddev=0.3)
    dynamic = VisionTransformer(config.replace(dynamic_image_size=True))
    dynamic.set_weights(fixed.get_weights())
    path = str(tmp_path / "weights.npz")
    save_npz(fixed, path)
    return config, fixed, dynamic, path


def _predict(model, images):
    # On JAX one compiled function per size: eager calls would compile op by op.
    if BACKEND == "jax":
        return model.predict(images, verbose=0)
    return to_numpy(model(images))


@pytest.mark.parametrize("name", sorted(OPTIONS))
@pytest.mark.slow
def test_equals_a_fixed_model_resized_at_load_time(name, tiny_config, tmp_path):
    config, fixed, dynamic, path = _pair(tiny_config, OPTIONS[name], tmp_path)
    images = random_images(config, seed=1)
    np.testing.assert_array_equal(_predict(dynamic, images), _predict(fixed, images))
    for seed, size in enumerate(OTHER_SIZES):
        resized = VisionTransformer(config.replace(image_size=size))
        load_weights(resized, path)
        images = random_images((*size, 3), seed=seed)
        expected = _predict(resized, images)
        assert np.abs(expected).max() > 0.1  # not a zero head
        assert np.abs(_predict(dynamic, images) - expected).max() <= TOLERANCE, (name, size)


def test_official_layout_vectors_at_other_sizes():
    """timm's model with the position embedding resized by the official rule (48x48, 40x56)."""
    with open(os.path.join(DATA, "parity_configs.json")) as file:
        case = dict(json.load(file)["timm_token"])
    weights = os.path.join(DATA, case.pop("weights"))
    dynamic = VisionTransformer(vit_keras.ViTConfig(**case, dynamic_image_size=True))
    load_weights(dynamic, weights, skip_head=False)
    with np.load(os.path.join(DATA, "parity_vectors.npz"), allow_pickle=False) as vectors:
        for grid in ("6x6", "5x7"):
            images = vectors[f"timm_token_resized_{grid}/images"]
            resized = VisionTransformer(vit_keras.ViTConfig(**dict(case, image_size=images.shape[1:3])))
            load_weights(resized, weights, skip_head=False)
            outputs = to_numpy(dynamic(images))
            assert np.abs(outputs - to_numpy(resized(images))).max() <= TOLERANCE
            assert np.abs(outputs - vectors[f"timm_token_resized_{grid}/outputs"]).max() <= 2e-5


def test_resample_is_skipped_at_the_stored_size(tiny_config):
    model = VisionTransformer(tiny_config.replace(dynamic_image_size=True))
    posemb = model.get_layer("posembed_input")
    stored = np.zeros((1, 4, 4, tiny_config.hidden_size), "float32")
    assert posemb.table(stored) is posemb.pos_embedding
    other = posemb.table(np.zeros((1, 5, 3, tiny_config.hidden_size), "float32"))
    assert tuple(other.shape) == (1, 1 + 15, tiny_config.hidden_size)


def test_interpolation_matrix_is_the_load_time_rule():
    for old, new in ((4, 7), (7, 4), (5, 5), (3, 1)):
        table = np.random.default_rng(old * new).normal(size=(old, 6)).astype("float32")
        np.testing.assert_allclose(to_numpy(grid_resize.resize_axis(table, new, 0)),
                                   resize.resize_axis(table, new, 0), atol=1e-6)
    np.testing.assert_array_equal(to_numpy(grid_resize.interpolation_matrix(5, 5)), np.eye(5))


def test_predict_on_two_sizes_in_a_row_and_round_trip(tiny_config, tmp_path):
    model = randomize_weights(VisionTransformer(tiny_config.replace(
        posemb="learn2d", dynamic_image_size=True)), stddev=0.3)
    small, large = random_images((32, 40, 3), batch=3), random_images((56, 24, 3), batch=5)
    for images in (small, large, small):
        np.testing.assert_allclose(model.predict(images, batch_size=2, verbose=0),
                                   to_numpy(model(images)), atol=1e-5)
    path = str(tmp_path / "dynamic.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert loaded.input_shape == (None, None, None, 3)
    np.testing.assert_allclose(to_numpy(loaded(large)), to_numpy(model(large)), atol=1e-6)
    assert config_from_model(loaded) == tiny_config.replace(posemb="learn2d",
                                                            dynamic_image_size=True)


def test_a_new_size_is_traced_once(tiny_config):
    model = VisionTransformer(tiny_config.replace(dynamic_image_size=True))
    sizes = [(32, 32), (48, 24), (32, 32), (48, 24), (48, 24)]
    if BACKEND == "tensorflow":
        import tensorflow as tf

        function = tf.function(model)
        for size in sizes:
            function(random_images((*size, 3)))
        assert function.experimental_get_tracing_count() == 2
    elif BACKEND == "jax":
        import jax

        traces = []

        def forward(variables, images):
            traces.append(images.shape)
            return model.stateless_call(*variables, images)[0]

        function = jax.jit(forward)
        variables = ([v.value for v in model.trainable_variables],
                     [v.value for v in model.non_trainable_variables])
        for size in sizes:
            function(variables, random_images((*size, 3)))
        assert [shape[1:3] for shape in traces] == [(32, 32), (48, 24)]
    else:
        pytest.skip(f"the {BACKEND} backend runs eagerly: nothing is traced")


def test_padding_of_sides_not_multiple_of_the_patch(tiny_config):
    config = tiny_config.replace(dynamic_image_size=True, dynamic_image_pad=True)
    padded_model = randomize_weights(VisionTransformer(config), stddev=0.3)
    images = random_images((36, 43, 3))
    padded = np.pad(images, ((0, 0), (0, 4), (0, 5), (0, 0)))
    np.testing.assert_allclose(to_numpy(padded_model(images)), to_numpy(padded_model(padded)),
                               atol=1e-6)
    strict = VisionTransformer(tiny_config.replace(dynamic_image_size=True))
    with pytest.raises(ValueError, match=r"height 36 is not divisible by patch_size 8.*"
                                         r"dynamic_image_pad=True"):
        strict(images)


@requires_tf
def test_a_side_not_multiple_of_the_patch_fails_at_run_time_in_a_graph(tiny_config):
    import tensorflow as tf

    model = VisionTransformer(tiny_config.replace(dynamic_image_size=True))
    function = tf.function(model, input_signature=[tf.TensorSpec((None, None, None, 3))])
    assert function(random_images((40, 24, 3))).shape == (2, tiny_config.num_classes)
    with pytest.raises(tf.errors.InvalidArgumentError, match="multiples of patch_size 8"):
        function(random_images((36, 40, 3)))


def test_config_checks(tiny_config):
    with pytest.raises(ValueError, match="dynamic_image_pad=True needs dynamic_image_size"):
        tiny_config.replace(dynamic_image_pad=True)
