"""The `vit` command line: one sub-command per module, registered in `COMMANDS`.

Each command module defines `add_arguments(parser)` and `run(args) -> int`, and its docstring's
first line is the command's help. Modules import TensorFlow inside `run`, so `vit --help` is fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {
    "train": "training.train",
    "evaluate": "training.evaluate",
    "predict": "training.predict",
    "export": "training.export",
    "inspect": "training.inspect",
    "bench": "training.bench",
    "weights": "training.weights",
}


def build_parser() -> argparse.ArgumentParser:
    """The `vit` parser with every sub-command's options."""
    parser = argparse.ArgumentParser(prog="vit", description="Vision Transformer for Keras 3.")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        summary = (module.__doc__ or name).strip().splitlines()[0]
        sub = subparsers.add_parser(name, help=summary, description=module.__doc__,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub)
        sub.set_defaults(func=module.run)
    return parser


def select_backend(argv: list[str]) -> None:
    """Sets the Keras backend from `vit train --backend` before any command imports Keras."""
    if not argv or argv[0] != "train":
        return
    from training import backend

    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--backend", default="auto")
    early.add_argument("--tpu")
    known, _ = early.parse_known_args(argv[1:])
    if known.backend in backend.BACKENDS:  # otherwise the full parser reports it
        backend.activate(backend.choose(known.backend, known.tpu))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `vit` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    select_backend(argv)
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
