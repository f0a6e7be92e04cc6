"""`vit weights`: the table of released pretrained weights, or one downloaded into the cache
ahead of time. The flags are `vit.commands.weights`'s.
"""

from __future__ import annotations

import argparse
import os

from vit_app import console
from vit_keras import families, pretrained
from vit_keras.config import variant_name


def release_table(releases) -> list[str]:
    """The lines of `vit weights list` for `releases`."""
    rows = [("model", "weights", "px", "classes", "pre_logits", "size", "cached")]
    rows += [(release.variant, release.name, str(release.image_size),
              f"{release.num_classes}{'' if release.head_trained else '*'}",
              "yes" if release.pre_logits else "no", _size(release),
              "yes" if release.cached else "no") for release in releases]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
            for row in rows]


def family_table() -> list[str]:
    """The lines of `vit weights list` for the DeiT-III, DINOv2, SigLIP and CLIP weights."""
    rows = [("weights (create_model name or hf:// reference)", "px", "preprocessing")]
    rows += [(model.reference(tag), str(model.config.image_hw[0]), rule.describe())
             for model, tag in families.weight_references()
             for rule in [model.tags[tag]]]
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
            for row in rows]


def _size(release) -> str:
    """The cached file's size, else the published one, else '?'."""
    size = os.path.getsize(release.cache_path) if release.cached else release.size
    return f"{size / 2**20:.0f} MiB" if size else "?"


def run(args: argparse.Namespace) -> int:
    """Runs `vit weights`."""
    variant = variant_name(args.model) if args.model else None
    if args.action == "list":
        releases = [release for release in pretrained.releases()
                    if variant is None or release.variant == variant]
        console.say("\n".join(release_table(releases)))
        console.say(f"\nfrom {pretrained.base_url()}; cached in {pretrained.cache_root()}")
        console.say("*: the released head is all zeros (for fine-tuning only)")
        console.say("'?': size not published (nor checksums); downloads are checked by length "
                    "and structure.")
        if variant is None:
            console.say("\nDeiT-III, DINOv2, SigLIP and CLIP (timm's files on the Hugging Face "
                        "Hub; vit_keras.create_model(NAME, weights=TAG)):")
            console.say("\n".join(family_table()))
        return 0
    path = pretrained.weights_file(args.name, variant)
    if not os.path.exists(path):
        raise ValueError(f"{args.name!r} is neither a weight name (`vit weights list`), a "
                         "URL nor an existing file")
    console.say(path)
    return 0
