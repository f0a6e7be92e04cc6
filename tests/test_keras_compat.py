"""The private Keras/TensorFlow internals `vit_keras.keras_compat` relies on are still there and
still shaped as expected: a Keras or TensorFlow upgrade that changes one fails here, loudly,
instead of training silently wrong."""

import inspect

import keras
import numpy as np
import pytest
from keras.src.saving import saving_lib
from helpers import random_images, requires_tf, to_numpy

from vit_keras import keras_compat

def test_installed_keras_is_the_tested_one():
    assert keras_compat.keras_minor() == keras_compat.TESTED_KERAS, (
        f"Keras {keras.__version__} is installed; keras_compat was checked on "
        f"{keras_compat.TESTED_KERAS}: re-check every work-around, then update TESTED_KERAS "
        "and the keras pin in pyproject.toml")


def test_pin_admits_only_the_tested_keras():
    import pathlib
    import tomllib

    pyproject = pathlib.Path(__file__).parents[1] / "pyproject.toml"
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    major, minor = keras_compat.TESTED_KERAS
    assert f"keras>={major}.{minor},<{major}.{minor + 1}" in dependencies


@pytest.mark.parametrize("owner, name, parameters", [
    pytest.param(keras.Model, "_symbolic_build", ["self", "iterator", "data_batch"],
                 marks=requires_tf),
    pytest.param(keras.Model, "_maybe_symbolic_build", ["self", "iterator", "data_batch"],
                 marks=requires_tf),
    (keras.optimizers.Optimizer, "_clip_gradients", ["self", "grads"]),
    (keras.optimizers.Adam, "_get_variable_index", ["self", "variable"]),
    (keras.layers.Layer, "_flatten_layers", ["self", "include_self", "recursive"]),
    (saving_lib, "get_attr_skipset", ["obj_type"]),
])
def test_private_methods_keep_their_signatures(owner, name, parameters):
    assert list(inspect.signature(getattr(owner, name)).parameters) == parameters


def test_adam_slots_are_the_moment_variables():
    variable = keras.Variable(np.ones((3,), "float32"))
    optimizer = keras.optimizers.Adam(learning_rate=0.1)
    optimizer.build([variable])
    optimizer.apply([keras.ops.convert_to_tensor([1.0, 2.0, 3.0])], [variable])
    momentum, velocity = keras_compat.adam_slots(optimizer, variable)
    np.testing.assert_allclose(to_numpy(momentum), [0.1, 0.2, 0.3], rtol=1e-6)    # (1-b1) g
    np.testing.assert_allclose(to_numpy(velocity), [1e-3, 4e-3, 9e-3], rtol=1e-5)  # (1-b2) g^2


def test_nested_layers_reach_inside_preprocessing_layers():
    layer = keras.layers.RandAugment(value_range=(0, 255), num_ops=2)
    nested = keras_compat.nested_layers(layer)
    assert nested[0] is layer and len(nested) > 1


@requires_tf
def test_build_without_peeking_builds_from_the_given_batch():
    """`fit` calls `_maybe_symbolic_build(iterator=...)`; the replacement never reads it."""
    model = keras.Sequential([keras.layers.Dense(2)])             # not built yet
    model.compile("sgd", "mse", metrics=["mae"])
    keras_compat.build_without_peeking(model, (np.zeros((2, 4), "float32"),
                                               np.zeros((2, 2), "float32")))
    model._maybe_symbolic_build(iterator=iter(()))                # an empty iterator: unread
    assert model.built and [w.shape for w in model.weights] == [(4, 2), (2,)]
    assert model._compile_metrics.built


@requires_tf
def test_tflite_converter_internals():
    import tensorflow as tf

    factor = tf.Variable(2.0)

    @tf.function(input_signature=[tf.TensorSpec([1, 2], tf.float32)])
    def double(x):
        return x * factor

    frozen = keras_compat.freeze_concrete_function(double.get_concrete_function())
    assert not frozen.graph.variables
    converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen])
    keras_compat.set_per_channel(converter, False)
    assert converter._experimental_disable_per_channel is True


def test_a_missing_internal_is_a_clear_error():
    with pytest.raises(RuntimeError, match="private API .* no longer has it"):
        keras_compat.check(keras.Model, "_no_such_internal")


def _fit_counting_steps(model, images, labels, run_eagerly=False) -> int:
    """Runs the model's `fit` for an epoch of two batches; returns how many times its training
    step was called in Python: each trace of the step, or each batch when run eagerly."""
    traces = []
    step = model.train_step
    model.train_step = lambda data: traces.append(1) or step(data)
    model.compile(optimizer=keras.optimizers.AdamW(1e-2), run_eagerly=run_eagerly,
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(images, labels, batch_size=5, epochs=1, shuffle=False, verbose=0)
    return len(traces)


@requires_tf
def test_fit_builds_the_optimizer_before_tracing_and_trains_as_keras_does(tiny_config):
    """Keras' own `fit` builds the optimizer inside the traced step, which TensorFlow then
    traces again; the model's `fit` builds it first: one trace, and the weights of the same
    steps run eagerly (where Keras builds it at the first update)."""
    from vit_keras import VisionTransformer

    config = tiny_config.replace(num_layers=1, hidden_size=16, mlp_dim=16, num_heads=2)
    images = random_images(config, batch=10)
    labels = np.arange(10) % config.num_classes
    calls, weights = [], []
    for run_eagerly in (True, False):
        keras.utils.set_random_seed(1)
        model = VisionTransformer(config)
        calls.append(_fit_counting_steps(model, images, labels, run_eagerly))
        weights.append([(weight.path, to_numpy(weight)) for weight in model.weights])
    assert calls == [2, 1]  # a call per batch eagerly; traced once in a graph (Keras: twice)
    for (path, theirs), (_, mine) in zip(*weights):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6, err_msg=path)


def test_saving_skipsets_are_computed_once_per_type_and_equal_keras_own():
    """Keras' cache of them misses every time (keras_compat, item 9); ours holds Keras'
    own sets, so `.keras` files are written and read as Keras writes and reads them."""
    def walked(names):  # the walk skips every dunder name (a class gains some over time)
        return {name for name in names if not name.startswith("__")}

    keras_compat.cache_saving_skipsets()  # a second call keeps the one cache
    for obj_type in ("Layer", "Functional", "Optimizer", "Metric", "Loss"):
        first = saving_lib.get_attr_skipset(obj_type)
        assert saving_lib.get_attr_skipset(obj_type) is first, obj_type
        assert walked(saving_lib.get_attr_skipset.__wrapped__(obj_type)) == walked(first), \
            obj_type


def test_quantize_calibrated_is_the_converters_own_int8_conversion():
    """Calibrate, then quantize, with nothing changed between: the tensors, their scales and
    the weights of `converter.convert()` (only the metadata's order differs)."""
    import tensorflow as tf
    from tensorflow.lite.tools import flatbuffer_utils

    inputs = keras.Input((4, 4, 3))
    features = keras.layers.Dense(8, activation="relu")(keras.layers.Flatten()(inputs))
    model = keras.Model(inputs, keras.layers.Dense(3)(features))
    function = tf.function(model, input_signature=[tf.TensorSpec([1, 4, 4, 3], tf.float32)])
    frozen = keras_compat.freeze_concrete_function(function.get_concrete_function())
    images = np.random.default_rng(0).uniform(0, 1, (8, 1, 4, 4, 3)).astype(np.float32)

    def converter():
        made = tf.lite.TFLiteConverter.from_concrete_functions([frozen])
        made.optimizations = [tf.lite.Optimize.DEFAULT]
        made.representative_dataset = lambda: ([image] for image in images)
        made.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        return made

    seen = []
    files = [flatbuffer_utils.convert_bytearray_to_object(bytearray(content)) for content in (
        converter().convert(),
        keras_compat.quantize_calibrated(converter(), lambda calibrated: seen.append(1) or
                                         calibrated))]
    assert seen == [1]

    def tensors(file):
        listed = lambda values: None if values is None else list(values)
        return [(tensor.name, tensor.type,
                 tensor.quantization and (listed(tensor.quantization.scale),
                                          listed(tensor.quantization.zeroPoint)),
                 listed(file.buffers[tensor.buffer].data))
                for tensor in file.subgraphs[0].tensors]

    assert tensors(files[0]) == tensors(files[1])
    assert [op.opcodeIndex for op in files[0].subgraphs[0].operators] == \
        [op.opcodeIndex for op in files[1].subgraphs[0].operators]
