"""Measure ViT throughput on this machine: img/s, GFLOP/s and MFU against its matmul peak.

Examples:
  vit bench                                   # B/16, 224 px, batch 16, fp32 and bf16
  vit bench --variant S/16 --precision bf16 --mode train --batch-size 32

The matmul peak is measured in the same run (a 2048^3 matrix product), so the MFU figure is
relative to what this hardware reaches, not to a datasheet number. The functions here also serve
`benchmarks/throughput.py`.
"""

from __future__ import annotations

import argparse

PRECISIONS = ("fp32", "bf16")
MODES = ("infer", "train")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of `vit bench`."""
    parser.add_argument("--variant", default="B/16", help="ViT variant (default B/16)")
    parser.add_argument("--image-size", type=int, default=224, help="input side in pixels")
    parser.add_argument("--batch-size", type=int, default=16, help="images per step")
    parser.add_argument("--precision", choices=PRECISIONS + ("all",), default="all",
                        help="fp32, bf16 (mixed_bfloat16) or all (default)")
    parser.add_argument("--mode", choices=MODES + ("all",), default="all",
                        help="infer (forward only), train (AdamW step) or all (default)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per measurement")
    parser.add_argument("--json", default=None, help="also write the results to this file")


def run(args: argparse.Namespace) -> int:
    """Prints a throughput table for the chosen configurations."""
    from training import bench

    bench.print_throughput(args.variant, args.image_size, args.batch_size,
                           precisions=_selected(args.precision, PRECISIONS),
                           modes=_selected(args.mode, MODES), steps=args.steps,
                           json_path=args.json)
    return 0


def _selected(value: str, choices: tuple[str, ...]) -> list[str]:
    return list(choices) if value == "all" else [value]
