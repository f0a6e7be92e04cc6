"""Shared test helpers: random inputs and weights, and the contract every layer and model keeps
(config and serialization round trips, `.keras` save/load in safe mode, a training step, mixed
precision).

Plain functions in pytest style; tests import them as `from helpers import ...` (pytest puts
tests/ on sys.path, as for `localhost`). Every check raises AssertionError with the layer's name.
"""

import copy
import json
import os
import struct
import tempfile
import zlib

import keras
import numpy as np
import pytest
from keras import tree

MIXED = "mixed_bfloat16"
BACKEND = keras.backend.backend()

# Sweeps (crash trials, serve load steps) run small by default, as in CI; VIT_FULL_SWEEPS=1
# runs them whole (the figures RELIABILITY.md and docs/serving.md quote).
FULL_SWEEPS = os.environ.get("VIT_FULL_SWEEPS", "") == "1"

# A test of something only TensorFlow has: its fused kernels, tf.function graphs, the TF
# profiler, SavedModel/TFLite export, or the TF trainer's private internals.
requires_tf = pytest.mark.skipif(
    BACKEND != "tensorflow",
    reason=f"TensorFlow-only (TF kernels, graphs, profiler, export or TF-trainer internals); "
           f"this run uses the {BACKEND} backend")


# ---------------------------------------------------------------------------------------------
# Inputs and weights


def variant_params(names, configs):
    """pytest params of variant names; those of width >= 1024 (L, H: 300M+ weights to build)
    are marked slow."""
    return [pytest.param(name, marks=pytest.mark.slow) if configs[name].hidden_size >= 1024
            else name for name in names]


def image_shape(shape_or_config):
    """(height, width, channels) of images for `shape_or_config`.

    Args:
        shape_or_config: a `ViTConfig` (its `image_hw` and `channels`), a Keras model (the shape
            of its first input), an int (square RGB), (height, width) (RGB) or
            (height, width, channels).
    """
    if hasattr(shape_or_config, "image_hw"):
        return (*shape_or_config.image_hw, shape_or_config.channels)
    if isinstance(shape_or_config, keras.Model):
        return tuple(shape_or_config.inputs[0].shape[1:])
    if isinstance(shape_or_config, int):
        return (shape_or_config, shape_or_config, 3)
    shape = tuple(shape_or_config)
    if len(shape) == 2:
        return (*shape, 3)
    if len(shape) == 3:
        return shape
    raise ValueError(f"expected a ViTConfig, a model, a size or (height, width[, channels]), "
                     f"got {shape_or_config!r}")


def random_images(shape_or_config, batch=2, seed=0, low=-1.0, high=1.0):
    """float32 [batch, height, width, channels] drawn uniformly from [low, high).

    The default range is the model's input range (`preprocess_input`'s output); use
    `random_pixels` for raw 0..255 images. The values are a function of (shape, batch, seed,
    low, high) only: `np.random.default_rng(seed).uniform(low, high, shape)`.

    Args:
        shape_or_config: see `image_shape`.
    """
    shape = (batch, *image_shape(shape_or_config))
    return np.random.default_rng(seed).uniform(low, high, shape).astype("float32")


def random_pixels(shape_or_config, batch=2, seed=0):
    """Raw float32 pixel values in [0, 255): what export, calibration and `vit export` take."""
    return random_images(shape_or_config, batch=batch, seed=seed, low=0.0, high=255.0)


def randomize_weights(target, seed=0, stddev=0.1, mean=0.0):
    """Assigns normal(mean, stddev) values to every weight, in order, from one seeded stream.

    Initialisers leave zeros and ones (class token, heads, biases, norms) that hide wrong
    weight handling; random values make every output depend on every weight.

    Args:
        target: a layer or model (all its weights) or an iterable of variables. A
            BatchNorm's `moving_variance` gets 1 + |normal| (a variance is positive).

    Returns:
        `target`.
    """
    variables = target.weights if isinstance(target, keras.layers.Layer) else target
    rng = np.random.default_rng(seed)
    for variable in variables:
        values = rng.normal(mean, stddev, variable.shape)
        if variable.path.endswith("moving_variance"):  # BatchNorm's stays a variance
            values = 1.0 + np.abs(values)
        variable.assign(values.astype(variable.dtype))
    return target


def record_calls(monkeypatch, owner, name, record=lambda *args, **kwargs: args) -> list:
    """Wraps `owner.name` (a function, method or class attribute) so that each call appends
    `record(*the call's arguments)` to the returned list, then runs as before."""
    calls, original = [], getattr(owner, name)

    def recorded(*args, **kwargs):
        calls.append(record(*args, **kwargs))
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, recorded)
    return calls


def quantize_layers(*layers, mode="int8"):
    """`layer.quantize(mode)` for each Keras layer, without the full garbage collection Keras
    runs for every kernel a layer drops (`keras_compat.no_collection_per_variable`): in a test
    worker's heap each took up to a second, and what is quantized is the same."""
    from vit_keras import keras_compat

    with keras_compat.no_collection_per_variable():
        for layer in layers:
            layer.quantize(mode)


def assert_builtin_tflite_ops(operators):
    """No Flex (TF Select) or custom operator among a TFLite file's operators."""
    operators = list(operators)
    assert operators, "no operators listed"
    bad = [op for op in operators if op.startswith("Flex") or op == "CUSTOM"]
    assert not bad, f"non-builtin TFLite operators: {bad}"


# ---------------------------------------------------------------------------------------------
# Comparisons


def to_numpy(value):
    """A tensor or variable of any backend as a NumPy array (torch: detached from autograd)."""
    return keras.ops.convert_to_numpy(value)


_numpy = to_numpy


def assert_outputs_equal(actual, expected, atol=0.0, what="outputs"):
    """Same structure and shapes; values equal (atol=0) or within `atol`."""
    actual, expected = tree.flatten(actual), tree.flatten(expected)
    assert len(actual) == len(expected), f"{what}: {len(actual)} tensors, {len(expected)} expected"
    for index, (got, want) in enumerate(zip(actual, expected)):
        got, want = _numpy(got), _numpy(want)
        message = f"{what}[{index}]"
        assert got.shape == want.shape, f"{message}: shape {got.shape} != {want.shape}"
        if atol:
            np.testing.assert_allclose(got.astype("float64"), want.astype("float64"), rtol=0,
                                       atol=atol, err_msg=message)
        else:
            np.testing.assert_array_equal(got, want, err_msg=message)


def _shapes(outputs):
    """The shapes of the (flattened) tensors in `outputs`, as a list of tuples."""
    return [tuple(tensor.shape) for tensor in tree.flatten(outputs)]


def _is_shape(value):
    return isinstance(value, (tuple, list)) and all(
        item is None or isinstance(item, (int, np.integer)) for item in value)


def _shape_list(shape_or_shapes):
    """A shape, or a sequence of shapes (one per output), as a list of tuples."""
    if _is_shape(shape_or_shapes):
        return [tuple(shape_or_shapes)]
    return [tuple(shape) for shape in shape_or_shapes]


def _is_float(dtype):
    return keras.backend.is_float_dtype(keras.backend.standardize_dtype(dtype))


def dtype_name(tensor):
    """The dtype of a tensor or variable of any backend as a string, e.g. 'bfloat16'."""
    return keras.backend.standardize_dtype(tensor.dtype)


_dtype = dtype_name


def _call(layer, input_data, call_kwargs, **extra):
    return layer(input_data, **{**call_kwargs, **extra})


# ---------------------------------------------------------------------------------------------
# Gradients


def value_and_gradients(function, variables=(), inputs=()):
    """A scalar `function(*inputs)` and its gradients, on whichever backend Keras runs.

    Args:
        function: maps backend tensors made from `inputs` to a scalar; it may read any Keras
            variable.
        variables: Keras variables to differentiate with respect to.
        inputs: float arrays to differentiate with respect to, passed to `function`.

    Returns:
        (value, gradients): the value as a NumPy scalar, and one NumPy gradient per variable,
        then per input, in their dtypes. A gradient that nothing reaches is None on TensorFlow
        and torch (JAX gives zeros).
    """
    variables, inputs = list(variables), list(inputs)
    value, gradients = _GRADIENTS[BACKEND](function, variables, inputs)
    return _numpy(value), [None if gradient is None else _numpy(gradient)
                           for gradient in gradients]


def _tensorflow_gradients(function, variables, inputs):
    import tensorflow as tf

    tensors = [tf.convert_to_tensor(value) for value in inputs]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        value = function(*tensors)
    return value, tape.gradient(value, variables + tensors)


def _jax_gradients(function, variables, inputs):
    import jax

    def pure(values, tensors):
        with keras.StatelessScope(state_mapping=list(zip(variables, values))):
            return function(*tensors)

    values = [variable.value for variable in variables]
    tensors = [keras.ops.convert_to_tensor(value) for value in inputs]
    value, (for_variables, for_inputs) = jax.value_and_grad(pure, argnums=(0, 1))(values,
                                                                                 tensors)
    return value, [*for_variables, *for_inputs]


def _torch_gradients(function, variables, inputs):
    import torch

    tensors = [keras.ops.convert_to_tensor(value).detach().requires_grad_(True)
               for value in inputs]
    value = function(*tensors)
    sources = [variable.value for variable in variables] + tensors
    return value, torch.autograd.grad(value, sources, allow_unused=True)


_GRADIENTS = {"tensorflow": _tensorflow_gradients, "jax": _jax_gradients,
              "torch": _torch_gradients}


# ---------------------------------------------------------------------------------------------
# Serialization


def _json_round_trip(value):
    return json.loads(json.dumps(value))


def _same_json(a, b):
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def run_serialization_test(layer):
    """`get_config` -> `from_config` and `serialize_keras_object` -> `deserialize_keras_object`
    (through JSON, as a `.keras` file stores it) both give the class back with the same config.

    Deserialization finds the class by its registered name only (no custom_objects), so this
    also checks that the class is registered for safe-mode loading.

    Returns:
        the layer's config.
    """
    cls, config = type(layer), layer.get_config()
    label = f"{cls.__name__} {layer.name!r}"
    assert _same_json(_json_round_trip(config), config), f"{label}: config is not JSON-safe"
    clone = cls.from_config(copy.deepcopy(config))  # from_config may consume its argument
    assert type(clone) is cls, label
    assert clone.get_config() == config, f"{label}: from_config(get_config()) changed the config"
    clone = cls.from_config(_json_round_trip(config))
    assert _same_json(clone.get_config(), config), f"{label}: config does not survive JSON"
    serialized = _json_round_trip(keras.saving.serialize_keras_object(layer))
    assert serialized["registered_name"] == keras.saving.get_registered_name(cls), label
    revived = keras.saving.deserialize_keras_object(serialized, safe_mode=True)
    assert type(revived) is cls, f"{label}: deserialized as {type(revived).__name__}"
    assert revived.get_config() == config, f"{label}: deserialization changed the config"
    return config


# ---------------------------------------------------------------------------------------------
# Layers


def _symbolic_inputs(input_data):
    """keras.Input(s) mirroring `input_data` (batch axis left free)."""
    return tree.map_structure(
        lambda value: keras.Input(shape=np.shape(value)[1:], dtype=_dtype(np.asarray(value))),
        input_data)


def _functional_model(layer, input_data, call_kwargs):
    inputs = _symbolic_inputs(input_data)
    outputs = _call(layer, inputs, call_kwargs)
    return keras.Model(inputs, outputs, name=f"{layer.name}_model")


def _check_training_step(layer, input_data, call_kwargs, expected_shapes):
    """One `training=True` call under autodiff: the outputs keep their shapes and every
    trainable weight and float input receives a finite gradient."""
    leaves = tree.flatten(input_data)
    floats = [index for index, value in enumerate(leaves) if _is_float(np.asarray(value).dtype)]
    shapes = []

    def loss(*float_inputs):
        values = [keras.ops.convert_to_tensor(value) for value in leaves]
        for index, value in zip(floats, float_inputs):
            values[index] = value
        outputs = _call(layer, tree.pack_sequence_as(input_data, values), call_kwargs,
                        training=True)
        shapes.append(_shapes(outputs))
        return sum(keras.ops.sum(keras.ops.square(keras.ops.cast(value, "float32")))
                   for value in tree.flatten(outputs) if _is_float(value.dtype))

    value, gradients = value_and_gradients(loss, layer.trainable_weights,
                                           [leaves[index] for index in floats])
    assert shapes[-1] == expected_shapes, f"{layer.name}: training changed the shapes"
    assert np.isfinite(value), f"{layer.name}: non-finite training outputs"
    names = [variable.path for variable in layer.trainable_weights]
    names += [f"input {index}" for index in range(len(floats))]
    for name, gradient in zip(names, gradients):
        assert gradient is not None, f"{layer.name}: no gradient reaches {name}"
        assert np.all(np.isfinite(gradient)), f"{layer.name}: non-finite gradient {name}"


def _check_mixed_precision(layer_cls, init_kwargs, input_data, call_kwargs, expected_shapes,
                           output_dtypes):
    """Under mixed_bfloat16 (global policy, then an explicit `dtype=`): float outputs in the
    expected dtype, every variable float32, every sub-layer on the mixed policy."""
    def check(layer, how):
        outputs = _call(layer, input_data, call_kwargs)
        label = f"{layer_cls.__name__} ({how})"
        assert _shapes(outputs) == expected_shapes, f"{label}: shapes changed"
        flat = tree.flatten(outputs)
        wanted = (tree.flatten(output_dtypes) if not isinstance(output_dtypes, str)
                  else [output_dtypes] * len(flat))
        assert len(wanted) == len(flat), f"{label}: {len(flat)} outputs, dtypes {output_dtypes}"
        for index, (tensor, dtype) in enumerate(zip(flat, wanted)):
            if _is_float(tensor.dtype):
                assert _dtype(tensor) == dtype, f"{label}: output {index} is {_dtype(tensor)}"
        for variable in layer.weights:
            if _is_float(variable.dtype):
                assert _dtype(variable) == "float32", f"{label}: {variable.path} {variable.dtype}"
        for sublayer in layer._flatten_layers(include_self=True):
            assert sublayer.dtype_policy.name == MIXED, (
                f"{label}: sub-layer {sublayer.name!r} runs {sublayer.dtype_policy.name}")

    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(MIXED)
    try:
        check(layer_cls(**init_kwargs), "global policy")
    finally:
        keras.mixed_precision.set_global_policy(previous)
    if "dtype" not in init_kwargs:
        check(layer_cls(**init_kwargs, dtype=MIXED), "dtype argument")


def run_layer_test(layer_cls, init_kwargs, input_data, expected_output_shape=None,
                   expected_num_trainable_weights=None, expected_num_non_trainable_weights=None,
                   run_training_check=True, run_mixed_precision_check=True, call_kwargs=None,
                   expected_mixed_output_dtype="bfloat16", randomize=True, atol=0.0,
                   tmp_path=None):
    """The contract of a serializable layer, on `input_data` (one array or a list of them).

    Builds `layer_cls(**init_kwargs)` by calling it (weights then randomised, so no zero init
    hides a mistake) and checks:

    - the output shapes (`expected_output_shape`: a tuple, or a structure of tuples for
      several outputs), `compute_output_shape` where the class defines it, and the weight
      counts;
    - `get_config` / `from_config` and `serialize_keras_object` / `deserialize_keras_object`
      round trips (`run_serialization_test`), and that a `from_config` clone given the same
      weights computes the same outputs;
    - a functional model around the layer computes the same outputs, keeps them through a
      `.keras` save and `keras.saving.load_model(safe_mode=True)`, and reloads the layer with the
      same config;
    - `run_training_check`: a `training=True` call sends finite gradients to every trainable
      weight and float input;
    - `run_mixed_precision_check`: under the mixed_bfloat16 global policy and with
      `dtype="mixed_bfloat16"`, float outputs are `expected_mixed_output_dtype` (a dtype, or
      one per output), every variable stays float32 and sub-layers follow the policy. The
      global policy is restored afterwards.

    Args:
        call_kwargs: extra keyword arguments of every call (e.g. return_attention_scores).
        randomize: replace the initial weights by random normal(0, 0.5) ones.
        atol: tolerance of output comparisons (0: exactly equal).
        tmp_path: where the `.keras` file goes (a temporary folder if None).

    Returns:
        the built layer.
    """
    call_kwargs = dict(call_kwargs or {})
    name = layer_cls.__name__
    layer = layer_cls(**init_kwargs)
    run_serialization_test(layer)  # unbuilt

    outputs = _call(layer, input_data, call_kwargs)
    assert layer.built, f"{name}: not built by its first call"
    if randomize and layer.weights:
        randomize_weights(layer, seed=0, stddev=0.5)
        outputs = _call(layer, input_data, call_kwargs)
    shapes = _shapes(outputs)
    if expected_output_shape is not None:
        assert shapes == _shape_list(expected_output_shape), (
            f"{name}: output shape {shapes}, expected {expected_output_shape}")
    if type(layer).compute_output_shape is not keras.layers.Layer.compute_output_shape:
        input_shapes = tree.map_structure(lambda value: tuple(np.shape(value)), input_data)
        computed = _shape_list(layer.compute_output_shape(input_shapes))
        assert computed == shapes, f"{name}: compute_output_shape {computed} != {shapes}"
    if expected_num_trainable_weights is not None:
        assert len(layer.trainable_weights) == expected_num_trainable_weights, (
            f"{name}: {len(layer.trainable_weights)} trainable weights "
            f"{[w.path for w in layer.trainable_weights]}")
    if expected_num_non_trainable_weights is not None:
        assert len(layer.non_trainable_weights) == expected_num_non_trainable_weights, (
            f"{name}: {len(layer.non_trainable_weights)} non-trainable weights")
    for tensor in tree.flatten(outputs):
        assert np.all(np.isfinite(_numpy(tensor))), f"{name}: non-finite outputs"

    # Config round trip (built; building may normalise arguments, as Keras' LayerNormalization
    # does with `axis`): same config, and the same outputs with the same weights.
    config = run_serialization_test(layer)
    clone = layer_cls.from_config(copy.deepcopy(config))
    _call(clone, input_data, call_kwargs)
    assert [tuple(w.shape) for w in clone.weights] == [tuple(w.shape) for w in layer.weights], (
        f"{name}: the clone has other weights")
    clone.set_weights(layer.get_weights())
    assert_outputs_equal(_call(clone, input_data, call_kwargs), outputs, atol,
                         f"{name} from_config clone")

    # A functional model around the layer (a fresh copy, built symbolically with a free batch
    # axis, given the same weights): same outputs, also after .keras save/load.
    inner = layer_cls.from_config(copy.deepcopy(config))
    model = _functional_model(inner, input_data, call_kwargs)
    inner.set_weights(layer.get_weights())
    symbolic = _shapes(model.outputs)
    assert [shape[0] for shape in symbolic] == [None] * len(shapes), name
    assert [shape[1:] for shape in symbolic] == [shape[1:] for shape in shapes], (
        f"{name}: symbolic output shapes {symbolic}, eager {shapes}")
    assert_outputs_equal(model(input_data), outputs, atol, f"{name} functional model")
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder if tmp_path is None else str(tmp_path), f"{name}.keras")
        loaded = run_model_saving_test(model, input_data, path=path, atol=atol)
    reloaded = [item for item in loaded.layers if type(item) is layer_cls]
    assert len(reloaded) == 1, f"{name}: {len(reloaded)} reloaded layers of this class"
    assert _same_json(reloaded[0].get_config(), layer.get_config()), (
        f"{name}: reloaded config differs")

    if run_training_check:
        _check_training_step(layer, input_data, call_kwargs, shapes)
    if run_mixed_precision_check:
        _check_mixed_precision(layer_cls, init_kwargs, input_data, call_kwargs, shapes,
                               expected_mixed_output_dtype)
    return layer


# ---------------------------------------------------------------------------------------------
# Models


def run_model_saving_test(model, input_data, tmp_path=None, path=None, atol=0.0,
                          check_from_config=True):
    """A model survives `.keras` save + `load_model(safe_mode=True)` and `get_config` ->
    `from_config`: same config, same weight paths and values, same outputs.

    Args:
        tmp_path: folder of the `.keras` file (or give `path`).
        check_from_config: also rebuild the model from its config, copy the weights and
            compare outputs.
        atol: tolerance of output comparisons (0: exactly equal).

    Returns:
        the loaded model.
    """
    if path is None:
        if tmp_path is None:
            raise ValueError("run_model_saving_test needs tmp_path or path")
        path = os.path.join(str(tmp_path), f"{model.name}.keras")
    expected = model(input_data, training=False)
    config = model.get_config()
    if check_from_config:
        clone = model.__class__.from_config(copy.deepcopy(config))  # Functional pops keys
        assert clone.get_config() == config, f"{model.name}: from_config changed the config"
        clone.set_weights(model.get_weights())
        assert_outputs_equal(clone(input_data, training=False), expected, atol,
                             f"{model.name} from_config clone")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert type(loaded) is type(model), f"{model.name}: loaded as {type(loaded).__name__}"
    # The file stores JSON, so tuples come back as lists.
    assert _same_json(loaded.get_config(), config), f"{model.name}: the loaded config differs"
    assert [w.path for w in loaded.weights] == [w.path for w in model.weights], model.name
    for saved, restored in zip(model.weights, loaded.weights):
        np.testing.assert_array_equal(_numpy(restored), _numpy(saved), err_msg=saved.path)
    assert_outputs_equal(loaded(input_data, training=False), expected, atol,
                         f"{model.name} loaded from .keras")
    return loaded


def png_bomb(width: int, height: int) -> bytes:
    """A tiny, well-formed PNG declaring width x height pixels (a decompression bomb)."""
    def chunk(kind, body):
        return (struct.pack(">I", len(body)) + kind + body +
                struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF))

    rows = zlib.compress(b"\x00" * (3 * width + 1) * 4, 9)  # a few rows are enough to declare
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2,
                                                                0, 0, 0))
            + chunk(b"IDAT", rows) + chunk(b"IEND", b""))


def script_module(folder: str, name: str):
    """A script of the repository's `folder` (tools, benchmarks), imported as a module."""
    import importlib
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", folder))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.pop(0)


# ---------------------------------------------------------------------------------------------
# A briefly trained classifier (export checks need logits that are not uniform)


def digit_pixels(config, classes=None):
    """scikit-learn's bundled 8x8 digits of the first `classes` (default: config.num_classes)
    classes as RGB pixels in 0..255 at the config's image size; (images, labels), shuffled."""
    from sklearn.datasets import load_digits

    classes = classes or config.num_classes
    digits = load_digits()
    keep = digits.target < classes
    images = digits.images[keep].astype("float32") * (255.0 / 16.0)
    height, width = image_shape(config)[:2]
    rows = (np.arange(height) * 8 // height)[:, None]
    columns = (np.arange(width) * 8 // width)[None, :]
    images = np.repeat(images[:, rows, columns, None], 3, axis=-1)  # nearest-neighbour resize
    order = np.random.default_rng(0).permutation(len(images))
    return images[order], digits.target[keep][order]


def digit_split(config, held_out=200):
    """`digit_pixels(config)` split as `trained_digit_classifier` splits them: (training
    images, held-out images, held-out labels); images in 0..255."""
    images, labels = digit_pixels(config)
    return images[held_out:], images[:held_out], labels[:held_out]


def trained_digit_classifier(config, epochs=40, held_out=200, batch_size=128,
                             learning_rate=5e-3):
    """`VisionTransformer(config)` trained for a few seconds on `digit_pixels`.

    40 epochs, not fewer: with oneDNN on some CPUs 30 left the tiny model at 88.5% held-out
    top-1, close enough to its decision boundaries that the int8 files fell under their bar.
    Batches of 128 at 5e-3, not 64 at 3e-3: a tiny model's step costs its operators' dispatch
    more than its arithmetic, so 40 epochs took 2.1 s less (7.5 -> 5.1 s on one thread) and
    ended at a lower training loss (0.002-0.005 against 0.009; held-out top-1 93.5-98% with
    one or two threads, oneDNN on or off).

    Returns:
        (model, train images, held-out images, held-out labels); images in 0..255.
    """
    import vit_keras

    keras.utils.set_random_seed(0)
    images, labels = digit_pixels(config)
    model = vit_keras.VisionTransformer(config)
    model.compile(optimizer=keras.optimizers.AdamW(learning_rate),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(images[held_out:] / 127.5 - 1.0, labels[held_out:], batch_size=batch_size,
              epochs=epochs, verbose=0)
    return (model, *digit_split(config, held_out))


def vit_predict(arguments, output_dir) -> tuple[int, list[dict]]:
    """Runs `vit predict ARGUMENTS --output DIR/predictions.json` in this process; returns its
    exit status and its predictions ({'file', 'top': [{'class', 'score'}]} per image)."""
    from vit import cli

    path = os.path.join(str(output_dir), "predictions.json")
    status = cli.main(["predict", *arguments, "--output", path])
    if status or not os.path.exists(path):
        return status, []
    with open(path) as file:
        return status, json.load(file)["predictions"]


def assert_a_runs_export_and_stages(run, printed: str, refused=(), blocks: int = 1,
                                    int8_smaller: bool = True):
    """What a `vit train` run with every default export prints and writes: a timed line per
    export stage, a wall time covering training and every stage (as `metrics.json` says), and
    `export.json` listing every default format: each file where its row says (under rejected/
    for the `refused` ones), the float files computing the model to rounding, the int8 files
    smaller (unless `int8_smaller` is False: in a model 16 wide the QDQ nodes' scales outweigh
    the bytes saved), the ONNX file's norms fused (two a block and the final one)."""
    import re

    from vit_app.inference.export import command as export_command

    stages = re.findall(r"^(export: .+|analysis: .+) \.\.\. (\d+\.\d) s$", printed, re.M)
    assert [name for name, _ in stages][:4] == [
        "export: SavedModel", "export: TFLite fp32", "export: TFLite fp16", "export: TFLite int8"]
    wall = float(re.search(r"\| wall time +\| ([\d.]+) s", printed).group(1))
    train = float(re.search(r"\| train time +\| ([\d.]+) s", printed).group(1))
    assert wall >= train + sum(float(seconds) for _, seconds in stages)
    assert json.loads((run / "metrics.json").read_text())["wall_seconds"] == \
        pytest.approx(wall, abs=0.06)
    report = json.loads((run / "export.json").read_text())
    formats = report["formats"]
    assert tuple(formats) == export_command.DEFAULT_FORMATS
    assert report["failed"] == list(refused)
    for name, entry in formats.items():
        where = run / ("rejected" if name in refused else "") / entry["file"]
        assert where.exists() and entry["size_bytes"] > 0, name
        assert name in ("saved_model", *refused) or entry["latency_ms"] > 0, name
    for name in ("saved_model", "tflite", "onnx"):
        assert formats[name]["top1_agreement"] == 1.0, name
        assert formats[name]["max_abs_logit_diff"] <= 1e-4, name
    if int8_smaller:
        assert formats["tflite_int8"]["size_bytes"] < formats["tflite"]["size_bytes"]
        assert formats["onnx_int8"]["size_bytes"] < formats["onnx"]["size_bytes"]
    assert formats["onnx"]["fused_layer_norms"] == 2 * blocks + 1
    assert {"QuantizeLinear", "DequantizeLinear"} <= set(formats["onnx_int8"]["ops"])
