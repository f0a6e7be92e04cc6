"""Segmentation: `vit train --task segment` beside a small Keras U-Net given the same training
time, on the built-in digit scenes and on shape scenes made here, and (--pretrained) a backbone
pre-trained by the default classification job, then fine-tuned, against the same from scratch.

The ViT is the plain command a user types (`vit train --task segment`, plus `--train-args`);
its training seconds (metrics.json `train_seconds`) are the U-Net's budget. The U-Net
(Ronneberger et al. 2015, shrunk to 32x32 inputs: 32-64-128 filters, two 3x3 conv-BN-ReLU per
level, max pooling down, 2x transposed convolutions up with skip connections, a 1x1 classifier)
trains on the very same batches (`training.tasks.segment.pipeline`, the preset's augmentation and
seed) with AdamW at 2e-3 and cosine decay over the epochs one timed epoch of a throwaway twin
says the budget affords; it stops at the budget whatever the estimate said. Every model is
scored by the same exact mIoU over the validation scenes (`vit_app.tasks.segment.evaluate`),
and each runs in its own process, whose peak resident memory is reported.

Shape scenes: 32x32 canvases of smooth colour gradients with two to four filled discs, squares
and triangles (4 classes with the background) in random colours and sizes, which may overlap;
1,200 training and 300 validation scenes, written as an images/ + masks/ folder (`folder:`).

Membranes (`benchmarks/dense_sets.py`): 24 training and 6 validation grayscale slices of 512x512
px whose class is the 1-3 px membrane between cells (7% of the pixels), the shape of a user's
microscopy folder. The plain command trains them as 128 px crops at their own resolution (the
small-data rule for large images); the U-Net trains on random 128x128 crops of the same slices
(with flips) for the ViT's training seconds and, being fully convolutional, segments the whole
512 px validation slices, as the ViT does. Every model is scored on the full-resolution masks.

    python benchmarks/segmentation.py                  # about 15 minutes on 2 cores
    python benchmarks/segmentation.py --pretrained     # + the default job, 3 fine-tunings
    python benchmarks/segmentation.py --only membranes # the membrane slices alone: 6 minutes
    python benchmarks/segmentation.py --only membranes --bits 16   # as 16-bit TIFF files
    python benchmarks/segmentation.py --no-unet --train-args "--set segment.head=linear"

It exits 1 when a check fails: a ViT more than `MARGIN_POINTS` below its same-time U-Net, or
the membranes' IoU below `MEMBRANE_IOU_BAR` (docs/testing.md names the promises it holds).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# A few hundred steps in all: Keras' default BatchNorm momentum (0.99) leaves the moving
# statistics a third short of the data's, and the inference-mode U-Net then calls every pixel a
# cell (membrane IoU 0% at 100 steps, 87% with the batch's own statistics).
CROP_NORM_MOMENTUM = 0.9
DATA_SETS = ("digit-scenes", "shape-scenes", "membranes")
MARGIN_POINTS = 2  # the ViT's mIoU should be within this of the same-time U-Net's, or above
# docs/segmentation.md's promise for a microscopy folder trained with no flags (92-96% measured)
MEMBRANE_IOU_BAR = 0.80
sys.path.insert(0, REPO)


def _run(command: list[str]) -> float:
    """Runs a command of this repository's Python; returns its peak resident memory in MB."""
    print("$", " ".join(shlex.quote(str(part)) for part in command[1:]), flush=True)
    process = subprocess.Popen(command, cwd=REPO)
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise SystemExit(f"{command[1:]} failed with exit status {process.returncode}")
    return usage.ru_maxrss / 1024  # Linux reports KiB


def run_vit(train_args: list, output: str, task: str = "segment") -> dict:
    """`vit train --task TASK ARGS` in its own process; its metrics.json and peak memory."""
    command = [sys.executable, "-m", "vit", "train", "--task", task, "--no-inspect",
               "--no-export", "--output", output, *train_args]  # training is what is compared
    peak = _run(command)
    with open(os.path.join(output, "metrics.json")) as handle:
        return {**json.load(handle), "peak_mb": peak}


def run_unet_process(budget_seconds: float, train_spec: str, val_spec: str,
                     folder: str) -> dict:
    """`run_unet` in its own process (this script's --unet mode), for its own peak memory."""
    result = os.path.join(folder, f"unet-{len(os.listdir(folder))}.json")
    peak = _run([sys.executable, os.path.abspath(__file__), "--unet", json.dumps(
        {"budget": budget_seconds, "train": train_spec, "val": val_spec, "result": result})])
    with open(result) as handle:
        return {**json.load(handle), "peak_mb": peak}


def make_shape_scenes(folder: str, count: int, seed: int, size: int = 32) -> str:
    """`count` shape scenes as `folder/images/*.png` + `folder/masks/*.png` and classes.txt;
    returns the `folder:` spec."""
    import numpy as np
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    for name in ("images", "masks"):
        os.makedirs(os.path.join(folder, name), exist_ok=True)
    for index in range(count):
        image = gradient_canvas(rng, size)
        mask = Image.new("L", (size, size), 0)
        for _ in range(rng.integers(2, 5)):
            _draw_shape(ImageDraw.Draw(image), ImageDraw.Draw(mask), rng, size)
        image.save(os.path.join(folder, "images", f"{index:04d}.png"))
        mask.save(os.path.join(folder, "masks", f"{index:04d}.png"))
    with open(os.path.join(folder, "classes.txt"), "w") as handle:
        handle.write("background\ndisc\nsquare\ntriangle\n")
    return f"folder:{folder}"


def gradient_canvas(rng, size: int):
    """A `size` x `size` RGB PIL image: a smooth gradient between two random colours, across or
    down, with pixel noise."""
    import numpy as np
    from PIL import Image

    ramp = np.linspace(0, 1, size)
    start, end = rng.uniform(0, 255, (2, 3))
    along = ramp[:, None] if rng.random() < 0.5 else ramp[None, :]
    canvas = start + (end - start) * along[..., None] + rng.normal(0, 8, (size, size, 3))
    return Image.fromarray(np.clip(canvas, 0, 255).astype(np.uint8))


def random_shape(rng, size: int):
    """A random disc, square or triangle inside a `size` canvas: (class 1-3, the name of the
    PIL `ImageDraw` method that draws it, its geometry for that method, its box x0 y0 x1 y1)."""
    label = int(rng.integers(1, 4))
    radius = rng.uniform(4, 9)
    x, y = rng.uniform(radius, size - radius, 2)
    box = [x - radius, y - radius, x + radius, y + radius]
    if label == 3:
        geometry = [(x, y - radius), (x - radius, y + radius), (x + radius, y + radius)]
    else:
        geometry = box
    return label, ("ellipse", "rectangle", "polygon")[label - 1], geometry, box


def _draw_shape(image, mask, rng, size: int) -> None:
    """One filled random shape in the image's random colour and the mask's id."""
    label, method, geometry, _ = random_shape(rng, size)
    colour = tuple(int(c) for c in rng.integers(0, 256, 3))
    getattr(image, method)(geometry, fill=colour)
    getattr(mask, method)(geometry, fill=label)


def unet(num_classes: int, size: int | None = 32, widths=(32, 64, 128),
         norm_momentum: float = 0.99):
    """A small U-Net: images [-1, 1] -> logits [batch, size, size, classes] (size None: any
    size divisible by 4; `norm_momentum`: of its BatchNorms' moving statistics)."""
    import keras

    def block(x, width):
        for _ in range(2):
            x = keras.layers.Conv2D(width, 3, padding="same", use_bias=False)(x)
            x = keras.layers.BatchNormalization(momentum=norm_momentum)(x)
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


def _compiled_unet(classes: int, epochs: int, steps: int, size: int | None = 32,
                   norm_momentum: float = 0.99):
    import keras

    model = unet(classes, size, norm_momentum=norm_momentum)
    schedule = keras.optimizers.schedules.CosineDecay(2e-3, max(1, epochs * steps))
    model.compile(keras.optimizers.AdamW(schedule, weight_decay=0.05),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=255))
    return model


def _stop_at_budget(model, seconds: float):
    """A Keras callback that ends `model`'s training once `seconds` of it have passed."""
    import keras

    clock = {}

    def begin(logs=None):
        clock["started"] = time.perf_counter()

    def after_batch(batch, logs=None):
        if time.perf_counter() - clock["started"] >= seconds:
            model.stop_training = True

    return keras.callbacks.LambdaCallback(on_train_begin=begin, on_train_batch_end=after_batch)


def run_unet(budget_seconds: float, train_spec: str, val_spec: str) -> dict:
    """The U-Net trained on `digits_segment`'s batches of `train_spec` for `budget_seconds`:
    one timed epoch of a throwaway twin (not counted) sets the cosine schedule's epochs, and
    training stops at the budget whatever that estimate said."""
    import keras

    from training.tasks.segment import pipeline as segment_pipeline
    from training.presets import get_preset
    from vit_app.tasks.segment.data import sources as segmentation
    from vit_app.tasks.segment import evaluate as segmentation_eval
    from vit_keras.tasks.segment import scores as segmentation_scores

    preset = get_preset("digits_segment")
    keras.utils.set_random_seed(preset.seed)
    train = segmentation.load_segmentation_source(train_spec, "train", 0.0)
    val = segmentation.load_segmentation_source(val_spec, "val" if val_spec == "digit-scenes"
                                                else "train", 0.0)
    classes, batch = train.num_classes, preset.schedule.batch_size
    steps = train.num_examples // batch

    def batches(epochs):
        stream = preset.with_values({"schedule.epochs": epochs})
        return segment_pipeline.train_dataset(train, 32, batch, stream, steps_per_epoch=steps)

    twin = _compiled_unet(classes, 2, steps)
    twin.fit(batches(1), epochs=1, verbose=0)  # traced: the second epoch times the step
    started = time.perf_counter()
    twin.fit(batches(1), epochs=1, verbose=0)
    epochs = max(1, round(budget_seconds / (time.perf_counter() - started)))
    model = _compiled_unet(classes, epochs, steps)
    started = time.perf_counter()
    history = model.fit(batches(epochs), epochs=epochs, steps_per_epoch=steps, verbose=0,
                        callbacks=[_stop_at_budget(model, budget_seconds)])
    seconds = time.perf_counter() - started
    matrix = segmentation_eval.confusion(segmentation_eval.keras_predict(model), val, 32,
                                         classes)
    scores = segmentation_scores.scores(matrix)
    return {"val_mIoU": scores["mIoU"], "val_pixel_accuracy": scores["pixel_accuracy"],
            "train_seconds": seconds, "epochs": len(history.history["loss"]),
            "planned_epochs": epochs, "total_weights": int(sum(w.size for w in
                                                               model.get_weights()))}


def _slices(folder: str):
    """A membranes folder as (float32 [N, H, W, 3] in [-1, 1], uint8 [N, H, W] class ids:
    its slices and binary masks read as `vit train` reads them)."""
    import numpy as np

    from vit_app.tasks.segment.data.masks import pair_files, read_mask
    from vit_app.images import decode_native, read_file

    image_files, mask_files = pair_files(folder)
    images = np.stack([decode_native(read_file(name)) / 127.5 - 1 for name in image_files])
    masks = np.stack([read_mask(name, binary=True) for name in mask_files])
    return images, masks


def _cosine_over_seconds(model, seconds: float, peak: float = 2e-3):
    """A Keras callback setting `model`'s learning rate to a cosine decay from `peak` over
    `seconds` of training."""
    import keras

    clock = {}

    def begin(logs=None):
        clock["started"] = time.perf_counter()

    def before_batch(batch, logs=None):
        done = min(1.0, (time.perf_counter() - clock["started"]) / seconds)
        model.optimizer.learning_rate.assign(peak * 0.5 * (1 + math.cos(math.pi * done)))

    return keras.callbacks.LambdaCallback(on_train_begin=begin,
                                          on_train_batch_begin=before_batch)


def _crop_unet():
    """The U-Net for crops of any size, its learning rate a variable (`_cosine_over_seconds`)."""
    import keras

    model = unet(2, None, norm_momentum=CROP_NORM_MOMENTUM)
    model.compile(keras.optimizers.AdamW(2e-3, weight_decay=0.05),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=255))
    return model


def run_unet_crops(budget_seconds: float, train_dir: str, val_dir: str, crop: int = 128,
                   batch: int = 16) -> dict:
    """The U-Net on random `crop`-px crops of the slices at their own resolution (flipped at
    random), for `budget_seconds`, then scored on the whole validation slices."""
    import keras
    import numpy as np
    import tensorflow as tf

    from vit_keras.tasks.segment import scores as segmentation_scores

    keras.utils.set_random_seed(0)
    images, masks = _slices(train_dir)
    stacked = np.concatenate([images, masks[..., None].astype(np.float32)], axis=-1)

    def cropped(seed):
        pair = tf.image.stateless_random_crop(tf.gather(stacked, seed[1] % len(stacked)),
                                              [crop, crop, 4], seed)
        pair = tf.image.stateless_random_flip_left_right(pair, seed + 1)
        pair = tf.image.stateless_random_flip_up_down(pair, seed + 2)
        return pair[..., :3], tf.cast(pair[..., 3], tf.int32)

    seeds = tf.data.Dataset.counter().map(lambda step: tf.stack([step, step * 7 + 3]))
    stream = seeds.map(cropped).batch(batch).prefetch(tf.data.AUTOTUNE)
    # No epoch plan: a probe's few steps ran half as fast as training (5 steps planned 87 s of
    # 156), so the learning rate follows a cosine over the budget's seconds instead, and the
    # budget ends training.
    steps = 10
    model = _crop_unet()
    started = time.perf_counter()
    history = model.fit(stream, epochs=1_000_000, steps_per_epoch=steps, verbose=0,
                        callbacks=[_cosine_over_seconds(model, budget_seconds),
                                   _stop_at_budget(model, budget_seconds)])
    seconds = time.perf_counter() - started
    val_images, val_masks = _slices(val_dir)
    predicted = np.concatenate([np.argmax(model.predict_on_batch(val_images[i:i + 1]), -1)
                                for i in range(len(val_images))])
    scores = segmentation_scores.scores(segmentation_scores.confusion_matrix(
        val_masks, predicted, 2))
    return {"val_mIoU": scores["mIoU"], "val_pixel_accuracy": scores["pixel_accuracy"],
            "val_class_iou": {"cell": scores["iou"][0], "membrane": scores["iou"][1]},
            "train_seconds": seconds, "epochs": len(history.history["loss"]),
            "planned_epochs": len(history.history["loss"]),
            "total_weights": int(sum(w.size for w in model.get_weights()))}


def membrane_rows(train_args: list, folder: str, unet: bool = True, bits: int = 8) -> list:
    """The ViT by the plain command on the membrane slices (8-bit PNG or 16-bit TIFF files),
    and the U-Net on native crops given its training seconds."""
    from dense_sets import make_membranes

    train = make_membranes(os.path.join(folder, "membranes-train"), 24, seed=0, bits=bits)
    val = make_membranes(os.path.join(folder, "membranes-val"), 6, seed=1, bits=bits)
    vit = run_vit(["--data", train, "--val-data", val, *train_args],
                  os.path.join(folder, "vit-membranes"))
    rows = [("membranes: ViT (vit train --task segment)", vit)]
    if unet:
        task = {"budget": vit["train_seconds"], "train": train.split(":", 1)[1],
                "val": val.split(":", 1)[1], "crops": True,
                "result": os.path.join(folder, "unet-membranes.json")}
        peak = _run([sys.executable, os.path.abspath(__file__), "--unet", json.dumps(task)])
        with open(task["result"]) as handle:
            rows.append(("membranes: U-Net, 128 px native crops, same training time",
                         {**json.load(handle), "peak_mb": peak}))
    return rows


def _row(name: str, result: dict) -> str:
    return (f"{name:<58} {100 * result['val_mIoU']:6.2f}% "
            f"{100 * result['val_pixel_accuracy']:9.2f}% {result['train_seconds']:8.1f} "
            f"{result['epochs']:7d} {result['total_weights']:9,d} {result['peak_mb']:8.0f}")


def compare(name: str, train_spec: str, val_spec: str, train_args: list, folder: str,
            unet: bool = True) -> list:
    """The ViT from scratch and the U-Net given its training seconds, on one data set."""
    data = ["--data", train_spec] + (["--val-data", val_spec] if val_spec != train_spec else [])
    vit = run_vit(data + train_args, os.path.join(folder, f"vit-{name}"))
    rows = [(f"{name}: ViT (vit train --task segment)", vit)]
    if unet:
        rows.append((f"{name}: U-Net, same training time",
                     run_unet_process(vit["train_seconds"], train_spec, val_spec, folder)))
    return rows


def pretrained_rows(train_args: list, folder: str) -> list:
    """The default classification job, then its encoder fine-tuned on the digit scenes."""
    classifier = os.path.join(folder, "classifier")
    job = run_vit([], classifier, task="classify")
    print(f"default job: {100 * job['val_top1']:.2f}% top-1 in {job['train_seconds']:.0f} s",
          flush=True)
    rows = []
    for mode in ("probe", "lora", "full"):
        weights = ["--weights", os.path.join(classifier, "model.keras"), "--finetune", mode]
        rows.append((f"digit-scenes: default job's encoder, {mode}",
                     run_vit(weights + train_args, os.path.join(folder, f"vit-{mode}"))))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-args", default="", help="more `vit train` arguments")
    parser.add_argument("--pretrained", action="store_true",
                        help="also the default classification job's encoder, fine-tuned")
    parser.add_argument("--only", choices=DATA_SETS, action="append",
                        help="only this data set's rows (repeatable; default: all three)")
    parser.add_argument("--no-unet", action="store_true",
                        help="the ViT rows alone (to compare `--train-args` variants)")
    parser.add_argument("--bits", type=int, choices=[8, 16], default=8,
                        help="membranes: 8-bit PNG or 16-bit TIFF slices, a 12-bit camera's "
                        "counts (default 8)")
    parser.add_argument("--unet", help=argparse.SUPPRESS)  # the U-Net's own process
    args = parser.parse_args()
    if args.unet:
        task = json.loads(args.unet)
        if task.get("crops"):
            result = run_unet_crops(task["budget"], task["train"], task["val"])
        else:
            result = run_unet(task["budget"], task["train"], task["val"])
        with open(task["result"], "w") as handle:
            json.dump(result, handle)
        return
    train_args, unet = shlex.split(args.train_args), not args.no_unet
    only = args.only or DATA_SETS
    with tempfile.TemporaryDirectory() as folder:
        shapes = os.path.join(folder, "shapes")
        rows = []
        if "digit-scenes" in only:
            rows += compare("digit-scenes", "digit-scenes", "digit-scenes", train_args, folder,
                            unet)
        if args.pretrained:
            rows += pretrained_rows(train_args, folder)
        if "shape-scenes" in only:
            rows += compare("shape-scenes", make_shape_scenes(shapes + "-train", 1200, seed=1),
                            make_shape_scenes(shapes + "-val", 300, seed=2), train_args,
                            folder, unet)
        if "membranes" in only:
            rows += membrane_rows(train_args, folder, unet, args.bits)
    print(f"\n{'model':<58} {'mIoU':>7} {'pixel acc':>10} {'train s':>8} {'epochs':>7} "
          f"{'weights':>9} {'peak MB':>8}")
    for name, result in rows:
        print(_row(name, result))
    for name, result in rows:
        if "val_class_iou" in result:
            print(f"{name}: IoU per class " + ", ".join(
                f"{label} {100 * (iou or 0):.2f}%" for label, iou in
                result["val_class_iou"].items()))
    failed = False
    for data in ("digit-scenes", "shape-scenes", "membranes"):
        pair = [result for name, result in rows if name.startswith(data) and
                ("ViT" in name or "U-Net" in name)][:2]  # the U-Net given the ViT's time
        if len(pair) != 2:
            continue
        vit, unet = pair
        points = 100 * (vit["val_mIoU"] - unet["val_mIoU"])
        verdict = "within" if points >= -MARGIN_POINTS else "NOT within"
        print(f"{data}: ViT - U-Net {points:+.1f} mIoU points ({verdict} {MARGIN_POINTS} of "
              f"the U-Net), ratio {vit['val_mIoU'] / max(unet['val_mIoU'], 1e-9):.2f}; U-Net "
              f"trained {unet['train_seconds']:.0f} s of its {vit['train_seconds']:.0f} s budget "
              f"({unet['epochs']} of {unet['planned_epochs']} planned epochs)")
        failed |= verdict != "within"
    failed |= not membranes_found(rows)
    if failed:
        raise SystemExit(1)


def membranes_found(rows: list) -> bool:
    """Whether the plain command found the membranes (their IoU at `MEMBRANE_IOU_BAR`), said
    in a line; True where the membranes were not run."""
    vit = next((result for name, result in rows if name.startswith("membranes: ViT")), None)
    if vit is None:
        return True
    iou = vit["val_class_iou"]["membrane"]
    found = iou >= MEMBRANE_IOU_BAR
    print(f"membranes: the plain command's membrane IoU {100 * iou:.1f}% "
          f"({'at least' if found else 'BELOW'} the {100 * MEMBRANE_IOU_BAR:.0f}% promised)")
    return found


if __name__ == "__main__":
    main()
