"""Training and inference img/s on this CPU, TensorFlow vs JAX backend, side by side in one run:
ViT-Ti/16 and ViT-B/16 at 224 px, float32 and mixed_bfloat16. Decides `vit train --backend auto`
on CPUs (`vit_app.backend.CPU_BACKEND`).

    python benchmarks/backends_cpu.py [--variants Ti/16,B/16] [--steps 4]

Each (backend, variant, precision) runs in its own subprocess, one after another. Training is
an AdamW step through `train_on_batch` (TensorFlow with its fused training kernels); inference
is `predict_on_batch`. Times are medians after two warm-up steps.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from vit_keras.timing import median_seconds

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BATCH = {"Ti/16": 16, "S/16": 8, "B/16": 4}


def measure(variant: str, policy: str, steps: int) -> dict:
    """img/s of one variant in this process's backend and `policy`."""
    import keras
    import numpy as np

    sys.path.insert(0, REPO)
    from vit_keras import VisionTransformer, get_variant

    keras.mixed_precision.set_global_policy(policy)
    batch = BATCH.get(variant, 4)
    model = VisionTransformer(get_variant(variant).replace(image_size=224, num_classes=1000))
    model.compile(optimizer=keras.optimizers.AdamW(1e-4),
                  loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (batch, 224, 224, 3)).astype("float32")
    labels = np.eye(1000, dtype="float32")[np.arange(batch)]
    train = median_seconds(lambda: model.train_on_batch(images, labels), steps)
    infer = median_seconds(lambda: model.predict_on_batch(images), steps)
    return {"train_img_s": batch / train, "infer_img_s": batch / infer, "batch": batch}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="Ti/16,B/16")
    parser.add_argument("--policies", default="float32,mixed_bfloat16")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(measure(*args.child, args.steps)))
        return
    rows = []
    for variant in args.variants.split(","):
        for policy in args.policies.split(","):
            rates = {}
            for backend in ("tensorflow", "jax"):
                env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3",
                           CUDA_VISIBLE_DEVICES="", JAX_PLATFORMS="cpu")
                done = subprocess.run([sys.executable, __file__, "--child", variant, policy,
                                       "--steps", str(args.steps)], env=env,
                                      capture_output=True, text=True)
                lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
                if done.returncode or not lines:
                    sys.exit(f"{backend} {variant} {policy} failed:\n{done.stderr[-3000:]}")
                rates[backend] = json.loads(lines[-1][len("RESULT "):])
            rows.append((variant, policy, rates))
    print(f"CPU: {os.cpu_count()} cores; batch per variant {BATCH}")
    print("| model | precision | TF train img/s | JAX train img/s | JAX/TF train | "
          "TF infer img/s | JAX infer img/s | JAX/TF infer |")
    print("|---|---|---|---|---|---|---|---|")
    for variant, policy, rates in rows:
        tf_rates, jax_rates = rates["tensorflow"], rates["jax"]
        print(f"| {variant} | {policy} | {tf_rates['train_img_s']:.1f} | "
              f"{jax_rates['train_img_s']:.1f} | "
              f"{jax_rates['train_img_s'] / tf_rates['train_img_s']:.2f}x | "
              f"{tf_rates['infer_img_s']:.1f} | {jax_rates['infer_img_s']:.1f} | "
              f"{jax_rates['infer_img_s'] / tf_rates['infer_img_s']:.2f}x |")


if __name__ == "__main__":
    main()
