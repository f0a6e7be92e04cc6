"""Compares `vit_keras.analysis.complexity.estimate` with TensorFlow's profiler on real model graphs.

    python benchmarks/complexity_vs_profiler.py [VARIANT ...]      (default: Ti/16 S/16 B/16 B/32)

For each variant at 224 px it builds the model, traces one forward pass and prints the estimated
GMACs, the profiler's count of the matrix products only (should be identical), the profiler's
count of the whole graph (adds LayerNorm, softmax, GELU, bias adds) and their ratio.
"""

import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from vit_keras import VisionTransformer, get_variant  # noqa: E402
from vit_keras.analysis.complexity import estimate  # noqa: E402


def profiled_flops(graph, op_types=None):
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    if op_types:
        options["account_type_regexes"] = op_types
    return tf.compat.v1.profiler.profile(graph, options=options).total_float_ops


def main(variants):
    print(f"{'variant':>8} {'estimate GMACs':>15} {'profiled matmul GMACs':>22} "
          f"{'profiled all GMACs':>19} {'all / estimate':>15} {'seconds':>8}")
    for name in variants:
        start = time.time()
        config = get_variant(name)
        model = VisionTransformer(config)
        spec = tf.TensorSpec((1, *config.image_hw, config.channels))
        graph = tf.function(lambda x: model(x, training=False)).get_concrete_function(spec).graph
        matmuls = profiled_flops(graph, ["MatMul", "BatchMatMulV2", "Conv2D"]) / 2e9
        everything = profiled_flops(graph) / 2e9
        estimated = estimate(config).gmacs
        print(f"{name:>8} {estimated:>15.3f} {matmuls:>22.3f} {everything:>19.3f} "
              f"{everything / estimated:>15.4f} {time.time() - start:>8.1f}")
        keras.backend.clear_session()


if __name__ == "__main__":
    main(sys.argv[1:] or ["Ti/16", "S/16", "B/16", "B/32"])
