"""Our ViT vs keras-hub's ViT, side by side in one process: img/s, GFLOP/s, MFU, peak RSS.

    pip install -e ".[bench]"        # keras-hub, benchmark-only
    python benchmarks/throughput.py --variants Ti/16,S/16,B/16 --precisions fp32,bf16

For each (variant, precision, mode) both models are built with the same config and compiled with
AdamW and sparse cross-entropy on logits: ours with the AdamW `vit train` uses (one fused kernel
per weight update), keras-hub's with `keras.optimizers.AdamW`, what its users would call;
`--same-optimizer` gives both the Keras one, to compare the models alone. They are warmed up,
then timed alternately A/B/A/B so that machine noise hits both alike. The ratio ours/keras-hub
is computed per repeat; its median and spread (min..max) are reported. Peak RSS of a training run is measured in a fresh subprocess per
model. The matmul peak is measured in the same run. Results also go to a JSON file.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402

import vit_keras  # noqa: E402
from training import bench  # noqa: E402
from vit_keras.timing import median_seconds  # noqa: E402

MODELS = ("ours", "keras_hub")
OPTIMIZERS = {"ours": "vit", "keras_hub": "keras"}


def build(kind: str, config):
    """Our model or keras-hub's ViTBackbone + Dense head for the same config."""
    if kind == "ours":
        return vit_keras.VisionTransformer(config)
    import keras_hub

    height, width = config.image_hw
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(height, width, 3), patch_size=config.patch_size,
        num_layers=config.num_layers, num_heads=config.num_heads,
        hidden_dim=config.hidden_size, mlp_dim=config.mlp_dim, layer_norm_epsilon=1e-6)
    pooled = backbone.output[:, 0]  # the class token, as keras-hub's ViTImageClassifier
    logits = keras.layers.Dense(config.num_classes, dtype="float32")(pooled)
    return keras.Model(backbone.input, logits)


def optimizer_for(kind, same_optimizer):
    """The `bench.compile_for_training` optimizer of `kind`."""
    return "keras" if same_optimizer else OPTIMIZERS[kind]


def compare(variant, precision, mode, batch_size, steps, repeats, peak, same_optimizer=False):
    """Alternating A/B timing of both models; returns rows for the table."""
    keras.mixed_precision.set_global_policy(bench.POLICIES[precision])
    config = vit_keras.get_variant(variant)
    images, labels = bench.random_batch(batch_size, 224, config.num_classes)
    runners = {}
    for kind in MODELS:
        model = bench.compile_for_training(build(kind, config),
                                           optimizer=optimizer_for(kind, same_optimizer))
        runners[kind] = bench.make_step(model, mode, images, labels)
        runners[kind](), runners[kind]()
    seconds = {kind: [] for kind in MODELS}
    for _ in range(repeats):
        for kind in MODELS:
            seconds[kind].append(median_seconds(runners[kind], steps, warmup=0))
    keras.mixed_precision.set_global_policy("float32")
    keras.backend.clear_session()
    flops = bench.flops_per_image(config, mode)
    ratios = [hub / ours for ours, hub in zip(seconds["ours"], seconds["keras_hub"])]
    rows = []
    for kind in MODELS:
        img_s = batch_size / statistics.median(seconds[kind])
        rows.append({"variant": variant, "precision": precision, "mode": mode, "model": kind,
                     "optimizer": optimizer_for(kind, same_optimizer),
                     "img_per_s": img_s, "gflops": img_s * flops / 1e9,
                     "mfu": img_s * flops / 1e9 / peak,
                     "ratio_ours_over_hub": statistics.median(ratios),
                     "ratio_min": min(ratios), "ratio_max": max(ratios)})
    return rows


def peak_rss_mb(kind, variant, precision, batch_size, optimizer) -> float:
    """Peak RSS of a fresh process that trains `kind` for 3 steps."""
    code = (
        "import os, sys; sys.path.insert(0, %r);"
        "os.environ['TF_CPP_MIN_LOG_LEVEL']='3';"
        "import throughput as t, keras, vit_keras; from training import bench;"
        "keras.mixed_precision.set_global_policy(bench.POLICIES[%r]);"
        "c=vit_keras.get_variant(%r);"
        "m=bench.compile_for_training(t.build(%r, c), optimizer=%r);"
        "x,y=bench.random_batch(%d,224,c.num_classes); s=bench.make_step(m,'train',x,y);"
        "[s() for _ in range(3)];"
        "print(bench.peak_rss_mb())"
    ) % (os.path.dirname(os.path.abspath(__file__)), precision, variant, kind, optimizer,
           batch_size)
    output = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                            text=True).stdout
    return float(output.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", default="Ti/16,S/16,B/16")
    parser.add_argument("--precisions", default="fp32,bf16")
    parser.add_argument("--modes", default="infer,train")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per repeat")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rss", action="store_true", help="also measure peak RSS (B/16 train)")
    parser.add_argument("--same-optimizer", action="store_true",
                        help="keras.optimizers.AdamW for both models (compare the models alone)")
    parser.add_argument("--output", default="benchmarks/results/throughput.json")
    args = parser.parse_args(argv)

    rows, peaks = [], {}
    for precision in args.precisions.split(","):
        peaks[precision] = bench.matmul_peak_gflops(precision)
        print(f"matmul peak {precision}: {peaks[precision]:.0f} GFLOP/s", flush=True)
        for variant in args.variants.split(","):
            for mode in [mode for mode in args.modes.split(",") if mode]:
                pair = compare(variant, precision, mode, args.batch_size, args.steps,
                               args.repeats, peaks[precision], args.same_optimizer)
                rows += pair
                ours, hub = pair
                print(f"{variant:>5} {precision:>4} {mode:>5}: ours {ours['img_per_s']:7.2f} "
                      f"img/s (MFU {100 * ours['mfu']:4.1f}%)  keras-hub {hub['img_per_s']:7.2f} "
                      f"img/s  ratio {ours['ratio_ours_over_hub']:.3f} "
                      f"[{ours['ratio_min']:.3f}..{ours['ratio_max']:.3f}]", flush=True)
    rss = {}
    if args.rss:
        for precision in args.precisions.split(","):
            for kind in MODELS:
                rss[f"{kind}/{precision}"] = peak_rss_mb(
                    kind, "B/16", precision, args.batch_size,
                    optimizer_for(kind, args.same_optimizer))
                print(f"peak RSS B/16 train b{args.batch_size} {precision} {kind}: "
                      f"{rss[f'{kind}/{precision}']:.0f} MB", flush=True)
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    temporary = args.output + ".tmp"
    with open(temporary, "w") as file:
        json.dump({"argv": sys.argv, "matmul_peak_gflops": peaks, "results": rows,
                   "peak_rss_mb": rss,
                   "self_rss_mb": bench.peak_rss_mb()},
                  file, indent=2)
    os.replace(temporary, args.output)


if __name__ == "__main__":
    main()
