"""The memory savers of the model core: patch dropout (`ViTConfig.patch_drop_rate`, timm's
`PatchDropout`) and per-block rematerialisation (`ViTConfig.remat`)."""

import gc

import numpy as np
import pytest
from helpers import (random_images, randomize_weights, requires_tf, run_layer_test,
                     run_model_saving_test, to_numpy, value_and_gradients)

import keras
from vit_keras import VisionTransformer, ViTConfig
from vit_keras.core.patch_dropout import PatchDropout
from vit_keras.core.remat import RematEncoderBlock

# Distinct values per token: a kept token is found again by its value.
LENGTH, WIDTH = 18, 4


def _numbered_tokens(batch=3):
    """[batch, LENGTH, WIDTH] where every entry of token i is i (the same in every example)."""
    return np.broadcast_to(np.arange(LENGTH, dtype="float32")[None, :, None],
                           (batch, LENGTH, WIDTH)).copy()


def _kept_ids(layer, batch=3):
    """The token numbers `layer` keeps, [batch, kept], in the order it returns them."""
    out = to_numpy(layer(_numbered_tokens(batch), training=True))
    assert (out == out[..., :1]).all(), "tokens were mixed, not selected"
    return out[..., 0].astype(int)


@pytest.mark.parametrize("rate", [0.1, 0.25, 0.5, 0.75, 0.9, 0.99])
@pytest.mark.parametrize("prefix", [0, 1, 2])
def test_keeps_timms_count_and_every_prefix_token(rate, prefix):
    layer = PatchDropout(rate, num_prefix_tokens=prefix, seed=1)
    ids = _kept_ids(layer)
    patches = LENGTH - prefix
    assert ids.shape[1] == prefix + max(1, int(patches * (1 - rate)))
    assert (ids[:, :prefix] == np.arange(prefix)).all()
    for row in ids:  # patches only, each at most once
        assert len(set(row[prefix:])) == len(row) - prefix
        assert (row[prefix:] >= prefix).all()


def test_draws_other_patches_for_each_example_and_step():
    layer = PatchDropout(0.5, num_prefix_tokens=1, seed=2)
    first = _kept_ids(layer, batch=8)
    assert len({tuple(sorted(row)) for row in first}) > 1
    assert not np.array_equal(first, _kept_ids(layer, batch=8))


def test_kept_patches_in_random_or_original_order():
    unordered = _kept_ids(PatchDropout(0.3, seed=3), batch=8)
    assert any((np.diff(row[1:]) < 0).any() for row in unordered)  # timm's default
    ordered = _kept_ids(PatchDropout(0.3, ordered=True, seed=3), batch=8)
    assert (np.diff(ordered[:, 1:], axis=1) > 0).all()


def test_layer_is_the_identity_at_inference():
    tokens = _numbered_tokens()
    layer = PatchDropout(0.5)
    np.testing.assert_array_equal(to_numpy(layer(tokens)), tokens)
    np.testing.assert_array_equal(to_numpy(layer(tokens, training=False)), tokens)


def test_layer_contract(tmp_path):
    # The training check is left out: training shortens the sequence by design.
    run_layer_test(PatchDropout, dict(rate=0.5, num_prefix_tokens=1, seed=4),
                   _numbered_tokens(), expected_output_shape=(3, LENGTH, WIDTH),
                   expected_num_trainable_weights=0, run_training_check=False,
                   tmp_path=tmp_path)


@requires_tf
def test_count_when_the_patch_count_is_known_only_at_run_time():
    import tensorflow as tf

    layer = PatchDropout(0.3, num_prefix_tokens=1)
    traced = tf.function(lambda tokens: layer(tokens, training=True),
                         input_signature=[tf.TensorSpec((None, None, WIDTH))])
    for length in (2, 5, 11, 18):
        out = traced(tf.ones((2, length, WIDTH)))
        assert out.shape[1] == 1 + max(1, int((length - 1) * 0.7)), length


def test_model_at_inference_is_the_model_without_patch_dropout(tiny_config):
    base = randomize_weights(VisionTransformer(tiny_config), stddev=0.1)
    dropping = VisionTransformer(tiny_config.replace(patch_drop_rate=0.5))
    assert [v.path for v in dropping.weights] == [v.path for v in base.weights]
    assert "patch_dropout" not in [layer.name for layer in base.layers]
    dropping.set_weights(base.get_weights())
    images = random_images(tiny_config, batch=3)
    np.testing.assert_array_equal(to_numpy(dropping(images)), to_numpy(base(images)))
    np.testing.assert_array_equal(dropping.predict(images, verbose=0),
                                  base.predict(images, verbose=0))


OPTIONS = {
    "token": dict(),
    "gap_registers": dict(classifier="gap", num_register_tokens=2),
    "map": dict(classifier="map"),
    "distilled_registers": dict(distilled=True, num_register_tokens=1),
    "dynamic_image_size": dict(dynamic_image_size=True),
}


def _sequence_length(model, images, training):
    """Tokens the last encoder block took in on one call."""
    last = model.get_layer(f"encoderblock_{model.config.num_layers - 1}")
    return keras.Model(model.inputs[0], last.input)(images, training=training).shape[1]


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_trains_with_patch_dropout(tiny_config, name):
    config = tiny_config.replace(num_layers=1, patch_drop_rate=0.5, dropout_rate=0.1,
                                 **OPTIONS[name])
    model = VisionTransformer(config)
    images, labels = random_images(config, batch=4), np.arange(4) % config.num_classes
    kept = config.num_prefix_tokens + max(1, int(config.num_patches * 0.5))
    assert _sequence_length(model, images, True) == kept + config.num_register_tokens
    assert _sequence_length(model, images, False) == config.seq_len
    model.compile(keras.optimizers.AdamW(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = [to_numpy(weight) for weight in model.trainable_weights]
    loss = model.train_on_batch(images, labels)
    assert np.isfinite(to_numpy(loss))
    after = [to_numpy(weight) for weight in model.trainable_weights]
    assert any(not np.array_equal(old, new) for old, new in zip(before, after))
    assert to_numpy(model(images)).shape == (4, config.num_classes)


def _seed_states(model):
    weights = {id(weight) for weight in model.weights}
    return [to_numpy(v) for v in model.variables if id(v) not in weights]


def _gradients(config, images):
    """Loss and gradients of one training-mode call, with fixed weights and random draws."""
    keras.utils.set_random_seed(0)  # the same seeds for every dropout layer of each model
    model = randomize_weights(VisionTransformer(config), stddev=0.1)

    def loss(inputs):
        return keras.ops.sum(keras.ops.square(model(inputs, training=True)))

    value, gradients = value_and_gradients(loss, model.trainable_weights, [images])
    return value, gradients, _seed_states(model)


@pytest.mark.parametrize("remat", [True, "dots"])
@pytest.mark.parametrize("regularised", [False, True], ids=["plain", "dropout"])
def test_remat_gives_the_same_loss_and_gradients(tiny_config, regularised, remat):
    # With dropout, stochastic depth and patch dropout, the recomputation must draw the same
    # masks as the forward pass.
    extra = dict(dropout_rate=0.1, attention_dropout_rate=0.1, drop_path_rate=0.2,
                 patch_drop_rate=0.3) if regularised else {}
    config = tiny_config.replace(classifier="gap", **extra)
    images = random_images(config, batch=3)
    value, gradients, seeds = _gradients(config, images)
    remat_value, remat_gradients, remat_seeds = _gradients(config.replace(remat=remat), images)
    np.testing.assert_allclose(remat_value, value, rtol=1e-6)
    for got, want in zip(remat_gradients, gradients):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-6)
    for got, want in zip(remat_seeds, seeds):  # the next step draws as without remat
        np.testing.assert_array_equal(got, want)


def test_remat_blocks_keep_weights_names_and_inference(tiny_config):
    base = randomize_weights(VisionTransformer(tiny_config), stddev=0.1)
    remat = VisionTransformer(tiny_config.replace(remat=True))
    blocks = [remat.get_layer(f"encoderblock_{i}") for i in range(tiny_config.num_layers)]
    assert all(type(block) is RematEncoderBlock for block in blocks)
    assert [v.path for v in remat.weights] == [v.path for v in base.weights]
    remat.set_weights(base.get_weights())
    images = random_images(tiny_config)
    np.testing.assert_array_equal(to_numpy(remat(images)), to_numpy(base(images)))


@pytest.mark.slow
def test_remat_training_step_leaves_no_tensor_to_the_cyclic_collector(tiny_config):
    # PyTorch's early stop of recomputation raised an exception through Keras' traceback
    # filtering, whose reference cycles kept every block's recomputed activations alive.
    model = VisionTransformer(tiny_config.replace(remat=True, dropout_rate=0.1))
    model.compile(keras.optimizers.AdamW(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    images, labels = random_images(tiny_config, batch=4), np.arange(4) % 5
    model.train_on_batch(images, labels)
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        model.train_on_batch(images, labels)
        gc.collect()
        tensors = [item for item in gc.garbage if keras.ops.is_tensor(item)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert not tensors, f"{len(tensors)} tensors were left in reference cycles"


@pytest.mark.slow
def test_remat_and_patch_dropout_train_with_fit_in_mixed_precision(tiny_config):
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    config = tiny_config.replace(remat=True, patch_drop_rate=0.5, drop_path_rate=0.1)
    model = VisionTransformer(config)
    model.compile(keras.optimizers.AdamW(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    images, labels = random_images(config, batch=8), np.arange(8) % config.num_classes
    losses = model.fit(images, labels, batch_size=4, epochs=1, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses))


@pytest.mark.parametrize("remat", [True, "dots"])
def test_config_and_keras_file_keep_both_fields(tiny_config, tmp_path, remat):
    config = tiny_config.replace(patch_drop_rate=0.25, remat=remat, distilled=True)
    assert ViTConfig.from_dict(config.to_dict()) == config
    model = randomize_weights(VisionTransformer(config), stddev=0.1)
    assert model.get_config()["config"]["patch_drop_rate"] == 0.25
    assert model.get_config()["config"]["remat"] == remat
    loaded = run_model_saving_test(model, random_images(config), tmp_path)
    assert loaded.config == config
    assert type(loaded.get_layer("encoderblock_0")) is RematEncoderBlock
    assert loaded.get_layer("encoderblock_0").policy == (None if remat is True else remat)
    assert loaded.get_layer("patch_dropout").rate == 0.25


@pytest.mark.parametrize("field, value", [
    ("patch_drop_rate", 1.0), ("patch_drop_rate", -0.1), ("patch_drop_rate", "0.5"),
    ("patch_drop_rate", True), ("remat", 1), ("remat", "yes"),
    ("remat", "Dots")])
def test_bad_config_values_are_rejected(tiny_config, field, value):
    expected = "in \\[0, 1\\)" if field == "patch_drop_rate" else "True, False or 'dots'"
    with pytest.raises(ValueError, match=f"{field} must be .*{expected}, got {value!r}"):
        tiny_config.replace(**{field: value})


@pytest.mark.parametrize("kwargs, message", [
    (dict(rate=1.0), "rate must be a number in \\[0, 1\\), got 1.0"),
    (dict(rate=0.5, num_prefix_tokens=-1), "num_prefix_tokens must be an int >= 0, got -1")])
def test_bad_layer_arguments_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PatchDropout(**kwargs)


@pytest.mark.slow
@requires_tf
def test_remat_patch_dropout_model_exports(tiny_config, tmp_path):
    import tensorflow as tf

    from vit_keras import export

    config = tiny_config.replace(remat=True, patch_drop_rate=0.5)
    model = randomize_weights(VisionTransformer(config), stddev=0.1)
    images = random_images(config)
    expected = to_numpy(model(images))
    pixels = (images + 1.0) * 127.5
    export.saved_model(model, str(tmp_path / "saved"))
    served = tf.saved_model.load(str(tmp_path / "saved")).signatures["serving_default"]
    np.testing.assert_allclose(served(images=tf.constant(pixels))["logits"].numpy(), expected,
                               atol=1e-5)
    report = export.tflite(model, str(tmp_path / "model.tflite"), verify_images=pixels)
    assert report["max_abs_logit_diff"] <= 1e-5
