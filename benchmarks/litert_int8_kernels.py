"""Where full-integer ViTs lose time on LiteRT CPUs: each ViT operator, float32 vs int8.

1. Converts every operator of a ViT block on its own, at ViT-S/16 shapes (197 tokens, 6 heads
   of 64, MLP 1536, batch 1), to a float32 and a full-integer int8 `.tflite` (float32 I/O).
   "XNNPACK takes int8" says whether XNNPACK took the int8 operator (the QUANTIZE -> op ->
   DEQUANTIZE file is one delegate partition); the others run on LiteRT's own int8 kernels.
2. Times our attention layer as full-integer export traces it in both forms, BATCH_MATMUL
   (the plain graph) and per-head FULLY_CONNECTED (`vit_keras.fast_paths.export_forms`), at three sizes,
   against float32: the measurements behind the attention's unrolling threshold.

Every file runs in LiteRT with its default XNNPACK delegate and 2 threads, timed in
interleaved rounds (median of the rounds' means).

    python benchmarks/litert_int8_kernels.py [--runs 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from vit_keras.core import attention  # noqa: E402
from vit_keras.fast_paths import export_forms  # noqa: E402

TOKENS, HEADS, HEAD_DIM, WIDTH, MLP = 197, 6, 64, 384, 1536
ATTENTION_SIZES = {  # name -> (tokens, heads, head_dim)
    "digits model: 16 tokens, 4 heads of 16": (16, 4, 16),
    "65 tokens, 4 heads of 32": (65, 4, 32),
    "ViT-S/16: 197 tokens, 6 heads of 64": (TOKENS, HEADS, HEAD_DIM),
}


def operators() -> dict:
    """name -> (function of one float32 tensor, input shape)."""
    rng = np.random.default_rng(1)
    w_mlp = tf.constant(rng.normal(0, 0.05, (WIDTH, MLP)).astype(np.float32))
    w_qkv = tf.constant(rng.normal(0, 0.05, (WIDTH, WIDTH)).astype(np.float32))

    def layer_norm(x):
        centred = x - tf.reduce_mean(x, -1, keepdims=True)
        return centred * tf.math.rsqrt(tf.reduce_mean(centred * centred, -1, keepdims=True)
                                       + 1e-6)

    def head_query_key(x):  # one head's q.k^T with the keys as weights
        return tf.matmul(x[:, :HEAD_DIM], x[:, HEAD_DIM:], transpose_b=True)

    heads = (1, HEADS, TOKENS, HEAD_DIM)
    return {
        "FULLY_CONNECTED 384->384 (q/k/v/out)": (lambda x: tf.matmul(x, w_qkv), (TOKENS, WIDTH)),
        "FULLY_CONNECTED 384->1536 (MLP)": (lambda x: tf.matmul(x, w_mlp), (TOKENS, WIDTH)),
        "GELU": (lambda x: tf.nn.gelu(x, approximate=True), (TOKENS, MLP)),
        "LayerNorm (MEAN, SUB, MUL, RSQRT)": (layer_norm, (TOKENS, WIDTH)),
        "BATCH_MATMUL q.k^T, 6 heads": (lambda x: tf.matmul(x, x, transpose_b=True), heads),
        "SOFTMAX, 6 heads": (tf.nn.softmax, (1, HEADS, TOKENS, TOKENS)),
        "BATCH_MATMUL probs.v, 6 heads": (lambda x: tf.matmul(x, x[..., :HEAD_DIM]),
                                          (1, HEADS, TOKENS, TOKENS)),
        "FULLY_CONNECTED q.k^T, 1 head": (head_query_key, (TOKENS, 2 * HEAD_DIM)),
        "SOFTMAX, 1 head": (tf.nn.softmax, (TOKENS, TOKENS)),
    }


def attention_functions(tokens, heads, head_dim):
    """(function, shape) of one attention layer with random weights."""
    layer = attention.MultiHeadSelfAttention(heads)
    layer.build((1, tokens, heads * head_dim))
    rng = np.random.default_rng(2)
    for weight in layer.weights:
        weight.assign(rng.normal(0, 0.1, weight.shape).astype(np.float32))
    return (lambda x: layer(x)), (1, tokens, heads * head_dim)


def convert(function, shape, int8: bool) -> bytes:
    """A float32 or full-integer (float32 I/O) `.tflite` of `function` on one input."""
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2)

    concrete = tf.function(function).get_concrete_function(tf.TensorSpec(shape, tf.float32))
    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [convert_variables_to_constants_v2(concrete)])
    if int8:
        rng = np.random.default_rng(0)
        samples = [rng.normal(size=shape).astype(np.float32) for _ in range(16)]
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: ([sample] for sample in samples)
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    return converter.convert()


def attention_files(tokens, heads, head_dim) -> dict:
    """float32, int8 BATCH_MATMUL and int8 per-head FULLY_CONNECTED files of one layer."""
    function, shape = attention_functions(tokens, heads, head_dim)
    files = {"float32": convert(function, shape, False)}
    default = attention._UNROLL_MIN_MACS_PER_HEAD
    for name, threshold in (("int8 BATCH_MATMUL", float("inf")),
                            ("int8 per-head FULLY_CONNECTED", 0)):
        attention._UNROLL_MIN_MACS_PER_HEAD = threshold
        try:
            with export_forms.tflite_form(integer=True):
                files[name] = convert(function, shape, True)
        finally:
            attention._UNROLL_MIN_MACS_PER_HEAD = default
    return files


def interpreter(content: bytes):
    from ai_edge_litert.interpreter import Interpreter

    runner = Interpreter(model_content=content, num_threads=2)
    runner.allocate_tensors()
    details = runner.get_input_details()[0]
    runner.set_tensor(details["index"],
                      np.random.default_rng(0).normal(size=details["shape"]).astype(np.float32))
    return runner


def delegated_whole(runner) -> bool:
    return [op["op_name"] for op in runner._get_ops_details()].count("DELEGATE") == 1


def mean_ms(runner, runs: int) -> float:
    start = time.perf_counter()
    for _ in range(runs):
        runner.invoke()
    return 1e3 * (time.perf_counter() - start) / runs


def median_times(runners: dict, runs: int, rounds: int) -> dict:
    """Median over interleaved rounds of each runner's mean time per call (ms)."""
    times = {name: [] for name in runners}
    for runner in runners.values():
        mean_ms(runner, 5)
    for _ in range(rounds):
        for name, runner in runners.items():
            times[name].append(mean_ms(runner, runs))
    return {name: statistics.median(values) for name, values in times.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    runners = {}
    for name, (function, shape) in operators().items():
        for kind in ("float32", "int8"):
            runners[(name, kind)] = interpreter(convert(function, shape, kind == "int8"))
    for size, dims in ATTENTION_SIZES.items():
        for form, content in attention_files(*dims).items():
            runners[(size, form)] = interpreter(content)
    times = median_times(runners, args.runs, args.rounds)
    print("| operator (ViT-S/16 shapes) | float32 ms | int8 ms | int8 / float32 | XNNPACK "
          "takes int8 |")
    print("|---|---|---|---|---|")
    for name in operators():
        fp32, int8 = times[(name, "float32")], times[(name, "int8")]
        print(f"| {name} | {fp32:.3f} | {int8:.3f} | {int8 / fp32:.2f} | "
              f"{'yes' if delegated_whole(runners[(name, 'int8')]) else 'no'} |")
    print("\n| attention layer, batch 1 | float32 ms | int8 BATCH_MATMUL ms | int8 per-head "
          "FULLY_CONNECTED ms | faster int8 form |")
    print("|---|---|---|---|---|")
    for size in ATTENTION_SIZES:
        fp32 = times[(size, "float32")]
        batch_matmul = times[(size, "int8 BATCH_MATMUL")]
        per_head = times[(size, "int8 per-head FULLY_CONNECTED")]
        faster = "per-head" if per_head < batch_matmul else "BATCH_MATMUL"
        print(f"| {size} | {fp32:.3f} | {batch_matmul:.3f} ({batch_matmul / fp32:.2f}x) | "
              f"{per_head:.3f} ({per_head / fp32:.2f}x) | {faster} |")
    print(f"\nmedian of {args.rounds} interleaved rounds of {args.runs} calls; load average "
          f"{os.getloadavg()}")


if __name__ == "__main__":
    main()
