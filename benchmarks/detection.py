"""Detection: `vit train --task detect` beside keras-hub's RetinaNet (a small ResNet and its
feature pyramid, from scratch) given the same training time, on the built-in digit boxes and on
shape scenes made here.

The ViT is the plain command a user types (`vit train --task detect`, plus `--train-args`); its
training seconds (metrics.json `train_seconds`) are RetinaNet's budget. RetinaNet
(Lin et al. 2017, `keras_hub.models.RetinaNetObjectDetector`) gets:
- a ResNet of basic blocks, 64-96-128 filters, two blocks a stage (`ResNetBackbone`), and the
  pyramid levels P2-P4 (strides 4, 8, 16: a 64 px image's 12-30 px objects sit on P2 and P3);
- keras-hub's own heads (four 3x3 convolutions of 256 filters before each output), and in a
  second row one convolution a head (a quarter of their work: at 64 px the heads on P2 cost
  more than the ResNet, and more steps in the same time may pay more than depth);
- anchors (3 scales x 3 aspect ratios a level, `anchor_size` 3: 12-19 px on P2), keras-hub's
  label encoder, losses (focal classification, Huber boxes) and non-maximum suppression (IoU
  0.5, scores >= 0.05, 100 boxes, as COCO scoring wants);
- the very same batches as the ViT (`training.tasks.detect.pipeline` with the resolved preset the
  ViT's run wrote: size, batch, crops, flips, photometric, seed);
- AdamW at 1e-3 (weight decay 1e-4, clipnorm 1) on a cosine over the budget's seconds;
  training stops at the budget.
Both are scored by the same pycocotools mAP (`vit_app.tasks.detect.evaluate.coco_scores`)
on every validation image at its own size, and each trains in its own process, whose peak
resident memory is reported.

Photo boxes: 300 + 60 photographs with a cat pasted in (`benchmarks/dense_sets.py`), the ViT
alone, held to the figures docs/detection.md promises for a first photo folder (`PHOTO_BARS`).

Shape scenes: 64x64 canvases of smooth colour gradients with one to four discs, squares and
triangles (3 classes) of 8-18 px in random colours, not overlapping; 1,200 training and 300
validation scenes, written as a YOLO folder (images/ + labels/ + classes.txt, `folder:`).

    python benchmarks/detection.py                      # about 22 minutes on 2 cores
    python benchmarks/detection.py --only shape-boxes   # one data set
    python benchmarks/detection.py --only photo-boxes   # the photo folder's figures: 5 minutes
    python benchmarks/detection.py --data folder:train --val-data folder:val  # your photos

Your own folder (`--data`, `--val-data`): the ViT, the two same-time RetinaNets and the constant
box (the training boxes' mean box in every validation photo, which the ViT's run scores); the
ViT should lead the constant box by `CONSTANT_BOX_POINTS` in both mAPs. RetinaNet's images are
zero-padded at the bottom and right to a multiple of 16, which its pyramid needs.

It exits 1 when a verdict does not hold.
    python benchmarks/detection.py --no-retinanet --train-args "--set detect.queries=30"
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time

from segmentation import (_cosine_over_seconds, _run, _stop_at_budget, gradient_canvas,
                          random_shape, run_vit)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA_SETS = ("digit-boxes", "shape-boxes", "photo-boxes")
# A user's first folder of photographs (benchmarks/dense_sets.py), trained with no flags: the
# ViT alone, held to docs/detection.md's figures (mAP@0.5 0.5 and mAP 0.2 at least).
PHOTO_BARS = {"val_mAP50": 0.5, "val_mAP": 0.2}
FOLDER = "your-folder"  # the rows of `--data`
SHAPE_CLASSES = ("disc", "square", "triangle")
HEAD_CONVS = {"keras-hub's heads": 4, "1 conv a head": 1}  # row name: convolutions a head
MARGIN_POINTS = 0  # the ViT's mAP should be at least the same-time RetinaNet's
# On a folder of real photographs the plain command should beat a box that never looks at the
# image (the training boxes' mean box, in every validation photo) by this much, in both mAPs.
CONSTANT_BOX_POINTS = 10
PYRAMID_STRIDE = 16  # P4's
sys.path.insert(0, REPO)


# --- the second data set -----------------------------------------------------------------------

def make_shape_boxes(folder: str, count: int, seed: int, size: int = 64) -> str:
    """`count` shape scenes as a YOLO folder (`images/`, `labels/`, classes.txt); returns the
    `folder:` spec."""
    import numpy as np
    from PIL import ImageDraw

    rng = np.random.default_rng(seed)
    for name in ("images", "labels"):
        os.makedirs(os.path.join(folder, name), exist_ok=True)
    for index in range(count):
        image = gradient_canvas(rng, size)
        lines = _draw_apart(ImageDraw.Draw(image), rng, size, int(rng.integers(1, 5)))
        image.save(os.path.join(folder, "images", f"{index:04d}.png"))
        with open(os.path.join(folder, "labels", f"{index:04d}.txt"), "w") as handle:
            handle.write("".join(lines))
    with open(os.path.join(folder, "classes.txt"), "w") as handle:
        handle.write("\n".join(SHAPE_CLASSES) + "\n")
    return f"folder:{folder}"


def _draw_apart(draw, rng, size: int, wanted: int) -> list[str]:
    """Up to `wanted` random shapes whose boxes do not touch; their YOLO lines."""
    taken, lines = [], []
    for _ in range(20 * wanted):
        if len(taken) == wanted:
            break
        label, method, geometry, box = random_shape(rng, size)
        if any(box[0] < other[2] + 1 and other[0] < box[2] + 1 and box[1] < other[3] + 1 and
               other[1] < box[3] + 1 for other in taken):
            continue
        getattr(draw, method)(geometry, fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
        taken.append(box)
        x0, y0, x1, y1 = box
        lines.append(f"{label - 1} {(x0 + x1) / 2 / size:.6f} {(y0 + y1) / 2 / size:.6f} "
                     f"{(x1 - x0) / size:.6f} {(y1 - y0) / size:.6f}\n")
    return lines


# --- RetinaNet ---------------------------------------------------------------------------------

def run_preset(run_folder: str):
    """The preset a `vit train` run resolved (its config.json), as a `Preset`."""
    from training.presets import get_preset

    with open(os.path.join(run_folder, "config.json")) as handle:
        saved = json.load(handle)["preset"]
    sections = ("schedule", "augment", "objective")
    return get_preset(saved["name"]).replace(
        seed=saved["seed"], model={"image_size": saved["model"]["image_size"]},
        data={key: saved["data"][key] for key in ("train", "val", "val_split")},
        **{section: saved[section] for section in sections})


def retinanet(num_classes: int, size: tuple[int, int], head_convs: int = 4):
    """keras-hub's RetinaNet on a small ResNet's P2-P4, with `head_convs` 3x3 convolutions
    before each head's output, compiled with its own losses."""
    import keras
    import keras_hub

    encoder = keras_hub.models.ResNetBackbone(
        input_conv_filters=[64], input_conv_kernel_sizes=[3],
        stackwise_num_filters=[64, 96, 128], stackwise_num_blocks=[2, 2, 2],
        stackwise_num_strides=[1, 2, 2], block_type="basic_block", image_shape=(*size, 3))
    backbone = keras_hub.models.RetinaNetBackbone(
        image_encoder=encoder, min_level=2, max_level=4, use_p5=False,
        image_shape=(*size, 3))
    anchors = keras_hub.layers.AnchorGenerator(
        "xyxy", min_level=2, max_level=4, num_scales=3, aspect_ratios=[0.5, 1.0, 2.0],
        anchor_size=3)
    decoder = keras_hub.layers.NonMaxSuppression(
        "xyxy", from_logits=True, iou_threshold=0.5, confidence_threshold=0.05,
        max_detections=100)
    model = keras_hub.models.RetinaNetObjectDetector(
        backbone=backbone, num_classes=num_classes, bounding_box_format="xyxy",
        anchor_generator=anchors, prediction_decoder=decoder,
        pre_logits_num_conv_layers=head_convs)
    model.compile(optimizer=keras.optimizers.AdamW(1e-3, weight_decay=1e-4, clipnorm=1.0))
    return model


def pyramid_size(size: tuple[int, int]) -> tuple[int, int]:
    """`size` rounded up to P4's stride (16), so that each pyramid level is exactly twice the
    next: a 56x64 ViT input is zero-padded at its bottom to 64x64 for RetinaNet."""
    return tuple(-(-side // PYRAMID_STRIDE) * PYRAMID_STRIDE for side in size)


def keras_hub_targets(size: tuple[int, int]):
    """A map from the ViT pipeline's batches (images at `size`; targets [batch, objects, 5] of
    class, cx cy w h fractions) to RetinaNet's: the images zero-padded at their bottom and right
    to `pyramid_size`, {'boxes': pixel xyxy, 'labels'} padding -1 in both."""
    import tensorflow as tf

    scale = tf.constant([size[1], size[0], size[1], size[0]], tf.float32)
    padded = pyramid_size(size)

    def convert(images, found):
        present = found[..., :1] >= 0
        centre, extent = found[..., 1:3], found[..., 3:5]
        boxes = tf.concat([centre - extent / 2, centre + extent / 2], axis=-1) * scale
        images = tf.image.pad_to_bounding_box(images, 0, 0, *padded)
        return images, {"boxes": tf.where(present, boxes, -1.0),
                        "labels": tf.where(present[..., 0], found[..., 0], -1.0)}

    return convert


def retinanet_scores(model, val, size, preprocessing) -> dict:
    """COCO scores of RetinaNet's boxes on every validation image, at the image's own size."""
    import numpy as np

    from vit_app.tasks.detect.data.sources import labelled_images
    from vit_app.tasks.detect.evaluate import coco_scores, model_inputs

    images, truth = labelled_images(val)
    padded = pyramid_size(size)
    inputs = np.pad(model_inputs(images, size, preprocessing),
                    [(0, 0), (0, padded[0] - size[0]), (0, padded[1] - size[1]), (0, 0)])
    found = {}
    for start in range(0, len(inputs), 64):  # eager: keras-hub's NMS needs a known batch size
        chunk = inputs[start:start + 64]
        decoded = model.decode_predictions(model(chunk, training=False), chunk)
        for key, value in decoded.items():
            found.setdefault(key, []).append(np.asarray(value))
    found = {key: np.concatenate(value) for key, value in found.items()}
    detections = []
    for index, image in enumerate(images):
        kept = int(found["num_detections"][index])
        stretch = np.array([image.shape[1] / size[1], image.shape[0] / size[0]] * 2)
        detections.append({"boxes": found["boxes"][index, :kept] * stretch,
                           "scores": found["confidence"][index, :kept],
                           "classes": found["labels"][index, :kept].astype(int)})
    return coco_scores(truth, detections, [image.shape[:2] for image in images],
                       val.class_names)


def run_retinanet(budget_seconds: float, run_folder: str, head_convs: int = 4) -> dict:
    """RetinaNet trained on the batches of the ViT run in `run_folder` for `budget_seconds`."""
    import keras

    from training.tasks.detect import pipeline as detect_pipeline
    from vit_app.tasks.detect.data.sources import open_detection_data
    from vit_app.images import image_hw

    preset = run_preset(run_folder)
    keras.utils.set_random_seed(preset.seed)
    data = open_detection_data(preset.data.train, preset.data.val, preset.data.val_split,
                               preset.seed)
    size, batch = image_hw(preset.model.image_size), preset.schedule.batch_size
    preprocessing = preset.data.preprocessing
    steps = data.train.num_examples // batch
    endless = preset.with_values({"schedule.epochs": 10_000})  # the budget ends training
    stream = detect_pipeline.train_dataset(data.train, size, batch, endless,
                                           preprocessing=preprocessing)
    model = retinanet(data.train.num_classes, pyramid_size(size), head_convs)
    started = time.perf_counter()
    history = model.fit(stream.map(keras_hub_targets(size)), epochs=10_000,
                        steps_per_epoch=steps, verbose=0,
                        callbacks=[_cosine_over_seconds(model, budget_seconds, peak=1e-3),
                                   _stop_at_budget(model, budget_seconds)])
    seconds = time.perf_counter() - started
    scores = retinanet_scores(model, data.val, size, preprocessing)
    return {**{f"val_{key}": value for key, value in scores.items()},
            "train_seconds": seconds, "epochs": len(history.history["loss"]),
            "total_weights": int(sum(w.size for w in model.get_weights()))}


# --- the table ---------------------------------------------------------------------------------

def compare(name: str, train_spec: str, val_spec: str, train_args: list, folder: str,
            with_retinanet: bool = True) -> list:
    """The ViT by the plain command, and RetinaNet given its training seconds, on one set."""
    data = ["--data", train_spec] + (["--val-data", val_spec] if val_spec != train_spec else [])
    output = os.path.join(folder, f"vit-{name}")
    vit = run_vit(data + train_args, output, task="detect")
    rows = [(f"{name}: ViT (vit train --task detect)", vit)]
    if name == FOLDER:
        rows.append((f"{name}: constant box (the training boxes' mean)", constant_box(vit)))
    for heads, convs in HEAD_CONVS.items() if with_retinanet else ():
        task = {"budget": vit["train_seconds"], "run": output, "head_convs": convs,
                "result": os.path.join(folder, f"retinanet-{name}-{convs}.json")}
        peak = _run([sys.executable, os.path.abspath(__file__), "--retinanet",
                     json.dumps(task)])
        with open(task["result"]) as handle:
            rows.append((f"{name}: RetinaNet, {heads}, same time",
                         {**json.load(handle), "peak_mb": peak}))
    return rows


def constant_box(vit: dict) -> dict:
    """The row of the constant box the ViT's run scored on the same validation photos."""
    return {"val_mAP": vit["val_constant_box_mAP"], "val_mAP50": vit["val_constant_box_mAP50"],
            "constant": True}


def photo_rows(train_args: list, folder: str) -> list:
    """The plain command on 300 photographs with VOC boxes, validated on 60 more."""
    from dense_sets import make_voc_photos

    train = make_voc_photos(os.path.join(folder, "photos-train"), 300, seed=0)
    val = make_voc_photos(os.path.join(folder, "photos-val"), 60, seed=1)
    vit = run_vit(["--data", train, "--val-data", val, *train_args],
                  os.path.join(folder, "vit-photos"), task="detect")
    return [("photo-boxes: ViT (vit train --task detect)", vit)]


def _row(name: str, result: dict) -> str:
    if result.get("constant"):
        return f"{name:<52} {100 * result['val_mAP']:6.2f}% {100 * result['val_mAP50']:7.2f}%"
    return (f"{name:<52} {100 * result['val_mAP']:6.2f}% {100 * result['val_mAP50']:7.2f}% "
            f"{result['train_seconds']:8.1f} {result['epochs']:7d} "
            f"{result['total_weights']:10,d} {result['peak_mb']:8.0f}")


def verdicts(rows: list) -> list[str]:
    """One line a data set: the ViT's mAP against the best same-time RetinaNet's, and whether
    it holds."""
    lines = []
    for name, result in rows:
        if name.startswith("photo-boxes:"):
            low = [f"{key} {100 * result[key]:.1f}% < {100 * bar:.0f}%"
                   for key, bar in PHOTO_BARS.items() if result[key] < bar]
            lines.append("photo-boxes: the plain command " + (
                f"DOES NOT HOLD its figures: {', '.join(low)}" if low else
                f"holds its figures (mAP@0.5 {100 * result['val_mAP50']:.1f}%, mAP "
                f"{100 * result['val_mAP']:.1f}%)"))
    for data in (*DATA_SETS, FOLDER):
        mine = [result for name, result in rows if name.startswith(data + ":")]
        found = [result for result in mine if not result.get("constant")]
        constant = [result for result in mine if result.get("constant")]
        lines += [constant_verdict(data, found[0], row) for row in constant]
        if len(found) < 2:
            continue
        vit, other = found[0], max(found[1:], key=lambda result: result["val_mAP"])
        points = 100 * (vit["val_mAP"] - other["val_mAP"])
        verdict = "holds" if points >= -MARGIN_POINTS else "DOES NOT HOLD"
        lines.append(f"{data}: ViT - best RetinaNet {points:+.1f} mAP points (at least its: "
                     f"{verdict}), ratio {vit['val_mAP'] / max(other['val_mAP'], 1e-9):.2f}; "
                     f"RetinaNet trained {other['train_seconds']:.0f} s of its "
                     f"{vit['train_seconds']:.0f} s budget ({other['epochs']} epochs)")
    return lines


def constant_verdict(data: str, vit: dict, constant: dict) -> str:
    """The ViT's lead over the constant box in both mAPs, held to `CONSTANT_BOX_POINTS`."""
    leads = {key: 100 * (vit[key] - constant[key]) for key in ("val_mAP", "val_mAP50")}
    verdict = ("holds" if min(leads.values()) >= CONSTANT_BOX_POINTS else "DOES NOT HOLD")
    return (f"{data}: ViT - constant box {leads['val_mAP']:+.1f} mAP points, "
            f"{leads['val_mAP50']:+.1f} mAP@0.5 points (at least {CONSTANT_BOX_POINTS} in "
            f"both: {verdict})")


def absolute_spec(spec: str) -> str:
    """A `folder:` spec with its path made absolute (RetinaNet's process reads it too)."""
    kind, _, path = spec.partition(":")
    return f"{kind}:{os.path.abspath(path)}" if kind == "folder" and path else spec


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-args", default="", help="more `vit train` arguments")
    parser.add_argument("--only", choices=DATA_SETS, action="append",
                        help="only this data set's rows (repeatable; default: all three)")
    parser.add_argument("--no-retinanet", action="store_true",
                        help="the ViT rows alone (to compare `--train-args` variants)")
    parser.add_argument("--data", help="a folder of your own photographs with boxes (a `vit "
                        "train --data` spec): its rows alone, with the constant box's")
    parser.add_argument("--val-data", help="its held-out photographs (default: a split)")
    parser.add_argument("--retinanet", help=argparse.SUPPRESS)  # RetinaNet's own process
    args = parser.parse_args()
    if args.retinanet:
        task = json.loads(args.retinanet)
        result = run_retinanet(task["budget"], task["run"], task.get("head_convs", 4))
        with open(task["result"], "w") as handle:
            json.dump(result, handle)
        return
    train_args, only = shlex.split(args.train_args), args.only or DATA_SETS
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        if args.data:
            rows += compare(FOLDER, absolute_spec(args.data),
                            absolute_spec(args.val_data or args.data), train_args, folder,
                            not args.no_retinanet)
            only = ()
        if "digit-boxes" in only:
            rows += compare("digit-boxes", "digit-boxes", "digit-boxes", train_args, folder,
                            not args.no_retinanet)
        if "shape-boxes" in only:
            shapes = os.path.join(folder, "shapes")
            rows += compare("shape-boxes", make_shape_boxes(shapes + "-train", 1200, seed=1),
                            make_shape_boxes(shapes + "-val", 300, seed=2), train_args,
                            folder, not args.no_retinanet)
        if "photo-boxes" in only:
            rows += photo_rows(train_args, folder)
    print(f"\n{'model':<52} {'mAP':>7} {'mAP@0.5':>8} {'train s':>8} {'epochs':>7} "
          f"{'weights':>10} {'peak MB':>8}")
    for name, result in rows:
        print(_row(name, result))
    lines = verdicts(rows)
    print("\n".join(lines))
    if any("DOES NOT HOLD" in line for line in lines):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
