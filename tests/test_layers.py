"""Each layer computes what the official Flax model computes (checked against NumPy)."""

import math

import numpy as np
from keras import ops

from vit_keras import EncoderBlock, MultiHeadSelfAttention, PatchEmbedding


def _layer_norm(x, scale, bias, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _attention(x, layer):
    q = np.einsum("btd,dnh->btnh", x, layer.query_kernel.numpy()) + layer.query_bias.numpy()
    k = np.einsum("btd,dnh->btnh", x, layer.key_kernel.numpy()) + layer.key_bias.numpy()
    v = np.einsum("btd,dnh->btnh", x, layer.value_kernel.numpy()) + layer.value_bias.numpy()
    logits = np.einsum("btnh,bsnh->bnts", q / math.sqrt(q.shape[-1]), k)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = np.einsum("bnts,bsnh->btnh", probs, v)
    return np.einsum("btnh,nhd->btd", context, layer.out_kernel.numpy()) + layer.out_bias.numpy()


def test_patch_embedding_equals_flatten_plus_dense():
    rng = np.random.default_rng(0)
    images = rng.normal(size=(2, 32, 48, 3)).astype("float32")
    layer = PatchEmbedding(hidden_size=8, patch_size=16)
    layer.build(images.shape)
    layer.bias.assign(rng.normal(size=8).astype("float32"))
    out = layer(images).numpy()
    # Row-major patches, each flattened (row, col, channel) and multiplied by the kernel.
    patches = images.reshape(2, 2, 16, 3, 16, 3).transpose(0, 1, 3, 2, 4, 5).reshape(2, 6, -1)
    expected = patches @ layer.kernel.numpy().reshape(-1, 8) + layer.bias.numpy()
    np.testing.assert_allclose(out, expected, atol=1e-4)


def test_attention_matches_reference():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 12)).astype("float32")
    layer = MultiHeadSelfAttention(num_heads=3)
    layer.build(x.shape)
    for weight in layer.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    out, scores = layer(x, return_attention_scores=True)
    np.testing.assert_allclose(out.numpy(), _attention(x, layer), atol=1e-5)
    assert scores.shape == (2, 3, 5, 5)
    np.testing.assert_allclose(ops.sum(scores, -1).numpy(), 1.0, atol=1e-6)


def test_encoder_block_is_pre_ln_with_official_epsilon_and_tanh_gelu():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 5, 12)).astype("float32")
    block = EncoderBlock(num_heads=3, mlp_dim=20)
    block.build(x.shape)
    for weight in block.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    ln0, ln2 = block.layer_norm_0, block.layer_norm_2
    h = x + _attention(_layer_norm(x, ln0.gamma.numpy(), ln0.beta.numpy()), block.attention)
    y = _layer_norm(h, ln2.gamma.numpy(), ln2.beta.numpy())
    mlp = block.mlp
    y = _gelu_tanh(y @ mlp.dense_0.kernel.numpy() + mlp.dense_0.bias.numpy())
    y = y @ mlp.dense_1.kernel.numpy() + mlp.dense_1.bias.numpy()
    np.testing.assert_allclose(block(x).numpy(), h + y, atol=1e-4)
    out, scores = block(x, return_attention_scores=True)
    np.testing.assert_allclose(out.numpy(), h + y, atol=1e-4)
    assert scores.shape == (2, 3, 5, 5)


def test_weight_paths_read_like_checkpoint_keys():
    block = EncoderBlock(num_heads=2, mlp_dim=8, name="encoderblock_0")
    block.build((1, 3, 4))
    paths = {w.path for w in block.weights}
    assert "encoderblock_0/LayerNorm_0/gamma" in paths
    assert "encoderblock_0/MultiHeadDotProductAttention_1/query_kernel" in paths
    assert "encoderblock_0/MlpBlock_3/Dense_1/kernel" in paths
