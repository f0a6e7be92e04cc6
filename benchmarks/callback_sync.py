"""Steps per second of a JAX `fit` with `vit train`'s callbacks, against none, side by side.

    python benchmarks/callback_sync.py [--steps 300] [--repeats 3] [--batch 32]

Keras reads every step's logs on the host, so the host waits for each step before it
dispatches the next, as soon as one callback overrides `on_train_batch_end` without being
async-safe; `vit train`'s NaN stop, backups, signal stop and TensorBoard all do. Rows, each
the median of `--repeats` fits of `--steps` steps of a small ViT (32 px, 4 blocks of width 64)
on in-memory batches, after one fit that compiles the step:
- none: no callbacks (Keras dispatches asynchronously);
- keras list: `vit train`'s callbacks in a plain list (Keras reads every step's logs);
- step logs: the same callbacks through `training.callbacks.StepLogCallbacks` (logs read
  every `check_every` steps, 20 by default, as `vit train` runs them).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "jax")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def vit_train_callbacks(folder: str, steps: int, check_every: int) -> list:
    """The callbacks `training.fitting.make_callbacks` gives a run, in its order."""
    import keras

    from training import callbacks, preemption

    best = callbacks.BestModel(os.path.join(folder, "best.weights.h5"))
    backup = callbacks.ResumableBackup(os.path.join(folder, "backup"), steps, 0)
    finite = callbacks.StopOnNonFinite(steps, check_every=check_every)
    return [finite, best, keras.callbacks.CSVLogger(os.path.join(folder, "history.csv")),
            backup, keras.callbacks.TensorBoard(os.path.join(folder, "logs")),
            callbacks.EpochLog(1, print_fn=lambda *args, **kwargs: None),
            preemption.StopOnSignal(preemption.SignalWatch(), backup, lambda flag: flag,
                                    folder, finite=finite)]


def steps_per_second(model, data, steps: int, chosen) -> float:
    """`steps` steps of one `fit` epoch, timed with the host waiting for the last."""
    started = time.perf_counter()
    model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=chosen)
    return steps / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--check-every", type=int, default=20)
    args = parser.parse_args()
    import jax
    import keras
    import numpy as np
    import tensorflow as tf

    import vit_keras
    from training import callbacks

    config = vit_keras.ViTConfig(image_size=32, patch_size=4, hidden_size=64, mlp_dim=128,
                                 num_heads=4, num_layers=4, num_classes=10)
    model = vit_keras.VisionTransformer(config)
    model.compile(keras.optimizers.AdamW(1e-3),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    images = rng.normal(size=(args.batch * 8, 32, 32, 3)).astype("float32")
    labels = rng.integers(0, 10, len(images))
    data = tf.data.Dataset.from_tensor_slices((images, labels)).batch(args.batch).repeat()
    model.fit(data, epochs=1, steps_per_epoch=5, verbose=0)  # compiles the step
    rows = {"none": [], "keras list": [], "step logs": []}
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(args.repeats):  # interleaved, so drift hits every row alike
            chosen = vit_train_callbacks(folder, args.steps, args.check_every)
            rows["none"].append(steps_per_second(model, data, args.steps, None))
            rows["keras list"].append(steps_per_second(model, data, args.steps, chosen))
            rows["step logs"].append(steps_per_second(
                model, data, args.steps, callbacks.StepLogCallbacks(chosen, model, 0, 1,
                                                                    args.steps)))
    base = statistics.median(rows["none"])
    print(f"jax {jax.__version__} on {jax.default_backend()}, ViT 32 px D64 L4, batch "
          f"{args.batch}, {args.steps} steps, median of {args.repeats}")
    print("| callbacks | steps/s | vs none |\n|---|---|---|")
    for name, values in rows.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.1f} | {median / base:.2f}x |")


if __name__ == "__main__":
    main()
