"""The training and inference fast paths keep the reference numbers.

The training path (XLA-fused GELU with its own gradient), the inference path (MatMul + BiasAdd +
GELU fused by grappler) and the one-kernel Adam update are each checked against a reference
that does not use them: timm's logits, float64 NumPy, plain Keras autodiff and Keras' AdamW.
"""

import json
import math
import os

import keras
import numpy as np
import pytest
from helpers import (dtype_name, quantize_layers, randomize_weights, requires_tf, to_numpy,
                     value_and_gradients)
from keras import ops

import vit_keras
from training import recipe
from vit_keras.fast_paths.tensorflow import scaled_softmax
from vit_keras.core.layers import gelu
from vit_keras.fast_paths import export_forms
from vit_keras.core.normalization import GroupNorm, LayerNorm

DATA = os.path.join(os.path.dirname(__file__), "data")


def _gelu_reference(x, approximate):
    """GELU and its derivative in float64 NumPy."""
    if approximate:
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)
        tanh = np.tanh(inner)
        d_inner = math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x ** 2)
        return 0.5 * x * (1 + tanh), 0.5 * (1 + tanh) + 0.5 * x * (1 - tanh ** 2) * d_inner
    cdf = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    return x * cdf, cdf + x * np.exp(-0.5 * x ** 2) / math.sqrt(2 * math.pi)


@pytest.mark.parametrize("approximate", [True, False])
@pytest.mark.parametrize("training", [False, True])
def test_gelu_value_and_gradient_match_float64(approximate, training):
    x = np.linspace(-8, 8, 401)
    expected, slope = _gelu_reference(x, approximate)
    inputs = x.astype("float32")
    outputs = to_numpy(gelu(ops.convert_to_tensor(inputs), approximate, training=training))
    _, (gradient,) = value_and_gradients(
        lambda t: ops.sum(2.0 * gelu(t, approximate, training=training)), inputs=[inputs])
    np.testing.assert_allclose(outputs, expected, atol=2e-6)
    np.testing.assert_allclose(gradient, 2 * slope, atol=2e-5)


def test_onnx_form_of_the_exact_gelu_equals_the_plain_one():
    """While an ONNX export traces, the exact GELU is spelled with Erf (ONNX has no Erfc)."""
    x = np.linspace(-6, 6, 241, dtype=np.float32)
    plain = to_numpy(gelu(x, approximate=False))
    with export_forms.onnx_form():
        exported = to_numpy(gelu(x, approximate=False))
        assert export_forms.onnx() and export_forms.active() and not export_forms.integer()
    np.testing.assert_allclose(exported, plain, atol=1e-6, rtol=0)
    assert not export_forms.onnx()


def test_gelu_training_path_keeps_bfloat16_and_is_at_least_as_accurate():
    inputs = to_numpy(ops.cast(np.linspace(-6, 6, 301).astype("float32"), "bfloat16"))
    exact_inputs = inputs.astype("float64")  # what bfloat16 can hold
    expected, slope = _gelu_reference(exact_inputs, True)
    errors = {}
    for training in (False, True):
        outputs = gelu(ops.convert_to_tensor(inputs), True, training=training)
        _, (gradient,) = value_and_gradients(
            lambda t: ops.sum(ops.cast(gelu(t, True, training=training), "float32")),
            inputs=[inputs])
        assert dtype_name(outputs) == "bfloat16"
        assert gradient.dtype == inputs.dtype
        errors[training] = (np.abs(to_numpy(outputs).astype("float64") - expected).max(),
                            np.abs(gradient.astype("float64") - slope).max())
    assert errors[True][0] <= errors[False][0] and errors[True][1] <= errors[False][1]
    if vit_keras.fast_paths.fused_training_available():  # elsewhere training runs the plain op (bfloat16 gradient)
        assert errors[True][0] < 0.04 and errors[True][1] < 0.01  # bfloat16 rounding only


@requires_tf
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_scaled_softmax_equals_plain_autodiff(dtype):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    logits = tf.cast(rng.normal(0, 4, (2, 3, 5, 7)), dtype)
    upstream = tf.cast(rng.normal(size=(2, 3, 5, 7)), dtype)
    results = []
    for softmax in (lambda x: scaled_softmax(x, scale=0.125),
                    lambda x: tf.nn.softmax(tf.cast(x, tf.float32) * 0.125)):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            probs = softmax(logits)
        gradient = tape.gradient(probs, logits, output_gradients=tf.cast(upstream, probs.dtype))
        results.append((np.asarray(probs, "float32"), np.asarray(gradient, "float32")))
        assert gradient.dtype == dtype
    (probs, gradient), (expected, expected_gradient) = results
    tolerance = 1e-6 if dtype == "float32" else 1e-2
    np.testing.assert_allclose(probs, expected, atol=tolerance)
    np.testing.assert_allclose(gradient, expected_gradient, atol=tolerance)


def test_training_path_gives_timm_logits():
    with open(os.path.join(DATA, "parity_configs.json")) as file:
        case = dict(json.load(file)["timm_token"])
    weights = case.pop("weights")
    model = vit_keras.VisionTransformer(vit_keras.ViTConfig(**case))
    vit_keras.load_weights(model, os.path.join(DATA, weights), skip_head=False)
    with np.load(os.path.join(DATA, "parity_vectors.npz"), allow_pickle=False) as archive:
        images, reference = archive["timm_token/images"], archive["timm_token/outputs"]
    for training in (False, True):  # dropout rates are 0: both paths are the same function
        logits = to_numpy(model(images, training=training))
        assert np.abs(logits - reference).max() <= 2e-5


def test_training_path_gradients_equal_plain_autodiff(tiny_config):
    model = vit_keras.VisionTransformer(tiny_config)
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    for weight in model.trainable_weights:  # non-zero head and biases reach every path
        weight.assign(weight + np.random.default_rng(1).normal(0, 0.05, weight.shape))
    gradients = {}
    for training in (False, True):
        _, gradients[training] = value_and_gradients(
            lambda: ops.sum(ops.square(model(images, training=training))),
            model.trainable_weights)
    for plain, fused in zip(gradients[False], gradients[True]):
        scale = max(1.0, float(np.abs(plain).max()))
        assert np.abs(plain - fused).max() <= 1e-5 * scale


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_fused_adam_update_equals_keras(optimizer, tiny_config):
    model = vit_keras.VisionTransformer(tiny_config)
    start = [to_numpy(weight) for weight in model.trainable_weights]
    rng = np.random.default_rng(0)
    gradients = [[ops.convert_to_tensor(rng.normal(0, 1e-2, w.shape).astype("float32"))
                  for w in start] for _ in range(3)]
    ours, theirs = recipe.Adam, keras.optimizers.Adam
    if optimizer == "adamw":
        ours, theirs = recipe.AdamW, keras.optimizers.AdamW
    results = []
    for cls in (ours, theirs):
        for weight, value in zip(model.trainable_weights, start):
            weight.assign(value)
        schedule = recipe.WarmupDecay(1e-2, total_steps=4, warmup_steps=1)
        instance = cls(learning_rate=schedule, beta_1=0.8, beta_2=0.95, epsilon=1e-7)
        for step in gradients:
            instance.apply(step, model.trainable_weights)
        results.append([to_numpy(weight) for weight in model.trainable_weights])
    for fused, reference, initial in zip(*results, start):
        assert np.abs(fused - initial).max() > 1e-3  # the weights moved
        np.testing.assert_allclose(fused, reference, atol=1e-6)


@requires_tf
def test_a_traced_update_builds_the_schedule_and_bias_corrections_once(tiny_config):
    """One step's graph holds the learning-rate schedule once (not once per decayed weight) and
    Adam's two bias corrections once per dtype (not once per weight)."""
    import tensorflow as tf

    model = vit_keras.VisionTransformer(tiny_config)
    optimizer = recipe.AdamW(learning_rate=recipe.WarmupDecay(1e-2, total_steps=4),
                             weight_decay=0.05)
    optimizer.build(model.trainable_weights)
    gradients = [ops.zeros_like(weight) for weight in model.trainable_weights]
    step = tf.function(lambda: optimizer.apply(gradients, model.trainable_weights))
    kinds = [op.type for op in step.get_concrete_function().graph.get_operations()]
    assert len(model.trainable_weights) > 20
    assert kinds.count("ResourceApplyAdam") == len(model.trainable_weights)
    assert kinds.count("Cos") == 1 and kinds.count("Pow") == 2


def test_mixed_bfloat16_training_path_stays_close_to_float32(tiny_config):
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    reference = vit_keras.VisionTransformer(tiny_config)
    for weight in reference.trainable_weights:
        weight.assign(weight + np.random.default_rng(1).normal(0, 0.05, weight.shape))
    expected = to_numpy(reference(images, training=True))
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = vit_keras.VisionTransformer(tiny_config)
    model.set_weights(reference.get_weights())
    logits = model(images, training=True)
    assert dtype_name(logits) == "float32"
    assert np.abs(to_numpy(logits) - expected).max() <= 0.05 * max(1.0, np.abs(expected).max())


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_layer_norm_training_path_equals_keras(policy):
    keras.mixed_precision.set_global_policy(policy)
    rng = np.random.default_rng(0)
    x = rng.normal(2.0, 3.0, (3, 7, 16)).astype("float32")
    layer = LayerNorm(epsilon=1e-6)
    layer.build(x.shape)
    layer.gamma.assign(rng.normal(1.0, 0.5, 16).astype("float32"))
    layer.beta.assign(rng.normal(0.0, 0.5, 16).astype("float32"))
    upstream = rng.normal(size=(3, 7, 16)).astype("float32")
    results = {}
    for training in (False, True):
        outputs = to_numpy(layer(x, training=training))
        _, gradients = value_and_gradients(
            lambda t: ops.sum(ops.cast(layer(t, training=training), "float32")
                              * ops.convert_to_tensor(upstream)),
            [layer.gamma, layer.beta], [x])
        results[training] = [outputs, *gradients]
    tolerance = 1e-5 if policy == "float32" else 0.05
    for plain, fused in zip(results[False], results[True]):
        assert plain.dtype == fused.dtype
        plain, fused = plain.astype("float32"), fused.astype("float32")
        scale = max(1.0, float(np.abs(plain).max()))
        assert np.abs(plain - fused).max() <= tolerance * scale


def _norm_layer(kind):
    """A built LayerNorm or GroupNorm with random scale and offset, and an input for it."""
    rng = np.random.default_rng(0)
    if kind == "layer_norm":
        layer, x = LayerNorm(epsilon=1e-6), rng.normal(2.0, 3.0, (3, 7, 16))
    else:
        layer, x = GroupNorm(groups=4, epsilon=1e-6), rng.normal(2.0, 3.0, (2, 5, 5, 16))
    layer.build(x.shape)
    layer.gamma.assign(rng.normal(1.0, 0.5, 16).astype("float32"))
    layer.beta.assign(rng.normal(0.0, 0.5, 16).astype("float32"))
    return layer, x.astype("float32")


@pytest.mark.parametrize("integer", [False, True])
@pytest.mark.parametrize("kind", ["layer_norm", "group_norm"])
def test_export_form_of_the_norms_equals_keras(kind, integer):
    """The centred forms TFLite exports trace (no NEG, integer-only in int8; LayerNorm's
    L2-normalised rows in full-integer files) give Keras' values."""
    layer, x = _norm_layer(kind)
    plain = to_numpy(layer(x))
    with export_forms.tflite_form(integer=integer):
        centred = to_numpy(layer(x))
    plain_again = to_numpy(layer(x))  # the context is left: back to Keras' form
    np.testing.assert_allclose(centred, plain, atol=1e-5)
    np.testing.assert_array_equal(plain_again, plain)


@requires_tf
@pytest.mark.parametrize("kind", ["layer_norm", "group_norm"])
def test_export_form_of_the_norms_has_no_neg(kind):
    import tensorflow as tf

    layer, x = _norm_layer(kind)
    traced = tf.function(layer).get_concrete_function(tf.TensorSpec(x.shape, tf.float32))
    with export_forms.tflite_form():
        traced_centred = tf.function(layer).get_concrete_function(
            tf.TensorSpec(x.shape, tf.float32))
    op_types = {op.type for op in traced.graph.get_operations()}
    centred_types = {op.type for op in traced_centred.graph.get_operations()}
    assert "Neg" in op_types and "Neg" not in centred_types


@requires_tf
@pytest.mark.parametrize("num_queries", [None, 3])
def test_per_head_attention_of_integer_export_equals_the_plain_graph(num_queries):
    """Full-integer export unrolls large heads into 2-D products; same values, batch > 1 too."""
    import tensorflow as tf

    from vit_keras.core import attention

    layer = attention.MultiHeadSelfAttention(2)
    x = tf.constant(np.random.default_rng(0).normal(size=(2, 64, 32)).astype("float32"))
    layer.build(x.shape)
    rng = np.random.default_rng(1)
    for weight in layer.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    plain = layer(x, num_queries=num_queries)
    with export_forms.tflite_form(integer=True):
        function = tf.function(lambda t: layer(t, num_queries=num_queries))
        graph = function.get_concrete_function(tf.TensorSpec(x.shape, tf.float32)).graph
        unrolled = function(x)
    np.testing.assert_allclose(unrolled, plain, atol=1e-5)
    op_types = [op.type for op in graph.get_operations()]
    queries = 64 if num_queries is None else num_queries
    if queries * 64 * 16 >= export_forms.UNROLL_MIN_MACS_PER_HEAD:
        assert "BatchMatMulV2" not in op_types and op_types.count("MatMul") > 2 * 2 * 2
    else:  # too small to pay off: the plain graph
        assert "BatchMatMulV2" in op_types or "Einsum" in op_types


@pytest.mark.slow
def test_fused_paths_train_inside_an_xla_compiled_step(tiny_config):
    """`compile(jit_compile=True)` (what TPUs run) nests the fused kernels in one XLA program."""
    images = np.random.default_rng(0).uniform(-1, 1, (4, 32, 32, 3)).astype("float32")
    labels = np.arange(4) % tiny_config.num_classes
    losses = []
    for jit_compile in (False, True):
        keras.utils.set_random_seed(0)
        model = vit_keras.VisionTransformer(tiny_config)
        model.compile(recipe.AdamW(1e-3), keras.losses.SparseCategoricalCrossentropy(
            from_logits=True), jit_compile=jit_compile)
        losses.append([float(model.train_on_batch(images, labels)) for _ in range(3)])
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-4)
    assert losses[0][2] < losses[0][0]


@pytest.mark.parametrize("training", [False, True])
def test_last_block_computes_only_the_tokens_the_head_reads(tiny_config, training):
    block = vit_keras.EncoderBlock(num_heads=4, mlp_dim=64)
    x = np.random.default_rng(0).normal(size=(2, 17, 32)).astype("float32")
    block.build(x.shape)
    for weight in block.weights:
        weight.assign(weight + np.random.default_rng(1).normal(0, 0.1, weight.shape))
    full, scores = block(x, training=training, return_attention_scores=True)
    first, first_scores = block(x, training=training, return_attention_scores=True,
                                output_tokens=2)
    assert first.shape == (2, 2, 32) and first_scores.shape == (2, 4, 2, 17)
    np.testing.assert_allclose(to_numpy(first), to_numpy(full)[:, :2], atol=1e-5)
    np.testing.assert_allclose(to_numpy(first_scores), to_numpy(scores)[:, :, :2], atol=1e-6)
    model = vit_keras.VisionTransformer(tiny_config)  # class-token head: one token leaves
    assert model.get_layer("encoder_norm").output.shape[1] == 1
    features = vit_keras.VisionTransformer(tiny_config, include_top=False)
    assert features.get_layer("encoder_norm").output.shape[1] == 17


@pytest.mark.parametrize("kind", ["dense", "heads", "output", "lora"])
def test_projection_fast_path_equals_the_keras_layer(kind):
    """TensorFlow's 2-D MatMul + BiasAdd form of a float Dense/EinsumDense (LoRA included) is
    the layer's own call; elsewhere `project` is the layer's call."""
    from vit_keras.core.attention import head_projection, output_projection

    rng = np.random.default_rng(0)
    if kind == "dense":
        layer, x = keras.layers.Dense(12), rng.normal(size=(10, 8))
    elif kind == "output":
        layer, x = output_projection(8, None), rng.normal(size=(2, 5, 2, 4))
    else:
        layer, x = head_projection("query", 2, 4, None), rng.normal(size=(2, 5, 8))
    x = x.astype("float32")
    layer.build(x.shape)
    randomize_weights(layer)
    if kind == "lora":
        layer.enable_lora(2)
        randomize_weights([layer.lora_kernel_b], seed=1)
    fast = to_numpy(vit_keras.fast_paths.project(layer, x))
    np.testing.assert_allclose(fast, to_numpy(layer(x)), atol=1e-5)


def test_patch_embedding_fast_path_equals_the_einsum_projection():
    """The strided convolution TensorFlow runs is the EinsumDense over the patches."""
    layer = vit_keras.PatchEmbedding(hidden_size=8, patch_size=4)
    images = np.random.default_rng(0).normal(size=(2, 8, 12, 3)).astype("float32")
    layer.build(images.shape)
    randomize_weights(layer)
    plain = to_numpy(layer.projection(layer._patches(images)))
    fast = vit_keras.fast_paths.patch_projection(layer.projection, images, 4)
    if fast is None:
        assert not vit_keras.fast_paths.fused_training_available()  # only TensorFlow has one
        return
    np.testing.assert_allclose(to_numpy(fast), plain, atol=1e-5)
    quantize_layers(layer.projection)  # a quantized projection always runs Keras' own call
    assert vit_keras.fast_paths.patch_projection(layer.projection, images, 4) is None


@requires_tf
def test_resize_to_a_size_known_at_run_time_matches_keras_resize():
    """The TensorFlow graph traced for any size resizes as Keras' resize does eagerly."""
    import tensorflow as tf

    maps = np.random.default_rng(0).normal(size=(2, 3, 5, 4)).astype("float32")

    @tf.function(input_signature=[tf.TensorSpec((None, None, None, 4)), tf.TensorSpec((2,),
                                                                                      tf.int32)])
    def traced(values, size):
        return vit_keras.fast_paths.resize_bilinear(values, (size[0], size[1]))

    expected = to_numpy(keras.ops.image.resize(maps, (12, 7), interpolation="bilinear"))
    np.testing.assert_allclose(traced(maps, tf.constant([12, 7])).numpy(), expected, atol=1e-6)


@pytest.mark.parametrize("size", [(12, 7), (3, 5), (2, 9), (1, 1)])
def test_resize_between_static_sizes_matches_keras_resize(size):
    """The interpolation-matrix form (static sizes) is Keras' bilinear resize, up or down."""
    maps = np.random.default_rng(1).normal(size=(2, 3, 5, 4)).astype("float32")
    fast = to_numpy(vit_keras.fast_paths.resize_bilinear(keras.ops.convert_to_tensor(maps), size))
    expected = to_numpy(keras.ops.image.resize(maps, size, interpolation="bilinear"))
    np.testing.assert_allclose(fast, expected, atol=1e-5)
