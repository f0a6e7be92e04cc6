"""What several commands check before any framework is imported: the model a command reads
(a file, or an architecture with --weights) and the images it is given."""

from __future__ import annotations

from training.presets.command_line import check_weights_argument
from vit.inference.model_files import MODEL_EXTENSIONS, check_model_path
from vit_keras.families import check_model_name


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
        check_weights_argument(weights)
    else:
        check_model_path(model, extensions)
