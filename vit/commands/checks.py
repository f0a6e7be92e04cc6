"""What several commands check before any framework is imported: the model a command reads
(a file, or an architecture with --weights) and the images it is given."""

from __future__ import annotations

import argparse

from vit_app.inference.model_files import MODEL_EXTENSIONS, check_model_path
from vit_keras.families import check_model_name
from vit_keras.pretrained.references import check_weights_reference
from vit_keras.preprocessing import PREPROCESSING_SYNTAX, Preprocessing, parse_preprocessing


def check_model(model: str, weights: str | None = None,
                extensions: tuple[str, ...] = MODEL_EXTENSIONS) -> None:
    """`--model FILE`, or `--model ARCHITECTURE --weights W`.

    Args:
        model: the --model argument.
        weights: the --weights argument, if any.
        extensions: the model files the command reads (a SavedModel directory with any).

    Raises:
        ValueError: a missing or unreadable kind of file, an unknown architecture, a --weights
            that is neither a name nor a file.
    """
    if weights:
        check_model_name(model)
        check_weights_reference(weights, model)
    else:
        check_model_path(model, extensions)


def preprocessing_argument(text: str) -> Preprocessing:
    """`--preprocessing`'s value as a `Preprocessing` (argparse reports a bad one)."""
    try:
        return parse_preprocessing(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_preprocessing_argument(parser: argparse.ArgumentParser) -> None:
    """`--preprocessing`, for a weights file that does not say how its images were prepared."""
    parser.add_argument("--preprocessing", type=preprocessing_argument, metavar="RULE",
                        help="how the weights expect images prepared, for a bare weights file "
                        "or a model that records the wrong rule (default: what the model or "
                        f"its weights record): {PREPROCESSING_SYNTAX}")


def check_preprocessing_target(model: str, preprocessing, weights: str | None = None) -> None:
    """`--preprocessing` sets what a Keras model records; an exported file normalises inside
    its graph, so it is refused there with the way to change it."""
    if preprocessing is None or weights or model.lower().endswith(".keras"):
        return
    raise ValueError(f"--preprocessing: {model} is an exported model, which normalises its "
                     "images inside its graph as recorded when it was exported; to change that, "
                     "export again: vit export --model model.keras --preprocessing ...")
