"""Look inside a ViT: attention rollout, attention distance, position embeddings, filters, cost.

  vit inspect --model saved_models/digits_tiny/model.keras a.png b.png --output inspect/
      writes rollout.png, attention_distance.png, position_similarity.png, filters.png and
      inspect.json (the numbers behind them) to the output directory; a figure a model
      cannot have (filters.png of a convolutional stem or a hybrid) is named with the reason.
  vit inspect --complexity B/16 --image-size 224 384 512
      prints parameters, GMACs, training activation memory and attention-matrix size per
      resolution (no model is built).
"""

from __future__ import annotations

import argparse

from vit.commands.checks import check_model
from vit_app.paths import expand_images
from vit_keras.families import check_model_name


DEFAULT_SIZES = (224, 384, 512)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds the `vit inspect` options to `parser`."""
    parser.add_argument("images", nargs="*", metavar="IMAGE",
                        help="image files to look at (resized to the model's resolution)")
    parser.add_argument("--model", help="a .keras model saved by `vit train` or vit_keras")
    parser.add_argument("--output", help="directory for the PNGs and inspect.json "
                                         "(default: 'inspect' beside the model file)")
    parser.add_argument("--discard-ratio", type=float, default=0.0,
                        help="rollout: fraction of the weakest attention weights dropped")
    parser.add_argument("--head-fusion", choices=("mean", "max", "min"), default="mean",
                        help="rollout: how the heads of a layer are combined")
    parser.add_argument("--complexity", metavar="VARIANT",
                        help="print the cost of a variant (e.g. B/16) instead of inspecting")
    parser.add_argument("--image-size", type=int, nargs="+", metavar="N", default=DEFAULT_SIZES,
                        help=f"resolutions for --complexity (default: {DEFAULT_SIZES})")
    parser.add_argument("--batch-size", type=int, default=1,
                        help="batch size of the --complexity memory figures")


def check(args: argparse.Namespace) -> None:
    """Checks the model, the variant and the images before any framework is imported."""
    if args.complexity:
        check_model_name(args.complexity)
    if args.model:
        check_model(args.model, extensions=(".keras",))
    if args.images:
        args.images = expand_images(args.images)


def run(args: argparse.Namespace) -> int:
    """Runs `vit inspect`."""
    from vit_app.inference import inspect

    return inspect.run(args)
