"""ViT-B/16 training and inference img/s on one GPU, bfloat16, side by side in one run:
ours on JAX (with and without `keras.ops.dot_product_attention`), keras-hub's ViT on JAX, and
timm on PyTorch (`torch.compile`, bf16 autocast), at the same batch; MFU against the bf16
matrix-product peak measured first.

    python benchmarks/backends_gpu.py [--batch 128] [--steps 30] [--only ours,keras_hub,timm]

Each framework runs in its own subprocess (Keras' backend and the GPU memory are per process).
Training: a full AdamW step (forward, backward, update) on device-resident random images and
labels; inference: a forward pass. Times are the median of `--steps` steps after warm-up.
Needs a GPU with JAX (CUDA) and, for its rows, keras-hub and timm installed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from vit_keras.timing import median_seconds

IMAGE, CLASSES = 224, 1000
WARMUP = 5  # untimed steps: compilation and autotuning
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERAS_BACKEND", "jax")


def keras_rates(model, batch: int, steps: int) -> dict:
    """Training and inference img/s of a Keras model on JAX (arrays already on the GPU)."""
    import jax
    import keras
    import numpy as np

    images = jax.device_put(np.random.default_rng(0).uniform(-1, 1, (batch, IMAGE, IMAGE, 3))
                            .astype("float32"))
    labels = jax.device_put((np.arange(batch) % CLASSES).astype("int32"))
    model.compile(optimizer=keras.optimizers.AdamW(1e-4), metrics=[],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  jit_compile=True)
    train = median_seconds(lambda: model.train_on_batch(images, labels), steps, WARMUP)

    @jax.jit
    def forward(variables, x):
        return model.stateless_call(*variables, x, training=False)[0]

    variables = ([v.value for v in model.trainable_variables],
                 [v.value for v in model.non_trainable_variables])
    infer = median_seconds(lambda: forward(variables, images).block_until_ready(), steps, WARMUP)
    return {"train_img_s": batch / train, "infer_img_s": batch / infer}


def jit_step_rate(model, batch: int, steps: int) -> dict:
    """Training img/s of the same model in a bare jitted step (no Keras trainer around it):
    how much of the gap to timm is the model and how much the per-step driver."""
    import functools

    import jax
    import keras
    import numpy as np

    images = jax.device_put(np.random.default_rng(0).uniform(-1, 1, (batch, IMAGE, IMAGE, 3))
                            .astype("float32"))
    labels = jax.device_put((np.arange(batch) % CLASSES).astype("int32"))
    optimizer = keras.optimizers.AdamW(1e-4)
    optimizer.build(model.trainable_variables)
    cross_entropy = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def loss(trainable, non_trainable, x, y):
        logits, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return cross_entropy(y, logits), non_trainable

    @functools.partial(jax.jit, donate_argnums=(0, 1, 2))
    def step(trainable, non_trainable, optimizer_variables, x, y):
        (value, non_trainable), grads = jax.value_and_grad(loss, has_aux=True)(
            trainable, non_trainable, x, y)
        trainable, optimizer_variables = optimizer.stateless_apply(optimizer_variables, grads,
                                                                   trainable)
        return trainable, non_trainable, optimizer_variables, value

    state = [[v.value for v in model.trainable_variables],
             [v.value for v in model.non_trainable_variables],
             [v.value for v in optimizer.variables]]

    def run():
        *state[:], value = step(*state, images, labels)
        value.block_until_ready()

    return {"train_img_s": batch / median_seconds(run, steps, WARMUP), "infer_img_s": float("nan")}


def run_ours(batch: int, steps: int, fused_attention: bool, bare_step: bool = False) -> dict:
    import keras

    sys.path.insert(0, REPO)
    import vit_keras
    from vit_keras.core import attention

    if not fused_attention:
        attention.dot_product_attention_available = lambda: False
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    model = vit_keras.ViTB16(input_shape=(IMAGE, IMAGE, 3), classes=CLASSES)
    if bare_step:
        return jit_step_rate(model, batch, steps)
    return keras_rates(model, batch, steps)


def run_keras_hub(batch: int, steps: int) -> dict:
    import keras
    import keras_hub

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    backbone = keras_hub.models.ViTBackbone(image_shape=(IMAGE, IMAGE, 3), patch_size=16,
                                            num_layers=12, num_heads=12, hidden_dim=768,
                                            mlp_dim=3072)
    model = keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=CLASSES,
                                                activation=None)
    return keras_rates(model, batch, steps)


def run_timm(batch: int, steps: int) -> dict:
    import timm
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    model = timm.create_model("vit_base_patch16_224", num_classes=CLASSES).cuda()
    images = torch.rand(batch, 3, IMAGE, IMAGE, device="cuda") * 2 - 1
    labels = torch.arange(batch, device="cuda") % CLASSES
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    compiled = torch.compile(model)

    def train_step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(compiled(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()

    def infer_step():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
            compiled(images)
        torch.cuda.synchronize()

    model.train()
    train = median_seconds(train_step, steps, WARMUP)
    model.eval()
    infer = median_seconds(infer_step, steps, WARMUP)
    return {"train_img_s": batch / train, "infer_img_s": batch / infer}


def matmul_peak_tflops() -> float:
    """bf16 matrix-product TFLOP/s of this GPU (8192^3 in JAX, median of 20)."""
    import jax
    import jax.numpy as jnp

    a = jnp.ones((8192, 8192), jnp.bfloat16)
    product = jax.jit(lambda x, y: x @ y)
    seconds = median_seconds(lambda: product(a, a).block_until_ready(), 20, WARMUP)
    return 2 * 8192**3 / seconds / 1e12


def train_flops_per_image() -> float:
    """3x the forward multiply-adds x 2 of ViT-B/16 at 224 px (vit_keras.analysis.complexity)."""
    sys.path.insert(0, REPO)
    from vit_keras import get_variant
    from vit_keras.analysis import complexity

    config = get_variant("B/16").replace(image_size=IMAGE, num_classes=CLASSES)
    return 3 * complexity.estimate(config).flops


RUNNERS = {"ours": lambda b, s: run_ours(b, s, True),
           "ours_einsum_attention": lambda b, s: run_ours(b, s, False),
           "ours_bare_jit_step": lambda b, s: run_ours(b, s, True, bare_step=True),
           "keras_hub": run_keras_hub, "timm": run_timm}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--only", default=",".join(RUNNERS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = {"peak": matmul_peak_tflops()} if args.child == "peak" else \
            RUNNERS[args.child](args.batch, args.steps)
        print("RESULT " + json.dumps(result))
        return
    env = dict(os.environ, KERAS_BACKEND="jax", XLA_PYTHON_CLIENT_MEM_FRACTION="0.9")
    results = {}
    for name in ["peak", *args.only.split(",")]:
        command = [sys.executable, __file__, "--child", name, "--batch", str(args.batch),
                   "--steps", str(args.steps)]
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode or not lines:
            print(f"{name}: failed\n{done.stderr[-3000:]}", file=sys.stderr)
            continue
        results[name] = json.loads(lines[-1][len("RESULT "):])
    peak = results.pop("peak", {}).get("peak")
    flops = train_flops_per_image()
    print(f"ViT-B/16 {IMAGE}px, batch {args.batch}, bf16; matmul peak {peak:.0f} TFLOP/s; "
          f"{flops / 1e9:.1f} GFLOP per training image")
    print("| implementation | train img/s | infer img/s | train MFU | train vs keras-hub | "
          "train vs timm |")
    print("|---|---|---|---|---|---|")
    for name, rates in results.items():
        mfu = rates["train_img_s"] * flops / (peak * 1e12) if peak else float("nan")
        ratio = {other: rates["train_img_s"] / results[other]["train_img_s"]
                 for other in ("keras_hub", "timm") if other in results}
        print(f"| {name} | {rates['train_img_s']:.0f} | {rates['infer_img_s']:.0f} | "
              f"{100 * mfu:.1f}% | {ratio.get('keras_hub', float('nan')):.2f}x | "
              f"{ratio.get('timm', float('nan')):.2f}x |")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
