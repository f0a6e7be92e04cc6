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
    "fp32": (24.6, 88e6),
    "dynamic_int8": (15.3, 23e6),
    "fp16": (30.2, 44e6),
}
ATTENTION_CORE = ("BATCH_MATMUL", "SOFTMAX")
LAYER_NORM = ("MEAN", "SQUARED_DIFFERENCE", "RSQRT", "NEG")
VARIANTS = {  # name -> tflite() keyword arguments
    "fp32": {},
    "fp16": {"quantization": "fp16"},
    "dynamic_int8": {"quantization": "dynamic_int8"},
    "int8": {"quantization": "int8"},
    "int8_float_attention": {"quantization": "int8", "float_ops": ATTENTION_CORE},
    "int8_float_attention_ln": {"quantization": "int8", "float_ops": ATTENTION_CORE + LAYER_NORM},
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds of --runs")
    parser.add_argument("--output", default="/tmp/vit_s16_export")
    parser.add_argument("--variants", default=",".join(VARIANTS))
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
                               verify_images=calibration[:4], **VARIANTS[name])
        print(f"{name}: converted in {time.perf_counter() - start:.0f} s, "
              f"{report['size_bytes'] / 1e6:.1f} MB, max |logit diff| "
              f"{report['max_abs_logit_diff']:.2e}, ops {report['ops']}", flush=True)
        files[name] = (export.TFLiteModel(path, num_threads=2), report["size_bytes"])
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
