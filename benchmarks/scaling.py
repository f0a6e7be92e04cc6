"""Throughput and memory of one ViT variant as the resolution grows, against its FLOP count.

    python benchmarks/scaling.py --variant S/16 --sizes 224,384,512 --precision bf16 --mode infer

Each resolution runs in a fresh subprocess so that its peak RSS is its own. For every size the
table shows the token count, forward GFLOPs per image from `vit_keras.analysis.complexity` and the share of
it in the two tokens^2 attention products, the measured img/s and achieved GFLOP/s, and the
per-image time and FLOPs relative to the first size: if time grows like FLOPs, the model runs as
efficiently at high resolution as at low; the attention share shows where the quadratic term
takes over. Results also go to a JSON file.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def measure(variant: str, image_size: int, batch_size: int, precision: str, mode: str,
            steps: int) -> dict:
    """One resolution, in this process: throughput, complexity and peak RSS."""
    import vit_keras
    from training import bench
    from vit_keras.analysis import complexity

    config = vit_keras.get_variant(variant, image_size=image_size)
    row = bench.bench_one(variant, image_size, batch_size, precision, mode, steps, peak=1.0)
    cost = complexity.estimate(config, batch_size=1)
    row.update(tokens=cost.tokens, gflops_per_image=cost.flops / 1e9,
               attention_share=cost.attention_macs / cost.macs,
               attention_matrix_mb=complexity.estimate(
                   config, batch_size=batch_size).attention_matrix_bytes / 2 ** 20,
               peak_rss_mb=bench.peak_rss_mb())
    row.pop("mfu"), row.pop("matmul_peak_gflops")
    return row


def run_in_subprocess(args, image_size: int) -> dict:
    """`measure` in a fresh interpreter; returns its row."""
    command = [sys.executable, os.path.abspath(__file__), "--worker", "--variant", args.variant,
               "--sizes", str(image_size), "--batch-size", str(args.batch_size),
               "--precision", args.precision, "--mode", args.mode, "--steps", str(args.steps)]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads(output.strip().splitlines()[-1])


def print_table(rows: list[dict]) -> None:
    base = rows[0]
    base_time = 1.0 / base["img_per_s"]
    print(f"{'px':>5} {'tokens':>6} {'GFLOP/img':>9} {'attn %':>6} {'img/s':>7} {'GFLOP/s':>8} "
          f"{'time x':>7} {'FLOPs x':>7} {'attn MB':>8} {'RSS MB':>7}")
    for row in rows:
        print(f"{row['image_size']:>5} {row['tokens']:>6} {row['gflops_per_image']:>9.1f} "
              f"{100 * row['attention_share']:>6.1f} {row['img_per_s']:>7.2f} "
              f"{row['gflops']:>8.0f} {1.0 / row['img_per_s'] / base_time:>7.2f} "
              f"{row['gflops_per_image'] / base['gflops_per_image']:>7.2f} "
              f"{row['attention_matrix_mb']:>8.0f} {row['peak_rss_mb']:>7.0f}", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="S/16")
    parser.add_argument("--sizes", default="224,384,512", help="image sides in pixels")
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="bf16")
    parser.add_argument("--mode", choices=("infer", "train"), default="infer")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per size")
    parser.add_argument("--output", default="benchmarks/results/scaling.json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    if args.worker:
        print(json.dumps(measure(args.variant, sizes[0], args.batch_size, args.precision,
                                 args.mode, args.steps)))
        return
    rows = [run_in_subprocess(args, size) for size in sizes]
    print(f"{args.variant} {args.precision} {args.mode} batch {args.batch_size}")
    print_table(rows)
    from vit_app.outputs import write_json

    write_json(args.output, {"argv": sys.argv, "results": rows})


if __name__ == "__main__":
    main()
