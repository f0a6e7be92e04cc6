"""ViT-S/16 at 224 px through our TFLite export and LiteRT: size and batch-1 latency per precision.

Random weights (latency and size do not depend on them). Compares with the reference measured
on this machine with keras-hub's ViT-S/16 through the same converter and LiteRT (2 threads,
batch 1), and, side by side in the same run, with a stand-in for keras-hub's structure built
from core Keras layers (`keras.layers.MultiHeadAttention`, `Dense(activation="gelu")`, exact
GELU) so that machine load does not decide the comparison. All files are timed in interleaved
rounds, so load from other processes hits them alike.

    python benchmarks/export_vit_s16.py [--runs 50] [--rounds 5] [--output /tmp/vit_s16_export]
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import vit_keras  # noqa: E402
from vit_app.inference.export.formats import tflite_arguments, tflite_precisions  # noqa: E402
from vit_keras import export  # noqa: E402

REFERENCE = {  # keras-hub ViT-S/16, same converter + LiteRT, 2 threads, batch 1
    "fp32": (24.6, 88e6),
    "dynamic_int8": (15.3, 23e6),
    "fp16": (30.2, 44e6),
}
ATTENTION_CORE = ("BATCH_MATMUL", "SOFTMAX")
VARIANTS = {  # name -> tflite() keyword arguments, as `vit export` writes each format
    **tflite_precisions(),  # fp32, fp16, dynamic_int8, int8
    "int8_float_attention": tflite_arguments("tflite_int8", int8_float_ops=ATTENTION_CORE),
}


BASELINE_VARIANTS = ("fp32", "fp16", "dynamic_int8")


def core_keras_vit_s16():
    """ViT-S/16 from core Keras layers, the way keras-hub assembles its ViT (MHA, exact GELU)."""
    layers = keras.layers
    images = keras.Input((224, 224, 3))
    tokens = layers.Reshape((196, 384))(layers.Conv2D(384, 16, strides=16)(images))
    tokens = vit_keras.PositionEmbedding()(vit_keras.ClassToken()(tokens))
    for _ in range(12):
        normed = layers.LayerNormalization(epsilon=1e-6)(tokens)
        tokens = tokens + layers.MultiHeadAttention(6, 64)(normed, normed)
        normed = layers.LayerNormalization(epsilon=1e-6)(tokens)
        hidden = layers.Dense(1536, activation="gelu")(normed)
        tokens = tokens + layers.Dense(384)(hidden)
    pooled = vit_keras.TokenPooling()(layers.LayerNormalization(epsilon=1e-6)(tokens))
    return keras.Model(images, layers.Dense(1000)(pooled))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of --runs")
    parser.add_argument("--output", default="/tmp/vit_s16_export")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the core-Keras stand-in for keras-hub's ViT")
    args = parser.parse_args()
    model = vit_keras.ViTS16()
    rng = np.random.default_rng(0)
    for weight in model.get_layer("head").weights:  # the zero-initialised head hides any diff
        weight.assign(rng.normal(0, 0.02, weight.shape).astype("float32"))
    calibration = rng.uniform(0, 255, (32, 224, 224, 3)).astype(np.float32)
    files = {}
    for name in args.variants.split(","):
        path = os.path.join(args.output, f"vit_s16_{name}.tflite")
        start = time.perf_counter()
        report = export.tflite(model, path, representative_data=calibration,
                               verify_images=calibration[:4], on_low_agreement="warn",
                               **VARIANTS[name])
        print(f"{name}: converted in {time.perf_counter() - start:.0f} s, "
              f"{report['size_bytes'] / 1e6:.1f} MB, max |logit diff| "
              f"{report['max_abs_logit_diff']:.2e}, ops {report['ops']}", flush=True)
        files[name] = (export.TFLiteModel(path, num_threads=2), report["size_bytes"])
    if not args.no_baseline:
        baseline = core_keras_vit_s16()
        for name in (name for name in BASELINE_VARIANTS if name in args.variants.split(",")):
            path = os.path.join(args.output, f"core_keras_s16_{name}.tflite")
            report = export.tflite(baseline, path, representative_data=calibration,
                                   verify_images=calibration[:4], on_low_agreement="warn",
                                   **VARIANTS[name])
            print(f"core-Keras baseline {name}: {report['size_bytes'] / 1e6:.1f} MB, ops "
                  f"{report['ops']}", flush=True)
            files[f"core-Keras {name}"] = (export.TFLiteModel(path, num_threads=2),
                                           report["size_bytes"])
    times = {name: [] for name in files}
    cpu = {name: [] for name in files}
    for _ in range(args.rounds):  # interleave so background load affects every file alike
        for name, (lite_model, _) in files.items():
            start = time.process_time()
            times[name].append(lite_model.latency_ms(runs=args.runs, warmup=3))
            cpu[name].append(1000 * (time.process_time() - start) / (args.runs + 3))
    fp32 = statistics.median(times["fp32"]) if "fp32" in times else None
    print("\n| precision | size (MB) | latency (ms, median) | x fp32 | CPU ms per call "
          "| reference keras-hub (ms / MB) |")
    print("|---|---|---|---|---|---|")
    for name, (_, size) in files.items():
        latency = statistics.median(times[name])
        ratio = f"{latency / fp32:.2f}" if fp32 else "-"
        reference = REFERENCE.get(name)
        reference = f"{reference[0]} / {reference[1] / 1e6:.0f}" if reference else "-"
        print(f"| {name} | {size / 1e6:.1f} | {latency:.1f} | {ratio} | "
              f"{statistics.median(cpu[name]):.1f} | {reference} |")
    print(f"\nload average during the run: {os.getloadavg()}")


if __name__ == "__main__":
    main()
