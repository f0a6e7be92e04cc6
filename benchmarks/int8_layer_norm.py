"""LayerNorm in full-integer int8 TFLite files, side by side in one run: the statistics spelled
out (mean, squares, mean, rsqrt: the form the export traced before) and one L2_NORMALIZATION
(its form now, `vit_keras.fast_paths.export_forms.integer_normalised_rows`).

Accuracy: tokens of which half are 10x smaller than the others, at four widths, normalised
by a LayerNorm and compared with Keras row by row (mean |error| on outputs of unit spread),
each file calibrated on the same 64 images. Speed: a ViT-Ti/16 at 224 px (random weights),
batch 1, 2 threads, the median of interleaved rounds. The two forms are equal in float
(tests/test_fast_paths.py). L2_NORMALIZATION's output has a fixed int8 scale (1/128 of the
unit row), so on wide rows of one size it is the less exact of the two (the export spells out
rows wider than 512). The script exits 1 if the small rows gain less than 3x, the large ones
lose more than 1.5x, or the file is more than 15% slower.

    python benchmarks/int8_layer_norm.py [--rounds 7]
"""

import argparse
import contextlib
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

import vit_keras  # noqa: E402
from vit_keras import export  # noqa: E402
from vit_keras.core.normalization import LayerNorm  # noqa: E402
from vit_keras.fast_paths import export_forms  # noqa: E402

WIDTHS = (32, 192, 384, 768)
TOKENS = 64
MAX_SLOWDOWN = 1.15
MIN_GAIN_SMALL = 3.0   # small rows: at least this many times more exact than spelled out
MAX_LOSS_LARGE = 1.5   # large rows: at most this many times less exact


def spelled_out_rows(x, epsilon):
    """The earlier form: (x - mean) * rsqrt(mean((x - mean)^2) + epsilon), each step int8."""
    centred = x - ops.mean(x, axis=-1, keepdims=True)
    variance = ops.mean(centred * centred, axis=-1, keepdims=True)
    return centred * ops.rsqrt(variance + epsilon)


@contextlib.contextmanager
def form(name):
    """Inside the block, full-integer exports trace LayerNorm in the named form, at any width
    (the export itself spells out rows wider than `L2_NORMALIZATION_MAX_WIDTH`)."""
    rows, widest = export_forms.integer_normalised_rows, export_forms.L2_NORMALIZATION_MAX_WIDTH
    export_forms.L2_NORMALIZATION_MAX_WIDTH = 10**9
    if name == "spelled out":
        export_forms.integer_normalised_rows = spelled_out_rows
    try:
        yield
    finally:
        export_forms.integer_normalised_rows = rows
        export_forms.L2_NORMALIZATION_MAX_WIDTH = widest


def rows_model(width):
    """Pixels -> tokens, half of them scaled by 0.1 -> LayerNorm -> the flattened rows."""
    inputs = keras.Input((8, 8, 3))
    tokens = keras.layers.Dense(width, use_bias=False, kernel_initializer=keras.initializers
                                .RandomNormal(seed=0))(keras.layers.Reshape((TOKENS, 3))(inputs))
    scaled = keras.layers.EinsumDense("btd,td->btd", output_shape=(TOKENS, width))
    model = keras.Model(inputs, keras.layers.Flatten()(LayerNorm(epsilon=1e-6)(scaled(tokens))))
    scale = np.repeat([[0.1]] * (TOKENS // 2) + [[1.0]] * (TOKENS // 2), width, axis=1)
    scaled.set_weights([scale.astype("float32")])
    return model


def row_errors(model, width, folder, name):
    """Mean |file - Keras| over the small rows and over the large rows."""
    pixels = np.random.default_rng(0).uniform(-1, 1, (64, 8, 8, 3)).astype("float32")
    path = os.path.join(folder, f"rows_{width}_{name.replace(' ', '_')}.tflite")
    with form(name):
        export.tflite(model, path, quantization="int8", representative_data=pixels,
                      include_preprocessing=False, on_low_agreement="warn")
    ours = keras.ops.convert_to_numpy(model(pixels[:8])).reshape(8, TOKENS, width)
    theirs = export.TFLiteModel(path)(pixels[:8]).reshape(8, TOKENS, width)
    errors = np.abs(theirs - ours).mean(axis=(0, 2))
    return float(errors[:TOKENS // 2].mean()), float(errors[TOKENS // 2:].mean())


def latencies(folder, rounds):
    """Batch-1 milliseconds of a ViT-Ti/16 full-integer file in each form, interleaved."""
    model = vit_keras.ViTTi16()
    images = np.random.default_rng(0).uniform(0, 255, (16, 224, 224, 3)).astype("float32")
    files = {}
    for name in ("spelled out", "L2_NORMALIZATION"):
        path = os.path.join(folder, f"ti_{len(files)}.tflite")
        with form(name):
            export.tflite(model, path, quantization="int8", representative_data=images)
        files[name] = export.TFLiteModel(path)
    timings = {name: [] for name in files}
    for _ in range(rounds):
        for name, runner in files.items():
            runner(images[:1])
            runs = []
            for _ in range(30):
                start = time.perf_counter()
                runner(images[:1])
                runs.append(time.perf_counter() - start)
            timings[name].append(np.median(runs))
    return {name: 1000 * float(np.median(values)) for name, values in timings.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    args = parser.parse_args()
    failures = []
    print("| width | rows | spelled out | L2_NORMALIZATION |\n|---|---|---|---|")
    with tempfile.TemporaryDirectory() as folder:
        for width in WIDTHS:
            model = rows_model(width)
            before = row_errors(model, width, folder, "spelled out")
            now = row_errors(model, width, folder, "L2_NORMALIZATION")
            for kind, old, new in zip(("0.1x", "1x"), before, now):
                print(f"| {width} | {kind} | {old:.3f} | {new:.3f} |")
            if before[0] < MIN_GAIN_SMALL * now[0] or now[1] > MAX_LOSS_LARGE * before[1]:
                failures.append(f"width {width}: small rows {before[0]:.3f} -> {now[0]:.3f}, "
                                f"large rows {before[1]:.3f} -> {now[1]:.3f}")
        timing = latencies(folder, args.rounds)
    ratio = timing["L2_NORMALIZATION"] / timing["spelled out"]
    print(f"\nViT-Ti/16 int8 batch 1: spelled out {timing['spelled out']:.1f} ms, "
          f"L2_NORMALIZATION {timing['L2_NORMALIZATION']:.1f} ms ({ratio:.2f}x)")
    if ratio > MAX_SLOWDOWN:
        failures.append(f"L2_NORMALIZATION {ratio:.2f}x the spelled-out file's latency")
    for failure in failures:
        print(f"FAILED: {failure}")
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
