"""ViT throughput on this machine for `vit bench` (whose flags are `vit.commands.bench`'s) and
`benchmarks/throughput.py`: img/s, GFLOP/s and MFU against the matmul peak measured in the
same run.
"""

from __future__ import annotations

import time

import keras
import numpy as np

import vit_keras
from training import recipe
from vit_app import console
from vit_keras.analysis import complexity
from vit_keras.core.model import last_block_outputs
from vit_keras.timing import median_seconds

POLICIES = {"fp32": "float32", "bf16": "mixed_bfloat16"}


def matmul_peak_gflops(precision: str, size: int = 2048, repeats: int = 20) -> float:
    """Best GFLOP/s of a size^3 `tf.matmul` in `precision` ('fp32' or 'bf16')."""
    import tensorflow as tf  # here: the GPU benchmark imports this module without TensorFlow

    dtype = tf.float32 if precision == "fp32" else tf.bfloat16
    a = tf.random.normal((size, size), dtype=tf.float32)
    a, b = tf.cast(a, dtype), tf.cast(tf.transpose(a), dtype)
    matmul = tf.function(lambda x, y: tf.reduce_sum(tf.cast(tf.matmul(x, y)[:1, :1], tf.float32)))
    matmul(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        matmul(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best / 1e9


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB.

    Linux's VmHWM belongs to the current program image; `ru_maxrss` would also count a parent's
    peak, since it survives fork and exec.
    """
    try:
        with open("/proc/self/status") as file:
            for line in file:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource  # Unix only: the fallback where /proc is absent

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make_step(model, mode: str, images, labels):
    """A no-argument callable running one inference or training step of `model`."""
    if mode == "infer":
        return lambda: model.predict_on_batch(images)
    return lambda: model.train_on_batch(images, labels)


def compile_for_training(model, learning_rate: float = 1e-4, optimizer: str = "vit"):
    """Compiles `model` with AdamW and sparse cross-entropy on logits.

    Args:
        model: a Keras model.
        learning_rate: AdamW's learning rate.
        optimizer: "vit" for the AdamW `vit train` uses (one fused kernel per weight update),
            "keras" for `keras.optimizers.AdamW`.

    Returns:
        `model`, compiled.
    """
    optimizers = {"vit": recipe.AdamW, "keras": keras.optimizers.AdamW}
    if optimizer not in optimizers:
        raise ValueError(f"optimizer must be 'vit' or 'keras', got {optimizer!r}")
    model.compile(optimizers[optimizer](learning_rate),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def random_batch(batch_size: int, image_size: int, num_classes: int, seed: int = 0):
    """Images in [-1, 1] and integer labels, fixed by `seed`."""
    rng = np.random.default_rng(seed)
    images = rng.uniform(-1, 1, (batch_size, image_size, image_size, 3)).astype("float32")
    return images, rng.integers(0, num_classes, batch_size)


def flops_per_image(config, mode: str) -> float:
    """Forward FLOPs per image as the classifier executes them (`last_block_outputs`), x3 for a
    training step (forward + two backward products)."""
    forward = complexity.estimate(config, batch_size=1,
                                  output_tokens=last_block_outputs(config)).flops
    return forward * (3 if mode == "train" else 1)


def bench_one(variant: str, image_size: int, batch_size: int, precision: str, mode: str,
              steps: int, peak: float) -> dict:
    """Throughput of one configuration of our model; returns a dict of figures."""
    keras.mixed_precision.set_global_policy(POLICIES[precision])
    try:
        config = vit_keras.get_variant(variant, image_size=image_size)
        model = compile_for_training(vit_keras.VisionTransformer(config))
        images, labels = random_batch(batch_size, image_size, config.num_classes)
        step = make_step(model, mode, images, labels)
        seconds = median_seconds(step, steps, warmup=2)  # the warm-up calls trace
    finally:
        keras.mixed_precision.set_global_policy("float32")
        keras.backend.clear_session()
    images_per_second = batch_size / seconds
    gflops = images_per_second * flops_per_image(config, mode) / 1e9
    return {"variant": variant, "image_size": image_size, "batch_size": batch_size,
            "precision": precision, "mode": mode, "img_per_s": images_per_second,
            "gflops": gflops, "matmul_peak_gflops": peak, "mfu": gflops / peak}


def print_throughput(variant: str, image_size: int, batch_size: int, precisions, modes,
                     steps: int, json_path: str | None = None) -> list[dict]:
    """Measures and prints the throughput of `variant` in every precision and mode.

    Args:
        variant: a ViT variant name (B/16, ...).
        image_size: input side in pixels.
        batch_size: images per step.
        precisions: names from `POLICIES` ('fp32', 'bf16').
        modes: 'infer' (forward only) and/or 'train' (an AdamW step).
        steps: timed steps per measurement.
        json_path: also write the results here (None: do not).

    Returns:
        One `bench_one` dict per (precision, mode).
    """
    # An unknown variant or a size the patches do not divide fails before any measuring.
    vit_keras.get_variant(variant, image_size=image_size)
    rows = []
    for precision in precisions:
        peak = matmul_peak_gflops(precision)
        console.say(f"matmul peak {precision}: {peak:.0f} GFLOP/s")
        for mode in modes:
            rows.append(bench_one(variant, image_size, batch_size, precision, mode, steps, peak))
            row = rows[-1]
            console.say(f"{row['variant']:>6} {row['image_size']}px b{row['batch_size']} "
                        f"{precision:>4} {mode:>5}: {row['img_per_s']:8.2f} img/s "
                        f"{row['gflops']:7.0f} GFLOP/s  MFU {100 * row['mfu']:5.1f}%")
    if json_path:
        from vit_app.outputs import write_json

        write_json(json_path, {"results": rows})
    return rows
