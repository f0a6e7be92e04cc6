"""What a JAX training step of ours keeps for its backward pass, per form of the step.

    KERAS_BACKEND=jax python benchmarks/saved_residuals.py [--model B/16] [--batch 128]
        [--image-size 224] [--precision mixed_bfloat16] [--json FILE]

Traces (does not run) the gradient of the cross-entropy of one batch through
`jax.ad_checkpoint`'s saved-residuals analysis, for the plain step, each opt-in form of
`vit_keras.fast_paths.training_forms` and both remat settings, and prints the activations each
keeps: their count, their bytes, and the largest kinds. Weights and images, which every form
keeps, are counted apart. The analysis is of the traced program, before XLA's fusion, so it
runs on a CPU and shows the memory traffic a GPU step starts from. The `attention_kernel` row
is cuDNN's padded kernel on a GPU; on a CPU it is XLA's form, which keeps the probabilities
(tests/test_jax_kernels.py checks the padded program there instead).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import re
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BYTES = {"f64": 8, "f32": 4, "bf16": 2, "f16": 2, "f8_e4m3fn": 1, "f8_e5m2": 1, "i64": 8,
         "i32": 4, "u32": 4, "i16": 2, "i8": 1, "u8": 1, "bool": 1}
SHAPE = re.compile(r"^(\w+)\[([\d,]*)\]")
# name: (ViTConfig changes, TrainingForms changes)
ROWS = {"plain": ({}, {}), "fused_qkv": ({}, {"fused_qkv": True}),
        "attention_kernel": ({}, {"attention_kernel": True}),
        "lean_activations": ({}, {"lean_activations": True}),
        "remat_dots": ({"remat": "dots"}, {}), "remat_full": ({"remat": True}, {})}


def residuals(model, batch: int) -> list[tuple[str, str]]:
    """(short aval, source) of each value the training step's gradient keeps."""
    import jax
    import keras
    import numpy as np

    height, width = model.config.image_hw
    images = jax.ShapeDtypeStruct((batch, height, width, model.config.channels), np.float32)
    labels = jax.ShapeDtypeStruct((batch,), np.int32)
    cross_entropy = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def loss(trainable, non_trainable, x, y):
        logits, _ = model.stateless_call(trainable, non_trainable, x, training=True)
        return cross_entropy(y, logits)

    trainable = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        jax.ad_checkpoint.print_saved_residuals(
            lambda t, x, y: loss(t, non_trainable, x, y), trainable, images, labels)
    lines = [line.split(" ", 1) for line in printed.getvalue().splitlines() if line.strip()]
    return [(parts[0], parts[1] if len(parts) > 1 else "") for parts in lines]


def size_of(aval: str) -> int:
    """Bytes of a short aval such as 'bf16[128,197,768]'."""
    match = SHAPE.match(aval)
    if not match or match.group(1) not in BYTES:
        raise ValueError(f"unexpected residual {aval!r}: expected dtype[dims]")
    count = 1
    for dim in filter(None, match.group(2).split(",")):
        count *= int(dim)
    return count * BYTES[match.group(1)]


def summarize(name: str, kept: list[tuple[str, str]]) -> dict:
    """Counts and bytes of the activations (not arguments) among `kept`."""
    activations = [aval for aval, source in kept if not source.startswith("from the argument")]
    arguments = [aval for aval, source in kept if source.startswith("from the argument")]
    by_shape = collections.Counter()
    for aval in activations:
        by_shape[aval] += size_of(aval)
    return {"name": name, "activations": len(activations),
            "activation_bytes": sum(by_shape.values()),
            "argument_bytes": sum(size_of(aval) for aval in arguments),
            "shapes": sorted(by_shape, key=by_shape.get, reverse=True),
            "largest": [(aval, by_shape[aval]) for aval in
                        sorted(by_shape, key=by_shape.get, reverse=True)[:4]]}


def measure(variant: str, image_size: int, batch: int, precision: str) -> list[dict]:
    """One summary per row of `ROWS`."""
    import keras

    import vit_keras
    from vit_keras.fast_paths import training_forms

    base = vit_keras.get_variant(variant).replace(image_size=image_size, num_classes=1000,
                                                  dropout_rate=0.0)  # as backends_gpu.py
    rows = []
    for name, (config_changes, forms) in ROWS.items():
        keras.backend.clear_session()  # which also resets the dtype policy
        keras.mixed_precision.set_global_policy(precision)
        model = vit_keras.VisionTransformer(base.replace(**config_changes))
        with training_forms.using(**forms):
            rows.append(summarize(name, residuals(model, batch)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="B/16")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--precision", default="mixed_bfloat16")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args()
    import jax

    rows = measure(args.model, args.image_size, args.batch, args.precision)
    plain = rows[0]["activation_bytes"]
    print(f"ViT-{args.model} {args.image_size}px, batch {args.batch}, {args.precision}, "
          f"jax {jax.__version__}: activations kept for the backward pass")
    print("| form | activations | MB | vs plain | largest kinds (MB) |")
    print("|---|---|---|---|---|")
    for row in rows:
        largest = ", ".join(f"{aval} {size / 2**20:.0f}" for aval, size in row["largest"])
        print(f"| {row['name']} | {row['activations']} | {row['activation_bytes'] / 2**20:.0f} "
              f"| {row['activation_bytes'] / plain:.2f}x | {largest} |")
    print(f"(inputs kept as they are, by every form: {rows[0]['argument_bytes'] / 2**20:.0f} MB)")
    if args.json:
        from vit_keras import atomic

        payload = json.dumps({"model": args.model, "image_size": args.image_size,
                              "batch": args.batch, "precision": args.precision,
                              "jax": jax.__version__, "rows": rows}, indent=1)
        atomic.write_bytes(args.json, payload.encode())


if __name__ == "__main__":
    main()
