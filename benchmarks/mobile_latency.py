"""Batch-1 CPU latency of on-device files, side by side: MobileViT v1 and v2 against Keras' own
MobileNetV3-Small and -Large and our ViT-Ti/16 and S/16, all at 256 px.

Each model (random weights: latency does not depend on them, and whether a quantized file
still computes its model is a question for trained weights, `vit export`'s check) is converted
by the library's exports to every on-device format: TFLite float32, float16 and full-integer
int8 (builtin operators only), ONNX float32 and static int8 (QDQ), the int8 files calibrated on
random images. Every file is timed at 1 and 2 threads (LiteRT's interpreter, ONNX Runtime's
CPU provider), in interleaved rounds so that machine load weighs on every file alike (the
median of each file's rounds). Parameters and FLOPs (TensorFlow's profiler on the Keras graph,
2 per multiply-add) and the ImageNet top-1 their authors report stand beside. The last lines
give the fastest MobileViT int8 TFLite file of each version as a ratio of MobileNetV3-Large's.

    python benchmarks/mobile_latency.py [--rows mobilevit_xxs,...] [--runs 60]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

SIZE = 256
# ImageNet-1k top-1 as reported: timm's results for MobileViT (cvnets_in1k) and ViT (augreg,
# 224 px), Keras' applications table for MobileNetV3 (224 px).
REPORTED_TOP1 = {"mobilevit_xxs": 68.9, "mobilevit_xs": 74.6, "mobilevit_s": 78.3,
                 "mobilevitv2_050": 70.2, "mobilevitv2_100": 78.1,
                 "mobilenetv3_small": 68.1, "mobilenetv3_large": 75.6,
                 "vit_ti16": 75.5, "vit_s16": 81.4}
ROWS = tuple(REPORTED_TOP1)
# (column, file suffix): every format a phone or board runs.
FORMATS = (("TFLite fp32", "fp32.tflite"), ("TFLite fp16", "fp16.tflite"),
           ("TFLite int8", "int8.tflite"), ("ONNX fp32", "fp32.onnx"), ("ONNX int8", "int8.onnx"))


def build(row: str):
    """(Keras model taking 0..255 pixels at 256 px, whether the export adds its preprocessing)."""
    import keras

    if row.startswith("mobilevit"):
        from vit_keras.mobilevit.config import get_config
        from vit_keras.mobilevit.model import MobileViT

        return MobileViT(get_config(row, image_size=SIZE)), True
    if row.startswith("mobilenetv3"):
        make = keras.applications.MobileNetV3Small if row.endswith("small") else \
            keras.applications.MobileNetV3Large
        return make(input_shape=(SIZE, SIZE, 3), weights=None, include_preprocessing=True), False
    from vit_keras import VisionTransformer, get_variant

    variant = "Ti/16" if row == "vit_ti16" else "S/16"
    return VisionTransformer(get_variant(variant).replace(image_size=SIZE)), True


def flops(model) -> int:
    """Floating-point operations of one image (TensorFlow's profiler; 2 per multiply-add)."""
    from vit_keras.analysis.network_cost import measured_cost

    return measured_cost(model).flops


def convert(row: str, folder: str) -> tuple[dict, dict]:
    """({format column: file path}, the row's figures) of one model."""
    import numpy as np

    from vit_keras.export import onnx, onnx_quantize
    from vit_keras.export.lite import tflite

    model, preprocessing = build(row)
    images = np.random.default_rng(0).uniform(0, 255, (32, SIZE, SIZE, 3)).astype("float32")
    files = {column: os.path.join(folder, f"{row}_{suffix}") for column, suffix in FORMATS}
    for column, quantization in (("TFLite fp32", None), ("TFLite fp16", "fp16"),
                                 ("TFLite int8", "int8")):
        tflite(model, files[column], quantization=quantization, representative_data=images,
               include_preprocessing=preprocessing, min_agreement=0.0)
    onnx(model, files["ONNX fp32"], dynamic_batch=False, include_preprocessing=preprocessing,
         min_agreement=0.0, on_low_agreement="warn")
    onnx_quantize.quantize(files["ONNX fp32"], files["ONNX int8"], "int8",
                           representative_data=images)
    figures = {"params": int(model.count_params()), "gflops": flops(model) / 1e9,
               "mb_int8": os.path.getsize(files["TFLite int8"]) / 2**20}
    return files, figures


def latencies(files: dict, threads: int, runs: int, rounds: int = 5) -> dict:
    """{(row, format column): median ms} of every file at `threads` threads."""
    from vit_keras.export import ONNXModel, TFLiteModel

    runners = {key: (ONNXModel if path.endswith(".onnx") else TFLiteModel)(
        path, num_threads=threads) for key, path in files.items()}
    times = {key: [] for key in runners}
    for _ in range(rounds):
        for key, runner in runners.items():
            times[key].append(runner.latency_ms(runs=max(1, runs // rounds), warmup=2))
    return {key: statistics.median(values) for key, values in times.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=",".join(ROWS), help="comma-separated rows")
    parser.add_argument("--runs", type=int, default=60, help="timed runs per file and thread "
                                                            "count (default 60)")
    args = parser.parse_args()
    rows = args.rows.split(",")
    unknown = sorted(set(rows) - set(ROWS))
    if unknown:
        sys.exit(f"unknown rows {unknown}; expected some of {list(ROWS)}")
    with tempfile.TemporaryDirectory() as folder:
        files, figures = {}, {}
        for row in rows:
            paths, figures[row] = convert(row, folder)
            files.update({(row, column): path for column, path in paths.items()})
        timed = {threads: latencies(files, threads, args.runs) for threads in (1, 2)}
    print(report(rows, figures, timed))


def report(rows, figures: dict, timed: dict) -> str:
    """A table per thread count and the ratio lines."""
    lines = []
    for threads in (1, 2):
        lines += [f"batch 1, {SIZE} px, {threads} thread(s), CPU; median ms of interleaved "
                  "rounds (LiteRT, ONNX Runtime)",
                  "| model | params | GFLOPs | int8 MB | "
                  + " | ".join(column for column, _ in FORMATS) + " | top-1 reported |",
                  "|---" * (5 + len(FORMATS)) + "|"]
        for row in rows:
            cells = [f"{timed[threads][(row, column)]:.2f}" for column, _ in FORMATS]
            figure = figures[row]
            lines.append(f"| {row} | {figure['params'] / 1e6:.2f} M | {figure['gflops']:.2f} | "
                         f"{figure['mb_int8']:.1f} | {' | '.join(cells)} | "
                         f"{REPORTED_TOP1[row]:.1f}% |")
    if "mobilenetv3_large" in rows:
        for version, prefix in (("v1", "mobilevit_"), ("v2", "mobilevitv2_")):
            lines += _ratio_lines(version, [row for row in rows if row.startswith(prefix)],
                                  timed)
    return "\n".join(lines)


def _ratio_lines(version: str, rows: list, timed: dict) -> list:
    """The fastest int8 TFLite file of a version's rows against MobileNetV3-Large's, per
    thread count."""
    lines = []
    for threads in (1, 2) if rows else ():
        int8 = {row: timed[threads][(row, "TFLite int8")] for row in rows}
        fastest = min(int8, key=int8.get)
        large = timed[threads][("mobilenetv3_large", "TFLite int8")]
        lines.append(f"{threads} thread(s): the fastest MobileViT {version} int8 TFLite file "
                     f"({fastest}, {int8[fastest]:.2f} ms) takes {int8[fastest] / large:.2f}x "
                     f"MobileNetV3-Large's ({large:.2f} ms)")
    return lines


if __name__ == "__main__":
    main()
