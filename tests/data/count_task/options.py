"""The count task's `vit predict` options, read without a framework (`vit predict --help`)."""

from __future__ import annotations

import argparse

PREDICT_HELP = """\
A counter (`vit train --task count`) prints how many dots each image holds, with the
model's estimate beside it. For example:
  vit predict dots.png --model saved_models/dots_count/model.keras --decimals 1"""


def add_predict_arguments(group: argparse._ArgumentGroup) -> None:
    """Registers a counter's `vit predict` options in `group`."""
    group.add_argument("--decimals", type=int, default=2,
                       help="decimals of the estimate printed beside each count "
                       "(default: %(default)s)")


def check_predict(args: argparse.Namespace) -> None:
    """Refuses a negative --decimals."""
    if args.decimals < 0:
        raise ValueError(f"--decimals must be >= 0, got {args.decimals}")
