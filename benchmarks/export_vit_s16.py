"""ViT-S/16 at 224 px through our TFLite export and LiteRT: size and batch-1 latency per precision.

Random weights (latency and size do not depend on them). Compares with the reference measured
on this machine with keras-hub's ViT-S/16 through the same converter and LiteRT (2 threads,
batch 1). All our files are measured side by side in one run, interleaved, so load from other
processes hits them alike.

    python benchmarks/export_vit_s16.py [--runs 50] [--output /tmp/vit_s16_export]
"""

import argparse
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

import vit_keras  # noqa: E402
from vit_keras import export  # noqa: E402

REFERENCE = {  # keras-hub ViT-S/16, same converter + LiteRT, 2 threads, batch 1 (issue 5)
    None: (24.6, 88e6),
    "dynamic_int8": (15.3, 23e6),
    "fp16": (30.2, 44e6),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of --runs")
    parser.add_argument("--output", default="/tmp/vit_s16_export")
    parser.add_argument("--quantizations", default="none,fp16,dynamic_int8,int8")
    args = parser.parse_args()
    model = vit_keras.ViTS16()
    rng = np.random.default_rng(0)
    calibration = rng.uniform(0, 255, (32, 224, 224, 3)).astype(np.float32)
    files = {}
    for name in args.quantizations.split(","):
        quantization = None if name == "none" else name
        path = os.path.join(args.output, f"vit_s16_{name}.tflite")
        start = time.perf_counter()
        report = export.tflite(model, path, quantization=quantization,
                               representative_data=calibration, verify_images=calibration[:4])
        print(f"{name}: converted in {time.perf_counter() - start:.0f} s, "
              f"{report['size_bytes'] / 1e6:.1f} MB, max |logit diff| "
              f"{report['max_abs_logit_diff']:.2e}, ops {report['ops']}", flush=True)
        files[quantization] = (export.TFLiteModel(path, num_threads=2), report["size_bytes"])
    times = {quantization: [] for quantization in files}
    for _ in range(args.rounds):  # interleave so background load affects every file alike
        for quantization, (lite_model, _) in files.items():
            times[quantization].append(lite_model.latency_ms(runs=args.runs, warmup=3))
    print("\n| precision | size (MB) | latency (ms, median) | reference keras-hub (ms / MB) |")
    print("|---|---|---|---|")
    for quantization, (_, size) in files.items():
        latency = statistics.median(times[quantization])
        reference = REFERENCE.get(quantization)
        reference = f"{reference[0]} / {reference[1] / 1e6:.0f}" if reference else "-"
        print(f"| {quantization or 'float32'} | {size / 1e6:.1f} | {latency:.1f} | {reference} |")
    fp32 = statistics.median(times[None]) if None in times else None
    if fp32 and "int8" in times:
        print(f"\nint8 / fp32 latency: {statistics.median(times['int8']) / fp32:.2f}, "
              f"size: {files['int8'][1] / files[None][1]:.2f}")


if __name__ == "__main__":
    main()
