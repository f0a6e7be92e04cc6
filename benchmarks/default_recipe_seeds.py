"""Is the default job robust? `vit train` (digits_tiny) over seeds and over other digit splits.

Runs the default preset on the default 80/20 split for each seed, then on stratified 75/25
splits of the 1797 digits made here (written as PNG folders, trained with `--data folder:...
--val-data folder:...`, so the training folder keeps all of its images), and prints the test
top-1 of every run with the mean and the minimum. The first run is the full default command
(export and inspect included), whose wall time is the main job's; the others skip both.

    python benchmarks/default_recipe_seeds.py                  # seeds 0-4, splits 1-3
    python benchmarks/default_recipe_seeds.py --seeds 0 1 --splits 7
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_split(root: str, split_seed: int, test_fraction: float = 0.25) -> tuple[str, str]:
    """A stratified split of the digits as train/ and test/ PNG folders; returns both paths."""
    from PIL import Image
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    images, labels = load_digits(return_X_y=True)
    images = np.round(images.reshape(-1, 8, 8) * (255.0 / 16.0)).astype(np.uint8)
    parts = train_test_split(images, labels, test_size=test_fraction, stratify=labels,
                             random_state=split_seed)
    folders = []
    for name, part_images, part_labels in (("train", parts[0], parts[2]),
                                           ("test", parts[1], parts[3])):
        folder = os.path.join(root, f"split{split_seed}", name)
        for index, (image, label) in enumerate(zip(part_images, part_labels)):
            os.makedirs(os.path.join(folder, str(label)), exist_ok=True)
            Image.fromarray(image).convert("RGB").save(
                os.path.join(folder, str(label), f"{index:04d}.png"))
        folders.append(folder)
    return folders[0], folders[1]


def train(output: str, seed: int, extra: list[str]) -> dict:
    """One `vit train` run; returns its metrics.json plus the command's wall time."""
    command = [sys.executable, "-m", "vit.cli", "train", "--seed", str(seed),
               "--output", output, *extra]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    seconds = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    with open(os.path.join(output, "metrics.json")) as handle:
        metrics = json.load(handle)
    metrics["command_seconds"] = round(seconds, 1)
    return metrics


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--splits", type=int, nargs="+", default=[1, 2, 3],
                        help="random_state of each extra stratified 75/25 split")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--train-args", default="",
                        help="extra `vit train` arguments for every run, e.g. '--epochs 150'")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for index, seed in enumerate(args.seeds):
            extra = args.train_args.split() + ([] if index == 0 else ["--no-export",
                                                                       "--no-inspect"])
            metrics = train(os.path.join(root, f"default-{seed}"), seed, extra)
            rows.append(("default 80/20", seed, metrics))
            print(f"default 80/20  seed {seed}: {100 * metrics['val_top1']:.2f}%  "
                  f"({metrics['command_seconds']} s)", flush=True)
        for split in args.splits:
            train_dir, test_dir = write_split(root, split)
            metrics = train(os.path.join(root, f"split-{split}"), 0,
                            ["--data", f"folder:{train_dir}", "--val-data", f"folder:{test_dir}",
                             "--no-export", "--no-inspect", *args.train_args.split()])
            rows.append((f"75/25 split {split}", 0, metrics))
            print(f"75/25 split {split} seed 0: {100 * metrics['val_top1']:.2f}% "
                  f"(train {metrics['num_train_examples']}, test {metrics['val_examples']})",
                  flush=True)
    print("\n| data | seed | train | test | test top-1 | best val top-1 (epoch) | command s |")
    print("|---|---|---|---|---|---|---|")
    for name, seed, m in rows:
        print(f"| {name} | {seed} | {m['num_train_examples']} | {m['val_examples']} | "
              f"{100 * m['val_top1']:.2f}% | {100 * m['best_val_accuracy']:.2f}% "
              f"({m['best_epoch']}) | {m['command_seconds']} |")
    default = [m["val_top1"] for name, _, m in rows if name.startswith("default")]
    others = [m["val_top1"] for name, _, m in rows if not name.startswith("default")]
    print(f"\ndefault split: mean {100 * np.mean(default):.2f}%, min {100 * min(default):.2f}% "
          f"over seeds {args.seeds}")
    if others:
        print(f"other splits: min {100 * min(others):.2f}%, mean {100 * np.mean(others):.2f}%")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump([{"data": n, "seed": s, **m} for n, s, m in rows], handle, indent=1)


if __name__ == "__main__":
    main()
