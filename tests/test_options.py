"""The optional ViT features: each changes the model only when enabled, drop path is the
identity at inference, and option models round-trip (.keras safe_mode, get_config) and export."""

import numpy as np
import pytest
from helpers import random_images, randomize_weights, run_model_saving_test, to_numpy

import keras
from vit_keras import VisionTransformer, config_from_model
from vit_keras.core.layers import DropPath
from vit_keras.core.posemb import sincos2d

OFF = dict(drop_path_rate=0.0, posemb="learn", layer_scale_init=None, num_register_tokens=0,
           distilled=False, resnet_layers=None, stem="patchify", locality_attention=False,
           activation="gelu", pre_norm=False, pooled_norm=False, layer_norm_epsilon=1e-6,
           projection_size=None)
ON = {
    "drop_path_rate": dict(drop_path_rate=0.5),
    "posemb_sincos2d": dict(posemb="sincos2d"),
    "posemb_learn2d": dict(posemb="learn2d"),
    "layer_scale_init": dict(layer_scale_init=0.1),
    "num_register_tokens": dict(num_register_tokens=2),
    "classifier_map": dict(classifier="map"),
    "distilled": dict(distilled=True),
    "stem_conv": dict(stem="conv"),
    "stem_shifted_patches": dict(stem="shifted_patches"),
    "locality_attention": dict(locality_attention=True),
    "activation_quick_gelu": dict(activation="quick_gelu"),
    "activation_swiglu": dict(activation="swiglu"),
    "pre_norm": dict(pre_norm=True),
    "pooled_norm": dict(pooled_norm=True, classifier="gap"),  # no change under 'token'
    "layer_norm_epsilon": dict(layer_norm_epsilon=0.5),
    "projection_size": dict(projection_size=12),
}


def _randomize_heads(model):
    heads = [layer for layer in model.layers if layer.name.startswith("head")]
    randomize_weights([weight for layer in heads for weight in layer.weights], seed=3, stddev=0.5)


def _copy_shared(source, target):
    """Copies every same-named, same-shaped weight of `source` into `target`."""
    weights = {v.path: v for v in source.weights}
    for variable in target.weights:
        if variable.path in weights and weights[variable.path].shape == variable.shape:
            variable.assign(weights[variable.path])


def test_options_default_off(tiny_config):
    assert tiny_config.replace(**OFF) == tiny_config
    base = VisionTransformer(tiny_config)
    keras.utils.set_random_seed(0)
    explicit = VisionTransformer(tiny_config.replace(**OFF))
    assert [v.path for v in base.weights] == [v.path for v in explicit.weights]


def test_each_option_changes_the_forward_pass(tiny_config):
    base = VisionTransformer(tiny_config)
    _randomize_heads(base)
    images = random_images(tiny_config)
    reference = to_numpy(base(images))
    for name, changes in ON.items():
        option = VisionTransformer(tiny_config.replace(**changes))
        _copy_shared(base, option)
        _randomize_heads(option)
        changed = to_numpy(option(images, training=name == "drop_path_rate"))
        assert changed.shape == reference.shape
        assert np.abs(changed - reference).max() > 1e-3, name
        if name == "drop_path_rate":  # stochastic depth only acts while training
            np.testing.assert_allclose(to_numpy(option(images)), reference, atol=1e-6)


def test_layer_scale_of_one_is_the_identity(tiny_config):
    base = VisionTransformer(tiny_config)
    _randomize_heads(base)
    scaled = VisionTransformer(tiny_config.replace(layer_scale_init=1.0))
    _copy_shared(base, scaled)
    images = random_images(tiny_config)
    np.testing.assert_allclose(to_numpy(scaled(images)), to_numpy(base(images)), atol=1e-6)


def test_drop_path_statistics_and_linear_depth(tiny_config):
    layer = DropPath(0.25, seed=1)
    ones = np.ones((4000, 3, 2), "float32")
    dropped = to_numpy(layer(ones, training=True))
    per_example = dropped[:, 0, 0]
    assert np.isclose(per_example, 0.0).sum() + np.isclose(per_example, 1 / 0.75).sum() == 4000
    assert (dropped == dropped[:, :1, :1]).all()  # whole examples, not single values
    assert abs((per_example == 0).mean() - 0.25) < 0.03
    np.testing.assert_array_equal(to_numpy(layer(ones, training=False)), ones)
    model = VisionTransformer(tiny_config.replace(num_layers=3, drop_path_rate=0.2))
    rates = [model.get_layer(f"encoderblock_{i}").drop_path_rate for i in range(3)]
    assert rates == pytest.approx([0.0, 0.1, 0.2])


def test_sincos2d_table():
    table = sincos2d(2, 3, 8)
    assert table.shape == (6, 8)
    # Patch (row 1, col 2) is index 5: sin/cos of x=2, then of y=1, frequencies 1 and 1e-4.
    np.testing.assert_allclose(table[5], [np.sin(2), np.sin(2e-4), np.cos(2), np.cos(2e-4),
                                          np.sin(1), np.sin(1e-4), np.cos(1), np.cos(1e-4)],
                               rtol=1e-5)


def test_registers_are_left_out_of_gap(tiny_config):
    config = tiny_config.replace(classifier="gap", num_register_tokens=3)
    model = VisionTransformer(config, include_top=False)
    assert model.output_shape == (None, config.num_patches + 3, config.hidden_size)
    pool = VisionTransformer(config).get_layer("pool")
    tokens = np.random.default_rng(0).normal(size=(2, config.num_patches + 3, config.hidden_size))
    np.testing.assert_allclose(pool(tokens.astype("float32")),
                               tokens[:, :config.num_patches].mean(axis=1), rtol=1e-5, atol=1e-6)


ROUND_TRIP = {
    "map_sincos_scale_registers_droppath": dict(
        classifier="map", posemb="sincos2d", layer_scale_init=0.5, num_register_tokens=2,
        drop_path_rate=0.1),
    "hybrid_deit_learn2d": dict(resnet_layers=(), patch_size=2, distilled=True,
                                posemb="learn2d", gelu_approximate=False),
    "conv_stem_locality_gap": dict(stem="conv", locality_attention=True, classifier="gap"),
    "shifted_patches_locality_token": dict(stem="shifted_patches", locality_attention=True),
    "clip_like": dict(activation="quick_gelu", pre_norm=True, layer_norm_epsilon=1e-5,
                      projection_size=12),
    "dinov2_like_swiglu_gap": dict(activation="swiglu", layer_scale_init=0.5,
                                   num_register_tokens=2, classifier="gap", pooled_norm=True),
}
# The model carries its preprocessing beside the config; the .keras file keeps it.
ROUND_TRIP_PREPROCESSING = {"clip_like": dict(mean=0.4, std=0.3, interpolation="bicubic",
                                              crop_fraction=0.9, crop_mode="center")}


@pytest.mark.parametrize("name", sorted(ROUND_TRIP))
def test_round_trips(tiny_config, tmp_path, name):
    config = tiny_config.replace(**ROUND_TRIP[name])
    model = VisionTransformer(config, preprocessing=ROUND_TRIP_PREPROCESSING.get(name))
    _randomize_heads(model)
    images = random_images(config)
    assert config_from_model(model) == config
    # from_config clone and .keras (safe_mode) file: same config, preprocessing, weights and
    # outputs.
    loaded = run_model_saving_test(model, images, tmp_path)
    assert config_from_model(loaded) == config
    assert loaded.preprocessing == model.preprocessing


@pytest.mark.slow  # a fresh process loading every option's file (about 20 s): in CI's slow tier
def test_every_option_loads_in_a_fresh_process_after_import_vit_keras(tiny_config, tmp_path):
    """`import vit_keras` alone registers every layer a saved model may hold."""
    import subprocess
    import sys

    import vit_keras

    options = [dict(distilled=True), dict(posemb="sincos2d"), dict(posemb="learn2d"),
               dict(classifier="map", num_register_tokens=1), dict(resnet_layers=(1,),
                                                                  patch_size=1),
               dict(stem="conv", locality_attention=True), dict(stem="shifted_patches"),
               ROUND_TRIP["clip_like"], ROUND_TRIP["dinov2_like_swiglu_gap"]]
    for index, option in enumerate(options):
        vit_keras.VisionTransformer(tiny_config.replace(**option)).save(tmp_path / f"{index}.keras")
    script = ("import glob, sys, keras, vit_keras\n"
              "for path in sorted(glob.glob(sys.argv[1] + '/*.keras')):\n"
              "    keras.saving.load_model(path, safe_mode=True)\n"
              "print('loaded', len(glob.glob(sys.argv[1] + '/*.keras')))\n")
    result = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"loaded {len(options)}" in result.stdout


@pytest.mark.parametrize("name, policy", [("map_sincos_scale_registers_droppath", "float32"),
                                          ("hybrid_deit_learn2d", "mixed_bfloat16"),
                                          ("conv_stem_locality_gap", "mixed_bfloat16"),
                                          ("shifted_patches_locality_token", "mixed_bfloat16"),
                                          ("clip_like", "mixed_bfloat16"),
                                          ("dinov2_like_swiglu_gap", "float32")])
@pytest.mark.slow
def test_option_models_train_with_fit(tiny_config, name, policy):
    """Every option trains through the backend's compiled `fit` step, also in mixed precision."""
    keras.mixed_precision.set_global_policy(policy)
    config = tiny_config.replace(**ROUND_TRIP[name])
    model = VisionTransformer(config)
    _randomize_heads(model)
    model.compile(keras.optimizers.Adam(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    images, labels = random_images(config, batch=8), np.arange(8) % config.num_classes
    before = [to_numpy(weight) for weight in model.trainable_weights]
    losses = model.fit(images, labels, batch_size=4, epochs=1, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses))
    after = [to_numpy(weight) for weight in model.trainable_weights]
    unchanged = [w.path for w, old, new in zip(model.trainable_weights, before, after)
                 if np.array_equal(old, new)]
    assert not unchanged, f"weights fit did not update: {unchanged}"
