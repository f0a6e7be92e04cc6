"""Image embeddings: the pooled (or projected) vector a ViT gives each image, or any block's.

Examples:
  vit embed cat.jpg dog.png --model saved_models/run/model.keras
  vit embed cat.jpg --model vit_base_patch16_clip_quickgelu_224 --weights openai --output cat.npy
  vit embed cat.jpg --model vit_small_patch14_dinov2 --weights lvd142m --block -4

Images are read, resized and normalised as the model's weights expect (its
`config.preprocessing`). A classifier gives the input of its head (the pre-logit features); a
DINOv2 model its class token, SigLIP its attention-pooled vector, CLIP its projected embedding.
--block probes an encoder block instead: its final-normed class token, or its patch mean.
"""

from __future__ import annotations

import argparse
import os

from vit import console


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Registers the `vit embed` options."""
    parser.add_argument("images", nargs="+", metavar="IMAGE", help="JPEG/PNG/BMP/GIF files")
    parser.add_argument("--model", required=True,
                        help="a .keras model written by `vit train`; with --weights an "
                        "architecture: a family name (`vit weights list`) or B/16, S/16, ...")
    parser.add_argument("--weights", help="weights for the --model architecture: a tag "
                        "(lvd142m), a name from `vit weights list`, hf://ORG/REPO or a file")
    parser.add_argument("--block", type=int, metavar="I",
                        help="embed with encoder block I (negative counts from the end)")
    parser.add_argument("--output", help="save the embeddings as a float32 [images, D] .npy "
                        "file (rows in the order of the images)")


def load_model(model: str, weights: str | None):
    """The Keras model --model/--weights name, built to output embeddings.

    Args:
        model: a `.keras` file, or an architecture when `weights` is given.
        weights: the architecture's weights, or None.

    Returns:
        The model.
    """
    import vit_keras
    from vit.inference import model_files

    if weights is None:
        if not model.endswith(".keras"):
            raise ValueError(f"--model {model!r}: expected a .keras file, or an architecture "
                             "with --weights")
        return model_files.load_model(model)
    from vit_keras import families

    if families.is_family_name(model):
        return vit_keras.create_model(model, weights=weights, include_top=False)
    from vit_keras.config import get_variant

    return vit_keras.create_model(model, weights=weights, include_top=False,
                                  pooling=get_variant(model).classifier)


def embedding_model(model, block: int | None):
    """The model mapping preprocessed images to one vector each.

    Args:
        model: the loaded Keras model.
        block: an encoder block to probe, or None (the head's input / the pooled output).

    Returns:
        A Keras model sharing `model`'s weights.
    """
    from vit_keras.analysis import feature_extractor
    from vit_keras.intermediates import block_embedding_model

    if block is not None:
        return block_embedding_model(model, block)
    return feature_extractor(model)


def run(args: argparse.Namespace) -> int:
    """Runs `vit embed`."""
    import numpy as np

    import io

    import vit_keras
    from vit.images import decode_checked, read_file
    from vit_keras.core.model import input_image_size
    from vit_keras.core.model import preprocessing_of

    model = load_model(args.model, args.weights)
    embed = embedding_model(model, args.block)
    files = [read_file(path) for path in args.images]
    pixels = decode_checked(files, input_image_size(model), names=list(args.images),
                            preprocessing=preprocessing_of(model))
    inputs = vit_keras.preprocess_input(pixels, model=model)
    vectors = np.asarray(embed.predict_on_batch(inputs), np.float32)
    for path, vector in zip(args.images, vectors):
        head = ", ".join(f"{value:.4f}" for value in vector[:4])
        console.say(f"{path}: {vector.shape[0]} values, L2 norm {np.linalg.norm(vector):.4f}, "
                    f"[{head}, ...]")
    if args.output:
        from vit_keras import atomic

        buffer = io.BytesIO()
        np.save(buffer, vectors, allow_pickle=False)
        atomic.write_bytes(args.output, buffer.getvalue())
        console.say(f"saved {vectors.shape[0]}x{vectors.shape[1]} float32 to "
                    f"{os.path.abspath(args.output)}")
    return 0
