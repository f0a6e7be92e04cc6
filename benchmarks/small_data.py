"""Small data: `vit train` beside a small Keras CNN and an RBF SVM, per data set, split and seed.

The ViT is the plain command a user types: `vit train` (the default job: digits, its 80/20
split) or `vit train --data folder:TRAIN --val-data folder:TEST` on a PNG folder made here,
with no other flag, so the recipe is the one `vit train` chooses for the data (the header line
`recipe:` says what it adapted). Beside it, on the same split in the same run:

- CNN: the keras.io "simple MNIST convnet" (two 3x3 convolutions of 32 and 64 filters with
  ReLU and 2x2 max pooling, dropout 0.5, a softmax layer; SAME padding so 8x8 digits fit;
  Adam, batch 128, pixels in [0, 1]) trained for as many epochs as the ViT (the example's 15
  leave it short of what it can reach on a few thousand images);
- SVM: scikit-learn's `SVC(C=10, gamma='scale')` (RBF) on the pixels in [0, 1].

The ViT's test folder is its `--val-data`, so the run keeps its best epoch on the test images
(`loop.keep`): that figure is chosen on the test set and optimistic. Each row also gives the
last epoch's score, which nothing chose; the CNN and SVM are scored after their last epoch.

On the real photographs (`photos`, `faces`) the CNN is a three-layer one made for them (32, 64
and 128 filters, batch norm, global average pooling, random horizontal flips, at most 64 px)
and trains for as many seconds as the ViT's training took (metrics.json `train_seconds`).

The data sets (benchmarks/small_datasets.py): scikit-learn's digits (8x8), glyphs (the digits in
matplotlib's 22 fonts, 28x28 grey, 3000), shapes (ten shapes, 32x32 RGB, 4000), photos (crops
of ten photographs scikit-image and scikit-learn ship, test crops from regions no training crop
touches; `--counts` training crops at each of `--photo-sizes`) and faces (scikit-image's 200
LFW faces and non-faces, 25x25 grey). Prints a row per run (test top-1 and the `vit train`
command's wall time), then a ViT / CNN / SVM table per data set.

    python benchmarks/small_data.py                        # all: about 60 minutes on 2 cores
    python benchmarks/small_data.py --seeds 0 --splits 1 --sets glyphs
    python benchmarks/small_data.py --train-args "--set model.stem=patchify"   # an ablation
    python benchmarks/small_data.py --sets shapes glyphs --counts 160 600 --folder-splits 1 2
    python benchmarks/small_data.py --sets photos --counts 600 --photo-sizes 64 128
    python benchmarks/small_data.py --sets faces
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import small_datasets  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHOTO_SETS = ("photos", "faces")  # real photographs: the CNN gets flips and the ViT's seconds


def vit_train(output: str, args: list[str]) -> dict:
    """One `vit train` command; returns its metrics.json plus the command's wall time and
    its `recipe:` header line."""
    command = [sys.executable, "-m", "vit.cli", "train", "--output", output, *args]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    seconds = time.perf_counter() - started
    if result.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-3000:]}")
    with open(os.path.join(output, "metrics.json")) as handle:
        metrics = json.load(handle)
    recipe = [line for line in result.stdout.splitlines() if line.startswith("recipe:")]
    with open(os.path.join(output, "config.json")) as handle:
        epochs = json.load(handle)["preset"]["schedule"]["epochs"]
    scores = [float(row["val_accuracy"]) for row in _history(output)
              if row.get("val_accuracy") not in (None, "", "NA")]
    return dict(metrics, command_seconds=round(seconds, 1), recipe=recipe[0] if recipe else "",
                command="vit train " + " ".join(args), epochs=epochs,
                last_top1=scores[-1] if scores else None)


def _history(output: str) -> list[dict]:
    import csv

    with open(os.path.join(output, "history.csv"), newline="") as handle:
        return list(csv.DictReader(handle))


def _scaled(images: np.ndarray) -> np.ndarray:
    images = images.astype("float32") / 255.0
    return images[..., None] if images.ndim == 3 else images


def cnn_top1(images, labels, train, test, epochs: int, seed: int = 0) -> float:
    """The keras.io simple MNIST convnet (SAME padding), trained on `train`, scored on `test`."""
    import keras

    keras.utils.set_random_seed(seed)
    x = _scaled(images)
    model = keras.Sequential([
        keras.Input(x.shape[1:]),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dropout(0.5),
        keras.layers.Dense(int(labels.max()) + 1, activation="softmax"),
    ])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    model.fit(x[train], labels[train], batch_size=128, epochs=epochs, verbose=0)
    return float(model.evaluate(x[test], labels[test], verbose=0)[1])


def photo_cnn_top1(images, labels, train, test, seconds: float, seed: int = 0) -> dict:
    """A three-layer CNN for photographs (3x3 convolutions of 32, 64 and 128 filters, each
    with batch norm, ReLU and 2x2 max pooling; global average pooling; dropout 0.3; a softmax
    layer) with random horizontal flips, on the images resized to at most 64 px, trained with
    Adam (1e-3, batch 32) for `seconds` of training (the ViT's), scored on `test`."""
    import keras

    keras.utils.set_random_seed(seed)
    x = _scaled(images)
    if x.shape[1] > 64:
        x = keras.ops.convert_to_numpy(keras.ops.image.resize(x, (64, 64), antialias=True))
    blocks = []
    for filters in (32, 64, 128):
        blocks += [keras.layers.Conv2D(filters, 3, padding="same", use_bias=False),
                   keras.layers.BatchNormalization(), keras.layers.ReLU(),
                   keras.layers.MaxPooling2D(2)]
    model = keras.Sequential([keras.Input(x.shape[1:]), keras.layers.RandomFlip("horizontal"),
                              *blocks, keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dropout(0.3),
                              keras.layers.Dense(int(labels.max()) + 1, activation="softmax")])
    model.compile(keras.optimizers.Adam(1e-3), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    budget = _StopAfter(seconds)
    model.fit(x[train], labels[train], batch_size=32, epochs=1000, verbose=0, callbacks=[budget])
    return dict(cnn=float(model.evaluate(x[test], labels[test], verbose=0)[1]),
                cnn_epochs=budget.epochs)


class _StopAfter:
    """A Keras callback (made lazily) that stops training once `seconds` of it have passed."""

    def __new__(cls, seconds: float):
        import keras

        class StopAfter(keras.callbacks.Callback):
            def __init__(self):
                super().__init__()
                self.epochs = 0

            def on_train_begin(self, logs=None):
                self.started = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                self.epochs = epoch + 1
                if time.perf_counter() - self.started >= seconds:
                    self.model.stop_training = True

        return StopAfter()


def svm_top1(images, labels, train, test) -> float:
    """An RBF SVM (C=10, gamma='scale') on the pixels in [0, 1]."""
    from sklearn.svm import SVC

    x = _scaled(images).reshape(len(images), -1)
    return float(SVC(C=10, gamma="scale").fit(x[train], labels[train]).score(x[test],
                                                                             labels[test]))


def default_split(labels):
    """The default job's split: vit_app.data.training_data's digits split (stratified 80/20, seed 0)."""
    from vit_app.data.training_data import DIGITS_SPLIT_SEED, DIGITS_TEST_FRACTION

    return small_datasets.split(labels, DIGITS_TEST_FRACTION, DIGITS_SPLIT_SEED)


def run_digits_default(root, seeds, extra, rows) -> None:
    """The default job over seeds (the first with its export and analysis: the full command)."""
    images, labels, _ = small_datasets.digits()
    train, test = default_split(labels)
    for index, seed in enumerate(seeds):
        args = ["--seed", str(seed), *extra] + ([] if index == 0 else ["--no-export",
                                                                         "--no-inspect"])
        metrics = vit_train(os.path.join(root, f"default-{seed}"), args)
        baselines = dict(cnn=cnn_top1(images, labels, train, test, metrics["epochs"], seed),
                         svm=svm_top1(images, labels, train, test))
        _report(rows, "digits (default job, 80/20)", f"seed {seed}", metrics, baselines)


def run_folder_set(root, name, split_seeds, extra, rows, count=None, size=None) -> None:
    """A data set written as PNG folders per split (`count` images and `size` px, default:
    the builder's); the ViT trains with --val-data."""
    builder = small_datasets.BUILDERS[name]
    for split_seed in split_seeds:
        made = builder(**({} if count is None else {"count": count}),
                       **({} if size is None else {"size": size}),
                       **({"seed": split_seed} if name == "photos" else {}))
        images, labels, class_names = made[:3]
        if len(made) == 4:  # the photos: split by region, a new set per seed
            train, test = np.flatnonzero(~made[3]), np.flatnonzero(made[3])
        else:
            train, test = small_datasets.split(labels, 0.25, split_seed)
        folder = os.path.join(root, f"{name}-{len(labels)}-{images.shape[1]}-{split_seed}")
        train_dir, test_dir = small_datasets.write_folders(folder, images, labels, class_names,
                                                           parts=(train, test))
        metrics = vit_train(os.path.join(folder, "run"),
                            ["--data", f"folder:{train_dir}", "--val-data", f"folder:{test_dir}",
                             "--no-export", "--no-inspect", *extra])
        cnn = photo_cnn_top1(images, labels, train, test, metrics["train_seconds"]) \
            if name in PHOTO_SETS else \
            dict(cnn=cnn_top1(images, labels, train, test, metrics["epochs"]))
        baselines = dict(**cnn, svm=svm_top1(images, labels, train, test))
        _report(rows, f"{name} {len(labels)} {images.shape[1]}x{images.shape[2]} (75/25)",
                f"split {split_seed}", metrics, baselines)


def _report(rows, data, run, metrics, baselines) -> None:
    row = dict(data=data, run=run, vit=metrics["val_top1"], vit_last=metrics["last_top1"],
               kept_epoch=metrics.get("kept_epoch"), **baselines,
               train=metrics["num_train_examples"], test=metrics["val_examples"],
               seconds=metrics["command_seconds"], recipe=metrics["recipe"],
               command=metrics["command"])
    rows.append(row)
    print(f"{data} {run}: ViT {100 * row['vit']:.2f}% (epoch {row['kept_epoch']}; last "
          f"{100 * row['vit_last']:.2f}%)  CNN {100 * row['cnn']:.2f}%  "
          f"SVM {100 * row['svm']:.2f}%  ({row['seconds']} s)  {row['recipe']}", flush=True)


def print_tables(rows) -> None:
    print("\n| data | run | train | test | ViT top-1 (kept epoch) | ViT last epoch | CNN top-1 | "
          "SVM top-1 | vit train s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['data']} | {r['run']} | {r['train']} | {r['test']} | "
              f"{100 * r['vit']:.2f}% ({r['kept_epoch']}) | {100 * r['vit_last']:.2f}% | "
              f"{100 * r['cnn']:.2f}% | {100 * r['svm']:.2f}% | {r['seconds']} |")
    print("\n| data | runs | ViT mean (min) | ViT last mean (min) | CNN mean (min) | "
          "SVM mean (min) | ViT >= CNN (last >= CNN) |")
    print("|---|---|---|---|---|---|---|")
    for data in dict.fromkeys(r["data"] for r in rows):
        group = [r for r in rows if r["data"] == data]
        cells = [f"{100 * np.mean([r[k] for r in group]):.2f}% "
                 f"({100 * min(r[k] for r in group):.2f}%)"
                 for k in ("vit", "vit_last", "cnn", "svm")]
        wins = sum(r["vit"] >= r["cnn"] for r in group)
        last_wins = sum(r["vit_last"] >= r["cnn"] for r in group)
        print(f"| {data} | {len(group)} | {' | '.join(cells)} | {wins} of {len(group)} "
              f"({last_wins}) |")
    for data in dict.fromkeys(r["data"] for r in rows):
        print(f"{data}: {next(r['command'] for r in rows if r['data'] == data)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4],
                        help="seeds of the default job")
    parser.add_argument("--splits", type=int, nargs="+", default=[1, 2, 3],
                        help="random_state of each stratified 75/25 split of the folder sets")
    parser.add_argument("--sets", nargs="+",
                        default=["digits", "glyphs", "shapes", "photos", "faces"],
                        choices=sorted(small_datasets.BUILDERS))
    parser.add_argument("--folder-splits", type=int, nargs="+", default=[1],
                        help="splits of the glyphs and shapes sets")
    parser.add_argument("--counts", type=int, nargs="+", default=[None],
                        help="images per glyphs/shapes set (default: 3000 and 4000), training "
                             "crops per photos set (default 600); several "
                             "sizes give a row each")
    parser.add_argument("--photo-sizes", type=int, nargs="+", default=[64, 128],
                        help="sides of the photo crops (px); several give a row each")
    parser.add_argument("--train-args", default="", help="extra `vit train` arguments")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args()
    extra, rows = args.train_args.split(), []
    with tempfile.TemporaryDirectory() as root:
        if "digits" in args.sets:
            run_digits_default(root, args.seeds, extra, rows)
        for name in args.sets:
            splits = args.splits if name == "digits" else args.folder_splits
            for count in args.counts if name != "digits" else [None]:  # digits: all 1797
                for size in args.photo_sizes if name == "photos" else [None]:
                    run_folder_set(root, name, splits, extra, rows, count, size)
    print_tables(rows)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)


if __name__ == "__main__":
    main()
