"""Every `--finetune` mode on a real transfer, offline: digits 0-4 -> digits 5-9.

    pip install -e .
    python benchmarks/finetune_modes.py [--output /tmp/finetune_modes] [--seed 0]

1. Pre-trains `digits_upstream` (digits_tiny's recipe on the digits 0-4).
2. Fine-tunes it on the digits 5-9 with `digits_transfer` (30 epochs) in each mode, and
   trains the same classes from scratch with the same 30 epochs and with digits_tiny's full
   80-epoch recipe, for reference. Each run is its own `vit train` process (so its peak memory is its own), on
   TensorFlow with the preset's precision, without export or analysis.
3. Prints top-1 on the 180 test digits 5-9, trained / total weights, training seconds, the
   whole command's seconds and peak host memory, and writes
   benchmarks/results/finetune_modes.{txt,json}.

The learning rate is the one that suits each mode (adapters and a lone head want a larger
one than full fine-tuning); the table prints it. Absolute seconds on a shared machine are
noisy; the runs go one after the other.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (name, extra `vit train` arguments) of the fine-tuning runs.
MODES = (
    ("full", ["--finetune", "full", "--lr", "3e-3"]),
    ("lora", ["--finetune", "lora", "--lr", "2e-2"]),
    ("head", ["--finetune", "head", "--lr", "3e-2"]),
    ("probe", ["--finetune", "probe"]),
)
COLUMNS = ("run", "lr", "top-1", "trained weights", "train s", "wall s", "peak MB")


def train(output: str, *arguments: str) -> dict:
    """Runs `vit train` into `output`; returns its metrics.json."""
    command = [sys.executable, "-m", "vit.cli", "train", "--output", output,
               "--overwrite", "--no-export", "--no-inspect", *arguments]
    environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    finished = subprocess.run(command, cwd=REPO, env=environment, capture_output=True,
                              text=True)
    if finished.returncode:
        raise RuntimeError(f"{' '.join(command)} failed:\n{finished.stderr[-3000:]}")
    with open(os.path.join(output, "metrics.json")) as file:
        return json.load(file)


def row(name: str, lr: str, metrics: dict) -> dict:
    """One table row from a run's metrics."""
    return {"run": name, "lr": lr, "top-1": round(100 * metrics["val_top1"], 2),
            "trained weights": metrics["trainable_weights"],
            "total weights": metrics["total_weights"],
            "train s": round(metrics["train_seconds"], 1),
            "wall s": round(metrics["wall_seconds"], 1),
            "peak MB": metrics["peak_host_memory_mb"]}


def table(rows: list[dict]) -> str:
    """The rows as a Markdown table."""
    def cell(item, column):
        if column == "trained weights":
            return f"{item[column]:,} of {item['total weights']:,}"
        return str(item[column])

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(item, column) for column in COLUMNS) + " |"
              for item in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output", default="/tmp/finetune_modes",
                        help="folder of the runs (default: %(default)s)")
    parser.add_argument("--seed", default="0", help="seed of every run (default: 0)")
    args = parser.parse_args()
    seed = ["--seed", args.seed]
    upstream = os.path.join(args.output, "upstream")
    base = train(upstream, "--config", "digits_upstream", *seed)
    print(f"upstream (digits 0-4): top-1 {100 * base['val_top1']:.2f}%", flush=True)
    weights = ["--weights", os.path.join(upstream, "model.keras")]
    rows = []
    for name, arguments in MODES:
        metrics = train(os.path.join(args.output, name), "--config", "digits_transfer",
                        *weights, *arguments, *seed)
        rows.append(row(name, arguments[-1] if "--lr" in arguments else "-", metrics))
        print(rows[-1], flush=True)
    same_budget = train(os.path.join(args.output, "scratch_30"), "--config", "digits_transfer",
                        *seed)
    rows.append(row("scratch (30 epochs)", "3e-3", same_budget))
    scratch = train(os.path.join(args.output, "scratch"), "--config", "digits_tiny",
                    "--set", "data.classes=5,6,7,8,9", *seed)
    rows.append(row("scratch (80 epochs)", "3e-3", scratch))
    text = table(rows)
    print(text)
    results = os.path.join(REPO, "benchmarks", "results")
    with open(os.path.join(results, "finetune_modes.txt"), "w") as file:
        file.write("python benchmarks/finetune_modes.py  (digits 0-4 -> 5-9, TensorFlow, "
                   "2-core CPU)\n" + f"upstream top-1 on digits 0-4: "
                   f"{100 * base['val_top1']:.2f}%\n\n" + text + "\n")
    with open(os.path.join(results, "finetune_modes.json"), "w") as file:
        json.dump({"upstream_top1": base["val_top1"], "rows": rows}, file, indent=2)


if __name__ == "__main__":
    main()
