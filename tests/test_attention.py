"""One attention layer serves the encoder blocks (self-attention) and the MAP head (a learned
probe attending to the tokens): both checked against plain NumPy."""

import math

import keras
import numpy as np
import pytest
from helpers import dtype_name, requires_tf, run_layer_test, to_numpy, value_and_gradients
from keras import ops

from vit_keras import VisionTransformer, fast_paths, load_weights
from vit_keras.core.attention import MultiHeadSelfAttention
from vit_keras.fast_paths import export_forms
from vit_keras.checkpoints import keys, official
from vit_keras.core.heads import MAPHead


def _randomize(layer, seed=0, stddev=0.3):
    rng = np.random.default_rng(seed)
    for weight in layer.weights:
        weight.assign(rng.normal(0, stddev, weight.shape).astype("float32"))


def _numpy(variable):
    return np.asarray(to_numpy(variable), dtype="float64")


def _attention(queries, context, layer):
    """Multi-head dot-product attention of `queries` over `context`, in float64."""
    def project(x, part):
        return (np.einsum("btd,dnh->btnh", x, _numpy(getattr(layer, part).kernel))
                + _numpy(getattr(layer, part).bias))

    q, k, v = project(queries, "query"), project(context, "key"), project(context, "value")
    logits = np.einsum("btnh,bsnh->bnts", q, k) / math.sqrt(q.shape[-1])
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    attended = np.einsum("bnts,bsnh->btnh", probs, v)
    return np.einsum("btnh,nhd->btd", attended, _numpy(layer.out.kernel)) + _numpy(layer.out.bias)


def _map_head(tokens, head):
    """big_vision's MAPHead: y = attention(probe, tokens); y + MLP(LayerNorm(y)), in float64."""
    probe = np.broadcast_to(_numpy(head.probe), (tokens.shape[0], 1, tokens.shape[-1]))
    pooled = _attention(probe, tokens, head.attention)
    mean, var = pooled.mean(-1, keepdims=True), pooled.var(-1, keepdims=True)
    normed = ((pooled - mean) / np.sqrt(var + 1e-6) * _numpy(head.layer_norm.gamma)
              + _numpy(head.layer_norm.beta))
    hidden = normed @ _numpy(head.mlp.dense_0.kernel) + _numpy(head.mlp.dense_0.bias)
    hidden = 0.5 * hidden * (1 + np.tanh(math.sqrt(2 / math.pi)
                                         * (hidden + 0.044715 * hidden ** 3)))
    mlp = hidden @ _numpy(head.mlp.dense_1.kernel) + _numpy(head.mlp.dense_1.bias)
    return (pooled + mlp)[:, 0]


def _tokens(shape, seed=1):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _built_map_head(width=12, heads=3, mlp_dim=16):
    head = MAPHead(num_heads=heads, mlp_dim=mlp_dim)
    head.build((None, 7, width))
    _randomize(head)
    return head


@pytest.mark.parametrize("layer_cls,init_kwargs,output_shape,trainable", [
    (MultiHeadSelfAttention, dict(num_heads=2), (2, 5, 8), 8),
    # probe, 8 attention weights, LayerNorm scale + bias, 2 Dense kernels + biases.
    (MAPHead, dict(num_heads=2, mlp_dim=16), (2, 8), 15),
], ids=["MultiHeadSelfAttention", "MAPHead"])
def test_layer_contract(layer_cls, init_kwargs, output_shape, trainable, tmp_path):
    run_layer_test(layer_cls, init_kwargs, _tokens((2, 5, 8)), expected_output_shape=output_shape,
                   expected_num_trainable_weights=trainable,
                   expected_num_non_trainable_weights=0, tmp_path=tmp_path)


def test_map_head_equals_numpy_attention_pooling():
    head = _built_map_head()
    tokens = _tokens((2, 7, 12))
    np.testing.assert_allclose(to_numpy(head(tokens)), _map_head(tokens, head), atol=1e-5)


def test_map_head_weights_read_like_big_vision():
    head = _built_map_head()
    paths = [weight.path for weight in head.weights]
    assert paths[0] == "map_head/probe"
    assert "map_head/MultiHeadDotProductAttention_0/query/kernel" in paths
    assert "map_head/LayerNorm_0/gamma" in paths and "map_head/MlpBlock_0/Dense_1/bias" in paths
    assert len(paths) == 1 + 8 + 2 + 4


def test_map_head_exempts_its_probe_and_attention_biases_from_weight_decay():
    head = _built_map_head()
    attention = head.attention
    assert head.no_weight_decay() == [head.probe, attention.query.bias, attention.key.bias,
                                      attention.value.bias]


def test_context_equal_to_the_inputs_is_self_attention():
    layer = MultiHeadSelfAttention(num_heads=2)
    x = _tokens((2, 5, 8))
    layer.build(x.shape)
    _randomize(layer)
    np.testing.assert_array_equal(to_numpy(layer(x, context=x)), to_numpy(layer(x)))


def test_cross_attention_equals_numpy():
    layer = MultiHeadSelfAttention(num_heads=2)
    queries, context = _tokens((2, 3, 8), seed=1), _tokens((2, 6, 8), seed=2)
    layer.build(queries.shape)
    _randomize(layer)
    out, scores = layer(queries, context=context, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(out), _attention(queries, context, layer), atol=1e-5)
    assert scores.shape == (2, 2, 3, 6)
    np.testing.assert_allclose(to_numpy(scores).sum(-1), 1.0, atol=1e-6)


@requires_tf
def test_cross_attention_of_integer_export_equals_the_plain_graph():
    """Large enough heads take the unrolled FULLY_CONNECTED form in cross-attention too."""
    import tensorflow as tf

    layer = MultiHeadSelfAttention(num_heads=2)
    queries, context = _tokens((2, 8, 32), seed=1), _tokens((2, 256, 32), seed=2)
    assert 8 * 256 * 16 >= export_forms.UNROLL_MIN_MACS_PER_HEAD
    layer.build(queries.shape)
    _randomize(layer)
    plain = to_numpy(layer(queries, context=context))
    with export_forms.tflite_form(integer=True):
        function = tf.function(lambda q, c: layer(q, context=c))
        graph = function.get_concrete_function(tf.TensorSpec(queries.shape),
                                               tf.TensorSpec(context.shape)).graph
        unrolled = to_numpy(function(queries, context))
    np.testing.assert_allclose(unrolled, plain, atol=1e-5)
    assert "BatchMatMulV2" not in [op.type for op in graph.get_operations()]


def test_mixed_bfloat16_map_head_is_close_to_float32_with_a_float32_softmax():
    reference = _built_map_head()
    tokens = _tokens((2, 7, 12))
    expected = to_numpy(reference(tokens))
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    head = MAPHead(num_heads=3, mlp_dim=16)
    head.build((None, 7, 12))
    head.set_weights(reference.get_weights())
    pooled = head(tokens)
    assert dtype_name(pooled) == "bfloat16" and dtype_name(head.probe) == "float32"
    np.testing.assert_allclose(to_numpy(pooled).astype("float32"), expected, atol=0.03)
    probe = keras.ops.broadcast_to(keras.ops.cast(head.probe, "bfloat16"), (2, 1, 12))
    _, scores = head.attention(probe, context=tokens, return_attention_scores=True)
    assert dtype_name(scores) == "float32"


@pytest.mark.slow
def test_big_vision_map_checkpoint_loads(tiny_config, tmp_path):
    """A `params/` file with big_vision's MAPHead_0 tree loads into a classifier='map' model."""
    config = tiny_config.replace(classifier="map")
    source = VisionTransformer(config)
    _randomize(source, seed=3)
    tensors = {f"params/{name}": value for name, value in official.model_tensors(source).items()}
    tensors["params/pos_embedding"] = tensors.pop(f"params/{keys.POSEMB}")
    assert "params/MAPHead_0/MultiHeadDotProductAttention_0/out/kernel" in tensors
    path = str(tmp_path / "big_vision.npz")
    np.savez(path, **tensors)
    target = VisionTransformer(config)
    load_weights(target, path)
    images = np.random.default_rng(0).uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(to_numpy(target(images)), to_numpy(source(images)))


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("queries, keys", [(17, None), (1, 17)], ids=["self", "cross"])
def test_dot_product_attention_path_equals_the_plain_math(monkeypatch, policy, queries, keys):
    """The one-op path JAX takes (`keras.ops.dot_product_attention`) gives the einsum path's
    outputs and gradients, for self-attention and the MAP head's cross-attention, on every
    backend (the choice is forced both ways here)."""
    keras.mixed_precision.set_global_policy(policy)
    layer = MultiHeadSelfAttention(num_heads=4)
    inputs = [_tokens((2, queries, 32), seed=1)]
    if keys is not None:
        inputs.append(_tokens((2, keys, 32), seed=2))
    layer.build(inputs[0].shape)
    _randomize(layer)
    fast_calls = []
    fast_path = ops.dot_product_attention
    monkeypatch.setattr(ops, "dot_product_attention",
                        lambda *args, **kwargs: fast_calls.append(1) or fast_path(*args, **kwargs))

    def loss(*tensors):  # the inference call: the fast path never runs with dropout
        outputs = layer(tensors[0], context=tensors[1] if keys else None, training=False)
        return ops.sum(ops.square(ops.cast(outputs, "float32")))

    results = []
    for fast in (False, True):
        monkeypatch.setattr(fast_paths, "dot_product_attention_available", lambda: fast)
        fast_calls.clear()
        outputs = to_numpy(ops.cast(layer(*inputs[:1], context=inputs[1] if keys else None),
                                    "float32"))
        _, gradients = value_and_gradients(loss, layer.trainable_weights, inputs)
        assert len(fast_calls) == (2 if fast else 0), "the path taken is not the one chosen"
        results.append([outputs, *gradients])
    # Relative to the largest value of its kind: the key bias's true gradient is zero (softmax
    # ignores a shift of all logits), so its computed one is rounding noise of the others.
    # bfloat16 keeps 8 significant bits and the two paths round at different steps: on CPUs
    # without native bfloat16 (AVX2 only) the gradients through the softmax came 7% of the
    # largest apart; float32 holds the paths to 1e-5.
    tolerance = 1e-5 if policy == "float32" else 1e-1
    outputs_scale = max(1.0, np.abs(results[0][0].astype("float32")).max())
    gradients_scale = max(1.0, max(np.abs(g.astype("float32")).max() for g in results[0][1:]))
    for index, (plain, fast) in enumerate(zip(*results)):
        scale = outputs_scale if index == 0 else gradients_scale
        difference = np.abs(plain.astype("float32") - fast.astype("float32")).max()
        assert difference <= tolerance * scale, f"result {index}: {difference} (scale {scale})"
