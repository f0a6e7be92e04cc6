"""vit_keras.analysis.complexity: exact parameter counts, MACs against the ViT table and against
TensorFlow's profiler on the traced model graph."""

import keras
import pytest
from helpers import requires_tf, variant_params

from vit_keras import VARIANTS, VisionTransformer, get_variant
from vit_keras.analysis.complexity import count_params, estimate, format_table
from vit_keras.core.model import last_block_outputs

MATMUL_OPS = ["MatMul", "BatchMatMulV2", "Conv2D"]


def _profiled_flops(config, batch_size=1, op_types=None):
    """FLOPs TensorFlow's profiler counts in the traced forward graph of the model."""
    import tensorflow as tf

    model = VisionTransformer(config)
    height, width = config.image_hw
    spec = tf.TensorSpec((batch_size, height, width, config.channels))
    graph = tf.function(lambda images: model(images, training=False)).get_concrete_function(
        spec).graph
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    if op_types:
        options["account_type_regexes"] = op_types
    return tf.compat.v1.profiler.profile(graph, options=options).total_float_ops


@pytest.mark.parametrize("name", variant_params(sorted(VARIANTS), VARIANTS))
def test_params_equal_count_params_for_every_variant(name):
    # Variables made in a stateless scope stay uninitialised: no memory, only shapes.
    with keras.StatelessScope(initialize_variables=False):
        model = VisionTransformer(VARIANTS[name])
        assert count_params(VARIANTS[name]) == model.count_params()


@pytest.mark.parametrize("overrides", [
    dict(representation_size=16),
    dict(classifier="gap", image_size=(32, 48)),
    dict(channels=1, num_classes=3),
])
def test_params_equal_count_params_for_other_configs(tiny_config, overrides):
    config = tiny_config.replace(**overrides)
    assert estimate(config).params == VisionTransformer(config).count_params()


@pytest.mark.parametrize("name, gmacs", [("Ti/16", 1.25), ("S/16", 4.60), ("B/16", 17.56),
                                         ("B/32", 4.41), ("L/16", 61.55), ("H/14", 167.30)])
def test_macs_match_the_vit_table(name, gmacs):
    assert round(estimate(get_variant(name)).gmacs, 2) == gmacs


@requires_tf
@pytest.mark.parametrize("overrides, batch", [
    (dict(), 1),
    (dict(representation_size=16), 2),
    (dict(classifier="gap", image_size=(32, 48)), 3),
])
def test_flops_equal_the_profiled_matmuls_of_the_graph(tiny_config, overrides, batch):
    config = tiny_config.replace(**overrides)
    executed = estimate(config, batch_size=batch, output_tokens=last_block_outputs(config))
    assert executed.flops == _profiled_flops(config, batch, MATMUL_OPS)


@requires_tf
def test_flops_within_two_percent_of_the_whole_profiled_graph():
    # The profiler also counts bias adds, LayerNorm, softmax and GELU; they stay under 2%.
    config = get_variant("Ti/16")
    profiled = _profiled_flops(config)
    executed = estimate(config, output_tokens=last_block_outputs(config))
    assert abs(profiled / executed.flops - 1) < 0.02


def test_attention_grows_quadratically_with_tokens():
    config = get_variant("B/16")
    small, large = estimate(config), estimate(config, image_size=384)
    assert (large.tokens, small.tokens) == (577, 197)
    assert large.attention_macs / small.attention_macs == pytest.approx((577 / 197) ** 2)
    assert large.attention_matrix_elements == 12 * 577 ** 2
    assert large.attention_matrix_bytes == 4 * 12 * 577 ** 2
    assert large.params == small.params + (577 - 197) * 768   # only the position embedding grows


def test_batch_scales_linearly_and_bad_batch_is_rejected(tiny_config):
    one, eight = estimate(tiny_config), estimate(tiny_config, batch_size=8)
    assert eight.macs == 8 * one.macs and eight.flops == 2 * eight.macs
    assert eight.activation_bytes == 8 * one.activation_bytes
    assert eight.params == one.params
    half = estimate(tiny_config, bytes_per_element=2)
    assert 2 * half.activation_bytes == one.activation_bytes
    with pytest.raises(ValueError, match="batch_size"):
        estimate(tiny_config, batch_size=0)


def test_activation_memory_of_a_hand_counted_config(tiny_config):
    # 32x32x3 image; per block 8*T*D + 2*T*M + H*T^2 with T=17, D=32, M=64, H=4; then the final
    # norm input T*D, the pooled D and the 5 logits.
    per_block = 8 * 17 * 32 + 2 * 17 * 64 + 4 * 17 * 17
    elements = 32 * 32 * 3 + 2 * per_block + 17 * 32 + 32 + 5
    assert estimate(tiny_config).activation_bytes == 4 * elements


def test_format_table_has_one_row_per_resolution():
    config = get_variant("B/16")
    table = format_table([estimate(config, image_size=size) for size in (224, 384, 512)])
    lines = table.splitlines()
    assert len(lines) == 5 and "GMACs" in lines[0]
    assert "17.56" in lines[2] and "384x384" in lines[3] and "512x512" in lines[4]


def test_class_token_head_skips_most_of_the_last_block():
    config = get_variant("B/16")
    full, executed = estimate(config), estimate(config, output_tokens=1)
    assert full.gmacs == pytest.approx(17.56, abs=0.01)  # the paper's table is unchanged
    saved = 1 - executed.macs / full.macs
    assert 0.06 < saved < 0.08
    features = VisionTransformer(config.replace(image_size=32, patch_size=16), include_top=False)
    assert last_block_outputs(config, include_top=False) is None
    assert features.output.shape[1] == 5  # every token when the sequence itself is the output
