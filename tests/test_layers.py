"""Each layer computes what the official Flax model computes (checked against NumPy)."""

import math

import keras
import numpy as np
import pytest
from helpers import random_images, run_layer_test, to_numpy
from keras import ops

from vit_keras import EncoderBlock, MultiHeadSelfAttention, PatchEmbedding, VisionTransformer
from vit_keras.core import (deit, heads, layers, masked_patch, normalization, posemb, resnet,
                            stems)
from vit_keras.intermediates import ClassTokenOf, SplitTokens
from vit_keras.tasks.detect import model as detection
from vit_keras.tasks.segment.model import ResizeToImage, Upsample, ViTSegmenter
from vit_keras.tasks.clip import layers as spacetime
from vit_keras.tasks.clip.model import SpaceTimeViT
from vit_keras.core.patch_dropout import PatchDropout
from vit_keras.core.remat import RematEncoderBlock
from vit_keras.mobilevit import layers as mobilevit
from vit_keras.mobilevit.model import MobileViT


def _layer_norm(x, scale, bias, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _attention(x, layer):
    q = np.einsum("btd,dnh->btnh", x, to_numpy(layer.query.kernel)) + to_numpy(layer.query.bias)
    k = np.einsum("btd,dnh->btnh", x, to_numpy(layer.key.kernel)) + to_numpy(layer.key.bias)
    v = np.einsum("btd,dnh->btnh", x, to_numpy(layer.value.kernel)) + to_numpy(layer.value.bias)
    logits = np.einsum("btnh,bsnh->bnts", q / math.sqrt(q.shape[-1]), k)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    context = np.einsum("bnts,bsnh->btnh", probs, v)
    return np.einsum("btnh,nhd->btd", context, to_numpy(layer.out.kernel)) + to_numpy(layer.out.bias)


def test_patch_embedding_equals_flatten_plus_dense():
    rng = np.random.default_rng(0)
    images = rng.normal(size=(2, 32, 48, 3)).astype("float32")
    layer = PatchEmbedding(hidden_size=8, patch_size=16)
    layer.build(images.shape)
    layer.projection.bias.assign(rng.normal(size=8).astype("float32"))
    out = to_numpy(layer(images))
    # Row-major patches, each flattened (row, col, channel) and multiplied by the kernel.
    patches = images.reshape(2, 2, 16, 3, 16, 3).transpose(0, 1, 3, 2, 4, 5).reshape(2, 6, -1)
    expected = (patches @ to_numpy(layer.projection.kernel).reshape(-1, 8)
                + to_numpy(layer.projection.bias))
    np.testing.assert_allclose(out, expected, atol=1e-4)


def test_attention_matches_reference():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 12)).astype("float32")
    layer = MultiHeadSelfAttention(num_heads=3)
    layer.build(x.shape)
    for weight in layer.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    out, scores = layer(x, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(out), _attention(x, layer), atol=1e-5)
    assert scores.shape == (2, 3, 5, 5)
    np.testing.assert_allclose(to_numpy(ops.sum(scores, -1)), 1.0, atol=1e-6)


def test_encoder_block_is_pre_ln_with_official_epsilon_and_tanh_gelu():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 5, 12)).astype("float32")
    block = EncoderBlock(num_heads=3, mlp_dim=20)
    block.build(x.shape)
    for weight in block.weights:
        weight.assign(rng.normal(0, 0.3, weight.shape).astype("float32"))
    ln0, ln2 = block.layer_norm_0, block.layer_norm_2
    h = x + _attention(_layer_norm(x, to_numpy(ln0.gamma), to_numpy(ln0.beta)), block.attention)
    y = _layer_norm(h, to_numpy(ln2.gamma), to_numpy(ln2.beta))
    mlp = block.mlp
    y = _gelu_tanh(y @ to_numpy(mlp.dense_0.kernel) + to_numpy(mlp.dense_0.bias))
    y = y @ to_numpy(mlp.dense_1.kernel) + to_numpy(mlp.dense_1.bias)
    np.testing.assert_allclose(to_numpy(block(x)), h + y, atol=1e-4)
    out, scores = block(x, return_attention_scores=True)
    np.testing.assert_allclose(to_numpy(out), h + y, atol=1e-4)
    assert scores.shape == (2, 3, 5, 5)


@pytest.mark.parametrize("block_cls", [EncoderBlock, RematEncoderBlock])
@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_a_blocks_stated_output_spec_is_its_calls(block_cls, policy):
    """The block states its outputs' shapes and dtypes (a model's construction then skips
    tracing each block): those Keras finds by tracing the call, in every form; a size the
    trace leaves unknown (TensorFlow's, of the first tokens of any number) is the size a call
    gives."""
    block = block_cls(num_heads=2, mlp_dim=8, locality=block_cls is EncoderBlock, dtype=policy)
    block.build((2, None, 4))
    for tokens in (5, None):
        inputs = keras.KerasTensor((2, tokens, 4), block.compute_dtype)  # as __call__ casts
        for options in ({}, dict(output_tokens=1), dict(return_attention_scores=True),
                        dict(output_tokens=3, return_attention_scores=True)):
            stated = keras.tree.flatten(block.compute_output_spec(inputs, **options))
            traced = keras.tree.flatten(keras.Operation.compute_output_spec(block, inputs,
                                                                            **options))
            called = keras.tree.flatten(block(np.zeros((2, 7, 4), "float32"), **options))
            assert [spec.dtype for spec in stated] == [spec.dtype for spec in traced], options
            for spec, trace, call in zip(stated, traced, called):
                for size, traced_size, called_size in zip(spec.shape, trace.shape, call.shape):
                    allowed = (None, called_size) if traced_size is None else (traced_size,)
                    assert size in allowed, (options, spec, trace)


def test_weight_paths_read_like_checkpoint_keys():
    block = EncoderBlock(num_heads=2, mlp_dim=8, name="encoderblock_0")
    block.build((1, 3, 4))
    paths = {w.path for w in block.weights}
    assert "encoderblock_0/LayerNorm_0/gamma" in paths
    assert "encoderblock_0/MultiHeadDotProductAttention_1/query/kernel" in paths
    assert "encoderblock_0/MlpBlock_3/Dense_1/kernel" in paths


# The layer contract (helpers.run_layer_test) for every registered layer: config and
# serialization round trips, .keras save/load in safe mode, a training step, mixed precision.
# Tiny shapes: batch 2, 5 or 6 tokens of width 8.
TOKENS = np.random.default_rng(5).normal(size=(2, 5, 8)).astype("float32")
GRID_TOKENS = np.random.default_rng(6).normal(size=(2, 6, 8)).astype("float32")  # a 2x3 grid
CORRUPTION = np.array([[-1, -2, 3, 0, -2, 5], [4, -1, -1, -2, 1, -2]], "int32")
FEATURES = np.random.default_rng(7).normal(size=(2, 4, 4, 8)).astype("float32")
CLIPS = np.random.default_rng(8).normal(size=(2, 4, 8, 8, 3)).astype("float32")
FRAME_TOKENS = np.random.default_rng(9).normal(size=(2, 2, 4, 8)).astype("float32")
MAPS = np.random.default_rng(10).normal(size=(2, 4, 6, 8)).astype("float32")  # a 4x6 map

LAYER_CASES = [
    # (class, init kwargs, input, output shape(s), trainable weights, extra run_layer_test args)
    pytest.param(layers.PatchEmbedding, dict(hidden_size=8, patch_size=4),
                 random_images((8, 12)), (2, 6, 8), 2, {}, id="PatchEmbedding"),
    # Two conv + BatchNorm pairs (their moving statistics are the 4 non-trainable weights).
    pytest.param(stems.ConvStem, dict(hidden_size=8, patch_size=4), random_images((8, 12)),
                 (2, 6, 8), 8, dict(expected_num_non_trainable_weights=4), id="ConvStem"),
    pytest.param(stems.ShiftedPatchEmbedding, dict(hidden_size=8, patch_size=4),
                 random_images((8, 12)), (2, 6, 8), 4, {}, id="ShiftedPatchEmbedding"),
    pytest.param(layers.ClassToken, {}, TOKENS, (2, 6, 8), 1, {}, id="ClassToken"),
    pytest.param(layers.PositionEmbedding, {}, TOKENS, (2, 5, 8), 1, {}, id="PositionEmbedding"),
    pytest.param(layers.MLPBlock, dict(mlp_dim=16, dropout_rate=0.1, gelu_approximate=False),
                 TOKENS, (2, 5, 8), 4, {}, id="MLPBlock"),
    pytest.param(layers.MLPBlock, dict(mlp_dim=16, activation="swiglu"), TOKENS, (2, 5, 8), 4,
                 {}, id="MLPBlock-swiglu"),
    pytest.param(layers.EncoderBlock, dict(num_heads=2, mlp_dim=16, activation="quick_gelu",
                                           layer_norm_epsilon=1e-5), TOKENS, (2, 5, 8), 16, {},
                 id="EncoderBlock-quick_gelu"),
    # Prefix = the class token and the 2 registers; the 2 patches as a 1x2 grid.
    pytest.param(SplitTokens, dict(num_prefix_tokens=1, num_register_tokens=2,
                                            grid_size=(1, 2)), TOKENS,
                 [(2, 1, 2, 8), (2, 3, 8)], 0, {}, id="SplitTokens"),
    pytest.param(ClassTokenOf, {}, TOKENS, (2, 8), 0, {}, id="ClassTokenOf"),
    # The segmentation heads' resizes: a 2x step, and to the images' size (the images give
    # only their shape, so they are integers here: no gradient is owed to them).
    pytest.param(Upsample, dict(factor=2), FEATURES, (2, 8, 8, 8), 0, {}, id="Upsample"),
    pytest.param(ResizeToImage, {}, [FEATURES, np.zeros((2, 8, 12, 3), "int32")],
                 (2, 8, 12, 8), 0, {}, id="ResizeToImage"),
    # 2 LayerNorms (2 each), attention (q, k, v, out: kernel and bias each), MLP (4).
    pytest.param(layers.EncoderBlock, dict(num_heads=2, mlp_dim=16), TOKENS,
                 [(2, 5, 8), (2, 2, 5, 5)], 16,
                 dict(call_kwargs=dict(return_attention_scores=True),
                      expected_mixed_output_dtype=["bfloat16", "float32"]),  # float32 softmax
                 id="EncoderBlock-scores"),
    pytest.param(layers.EncoderBlock,
                 dict(num_heads=2, mlp_dim=16, dropout_rate=0.1, attention_dropout_rate=0.1,
                      gelu_approximate=False, drop_path_rate=0.2, layer_scale_init=0.1),
                 TOKENS, (2, 1, 8), 18, dict(call_kwargs=dict(output_tokens=1)),
                 id="EncoderBlock-options"),
    pytest.param(layers.EncoderBlock, dict(num_heads=2, mlp_dim=16, locality=True), TOKENS,
                 [(2, 5, 8), (2, 2, 5, 5)], 17,
                 dict(call_kwargs=dict(return_attention_scores=True),
                      expected_mixed_output_dtype=["bfloat16", "float32"]),
                 id="EncoderBlock-locality"),
    pytest.param(RematEncoderBlock, dict(num_heads=2, mlp_dim=16, dropout_rate=0.1,
                                         drop_path_rate=0.2), TOKENS, (2, 5, 8), 16, {},
                 id="RematEncoderBlock"),
    pytest.param(layers.DropPath, dict(rate=0.5, seed=1), TOKENS, (2, 5, 8), 0, {},
                 id="DropPath"),
    # Training shortens the sequence by design (tests/test_memory_savers.py checks it).
    pytest.param(PatchDropout, dict(rate=0.5, num_prefix_tokens=1, seed=1), TOKENS, (2, 5, 8),
                 0, dict(run_training_check=False), id="PatchDropout"),
    pytest.param(layers.LayerScale, dict(init_value=0.1), TOKENS, (2, 5, 8), 1, {},
                 id="LayerScale"),
    pytest.param(layers.TokenPooling, dict(mode="token"), TOKENS, (2, 8), 0, {},
                 id="TokenPooling-token"),
    pytest.param(layers.TokenPooling, dict(mode="gap", start=1, stop=4), TOKENS, (2, 8), 0, {},
                 id="TokenPooling-gap-range"),
    pytest.param(layers.RegisterTokens, dict(num_tokens=2), TOKENS, (2, 7, 8), 1, {},
                 id="RegisterTokens"),
    pytest.param(posemb.SinCosPositionEmbedding, dict(grid_size=(2, 3)), GRID_TOKENS,
                 (2, 6, 8), 0, {}, id="SinCosPositionEmbedding"),
    pytest.param(posemb.Learned2DPositionEmbedding, dict(grid_size=(2, 3)), GRID_TOKENS,
                 (2, 6, 8), 2, {}, id="Learned2DPositionEmbedding"),
    pytest.param(deit.DistillationToken, {}, TOKENS, (2, 6, 8), 1, {}, id="DistillationToken"),
    pytest.param(masked_patch.MaskedPatchCorruption, {}, [GRID_TOKENS, CORRUPTION], (2, 6, 8),
                 1, {}, id="MaskedPatchCorruption"),
    pytest.param(masked_patch.PatchOutputs, dict(start=1, count=4), GRID_TOKENS, (2, 4, 8), 0,
                 {}, id="PatchOutputs"),
    pytest.param(normalization.LayerNorm, dict(epsilon=1e-6), TOKENS, (2, 5, 8), 2, {},
                 id="LayerNorm"),
    pytest.param(normalization.GroupNorm, dict(groups=4, epsilon=1e-6), FEATURES, (2, 4, 4, 8),
                 2, {}, id="GroupNorm"),
    pytest.param(resnet.StdConv, dict(filters=4, kernel_size=3, strides=2),
                 random_images((5, 5)), (2, 3, 3, 4), 1, {}, id="StdConv"),
    # conv1-3 and conv_proj kernels, and scale + bias of gn1-3 and gn_proj.
    pytest.param(resnet.ResidualUnit, dict(features=32, strides=2), FEATURES, (2, 2, 2, 128), 12,
                 {}, id="ResidualUnit"),
    # Root (conv_root, gn_root: 3 weights), then one 64-wide unit with a projection (12).
    pytest.param(resnet.ResNetStem, dict(block_counts=(1,)), random_images(16), (2, 4, 4, 256),
                 15, {}, id="ResNetStem"),
    # The detection head: the memory (projection + LayerNorm), its constant sine positions and
    # patch anchors; learned queries (content, anchors); proposals chosen among the tokens
    # (box MLP 6, class logits 2); a decoder block (4 LayerNorms, 2 attentions, MLP, the
    # anchor MLP 4, box MLP 6, class logits 2). Anchors and box outputs stay float32.
    pytest.param(detection.DecoderMemory, dict(width=8), FEATURES,
                 [(2, 16, 8), (2, 16, 8), (2, 16, 4)], 4,
                 dict(expected_mixed_output_dtype=["bfloat16", "bfloat16", "float32"]),
                 id="DecoderMemory"),
    # Its input gives only the batch size (no gradient flows back to it).
    pytest.param(detection.ObjectQueries, dict(num_queries=3, width=8), TOKENS,
                 [(2, 3, 8), (2, 3, 4)], 2,
                 dict(expected_mixed_output_dtype=["bfloat16", "float32"],
                      run_training_check=False), id="ObjectQueries"),
    pytest.param(detection.ProposalQueries, dict(num_queries=3, num_classes=2, width=8),
                 [TOKENS, np.zeros((2, 5, 4), "float32")], [(2, 3, 8), (2, 3, 4), (2, 3, 6)], 8,
                 dict(expected_mixed_output_dtype=["bfloat16", "float32", "float32"]),
                 id="ProposalQueries"),
    pytest.param(detection.DecoderLayer, dict(num_classes=2, width=8, num_heads=2, mlp_dim=16),
                 [TOKENS[:, :3], np.zeros((2, 3, 4), "float32"), TOKENS,
                  np.zeros((2, 5, 8), "float32")], [(2, 3, 8), (2, 3, 4), (2, 3, 6)], 40,
                 dict(expected_mixed_output_dtype=["bfloat16", "float32", "float32"]),
                 id="DecoderLayer"),
    pytest.param(detection.StackLayers, {}, [TOKENS, TOKENS], (2, 2, 5, 8), 0, {},
                 id="StackLayers"),
    # The space-time model's: 4 frames of 8x8 px in tubelets of 2 x 4 x 4 (kernel, bias); the
    # positions (spatial and temporal tables, the class token); the temporal attention (a
    # LayerNorm, the attention's 4 projections); the reshapes between clips and frames.
    pytest.param(spacetime.TubeletEmbedding, dict(hidden_size=8, patch_size=4, tubelet_frames=2),
                 CLIPS, (2, 2, 4, 8), 2, {}, id="TubeletEmbedding"),
    pytest.param(spacetime.SpaceTimeEmbedding, dict(frames=2, num_prefix_tokens=1),
                 FRAME_TOKENS, [(2, 2, 4, 8), (2, 1, 8)], 3, {}, id="SpaceTimeEmbedding-cls"),
    pytest.param(spacetime.SpaceTimeEmbedding, dict(frames=2), FRAME_TOKENS, (2, 2, 4, 8), 2,
                 {}, id="SpaceTimeEmbedding"),
    pytest.param(spacetime.TemporalAttention, dict(num_heads=2, dropout_rate=0.1),
                 FRAME_TOKENS, (2, 2, 4, 8), 10, {}, id="TemporalAttention"),
    pytest.param(spacetime.FoldFrames, {}, [FRAME_TOKENS, TOKENS[:, :1]], (4, 5, 8), 0, {},
                 id="FoldFrames"),
    pytest.param(spacetime.UnfoldFrames, dict(frames=2, num_prefix_tokens=1), TOKENS,
                 [(1, 2, 4, 8), (1, 1, 8)], 0, {}, id="UnfoldFrames"),
    pytest.param(spacetime.JoinFrames, {}, [FRAME_TOKENS, TOKENS[:, :1]], (2, 10, 8), 0, {},
                 id="JoinFrames"),
    pytest.param(spacetime.MergeFrameTokens, dict(frames=2), np.concatenate([TOKENS] * 2, 1),
                 (2, 9, 8), 0, {}, id="MergeFrameTokens"),
    # MobileViT's: a map's 2x2 patches and back, the odd-side resize, v2's linear attention.
    pytest.param(mobilevit.UnfoldPatches, {}, MAPS, (2, 4, 6, 8), 0, {}, id="UnfoldPatches"),
    pytest.param(mobilevit.FoldPatches, dict(height=4, width=6), MAPS, (2, 4, 6, 8), 0, {},
                 id="FoldPatches"),
    pytest.param(mobilevit.BilinearResize, dict(height=5, width=7, align_corners=True), MAPS,
                 (2, 5, 7, 8), 0, {}, id="BilinearResize"),
    pytest.param(mobilevit.LinearSelfAttention, dict(dropout_rate=0.1), MAPS, (2, 4, 6, 8), 4,
                 {}, id="LinearSelfAttention"),
    pytest.param(layers.MLPBlock, dict(mlp_dim=16, activation="silu"), TOKENS, (2, 5, 8), 4,
                 {}, id="MLPBlock-silu"),
]

# Being rewritten elsewhere, or whole models held by their own files (test_clip_model.py).
NOT_COVERED_HERE = {heads.MAPHead, MultiHeadSelfAttention, VisionTransformer, ViTSegmenter,
                    detection.ViTDetector, SpaceTimeViT, MobileViT}


@pytest.mark.parametrize("layer_cls,init_kwargs,input_data,output_shape,trainable,extra",
                         LAYER_CASES)
def test_layer_contract(layer_cls, init_kwargs, input_data, output_shape, trainable, extra,
                        tmp_path):
    extra = dict(extra)
    non_trainable = extra.pop("expected_num_non_trainable_weights", 0)
    run_layer_test(layer_cls, init_kwargs, input_data, expected_output_shape=output_shape,
                   expected_num_trainable_weights=trainable,
                   expected_num_non_trainable_weights=non_trainable, tmp_path=tmp_path, **extra)


def test_every_registered_layer_has_a_contract_case():
    registered = {obj for name, obj in keras.saving.get_custom_objects().items()
                  if name.startswith("vit_keras>") and isinstance(obj, type)
                  and issubclass(obj, keras.layers.Layer)}
    covered = {case.values[0] for case in LAYER_CASES}
    assert covered <= registered
    missing = registered - covered - NOT_COVERED_HERE
    assert not missing, f"registered layers without a run_layer_test case: {missing}"
    assert len(registered) >= 20  # the import above registered every module's layers
