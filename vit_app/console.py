"""What `vit` commands print: quiet by default, and a timed line per slow stage.

TensorFlow's C++ and absl logging, the CUDA probe on machines without a GPU and the TFLite
converter's known-harmless messages are silenced unless `--verbose`. `TF_CPP_MIN_LOG_LEVEL` is
set before TensorFlow is imported; `vit` imports it with native stderr discarded, because
TensorFlow loads jaxlib (when installed), whose copy of XLA's start-up logging ignores that
variable (oneDNN and "Could not find cuda drivers" lines, printed once per library).
"""

from __future__ import annotations

import contextlib
import faulthandler
import logging
import os
import sys
import time
import warnings

# Python warnings raised by dependencies while converting or loading models, harmless for what
# `vit` does (each with the reason).
HARMLESS_WARNINGS = (
    # TFLite: full-integer conversion with float inputs and outputs kept (our contract).
    r"Statistics for quantized inputs were expected",
    # TFLite: we convert concrete functions of a Keras model; the "new" path needs a trackable.
    r".*trackable_obj argument",
)

# Python loggers whose warnings are about the environment, not the run: absl (TensorFlow's
# deprecation notes) and JAX's search for accelerators on a CPU-only machine.
QUIET_LOGGERS = ("absl", "jax._src.xla_bridge")

_state = {"verbose": False, "started": None}


def configure(verbose: bool) -> None:
    """Sets up quiet (or verbose) output for this process; call before TensorFlow is imported.

    Args:
        verbose: show every log line of TensorFlow, absl and the converters.
    """
    _state["verbose"] = verbose
    _state["started"] = time.perf_counter()
    if verbose:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "0")
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # C++ INFO/WARNING/ERROR, the CUDA probe
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)
    for message in HARMLESS_WARNINGS:
        warnings.filterwarnings("ignore", message=message)


@contextlib.contextmanager
def quiet_native_stderr():
    """Discards what native code writes to stderr inside, unless `--verbose` (for imports:
    TensorFlow and jaxlib log their start-up there)."""
    if _state["verbose"]:
        yield
    else:
        with _native_stderr_discarded():
            yield


def say(*parts, error: bool = False) -> None:
    """The application's one way to write a line: stdout (stderr with `error=True`), flushed
    at once so progress shows up when piped.

    Args:
        parts: printed like `print`'s positional arguments.
        error: write to stderr (errors, warnings, what to try).
    """
    print(*parts, file=sys.stderr if error else sys.stdout, flush=True)


def is_verbose() -> bool:
    """Whether `--verbose` was given."""
    return _state["verbose"]


def elapsed(since: float) -> float:
    """Seconds since the command started (`configure`), else since `since` (a perf_counter
    time: a run started from Python has no command around it)."""
    started = _state["started"] if _state["started"] is not None else since
    return time.perf_counter() - min(started, since)


@contextlib.contextmanager
def stage(what: str):
    """Prints `what ...` and, when the stage is done, its time on the same line.

    Native libraries' direct writes to stderr (the TFLite converter's and LiteRT's) are
    discarded inside the stage unless `--verbose`; Python exceptions still surface whole.

    Args:
        what: e.g. 'export: TFLite int8'.
    """
    print(f"{what} ...", end="", flush=True)
    started = time.perf_counter()
    finished = False
    try:
        with contextlib.ExitStack() as stack:
            if not _state["verbose"]:
                stack.enter_context(_native_stderr_discarded())
            yield
        finished = True
    finally:
        seconds = time.perf_counter() - started
        print(f" {seconds:.1f} s" if finished else
              " failed (--verbose shows the libraries' own messages)", flush=True)


@contextlib.contextmanager
def _native_stderr_discarded():
    """Points file descriptor 2 at /dev/null (what C/C++ code writes), then restores it.

    A hard crash meanwhile (segfault, abort) still prints its Python traceback on the real
    stderr: faulthandler writes to a copy of the original descriptor (unless it was already
    enabled by the caller, e.g. `python -X faulthandler` or pytest, on a file of its own).
    """
    sys.stderr.flush()
    saved = os.dup(2)
    crash_report = None
    if not faulthandler.is_enabled():
        crash_report = os.fdopen(os.dup(saved), "w")
        faulthandler.enable(file=crash_report)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        if crash_report is not None:
            faulthandler.disable()
            crash_report.close()
