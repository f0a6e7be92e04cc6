"""The `vit` sub-commands' flags, one module per command, apart from their implementations.

Each module's docstring is its command's `--help` text; it defines `add_arguments(parser)`,
`run(args) -> int` and, where there is something to check, `check(args)`, which `vit.cli` runs
before any framework is imported (names, values, data specs, paths: a usage error is answered
at once); `checks.py` holds what several commands check. `vit.cli` builds the parser from these modules before it chooses the Keras
backend and imports TensorFlow, so they import no framework: `run`'s one import, of the
command's implementation module, is the command boundary, crossed after the backend is chosen.
The implementation modules (`vit_app.inference.*`, `training.train`, `training.bench`) import what
they need at their top.
"""
