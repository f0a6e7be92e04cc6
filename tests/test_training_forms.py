"""The opt-in forms of the training step (`vit_keras.fast_paths.training_forms`) give the plain
path's outputs and gradients, on every backend (tests/test_backends.py runs this file on JAX
and PyTorch too)."""

import keras
import numpy as np
import pytest
from helpers import (dtype_name, quantize_layers, random_images, randomize_weights, to_numpy,
                     value_and_gradients)
from keras import ops

from vit_keras import VisionTransformer, fast_paths
from vit_keras.core.attention import MultiHeadSelfAttention
from vit_keras.fast_paths import training_forms
from vit_keras.fast_paths.training_forms import TrainingForms


@pytest.fixture(autouse=True)
def _plain_forms():
    previous = training_forms.set_forms(TrainingForms())
    yield
    training_forms.set_forms(previous)
    keras.mixed_precision.set_global_policy("float32")


def _attention_layer(seed=0, width=32, heads=4, dropout=0.0):
    layer = MultiHeadSelfAttention(num_heads=heads, dropout_rate=dropout)
    layer.build((2, 17, width))
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(rng.normal(0, 0.2, weight.shape).astype("float32"))
    return layer


def _tokens(seed=1, shape=(2, 17, 32)):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _outputs_and_gradients(layer, inputs, training):
    def loss(tokens):
        outputs = ops.cast(layer(tokens, training=training), "float32")
        return ops.sum(ops.square(outputs))

    outputs = to_numpy(ops.cast(layer(inputs, training=training), "float32"))
    _, gradients = value_and_gradients(loss, layer.trainable_weights, [inputs])
    return [outputs, *gradients]


def _assert_close(plain, fast, tolerance):
    """Each result within `tolerance` of the largest value of its kind (outputs, gradients)."""
    scales = [max(1.0, np.abs(plain[0]).max()),
              max(1.0, max(np.abs(g).max() for g in plain[1:]))]
    for index, (want, got) in enumerate(zip(plain, fast)):
        difference = np.abs(np.asarray(want, "float32") - np.asarray(got, "float32")).max()
        scale = scales[min(index, 1)]
        assert difference <= tolerance * scale, f"result {index}: {difference} (scale {scale})"


def _count_calls(monkeypatch, owner, name):
    calls = []
    original = getattr(owner, name)

    def counted(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, counted)
    return calls


@pytest.mark.parametrize("policy, tolerance", [("float32", 1e-5), ("mixed_bfloat16", 2e-2)])
@pytest.mark.parametrize("training", [False, True])
def test_fused_qkv_gives_the_three_projections(monkeypatch, policy, tolerance, training):
    keras.mixed_precision.set_global_policy(policy)
    layer, inputs = _attention_layer(), _tokens()
    plain = _outputs_and_gradients(layer, inputs, training)
    taken = []
    original = training_forms.fused_self_attention_projections
    monkeypatch.setattr(training_forms, "fused_self_attention_projections",
                        lambda *args: taken.append(original(*args) is not None) or original(*args))
    with training_forms.using(fused_qkv=True):
        fused = _outputs_and_gradients(layer, inputs, training)
    assert taken == [True, True], taken  # the call and the gradient's call
    _assert_close(plain, fused, tolerance)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_fused_projections_equal_each_projection_in_its_dtype(policy):
    """Query, key and value from the one product equal the layers' own calls, in the compute
    dtype (bfloat16 under mixed precision, not float32)."""
    keras.mixed_precision.set_global_policy(policy)
    layer, inputs = _attention_layer(), _tokens()
    with training_forms.using(fused_qkv=True):
        fused = training_forms.fused_self_attention_projections(
            layer.query, layer.key, layer.value, ops.convert_to_tensor(inputs))
    for projection, got in zip((layer.query, layer.key, layer.value), fused):
        want = projection(inputs)
        assert dtype_name(got) == dtype_name(want) == layer.compute_dtype
        want = to_numpy(ops.cast(want, "float32"))
        # bfloat16: the two products round at different steps; on CPUs without native
        # bfloat16 (AVX2 only) they came up to 4% of the largest output apart.
        tolerance = 1e-5 if policy == "float32" else 2.0 ** -4 * np.abs(want).max()
        np.testing.assert_allclose(to_numpy(ops.cast(got, "float32")), want, atol=tolerance)


def test_fused_qkv_includes_lora_and_leaves_quantized_layers_alone():
    layer, inputs = _attention_layer(), _tokens()
    for projection in (layer.query, layer.value):
        projection.enable_lora(2)
        projection.lora_kernel_b.assign(np.full(projection.lora_kernel_b.shape, 0.1, "float32"))
    plain = to_numpy(layer(inputs))
    with training_forms.using(fused_qkv=True):
        np.testing.assert_allclose(to_numpy(layer(inputs)), plain, atol=1e-5)
    quantized = _attention_layer()
    quantize_layers(quantized.query, quantized.key, quantized.value)
    assert training_forms.fused_self_attention_projections(
        quantized.query, quantized.key, quantized.value, inputs) is None
    plain = to_numpy(quantized(inputs))
    with training_forms.using(fused_qkv=True):
        assert training_forms.fused_self_attention_projections(
            quantized.query, quantized.key, quantized.value, inputs) is None
        np.testing.assert_array_equal(to_numpy(quantized(inputs)), plain)


def test_fused_qkv_is_not_taken_for_cross_attention_or_some_queries():
    layer, inputs, context = _attention_layer(), _tokens(), _tokens(seed=2, shape=(2, 5, 32))
    plain = [to_numpy(layer(inputs, context=context)), to_numpy(layer(inputs, num_queries=3))]
    with training_forms.using(fused_qkv=True):
        fused = [to_numpy(layer(inputs, context=context)), to_numpy(layer(inputs, num_queries=3))]
    for want, got in zip(plain, fused):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("policy, tolerance", [("float32", 1e-5), ("mixed_bfloat16", 2e-2)])
def test_attention_kernel_in_training_equals_the_einsum_form(monkeypatch, policy, tolerance):
    keras.mixed_precision.set_global_policy(policy)
    layer, inputs = _attention_layer(), _tokens()
    plain = _outputs_and_gradients(layer, inputs, training=True)
    kernel_calls = _count_calls(monkeypatch, ops, "dot_product_attention")
    with training_forms.using(attention_kernel=True):
        fast = _outputs_and_gradients(layer, inputs, training=True)
    expected = 2 if fast_paths.dot_product_attention_available() else 0
    assert len(kernel_calls) == expected, "the path taken is not the one chosen"
    _assert_close(plain, fast, tolerance)


def test_attention_kernel_is_not_taken_under_attention_dropout(monkeypatch):
    layer, inputs = _attention_layer(dropout=0.1), _tokens()
    kernel_calls = _count_calls(monkeypatch, ops, "dot_product_attention")
    with training_forms.using(attention_kernel=True):
        layer(inputs, training=True)
        assert not kernel_calls
        layer(inputs, training=False)
    assert len(kernel_calls) == (1 if fast_paths.dot_product_attention_available() else 0)


def test_attention_kernel_on_a_gpu_takes_the_padded_kernel(monkeypatch):
    """On a JAX GPU, training attention goes to `jax_kernels.padded_attention` (here through
    XLA's implementation of it, the cuDNN kernel needing the GPU), never to Keras' silent
    fallback; inference keeps `ops.dot_product_attention`."""
    from vit_keras.fast_paths import jax_kernels

    layer, inputs = _attention_layer(), _tokens()
    plain = _outputs_and_gradients(layer, inputs, training=True)
    padded = jax_kernels.padded_attention
    monkeypatch.setattr(fast_paths, "_jax_gpu", lambda: True)
    monkeypatch.setattr(jax_kernels, "padded_attention", lambda *args: padded(
        *args, implementation="xla"))
    padded_calls = _count_calls(monkeypatch, jax_kernels, "padded_attention")
    with training_forms.using(attention_kernel=True):
        fast = _outputs_and_gradients(layer, inputs, training=True)
    on_jax = fast_paths.dot_product_attention_available()
    assert len(padded_calls) == (2 if on_jax else 0), "the path taken is not the one chosen"
    _assert_close(plain, fast, 1e-5)


@pytest.mark.parametrize("policy, tolerance", [("float32", 1e-5), ("mixed_bfloat16", 2e-2)])
def test_lean_activations_give_the_plain_step(monkeypatch, tiny_config, policy, tolerance):
    """GELU and LayerNorm keeping only their inputs: a whole model's loss and gradients; the
    lean kernels are taken on JAX, the only backend they are for."""
    from vit_keras.fast_paths import jax_kernels

    keras.mixed_precision.set_global_policy(policy)
    config = tiny_config.replace(classifier="gap", num_layers=1)  # eager JAX grads are slow
    images = random_images(config, batch=2)

    def run():
        keras.utils.set_random_seed(0)
        model = randomize_weights(VisionTransformer(config), stddev=0.1)

        def loss(inputs):
            return ops.sum(ops.square(ops.cast(model(inputs, training=True), "float32")))

        value, gradients = value_and_gradients(loss, model.trainable_weights, [images])
        return [np.asarray(value).reshape(1), *gradients]

    plain = run()
    gelus = _count_calls(monkeypatch, jax_kernels, "gelu")
    norms = _count_calls(monkeypatch, jax_kernels, "layer_norm")
    with training_forms.using(lean_activations=True):
        lean = run()
    on_jax = keras.backend.backend() == "jax"
    assert (len(gelus) >= config.num_layers) == on_jax
    assert (len(norms) >= 2 * config.num_layers) == on_jax
    _assert_close(plain, lean, tolerance)


def test_every_form_together_trains_a_model_as_the_plain_step(monkeypatch, tiny_config):
    """Loss and gradients of a whole model's training call, remat='dots' included; each form
    is taken (the policy on JAX, where it exists)."""
    config = tiny_config.replace(classifier="gap", drop_path_rate=0.1)
    images = random_images(config, batch=3)

    def run(model_config):
        keras.utils.set_random_seed(0)
        model = randomize_weights(VisionTransformer(model_config), stddev=0.1)

        def loss(inputs):
            return ops.sum(ops.square(model(inputs, training=True)))

        value, gradients = value_and_gradients(loss, model.trainable_weights, [images])
        return [np.asarray(value).reshape(1), *gradients]

    plain = run(config)
    fused = _count_calls(monkeypatch, training_forms, "fused_self_attention_projections")
    policies = _count_calls(monkeypatch, training_forms, "checkpointed")
    kernels = _count_calls(monkeypatch, ops, "dot_product_attention")
    with training_forms.using(fused_qkv=True, attention_kernel=True, lean_activations=True):
        fast = run(config.replace(remat="dots"))
    blocks = config.num_layers
    assert len(fused) >= blocks and len(policies) >= blocks
    if fast_paths.dot_product_attention_available():
        assert len(kernels) >= blocks
    _assert_close(plain, fast, 1e-5)


def test_forms_are_validated_and_restored():
    with pytest.raises(ValueError, match="fused_qkv must be True or False, got 'yes'"):
        TrainingForms(fused_qkv="yes")
    with pytest.raises(TypeError, match="expected a TrainingForms, got dict"):
        training_forms.set_forms({"fused_qkv": True})
    with pytest.raises(ValueError, match="remat policy must be one of .*'dots'.*, got 'all'"):
        training_forms.checkpointed(lambda x: x, "all")
    with training_forms.using(fused_qkv=True) as forms:
        assert forms == TrainingForms(fused_qkv=True) == training_forms.current()
        with training_forms.using(attention_kernel=True):
            assert training_forms.current() == TrainingForms(True, True, False)
        assert training_forms.current() == TrainingForms(fused_qkv=True)
    assert training_forms.current() == TrainingForms()
