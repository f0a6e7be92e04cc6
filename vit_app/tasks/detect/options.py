"""The detect task's `vit predict` options, read without a framework (`vit predict --help`)."""

from __future__ import annotations

import argparse

PREDICT_HELP = """\
A detector (`vit train --task detect`) writes each image's boxes (file, class, score, x0 y0 x1
y1 in pixels of the image) and a copy with them drawn into --drawn (none with --no-drawn).
For example:
  vit predict scene.png --model saved_models/digits_detect/model.keras --output boxes.csv"""


def add_predict_arguments(group: argparse._ArgumentGroup) -> None:
    """Registers a detector's `vit predict` options in `group`."""
    group.add_argument("--drawn", default="drawn", metavar="DIR",
                       help="a copy of each image with its boxes drawn is written here "
                       "(default: %(default)s)")
    group.add_argument("--no-drawn", action="store_true",
                       help="no drawn copies (the table and --output only)")
    group.add_argument("--min-score", type=float, default=0.3,
                       help="boxes scoring below this are left out (default: %(default)s)")


def check_predict(args: argparse.Namespace) -> None:
    """Refuses a --min-score outside [0, 1]."""
    if not 0 <= args.min_score <= 1:
        raise ValueError(f"--min-score must be in [0, 1], got {args.min_score}")
