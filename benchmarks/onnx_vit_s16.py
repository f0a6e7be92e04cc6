"""ViT-S/16 at 224 px through the ONNX export and ONNX Runtime, against our TFLite fp32 file:
size and batch-1 latency (2 threads), side by side in one run.

Random weights (latency and size do not depend on them); static int8 is calibrated on
`--calibration` random images (its accuracy is measured on the default job instead:
`vit export --formats onnx,onnx_dynamic_int8,onnx_int8`). Every file is timed in interleaved
rounds, so load from other processes hits them alike; each round is the median of `--runs`
calls and the table shows the median round.

    python benchmarks/onnx_vit_s16.py [--runs 30] [--rounds 5] [--output /tmp/vit_s16_onnx]
"""

import argparse
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

import vit_keras  # noqa: E402
from vit_app.inference.export.formats import EXPORT_FORMATS  # noqa: E402
from vit_keras import export  # noqa: E402
from vit_keras.export import onnx_quantize  # noqa: E402


def write_files(model, folder: str, calibration: int) -> dict:
    """Writes the four files; returns name -> (runner, size in bytes)."""
    rng = np.random.default_rng(0)
    images = rng.uniform(0, 255, (calibration, 224, 224, 3)).astype(np.float32)
    paths = {label: os.path.join(folder, EXPORT_FORMATS[name].file) for label, name in (
        ("onnx fp32", "onnx"), ("onnx dynamic int8", "onnx_dynamic_int8"),
        ("onnx int8 (static QDQ)", "onnx_int8"), ("tflite fp32", "tflite"))}
    report = export.onnx(model, paths["onnx fp32"])
    print(f"onnx fp32: {report['fused_layer_norms']} LayerNorms fused, max abs logit diff "
          f"{report['max_abs_logit_diff']:.2e}")
    onnx_quantize.quantize(paths["onnx fp32"], paths["onnx dynamic int8"], "dynamic_int8")
    onnx_quantize.quantize(paths["onnx fp32"], paths["onnx int8 (static QDQ)"], "int8",
                           representative_data=images)
    export.tflite(model, paths["tflite fp32"])
    files = {}
    for name, path in paths.items():
        runner = (export.TFLiteModel(path, num_threads=2) if path.endswith(".tflite")
                  else export.ONNXModel(path, num_threads=2))
        files[name] = (runner, os.path.getsize(path))
    return files


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calibration", type=int, default=16)
    parser.add_argument("--output", default="/tmp/vit_s16_onnx")
    args = parser.parse_args()
    os.makedirs(args.output, exist_ok=True)
    model = vit_keras.ViTS16()
    rng = np.random.default_rng(0)
    for weight in model.get_layer("head").weights:  # the zero-initialised head, made non-zero
        weight.assign(rng.normal(0, 0.02, weight.shape).astype(np.float32))
    files = write_files(model, args.output, args.calibration)
    rounds = {name: [] for name in files}
    for _ in range(args.rounds):
        for name, (runner, _) in files.items():
            rounds[name].append(runner.latency_ms(runs=args.runs, warmup=3))
    base = statistics.median(rounds["onnx fp32"])
    print("| file | size (MB) | batch-1 latency (ms) | vs onnx fp32 |")
    print("|---|---|---|---|")
    for name, (_, size) in files.items():
        latency = statistics.median(rounds[name])
        print(f"| {name} | {size / 1e6:.1f} | {latency:.1f} | {latency / base:.2f}x |")


if __name__ == "__main__":
    main()
