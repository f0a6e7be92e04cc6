"""List the released pretrained weights, or download one into the cache ahead of time.

Examples:
  vit weights list
  vit weights list --model B/16
  vit weights fetch imagenet21k+imagenet2012 --model B/16

Weights are cached under $KERAS_HOME/models/vit_keras (default ~/.keras). Set
VIT_KERAS_WEIGHTS_URL to download from a mirror of the vit_models bucket instead.
"""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Registers the `vit weights` sub-commands."""
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="the registry: name, resolution, classes, cached")
    listing.add_argument("--model", help="only this architecture (B/16, R50+B/16, ...)")
    fetch = actions.add_parser("fetch", help="download weights into the cache; prints the path")
    fetch.add_argument("name", help="a weight name from `vit weights list`, or a URL")
    fetch.add_argument("--model", help="the architecture of a weight name (B/16, ...)")


def run(args: argparse.Namespace) -> int:
    """Runs `vit weights`."""
    from vit_app.inference import weights

    return weights.run(args)
