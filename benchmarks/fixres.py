"""FixRes (Touvron et al., 2019) on the default job: train at one size, evaluate at several.

    python benchmarks/fixres.py [--sizes 12,16,20,24,32] [--epochs 80] [--output DIR]

Trains the `digits_tiny` preset (16 px) with `--set model.dynamic_image_size=true` three times,
with the preset's plain resize and with random-resized crops (`train_crop=inception`, the FixRes
setting: objects look larger in training than in a centred test image; with the preset's
minimum crop area 0.05, and with 0.35), then evaluates the models on digits' test split at
every size with `vit_app.tasks.classify.evaluate.evaluate` (the position embeddings resampled at
call time). Prints a Markdown table of top-1 per training crop and
evaluation size.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Table label: (output folder, `vit train` arguments).
CROPS = {"resize": ("resize", []),
         "inception": ("inception", ["--set", "augment.crop=inception"]),
         "inception, area >= 0.35": ("inception_035", ["--set", "augment.crop=inception",
                                                      "--set", "augment.crop_area_min=0.35"])}


def train(crop: str, epochs: int, output: str) -> str:
    """Runs `vit train` for one training crop; returns the model file."""
    folder, crop_arguments = CROPS[crop]
    folder = os.path.join(output, folder)
    command = [sys.executable, "-m", "vit.cli", "train", "--epochs", str(epochs),
               "--set", "model.dynamic_image_size=true", *crop_arguments, "--no-export",
               "--no-inspect", "--overwrite", "--output", folder]
    subprocess.run(command, cwd=REPO, check=True)
    return os.path.join(folder, "model.keras")


def evaluate_sizes(model_path: str, sizes: list[int]) -> dict[int, float]:
    """top-1 on digits' test split at each square size."""
    sys.path.insert(0, REPO)
    import keras

    from vit_app.data.training_data import evaluation_subset
    from vit_app.tasks.classify.data import readers
    from vit_app.tasks.classify.evaluate import evaluate

    model = keras.saving.load_model(model_path, safe_mode=True)
    source = readers.load_source("digits", evaluation_subset("digits"), None,
                                 val_split=0.0)
    return {size: evaluate(model, source, image_size=(size, size))["top1"] for size in sizes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="12,16,20,24,32")
    parser.add_argument("--epochs", type=int, default=80)
    parser.add_argument("--output", default=os.path.join(REPO, "saved_models", "fixres"))
    args = parser.parse_args()
    sizes = [int(size) for size in args.sizes.split(",")]
    rows = {crop: evaluate_sizes(train(crop, args.epochs, args.output), sizes) for crop in CROPS}
    print("| training crop (16 px) | " + " | ".join(f"test {size} px" for size in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for crop, accuracies in rows.items():
        print(f"| {crop} | " + " | ".join(f"{100 * accuracies[size]:.2f}%" for size in sizes)
              + " |")


if __name__ == "__main__":
    main()
