"""`vit embed`: the pooled (or projected) vector a ViT gives each image, or any block's, printed
and optionally saved as .npy. The flags are `vit.commands.embed`'s.
"""

from __future__ import annotations

import argparse
import io
import os

import numpy as np

import vit_keras
from vit_app import console
from vit_app.images import decode_checked, read_file
from vit_app.inference import model_files
from vit_keras import atomic, families
from vit_keras.analysis import feature_extractor
from vit_keras.config import get_variant
from vit_keras.core.model import input_image_size, preprocessing_of
from vit_keras.intermediates import block_embedding_model


def load_model(model: str, weights: str | None, preprocessing=None):
    """The Keras model --model/--weights name, built to output embeddings.

    Args:
        model: a `.keras` file, or an architecture when `weights` is given.
        weights: the architecture's weights, or None.
        preprocessing: what the weights expect, when neither they nor the model say.

    Returns:
        The model.
    """
    if weights is None:
        loaded = model_files.load_model(model)
    elif families.is_family_name(model):
        loaded = vit_keras.create_model(model, weights=weights, include_top=False)
    else:
        loaded = vit_keras.create_model(model, weights=weights, include_top=False,
                                        pooling=get_variant(model).classifier)
    if preprocessing is not None:
        loaded.set_preprocessing(preprocessing)
    return loaded


def embedding_model(model, block: int | None):
    """The model mapping preprocessed images to one vector each.

    Args:
        model: the loaded Keras model.
        block: an encoder block to probe, or None (the head's input / the pooled output).

    Returns:
        A Keras model sharing `model`'s weights.
    """
    if block is not None:
        return block_embedding_model(model, block)
    return feature_extractor(model)


def run(args: argparse.Namespace) -> int:
    """Runs `vit embed`."""
    model = load_model(args.model, args.weights, args.preprocessing)
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
        buffer = io.BytesIO()
        np.save(buffer, vectors, allow_pickle=False)
        atomic.write_bytes(args.output, buffer.getvalue())
        console.say(f"saved {vectors.shape[0]}x{vectors.shape[1]} float32 to "
                    f"{os.path.abspath(args.output)}")
    return 0
