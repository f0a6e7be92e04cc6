"""Image embeddings: the pooled (or projected) vector a ViT gives each image, or any block's.

Examples:
  vit embed cat.jpg dog.png --model saved_models/run/model.keras
  vit embed cat.jpg --model vit_base_patch16_clip_quickgelu_224 --weights openai --output cat.npy
  vit embed cat.jpg --model vit_small_patch14_dinov2 --weights lvd142m --block -4

Images are read, resized and normalised as the model's weights expect (its
`model.preprocessing`). A classifier gives the input of its head (the pre-logit features); a
DINOv2 model its class token, SigLIP its attention-pooled vector, CLIP its projected embedding.
--block probes an encoder block instead: its final-normed class token, or its patch mean.
"""

from __future__ import annotations

import argparse

from vit.commands.checks import add_preprocessing_argument, check_model
from vit_app.paths import expand_images


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Registers the `vit embed` options."""
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="JPEG/PNG/BMP/GIF/TIFF files")
    parser.add_argument("--model", required=True,
                        help="a .keras model written by `vit train` or a keras-hub "
                        "preset folder; with --weights an "
                        "architecture: a family name (`vit weights list`) or B/16, S/16, ...")
    parser.add_argument("--weights", help="weights for the --model architecture: a tag "
                        "(lvd142m), a name from `vit weights list`, hf://ORG/REPO or a file")
    add_preprocessing_argument(parser)
    parser.add_argument("--block", type=int, metavar="I",
                        help="embed with encoder block I (negative counts from the end)")
    parser.add_argument("--output", help="save the embeddings as a float32 [images, D] .npy "
                        "file (rows in the order of the images)")


def check(args: argparse.Namespace) -> None:
    """Checks the model and the images before any framework is imported; the folders and
    patterns among the images become their files."""
    check_model(args.model, args.weights, (".keras",))
    args.images = expand_images(args.images)


def run(args: argparse.Namespace) -> int:
    """Runs `vit embed`."""
    from vit_app.inference import embed

    return embed.run(args)
