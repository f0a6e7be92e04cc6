"""How long a preempted `vit train` takes from SIGTERM to its backup on disk, for a real model.

Starts `vit train` on the digits (resized to the model's resolution), waits until training
runs (past its first, compiling step), sends SIGTERM at a random instant within the next steps,
and reads what the run says (`backup written to ... X s after the signal`) and when it exits.
A signal waits for the step in progress, so the time is up to one step plus the backup write
(weights and optimizer state); both are printed.

    python benchmarks/preemption.py                       # B/16 at 224 px, batch 8, 3 trials
    python benchmarks/preemption.py --model S/16 --trials 5
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WARM_STEPS = 3  # the first step traces and compiles: signal after a backup at this step


def vit(args: list[str], cwd: str) -> subprocess.Popen:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO, CUDA_VISIBLE_DEVICES="")
    return subprocess.Popen([sys.executable, "-m", "vit", *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def backup_megabytes(folder: str) -> float:
    return sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder)) / 1e6


def trial(args: list[str], output: str, delay: float) -> dict:
    """One run signalled `delay` s after its backup of step WARM_STEPS (past the first,
    compiling step)."""
    process = vit(["train", *args, "--output", output, "--set",
                   f"loop.backup_every={WARM_STEPS}"], os.path.dirname(output))
    while process.poll() is None and not os.path.exists(
            os.path.join(output, "backup", "state.json")):
        time.sleep(0.05)
    time.sleep(delay)
    if process.poll() is not None:
        raise RuntimeError("the run ended before the signal:\n" + process.stdout.read()[-3000:])
    sent = time.monotonic()
    process.send_signal(signal.SIGTERM)
    log = process.communicate()[0]
    exited = time.monotonic() - sent
    found = re.search(r"global step (\d+)\); backup written to \S+ ([\d.]+) s after the "
                      r"signal \(writing it took ([\d.]+) s\)", log)
    if process.returncode != 75 or not found:
        raise RuntimeError(f"exit {process.returncode}:\n{log[-3000:]}")
    return {"step": int(found.group(1)), "to_backup_s": float(found.group(2)),
            "write_s": float(found.group(3)), "to_exit_s": exited,
            "backup_mb": backup_megabytes(os.path.join(output, "backup"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="B/16")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    options = parser.parse_args()
    args = ["--model", options.model, "--image-size", str(options.image_size), "--batch-size",
            str(options.batch_size), "--mixed-precision", "float32", "--epochs", "1",
            "--no-export", "--no-inspect"]
    rng = random.Random(options.seed)
    print(f"vit train {' '.join(args)}: SIGTERM 0-10 s after the backup of step {WARM_STEPS}")
    with tempfile.TemporaryDirectory() as folder:
        print("| trial | global step | signal -> backup written (s) | of which the write (s) "
              "| signal -> exit (s) | backup MB |")
        print("|---|---|---|---|---|---|")
        for index in range(options.trials):
            result = trial(args, os.path.join(folder, f"run{index}"),
                           delay=rng.uniform(0.0, 10.0))
            print(f"| {index + 1} | {result['step']} | {result['to_backup_s']:.1f} | "
                  f"{result['write_s']:.1f} | {result['to_exit_s']:.1f} | "
                  f"{result['backup_mb']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
