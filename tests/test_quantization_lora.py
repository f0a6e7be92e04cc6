"""Keras' own `quantize` and LoRA on every projection, the model's own config, and `.keras` files
of the earlier release: on every backend (tests/test_backends.py runs this file on JAX and
PyTorch too)."""

import os
import warnings

import keras
import numpy as np
import pytest
from helpers import (quantize_layers, random_images, randomize_weights, requires_tf,
                     script_module, to_numpy)

from vit_keras import VisionTransformer, ViTConfig, convert, lora
from vit_keras.checkpoints import save_npz
from vit_keras.core.layers import MLPBlock, gelu
from vit_keras.quantization import QUANTIZABLE

DATA = os.path.join(os.path.dirname(__file__), "data")
# Largest |quantized - float| relative to the largest |float output| on random weights (stddev
# 0.1), 2 blocks: int8 per-channel weights stay within a few percent, int4 within a third;
# float8 is Keras' float8 training scheme (e4m3 weights and inputs).
RELATIVE_ERROR = {"int8": 0.03, "int4": 0.35, "float8": 0.1}
OPTIONS = {"token": {}, "map+pre_logits": dict(classifier="map", representation_size=16),
           "distilled": dict(distilled=True)}


def _model(config, seed=0, **kwargs):
    return randomize_weights(VisionTransformer(config, **kwargs), seed=seed)


def _projections(model):
    return [layer for layer in model._flatten_layers() if isinstance(layer, QUANTIZABLE)]


def _relative_error(actual, expected):
    return np.abs(to_numpy(actual) - expected).max() / np.abs(expected).max()


def _keras_warnings(record):
    """Warnings other than NumPy's copy-keyword notice from Keras' TensorFlow backend."""
    return [str(item.message) for item in record if "copy keyword" not in str(item.message)]


# Each mode once, each on another head option (the projections of every option are quantized).
@pytest.mark.parametrize("mode,option", [("int8", "map+pre_logits"), ("int4", "distilled"),
                                         ("float8", "token")])
def test_quantize_converts_every_projection_quietly_and_saves(tiny_config, mode, option,
                                                             tmp_path):
    config = tiny_config.replace(num_layers=1, **OPTIONS[option])
    model = _model(config)
    images = random_images(config)
    expected = to_numpy(model(images))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model.quantize(mode)
    assert not _keras_warnings(record)
    projections = _projections(model)
    # patch embedding, 4 attention + 2 MLP projections per block, the head(s), and the options'
    assert len(projections) >= 1 + 6 * config.num_layers + 1
    assert {layer.quantization_mode for layer in projections} == {mode}
    quantized = to_numpy(model(images))
    assert 0 < _relative_error(quantized, expected) <= RELATIVE_ERROR[mode]
    path = str(tmp_path / "quantized.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded, VisionTransformer) and loaded.config == config
    assert {layer.quantization_mode for layer in _projections(loaded)} == {mode}
    np.testing.assert_allclose(to_numpy(loaded(images)), quantized, atol=1e-5)


def test_quantize_frees_each_float_kernel_without_a_full_collection_per_layer(tiny_config,
                                                                             monkeypatch):
    """Keras collects garbage after each variable a layer drops (a full collection each:
    ViT-B/16's quantize took 16.5 s with them, 0.6 s without); the float kernels go by
    reference counting all the same."""
    import gc
    import weakref

    model = _model(tiny_config.replace(num_layers=1))
    kernels = [weakref.ref(layer._kernel) for layer in _projections(model)]
    collections = []
    monkeypatch.setattr(gc, "collect", lambda *args: collections.append(args) or 0)
    model.quantize("int8")
    assert not collections and gc.collect is not None
    gc.collect()
    assert len(collections) == 1, "gc.collect is itself again after quantize"
    assert not [kernel for kernel in kernels if kernel() is not None]


def test_quantized_mlp_block_is_its_dense_layers(tiny_config):
    """The block calls its Dense layers: quantized, it equals them called one after the other
    (the earlier block multiplied by the raw int8 kernels)."""
    block = MLPBlock(mlp_dim=64)
    tokens = np.random.default_rng(0).normal(size=(2, 5, 32)).astype("float32")
    block.build(tokens.shape)
    randomize_weights(block)
    expected = to_numpy(block(tokens))
    quantize_layers(block.dense_0, block.dense_1)
    flat = tokens.reshape(-1, 32)
    by_hand = to_numpy(block.dense_1(gelu(block.dense_0(flat)))).reshape(tokens.shape)
    np.testing.assert_allclose(to_numpy(block(tokens)), by_hand, atol=1e-5)
    assert _relative_error(block(tokens), expected) <= 0.03


@pytest.mark.slow
def test_quantize_filters_and_modes(tiny_config):
    model = _model(tiny_config)
    model.quantize("int8", filters=["query", "value"])
    modes = {layer.name: layer.quantization_mode for layer in _projections(model)}
    assert modes["query"] == modes["value"] == "int8" and modes["key"] is None
    assert modes["head"] is None
    with pytest.raises(ValueError, match="one of"):
        _model(tiny_config).quantize("int2")


@pytest.mark.slow
def test_hybrid_convolutions_stay_float_with_one_warning():
    config = ViTConfig(image_size=16, patch_size=1, hidden_size=32, mlp_dim=64, num_heads=4,
                       num_layers=1, num_classes=5, resnet_layers=())
    model = _model(config)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        model.quantize("int8")
    messages = _keras_warnings(record)
    assert len(messages) == 1 and "ResNet convolutions" in messages[0]
    assert np.isfinite(to_numpy(model(random_images(config)))).all()


@pytest.mark.slow
def test_quantized_weights_cannot_be_read_as_float(tiny_config, tmp_path):
    model = _model(tiny_config.replace(num_layers=1))
    model.quantize("int8")
    with pytest.raises(ValueError, match="quantized"):
        save_npz(model, str(tmp_path / "weights.npz"))


def test_lora_trains_only_the_adapters_and_what_is_unfrozen(tiny_config):
    model = _model(tiny_config)
    images = random_images(tiny_config, batch=4)
    before = to_numpy(model(images))
    model.enable_lora(4)
    np.testing.assert_allclose(to_numpy(model(images)), before, atol=1e-6)  # B starts at 0
    adapters = {variable.path for variable in model.trainable_weights}
    assert len(adapters) == 2 * 2 * tiny_config.num_layers
    assert all(path.endswith(("query/lora_kernel_a", "query/lora_kernel_b",
                              "value/lora_kernel_a", "value/lora_kernel_b"))
               for path in adapters)
    model.get_layer("head").trainable = True
    start = {variable.path: to_numpy(variable) for variable in model.weights}
    model.compile(keras.optimizers.Adam(1e-2),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(images, np.arange(4) % 5, epochs=2, batch_size=4, verbose=0)
    moved = {variable.path for variable in model.weights
             if not np.array_equal(to_numpy(variable), start[variable.path])}
    assert moved == adapters | {"head/kernel", "head/bias"}


def test_lora_targets(tiny_config):
    model = _model(tiny_config)
    model.enable_lora(2, targets="all")
    enabled = lora.lora_layers(model)
    assert len(enabled) == len(_projections(model))
    with pytest.raises(ValueError, match="already"):
        model.enable_lora(2)
    with pytest.raises(ValueError, match="targets must be some of"):
        _model(tiny_config).enable_lora(2, targets=["qkv"])
    with pytest.raises(ValueError, match="positive int"):
        _model(tiny_config).enable_lora(0)


def _trained_adapters(model, seed=1):
    for layer in lora.lora_layers(model):
        randomize_weights([layer.lora_kernel_a, layer.lora_kernel_b], seed=seed)
    return model


def test_lora_adapters_save_load_and_merge(tiny_config, tmp_path):
    model = _model(tiny_config)
    model.enable_lora(4, targets=("query", "value", "mlp"))
    _trained_adapters(model)
    images = random_images(tiny_config)
    expected = to_numpy(model(images))
    path = str(tmp_path / "adapters.npz")
    lora.save_lora_weights(model, path)
    model_bytes = sum(4 * int(np.prod(variable.shape)) for variable in model.weights)
    assert os.path.getsize(path) < model_bytes / 2
    fresh = _model(tiny_config)  # the same base weights (same seed), no adapters
    lora.load_lora_weights(fresh, path)
    np.testing.assert_allclose(to_numpy(fresh(images)), expected, atol=1e-6)
    merged = lora.merge_lora(model)
    assert not lora.lora_layers(merged) and isinstance(merged, VisionTransformer)
    np.testing.assert_allclose(to_numpy(merged(images)), expected, atol=1e-5)
    merged_path = str(tmp_path / "merged.keras")
    merged.save(merged_path)
    loaded = keras.saving.load_model(merged_path, safe_mode=True)
    np.testing.assert_allclose(to_numpy(loaded(images)), expected, atol=1e-5)
    other = _model(tiny_config)
    other.enable_lora(8)
    with pytest.raises(ValueError, match="do not fit"):
        lora.load_lora_weights(other, path)


def test_the_model_carries_its_config(tiny_config, tmp_path):
    config = tiny_config.replace(head_bias_init=-10.0, representation_size=8)
    model = VisionTransformer(config, classifier_activation="softmax", name="mine")
    assert model.config is config
    rebuilt = VisionTransformer.from_config(model.get_config())
    assert rebuilt.config == config and rebuilt.name == "mine"
    assert model.get_config()["config"]["head_bias_init"] == -10.0
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded, VisionTransformer) and loaded.config == config
    np.testing.assert_array_equal(to_numpy(loaded.get_layer("head").bias), -10.0)
    features = VisionTransformer(tiny_config, include_top=False, pooling="gap")
    assert VisionTransformer.from_config(features.get_config()).output.shape == (None, 32)


@pytest.mark.filterwarnings("ignore:Skipping nested container")  # Keras, on the old file
def test_a_keras_file_of_the_earlier_release_names_its_conversion(tmp_path):
    old = os.path.join(DATA, "legacy_0.1_map.keras")
    with pytest.raises(ValueError, match="python -m vit_keras.convert OLD.keras NEW.keras"):
        keras.saving.load_model(old)
    new = str(tmp_path / "converted.keras")
    assert convert.main([old, new]) == 0
    model = keras.saving.load_model(new, safe_mode=True)
    assert isinstance(model, VisionTransformer) and model.config.classifier == "map"
    with np.load(os.path.join(DATA, "legacy_0.1_map_io.npz"), allow_pickle=False) as archive:
        np.testing.assert_allclose(to_numpy(model(archive["images"])), archive["outputs"],
                                   atol=1e-6)


@requires_tf
@pytest.mark.slow
def test_export_of_a_keras_quantized_model_is_refused_clearly(tiny_config, tmp_path):
    from vit_keras import export

    model = _model(tiny_config)
    model.quantize("int8")
    with pytest.raises(ValueError, match="export takes the float model"):
        export.saved_model(model, str(tmp_path / "saved_model"))


def test_the_accuracy_benchmark_fails_a_copy_past_its_bound():
    """`benchmarks/quantization.py --check`: int8 may lose 0.5 points of top-1, int4 2."""
    quantization = script_module("benchmarks", "quantization")
    within = {"float32": 0.99, "int8": 0.985, "int4": 0.975, "float8": 0.5}
    assert quantization.accuracy_failures(within) == []
    (failure,) = quantization.accuracy_failures(dict(within, int8=0.98))
    assert failure.startswith("int8 loses 1.00 points of top-1") and "over 0.5" in failure
    assert [line.split()[0] for line in quantization.accuracy_failures(
        dict(within, int8=0.9, int4=0.9))] == ["int8", "int4"]
