"""`vit train` after its flags (`vit.commands.train`): the preset and run options they make,
checked before any data is read or anything downloaded, then the run (`training.run`), with
the message that resumes a run stopped by SIGTERM or Ctrl+C.
"""

from __future__ import annotations

import argparse
import shlex

from training import preemption
from training import run as training_run
from training.presets.command_line import resolve_preset, run_options
from vit_app import console

def run(args: argparse.Namespace) -> int:
    """Runs `vit train`; returns the exit status: 0; 3 when the model trained but an exported
    file failed its agreement check; 75 (`preemption.EXIT_PREEMPTED`) when SIGTERM stopped it,
    130 when Ctrl+C did (errors: see `vit.cli`)."""
    preset = resolve_preset(args)
    try:
        return training_run.train(preset, run_options(args))
    except preemption.Preempted as stop:
        argv = getattr(args, "command_line", None) or ["train"]
        again = (f"resume with: {preemption.resume_command(argv)}" if stop.resumable else
                 f"nothing was trained yet; run again: vit {shlex.join(argv)}")
        console.say(f"vit train: {stop}\n{again}")
        return stop.exit_status

