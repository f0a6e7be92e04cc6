"""Where the default detection job's training step spends its time.

    python benchmarks/detection_step.py     # about 3 minutes on 2 CPU cores

Times one training step (forward, DETR's set loss with its host matching, backward, AdamW) of
`digits_detect`'s model at its batch of 32 on TensorFlow, compiled as the run compiles it
(no XLA: the matching calls SciPy on the host), beside the same step with one part changed, and
the input pipeline alone. Medians of 20 steps, in ms, each row's ratio to the default step.
Exits 1 if the loss with its matching costs more than a quarter of the step (the step with
it against the step with a plain mean in its place): then the matching stalls the step and
belongs in the graph.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

BATCH, STEPS = 32, 20
MATCHING_SHARE = 0.25   # the most of the step the loss and its matching may take
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                       "detection_step.txt")


def step_ms(config, images, targets, decoder_layers: int = 3, set_loss: bool = True) -> float:
    """The median time of one training step of a `ViTDetector` built from `config`."""
    import keras

    from vit_keras.tasks.detect.loss import SetPredictionLoss
    from vit_keras.tasks.detect.model import ViTDetector

    model = ViTDetector(config, num_queries=20, decoder_layers=decoder_layers,
                        decoder_width=128, all_layers=True)
    loss = SetPredictionLoss(config.num_classes)
    optimizer = keras.optimizers.AdamW(1e-3)
    model(images[:2])

    @tf.function
    def step(inputs, wanted):
        with tf.GradientTape() as tape:
            outputs = model(inputs, training=True)
            value = loss(wanted, outputs) if set_loss else tf.reduce_mean(outputs)
        gradients = tape.gradient(value, model.trainable_variables)
        optimizer.apply(gradients, model.trainable_variables)
        return value

    for _ in range(3):
        step(images, targets).numpy()
    times = []
    for _ in range(STEPS):
        started = time.perf_counter()
        step(images, targets).numpy()
        times.append(time.perf_counter() - started)
    return 1e3 * statistics.median(times)


def pipeline_ms(preset) -> float:
    """The median time the input pipeline takes to give one batch of the digit boxes."""
    from training.objective import get_objective

    objective = get_objective(preset)
    batches = iter(objective.train_batches(objective.open_data(None).train, 64, BATCH))
    next(batches)
    times = []
    for _ in range(STEPS):
        started = time.perf_counter()
        next(batches)
        times.append(time.perf_counter() - started)
    return 1e3 * statistics.median(times)


def main() -> int:
    from training.objective import get_objective
    from training.presets import get_preset

    preset = get_preset("digits_detect")
    config = get_objective(preset).model_config(10)
    rng = np.random.default_rng(0)
    images = tf.constant(rng.uniform(0, 255, (BATCH, 64, 64, 3)), tf.float32)
    targets = np.full((BATCH, 4, 5), -1, np.float32)
    targets[:, :3] = [[0, 0.25, 0.3, 0.2, 0.25], [3, 0.6, 0.5, 0.3, 0.3], [7, 0.8, 0.8, 0.2, 0.2]]
    targets = tf.constant(targets)
    rows = [("the default step (digits_detect)", step_ms(config, images, targets)),
            ("a plain mean in place of the set loss", step_ms(config, images, targets,
                                                              set_loss=False)),
            ("no locality attention", step_ms(config.replace(locality_attention=False),
                                              images, targets)),
            ("patchify stem", step_ms(config.replace(stem="patchify"), images, targets)),
            ("1 decoder block of 3", step_ms(config, images, targets, decoder_layers=1)),
            ("the input pipeline alone (a batch)", pipeline_ms(preset))]
    default = rows[0][1]
    lines = [f"digits_detect's training step, batch {BATCH}, TensorFlow on "
             f"{os.cpu_count()} CPU cores, medians of {STEPS} steps",
             "| step | ms | img/s | x default |", "|---|---|---|---|"]
    lines += [f"| {name} | {ms:.1f} | {BATCH / ms * 1e3:.0f} | {ms / default:.2f} |"
              for name, ms in rows]
    share = max(0.0, 1 - rows[1][1] / default)
    lines.append(f"the set loss with its matching: {100 * share:.0f}% of the step "
                 f"(at most {100 * MATCHING_SHARE:.0f}%)")
    text = "\n".join(lines)
    print(text)
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS + ".tmp", "w") as handle:
        handle.write(text + "\n")
    os.replace(RESULTS + ".tmp", RESULTS)
    if share > MATCHING_SHARE:
        print(f"FAILED: the loss and its host matching take {100 * share:.0f}% of the step")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
