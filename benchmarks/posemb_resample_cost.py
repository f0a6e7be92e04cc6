"""What the call-time position-embedding resample of `dynamic_image_size` costs, side by side.

    python benchmarks/posemb_resample_cost.py [--variants Ti/16,B/16] [--batch 8] [--steps 10]

For each variant (224 px stored size), in this process's backend:
- at the stored size: a fixed 224 px model vs the same weights in an any-size model (the
  resample is skipped, so the ratio should be 1.00 within noise);
- at 384 px: a fixed 384 px model with the position embedding resized at load time vs the
  any-size model resampling at every call (the resample's cost);
- the resample alone (`PositionEmbedding.table` to the 384 px grid), in ms per call.
Inference through `predict_on_batch`; each time is the median of 3 interleaved rounds, each the
median of `--steps` calls after warm-up.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

from vit_keras import names
from vit_keras.timing import median_seconds

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROUNDS = 3


def _models(variant: str):
    from vit_keras import VisionTransformer, get_variant
    from vit_keras import load_weights
    from vit_keras.checkpoints import save_npz

    config = get_variant(variant).replace(image_size=224, num_classes=1000)
    fixed = VisionTransformer(config)
    dynamic = VisionTransformer(config.replace(dynamic_image_size=True))
    dynamic.set_weights(fixed.get_weights())
    fixed_384 = VisionTransformer(config.replace(image_size=384))
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "weights.npz")
        save_npz(fixed, path)
        load_weights(fixed_384, path)
    return fixed, dynamic, fixed_384


def measure(variant: str, batch: int, steps: int) -> dict:
    """Seconds per batch for each model and size, and the resample's own time."""
    import numpy as np

    fixed, dynamic, fixed_384 = _models(variant)
    rng = np.random.default_rng(0)
    at_224 = rng.uniform(-1, 1, (batch, 224, 224, 3)).astype("float32")
    at_384 = rng.uniform(-1, 1, (batch, 384, 384, 3)).astype("float32")
    cases = (("fixed_224", fixed, at_224), ("any_224", dynamic, at_224),
             ("fixed_384", fixed_384, at_384), ("any_384", dynamic, at_384))
    rounds = {name: [] for name, _, _ in cases}
    for _ in range(ROUNDS):  # interleaved, so that load from other processes weighs on all
        for name, model, images in cases:
            rounds[name].append(median_seconds(lambda: model.predict_on_batch(images), steps))
    seconds = {name: sorted(times)[len(times) // 2] for name, times in rounds.items()}
    posemb = dynamic.get_layer(names.POSEMB)
    grid = np.zeros((1, 24, 24, 1), "float32")
    seconds["resample_only"] = median_seconds(
        lambda: np.asarray(posemb.table(grid)), steps)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variants", default="Ti/16,B/16")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    sys.path.insert(0, REPO)
    import keras

    print(f"backend {keras.backend.backend()}, batch {args.batch}, median of {args.steps}")
    print("| variant | fixed 224 (ms) | any-size 224 (ms) | ratio | fixed 384 (ms) "
          "| any-size 384 (ms) | ratio | resample alone (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    for variant in args.variants.split(","):
        s = measure(variant, args.batch, args.steps)
        print(f"| {variant} | {1e3 * s['fixed_224']:.1f} | {1e3 * s['any_224']:.1f} | "
              f"{s['any_224'] / s['fixed_224']:.3f} | {1e3 * s['fixed_384']:.1f} | "
              f"{1e3 * s['any_384']:.1f} | {s['any_384'] / s['fixed_384']:.3f} | "
              f"{1e3 * s['resample_only']:.2f} |")


if __name__ == "__main__":
    main()
