"""Segmentation: `vit train --task segment` beside a small Keras U-Net trained for the same wall
time, on the built-in digit scenes, in one run.

The ViT is the plain command a user types (`vit train --task segment`, plus `--train-args`);
its training seconds (metrics.json `train_seconds`) are the U-Net's budget. The U-Net
(Ronneberger et al. 2015, shrunk to 32x32 inputs: 32-64-128 filters, two 3x3 conv-BN-ReLU per
level, max pooling down, 2x transposed convolutions up with skip connections, a 1x1 classifier)
trains on the very same batches (`training.segment_pipeline`, the preset's augmentation and
seed) with AdamW at 2e-3 and cosine decay over as many epochs as the budget affords (timed on
a throwaway twin's epoch first). Both are scored by the same exact mIoU over the validation scenes
(`vit.inference.segmentation_eval`). Prints one row per model and the ratio.

    python benchmarks/segmentation.py                  # about 6 minutes on 2 cores
    python benchmarks/segmentation.py --train-args "--set objective.segment_head=linear --epochs 20"
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)


def run_vit(train_args: list[str], output: str) -> dict:
    """`vit train --task segment ARGS` in its own process; its metrics.json."""
    command = [sys.executable, "-m", "vit", "train", "--task", "segment", "--no-inspect",
               "--no-export", "--output", output, *train_args]  # training is what is compared
    print("$", " ".join(shlex.quote(part) for part in command[1:]), flush=True)
    started = time.perf_counter()
    subprocess.run(command, check=True, cwd=REPO)
    with open(os.path.join(output, "metrics.json")) as handle:
        metrics = json.load(handle)
    metrics["command_seconds"] = time.perf_counter() - started
    return metrics


def unet(num_classes: int, size: int = 32, widths=(32, 64, 128)):
    """A small U-Net: images [-1, 1] -> logits [batch, size, size, classes]."""
    import keras

    def block(x, width):
        for _ in range(2):
            x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(x)
            x = keras.layers.BatchNormalization()(x)
            x = keras.layers.ReLU()(x)
        return x

    inputs = keras.Input((size, size, 3))
    skips, x = [], inputs
    for width in widths[:-1]:
        x = block(x, width)
        skips.append(x)
        x = keras.layers.MaxPooling2D()(x)
    x = block(x, widths[-1])
    for width, skip in zip(reversed(widths[:-1]), reversed(skips)):
        x = keras.layers.Conv2DTranspose(width, 2, strides=2)(x)
        x = block(keras.layers.Concatenate()([x, skip]), width)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(x), name="unet")


def _compiled_unet(classes: int, epochs: int, steps: int):
    import keras

    model = unet(classes)
    schedule = keras.optimizers.schedules.CosineDecay(2e-3, max(1, epochs * steps))
    model.compile(keras.optimizers.AdamW(schedule, weight_decay=0.05),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=255))
    return model


def run_unet(budget_seconds: float, preset) -> dict:
    """The U-Net trained on the preset's batches for `budget_seconds`: one timed epoch of a
    throwaway twin (not counted) sets how many epochs the budget affords, and the cosine
    schedule spans exactly those."""
    import keras

    from training import segment_pipeline
    from vit.data import segmentation
    from vit.inference import segmentation_eval
    from vit_keras import segmentation_scores

    keras.utils.set_random_seed(preset.seed)
    train = segmentation.digit_scenes_source("train")
    val = segmentation.digit_scenes_source("test")
    classes, batch = train.num_classes, preset.schedule.batch_size
    steps = train.num_examples // batch

    def batches(epochs):
        stream = preset.with_values({"schedule.epochs": epochs})
        return segment_pipeline.train_dataset(train, 32, batch, stream, steps_per_epoch=steps)

    probe = _compiled_unet(classes, 2, steps)
    probe.fit(batches(1), epochs=1, verbose=0)  # traced: the second epoch times the step
    started = time.perf_counter()
    probe.fit(batches(1), epochs=1, verbose=0)
    epochs = max(1, int(budget_seconds / (time.perf_counter() - started)))
    model = _compiled_unet(classes, epochs, steps)
    started = time.perf_counter()
    model.fit(batches(epochs), epochs=epochs, steps_per_epoch=steps, verbose=0)
    seconds = time.perf_counter() - started
    matrix = segmentation_eval.confusion(segmentation_eval.keras_predict(model), val, 32,
                                         classes)
    scores = segmentation_scores.scores(matrix)
    return {"val_mIoU": scores["mIoU"], "val_pixel_accuracy": scores["pixel_accuracy"],
            "train_seconds": seconds, "epochs": epochs,
            "weights": int(sum(w.size for w in model.get_weights()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-args", default="", help="more `vit train` arguments")
    args = parser.parse_args()
    from training import presets

    with tempfile.TemporaryDirectory() as folder:
        vit = run_vit(shlex.split(args.train_args), os.path.join(folder, "vit"))
    preset = presets.get_preset("digits_segment")
    baseline = run_unet(vit["train_seconds"], preset)
    print(f"\n{'model':<28} {'mIoU':>7} {'pixel acc':>10} {'train s':>8} {'epochs':>7} "
          f"{'weights':>9}")
    print(f"{'ViT (vit train --task segment)':<28} {100 * vit['val_mIoU']:6.2f}% "
          f"{100 * vit['val_pixel_accuracy']:9.2f}% {vit['train_seconds']:8.1f} "
          f"{vit['epochs']:7d} {vit['total_weights']:9,d}")
    print(f"{'U-Net, same wall time':<28} {100 * baseline['val_mIoU']:6.2f}% "
          f"{100 * baseline['val_pixel_accuracy']:9.2f}% {baseline['train_seconds']:8.1f} "
          f"{baseline['epochs']:7d} {baseline['weights']:9,d}")
    print(f"\nmIoU ratio ViT / U-Net: {vit['val_mIoU'] / max(baseline['val_mIoU'], 1e-9):.2f}")


if __name__ == "__main__":
    main()
