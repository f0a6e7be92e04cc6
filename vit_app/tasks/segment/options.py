"""The segment task's `vit predict` options, read without a framework (`vit predict --help`)."""

from __future__ import annotations

import argparse

PREDICT_HELP = """\
A segmenter (`vit train --task segment`) writes a class-id mask and an overlay per image into
--masks and shows each image's classes by the share of pixels they cover (run from inside a
data folder, --masks masks/ is its ground truth). For example:
  vit predict scene.png --model saved_models/digits_segment/model.keras --masks masks/"""


def add_predict_arguments(group: argparse._ArgumentGroup) -> None:
    """Registers a segmenter's `vit predict` options in `group`."""
    group.add_argument("--masks", default="masks", metavar="DIR",
                       help="each image's class-id mask (palette PNG) and overlay are written "
                       "here (default: %(default)s)")


def check_predict(args: argparse.Namespace) -> None:
    """Nothing of a segmenter's options needs checking before the model loads."""
