"""Regenerates the `vit train` example of docs/training.md from a real run on this machine.

Runs `vit train` (the offline default job) in a temporary folder, and writes into
docs/training.md, between the `readme-example` markers: the command's output (the epoch lines
shortened to the first and last two), labelled with the CPU, TensorFlow and Keras it came from;
and the default model's parameter count in the quick-start text, computed from the preset.

Usage:
  python tools/readme_example.py [--readme docs/training.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile

START, END = "<!-- readme-example:start -->", "<!-- readme-example:end -->"
PARAMS = re.compile(r"\(([\d,]+) parameters\)")
KEPT_EPOCH_LINES = 2  # first and last epoch lines kept
DEFAULT_TARGET = os.path.join(os.path.dirname(__file__), "..", "docs", "training.md")


def run_default_job() -> str:
    """stdout of `vit train` run in a fresh temporary folder."""
    with tempfile.TemporaryDirectory() as folder:
        done = subprocess.run([sys.executable, "-m", "vit.cli", "train"], cwd=folder,
                              capture_output=True, text=True, check=True)
    return done.stdout


def shorten(output: str) -> str:
    """The output with the epoch lines cut to the first and last few."""
    lines = output.rstrip("\n").splitlines()
    epochs = [index for index, line in enumerate(lines) if line.startswith("epoch ")]
    if len(epochs) <= 2 * KEPT_EPOCH_LINES:
        return "\n".join(lines)
    cut = epochs[KEPT_EPOCH_LINES:-KEPT_EPOCH_LINES]
    return "\n".join(lines[:cut[0]] + ["..."] + lines[cut[-1] + 1:])


def machine() -> str:
    """'CPU model, N cores, TensorFlow x, Keras y' of this machine."""
    import keras
    import tensorflow as tf

    cpu = platform.processor() or platform.machine()
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as file:
            names = re.findall(r"^model name\s*:\s*(.+)$", file.read(), re.M)
        cpu = names[0] if names else cpu
    return (f"{cpu}, {os.cpu_count()} cores, TensorFlow {tf.__version__}, "
            f"Keras {keras.__version__}")


def default_parameter_count() -> int:
    """Parameters of the default job's model (digits: 10 classes)."""
    import vit_keras
    from training import presets

    config = presets.get_preset("digits_tiny").model.replace(num_classes=10)
    return vit_keras.VisionTransformer(config).count_params()


def main() -> None:
    from vit_app import console

    with console.quiet_native_stderr():  # TensorFlow's start-up lines, as `vit` hides them
        import tensorflow  # noqa: F401
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--readme", default=DEFAULT_TARGET,
                        help="the Markdown file to update (default: docs/training.md)")
    args = parser.parse_args()
    with open(args.readme, encoding="utf-8") as file:
        readme = file.read()
    if START not in readme or END not in readme:
        raise SystemExit(f"{args.readme} has no {START} ... {END} block")
    example = (f"{START}\n```\n$ vit train\n{shorten(run_default_job())}\n```\n"
               f"Output of `python tools/readme_example.py` on: {machine()}.\n{END}")
    head, rest = readme.split(START, 1)
    readme = head + example + rest.split(END, 1)[1]
    readme = PARAMS.sub(f"({default_parameter_count():,} parameters)", readme, count=1)
    temp = args.readme + ".tmp"
    with open(temp, "w", encoding="utf-8") as file:
        file.write(readme)
    os.replace(temp, args.readme)
    print(f"updated {args.readme}")


if __name__ == "__main__":
    main()
