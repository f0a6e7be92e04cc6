"""The `vit` command line: one sub-command per module, registered in `COMMANDS`.

Each command module (`vit.commands`) defines `add_arguments(parser)` and `run(args) -> int`,
optionally `check(args)`, and its docstring's first paragraph is the command's help. Command
modules import no framework, so that `vit --help` and `vit CMD --help` answer at once; `main`
parses the command line first, then `check` validates names, values, data specs and paths
(still without a framework: a usage error is answered within a second), then `main` sets the
Keras backend and imports TensorFlow with its start-up logging silenced (see `vit_app.console`),
then `run` imports the command's implementation.

Errors look alike in every command: a bad argument or input (`ValueError`) prints one line
`vit CMD: error: ...` and exits with status 2; a run that fails on its way (`RuntimeError`,
`OSError`) the same with status 1; Ctrl+C prints `vit CMD: interrupted` and exits with 130.
`vit export`, and `vit train` at its export, exit with 3 when an exported file failed its
agreement check with the Keras model (every other file and the trained model are written).
`vit train` stopped by SIGTERM exits with 75 after its backup, by Ctrl+C with 130
(`training.preemption`). `--debug` shows the traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import textwrap

from vit_app import console

COMMANDS = {
    "train": "vit.commands.train",
    "evaluate": "vit.commands.evaluate",
    "predict": "vit.commands.predict",
    "embed": "vit.commands.embed",
    "serve": "vit.commands.serve",
    "export": "vit.commands.export",
    "inspect": "vit.commands.inspect",
    "bench": "vit.commands.bench",
    "weights": "vit.commands.weights",
}


class WholeWordsHelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The command's docstring as written; option help wrapped between words only (a format
    name or a path is never split across lines)."""

    def _split_lines(self, text, width):
        return textwrap.wrap(" ".join(text.split()), width, break_long_words=False,
                             break_on_hyphens=False)


def build_parser() -> argparse.ArgumentParser:
    """The `vit` parser with every sub-command's options."""
    parser = argparse.ArgumentParser(prog="vit", description="Vision Transformer for Keras 3.",
                                     formatter_class=WholeWordsHelpFormatter)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module_name in COMMANDS.items():
        module = importlib.import_module(module_name)
        summary = " ".join((module.__doc__ or name).strip().split("\n\n")[0].split())
        sub = subparsers.add_parser(name, help=summary, description=module.__doc__,
                                    formatter_class=WholeWordsHelpFormatter)
        module.add_arguments(sub)
        _add_common_arguments(sub)
        sub.set_defaults(func=module.run, check=getattr(module, "check", None))
    return parser


def _add_common_arguments(parser: argparse.ArgumentParser) -> None:
    """--debug and --verbose on every command, on its actions where it has some (`vit weights
    list`); train's own --verbose also sets Keras' verbosity."""
    actions = [action for action in parser._actions
               if isinstance(action, argparse._SubParsersAction)]
    if actions:
        for child in actions[0].choices.values():
            _add_common_arguments(child)
        return
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an error")
    if not any("--verbose" in action.option_strings for action in parser._actions):
        parser.add_argument("--verbose", action="store_true",
                            help="show every TensorFlow, absl and converter log line")


def verbose_requested(argv: list[str]) -> bool:
    """Whether argv asks for --verbose (read before parsing: it decides TensorFlow's logging);
    train's `--verbose 0` does not."""
    for index, arg in enumerate(argv):
        if arg.startswith("--verbose="):
            value = arg.split("=", 1)[1]
        elif arg == "--verbose":
            value = argv[index + 1] if index + 1 < len(argv) else ""
        else:
            continue
        if value != "0":
            return True
    return False


def select_backend(argv: list[str]) -> None:
    """Sets the Keras backend from `vit train --backend` before any command imports Keras."""
    if not argv or argv[0] != "train":
        return
    from vit_app import backend

    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--backend", default="auto")
    early.add_argument("--tpu")
    known, _ = early.parse_known_args(argv[1:])
    if known.backend in backend.BACKENDS:  # otherwise the full parser reports it
        backend.activate(backend.choose(known.backend, known.tpu))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `vit` console script."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)  # --help and usage errors exit here
    args.command_line = argv  # `vit train` prints the command that resumes it
    console.configure(verbose_requested(argv))
    if args.check is not None:  # names, values, paths: answered before any framework loads
        status = _guarded(args, args.check)
        if status:
            return status
    with console.quiet_native_stderr():
        select_backend(argv)  # before Keras is imported (TensorFlow imports it)
        import tensorflow  # noqa: F401  every command uses it; quietly (see vit_app.console)
    return _guarded(args, args.func)


def _guarded(args: argparse.Namespace, step) -> int:
    """`step(args)`'s exit status, with an error or Ctrl+C reported as the module docstring
    says."""
    try:
        return int(step(args) or 0)
    except (ValueError, RuntimeError, OSError) as error:
        if args.debug:
            raise
        console.say(f"vit {args.command}: error: {error}", error=True)
        return 2 if isinstance(error, ValueError) else 1
    except KeyboardInterrupt:
        if args.debug:
            raise
        console.say(f"vit {args.command}: interrupted", error=True)
        return 130


if __name__ == "__main__":
    sys.exit(main())
