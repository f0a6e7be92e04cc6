"""The fast paths alone: fused vs plain GELU / LayerNorm / softmax, one-kernel vs Keras AdamW.

    python benchmarks/fused_kernels.py

Each kernel runs forward + backward on ViT-B/16-sized activations at batch 16 (3152 tokens),
inside a `tf.function`, the fused (training) path and the plain Keras ops alternately; the
optimizer row times one AdamW update of all ViT-B/16 weights. Medians of 7 runs, in ms.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

TOKENS = 16 * 197


def median_ms(function, *args, runs: int = 7) -> float:
    function(*args)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        tf.nest.map_structure(lambda value: value.numpy(), function(*args))
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def forward_backward(apply):
    """A tf.function returning the input gradient of sum(apply(x) * upstream)."""
    @tf.function(autograph=False)
    def step(inputs, upstream):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            outputs = apply(inputs)
        return tape.gradient(outputs, inputs, output_gradients=upstream)
    return step


def kernel_rows():
    from vit_keras.core.normalization import LayerNorm
    from vit_keras.fast_paths.tensorflow import gelu, scaled_softmax

    rng = np.random.default_rng(0)
    norm = LayerNorm(epsilon=1e-6)
    norm.build((None, 768))
    cases = {
        "gelu [3152, 3072]": ((TOKENS, 3072),
                              lambda x: gelu(x, approximate=True),
                              lambda x: tf.nn.gelu(x, approximate=True)),
        "layer norm [3152, 768]": ((TOKENS, 768),
                                   lambda x: norm(x, training=True),
                                   lambda x: norm(x, training=False)),
        "softmax [16, 12, 197, 197]": ((16, 12, 197, 197),
                                       lambda x: scaled_softmax(x, 0.125),
                                       lambda x: tf.cast(tf.nn.softmax(
                                           tf.cast(x, tf.float32) * 0.125), x.dtype)),
    }
    for dtype in ("bfloat16", "float32"):
        for name, (shape, fused, plain) in cases.items():
            inputs = tf.cast(rng.normal(size=shape), dtype)
            upstream = tf.cast(rng.normal(size=shape), dtype)
            plain_ms = median_ms(forward_backward(plain), inputs, upstream)
            fused_ms = median_ms(forward_backward(fused), inputs, upstream)
            yield f"{name} {dtype}", plain_ms, fused_ms


def optimizer_row():
    import keras

    import vit_keras
    from training.recipe import AdamW

    model = vit_keras.VisionTransformer(vit_keras.get_variant("B/16"))
    rng = np.random.default_rng(0)
    weights = model.trainable_variables
    gradients = [tf.constant(rng.normal(0, 1e-3, w.shape).astype("float32")) for w in weights]
    times = []
    for optimizer_class in (keras.optimizers.AdamW, AdamW):
        optimizer = optimizer_class(1e-3, weight_decay=0.05)
        optimizer.build(weights)
        update = tf.function(lambda optimizer=optimizer: optimizer.apply(gradients, weights))
        times.append(median_ms(lambda: (update(), weights[0].value)[1], runs=5))
    return "AdamW update, ViT-B/16 weights", times[0], times[1]


def main():
    print(f"{'forward + backward':34s} {'plain ms':>9} {'fused ms':>9} {'speed-up':>9}")
    for name, plain_ms, fused_ms in [*kernel_rows(), optimizer_row()]:
        print(f"{name:34s} {plain_ms:9.1f} {fused_ms:9.1f} {plain_ms / fused_ms:8.2f}x",
              flush=True)


if __name__ == "__main__":
    main()
