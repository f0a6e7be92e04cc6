"""ViT training and inference img/s on one GPU, side by side in one run: ours on JAX through
`model.fit` (plain, each opt-in form of the step, XLA flags, float8 training, int8 inference),
keras-hub's ViT through `model.fit`, and timm on PyTorch (`torch.compile`, bf16 autocast);
MFU against the bf16 matrix-product peak measured in the same run.

    python benchmarks/backends_gpu.py [--model B/16] [--batch 128] [--steps 50]
        [--rows ours,ours_fused_qkv,...,timm] [--json FILE]

Every contender is timed the same way: the batch lives on the device, N steps run back to back
and one sync ends them (Keras: one `fit` of N steps, which keeps the state on the device and
donates its buffers; timm: N eager steps of the compiled model). Inference: N jitted (compiled)
forward passes, one sync. Each row runs in its own subprocess (Keras' backend, XLA flags and
GPU memory are per process). The header records the GPU and the jax, jaxlib, CUDA, cuDNN,
keras, torch and timm versions. `--dump-hlo DIR` keeps the optimized HLO of each JAX row
(which products XLA merged, which fusions it made) for reading off the GPU.

Needs a GPU with JAX (CUDA), Keras and, for their rows, keras-hub, PyTorch and timm; rows whose
packages are missing are reported as skipped. `--model Ti/16 --image-size 32 --batch 4
--steps 2 --peak-size 256 --depth 1` runs the Keras rows on a CPU as a smoke test (`--depth`
cuts every contender to that many encoder blocks: the rates are then not the variant's).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "jax")  # the table imports Keras here too
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
CLASSES = 1000
WARMUP = 5  # untimed steps: compilation and autotuning

# The XLA flags the A/B rows add, each alone (a CPU accepts them and ignores them).
XLA_FLAGS = {
    "cublaslt": "--xla_gpu_enable_cublaslt=true",
    "no_triton_gemm": "--xla_gpu_enable_triton_gemm=false",
    "cudnn_layer_norm": "--xla_gpu_enable_cudnn_layer_norm=true",
    "cudnn_gemm_fusion": "--xla_gpu_cudnn_gemm_fusion_level=2",
    "dot_merger_64mb": "--xla_gpu_dot_merger_threshold_mb=64",
}
# Ours: (TrainingForms changes, ViTConfig changes, how: None = fit and forward passes,
# 'float8'/'int8' = Keras' quantization for training/inference, 'bare_step' = a jitted step
# without Keras' trainer, which shows what the driver costs); the flags rows below.
OURS = {
    "ours": ({}, {}, None),
    "ours_fused_qkv": ({"fused_qkv": True}, {}, None),
    "ours_attention_kernel": ({"attention_kernel": True}, {}, None),
    "ours_lean_activations": ({"lean_activations": True}, {}, None),
    "ours_kernel_and_lean": ({"attention_kernel": True, "lean_activations": True}, {}, None),
    "ours_remat_dots": ({}, {"remat": "dots"}, None),
    "ours_all_forms": ({"fused_qkv": True, "attention_kernel": True}, {"remat": "dots"}, None),
    "ours_float8": ({}, {}, "float8"),
    "ours_int8": ({}, {}, "int8"),
    "ours_bare_step": ({}, {}, "bare_step"),
}
OURS.update({f"ours_xla_{name}": ({}, {}, None) for name in XLA_FLAGS})
ROWS = [*OURS, "keras_hub", "timm"]


def versions() -> dict:
    """The software under the measurement (what each import finds; None when missing)."""
    found = {}
    for name in ("jax", "jaxlib", "keras", "keras_hub", "torch", "timm"):
        try:
            found[name] = __import__(name).__version__
        except ImportError:
            found[name] = None
    try:
        import jax

        found["device"] = jax.devices()[0].device_kind
        from jax._src.lib import cuda_versions  # jaxlib's CUDA plugin, when there is one

        found["cuda"] = cuda_versions.cuda_runtime_get_version() if cuda_versions else None
        found["cudnn"] = cuda_versions.cudnn_get_version() if cuda_versions else None
    except (ImportError, AttributeError, RuntimeError):
        pass
    try:
        import torch

        found["torch_cuda"], found["torch_cudnn"] = (torch.version.cuda,
                                                     torch.backends.cudnn.version())
    except ImportError:
        pass
    return found


def _device_batch(batch: int, image_size: int):
    import jax

    from training import bench

    images, labels = bench.random_batch(batch, image_size, CLASSES)
    return jax.device_put(images), jax.device_put(labels.astype("int32"))


def _synced_seconds(run, sync) -> float:
    start = time.perf_counter()
    run()
    sync()
    return time.perf_counter() - start


def fit_rate(model, images, labels, steps: int, train: bool = True) -> float:
    """Training img/s of a compiled Keras model: one `fit` of `steps` steps on the batch
    already on the device, after a warm-up `fit`; one sync at the end."""
    import jax

    def batches():
        while True:
            yield images, labels

    def fit(count):
        model.fit(batches(), steps_per_epoch=count, epochs=1, verbose=0)

    fit(WARMUP)
    seconds = _synced_seconds(lambda: fit(steps), lambda: jax.block_until_ready(
        [v.value for v in model.trainable_variables]))
    return images.shape[0] * steps / seconds


def forward_rate(model, images, steps: int) -> float:
    """Inference img/s: `steps` jitted forward passes of the model's state, one sync."""
    import jax

    @jax.jit
    def forward(variables, x):
        return model.stateless_call(*variables, x, training=False)[0]

    variables = ([v.value for v in model.trainable_variables],
                 [v.value for v in model.non_trainable_variables])
    for _ in range(WARMUP):
        forward(variables, images).block_until_ready()
    outputs = []
    seconds = _synced_seconds(lambda: outputs.extend(forward(variables, images)
                                                     for _ in range(steps)),
                              lambda: jax.block_until_ready(outputs))
    return images.shape[0] * steps / seconds


def bare_step_rate(model, images, labels, steps: int) -> float:
    """Training img/s of the model in a bare jitted AdamW step (donated state, no Keras
    trainer around it), timed as `fit_rate` times `fit`."""
    import functools

    import jax
    import keras

    optimizer = keras.optimizers.AdamW(1e-4)
    optimizer.build(model.trainable_variables)
    cross_entropy = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    def loss(trainable, non_trainable, x, y):
        logits, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return cross_entropy(y, logits), non_trainable

    @functools.partial(jax.jit, donate_argnums=(0, 1, 2))
    def step(trainable, non_trainable, optimizer_variables, x, y):
        (_, non_trainable), grads = jax.value_and_grad(loss, has_aux=True)(
            trainable, non_trainable, x, y)
        trainable, optimizer_variables = optimizer.stateless_apply(optimizer_variables, grads,
                                                                   trainable)
        return trainable, non_trainable, optimizer_variables

    state = [[v.value for v in model.trainable_variables],
             [v.value for v in model.non_trainable_variables],
             [v.value for v in optimizer.variables]]

    def run(count):
        for _ in range(count):
            state[:] = step(*state, images, labels)

    run(WARMUP)
    seconds = _synced_seconds(lambda: run(steps), lambda: jax.block_until_ready(state))
    return images.shape[0] * steps / seconds



def variant(args):
    """The `--model` variant's config at `--depth` encoder blocks (0: its own depth)."""
    import vit_keras

    config = vit_keras.get_variant(args.model)
    return config.replace(num_layers=args.depth) if args.depth else config


def run_ours(name: str, args) -> dict:
    import keras

    import vit_keras
    from training import bench
    from vit_keras.fast_paths import training_forms

    forms, changes, how = OURS[name]
    training_forms.set_forms(training_forms.TrainingForms(**forms))
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    # No dropout (L/16's paper recipe has 0.1): the same work as timm's and keras-hub's.
    config = variant(args).replace(
        image_size=args.image_size, num_classes=CLASSES, dropout_rate=0.0, **changes)
    model = vit_keras.VisionTransformer(config)
    images, labels = _device_batch(args.batch, args.image_size)
    if how == "bare_step":
        return {"train_img_s": bare_step_rate(model, images, labels, args.steps)}
    rates = {}
    if how != "int8":  # int8 is Keras' inference quantization
        if how:
            model.quantize(how)
        bench.compile_for_training(model, optimizer="keras")
        rates["train_img_s"] = fit_rate(model, images, labels, args.steps)
    if how != "float8":
        if how == "int8":
            model.quantize(how)
        rates["infer_img_s"] = forward_rate(model, images, args.steps)
    return rates


def run_keras_hub(args) -> dict:
    import keras
    import keras_hub

    from training import bench

    config = variant(args)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    backbone = keras_hub.models.ViTBackbone(
        image_shape=(args.image_size, args.image_size, 3), patch_size=config.patch_size,
        num_layers=config.num_layers, num_heads=config.num_heads,
        hidden_dim=config.hidden_size, mlp_dim=config.mlp_dim)
    classifier = keras_hub.models.ViTImageClassifier(backbone=backbone, num_classes=CLASSES,
                                                     activation=None)
    # The same layers as a plain functional model: keras-hub's Task.fit takes no generator.
    model = keras.Model(classifier.inputs, classifier.outputs)
    images, labels = _device_batch(args.batch, args.image_size)
    bench.compile_for_training(model, optimizer="keras")
    return {"train_img_s": fit_rate(model, images, labels, args.steps),
            "infer_img_s": forward_rate(model, images, args.steps)}


TIMM_NAMES = {"Ti/16": "vit_tiny_patch16_224", "S/16": "vit_small_patch16_224",
              "B/16": "vit_base_patch16_224", "B/32": "vit_base_patch32_224",
              "L/16": "vit_large_patch16_224", "H/14": "vit_huge_patch14_224"}


def run_timm(args) -> dict:
    import timm
    import torch

    torch.backends.cuda.matmul.allow_tf32 = True
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = timm.create_model(TIMM_NAMES[args.model], num_classes=CLASSES,
                              img_size=args.image_size, depth=variant(args).num_layers
                              ).to(device)
    images = torch.rand(args.batch, 3, args.image_size, args.image_size, device=device) * 2 - 1
    labels = torch.arange(args.batch, device=device) % CLASSES
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    compiled = torch.compile(model)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    def train_steps(count):
        for _ in range(count):
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(compiled(images), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    def infer_steps(count):
        with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16):
            for _ in range(count):
                compiled(images)

    model.train()
    train_steps(WARMUP)
    sync()
    train = _synced_seconds(lambda: train_steps(args.steps), sync)
    model.eval()
    infer_steps(WARMUP)
    sync()
    infer = _synced_seconds(lambda: infer_steps(args.steps), sync)
    return {"train_img_s": args.batch * args.steps / train,
            "infer_img_s": args.batch * args.steps / infer}


def matmul_peak_tflops(size: int) -> float:
    """bf16 matrix-product TFLOP/s of this device (size^3 in JAX, median of 20)."""
    import jax
    import jax.numpy as jnp

    from vit_keras.timing import median_seconds

    a = jax.random.normal(jax.random.key(0), (size, size), jnp.bfloat16)
    product = jax.jit(lambda x, y: x @ y)
    seconds = median_seconds(lambda: product(a, a).block_until_ready(), 20, WARMUP)
    return 2 * size**3 / seconds / 1e12


def training_flops_per_image(args, ours: bool) -> float:
    """FLOPs of one training image (3x the forward pass).

    Args:
        args: the command line (`variant(args)` at `--image-size`).
        ours: count the forward pass as our classifier runs it (`bench.flops_per_image`: a
            class-token head computes only the class token in the last block); else every
            token, as timm and keras-hub compute it.

    Returns:
        FLOPs of one training step per image.
    """
    from training import bench
    from vit_keras.analysis import complexity

    config = variant(args).replace(image_size=args.image_size, num_classes=CLASSES)
    return bench.flops_per_image(config, "train") if ours else 3 * complexity.estimate(
        config).flops


def run_child(name: str, args) -> dict:
    if name == "peak":
        return {"peak_tflops": matmul_peak_tflops(args.peak_size), "versions": versions()}
    if name in OURS:
        return run_ours(name, args)
    return run_keras_hub(args) if name == "keras_hub" else run_timm(args)


def _child_env(name: str, dump_hlo: str | None) -> dict:
    """The row's environment: JAX, its XLA flag if it is a flag row, an HLO dump if asked."""
    env = dict(os.environ, KERAS_BACKEND="jax", XLA_PYTHON_CLIENT_MEM_FRACTION="0.9")
    flags = [env.get("XLA_FLAGS", "")]
    if name.startswith("ours_xla_"):
        flags.append(XLA_FLAGS[name.removeprefix("ours_xla_")])
    if dump_hlo and name != "peak":
        flags += [f"--xla_dump_to={os.path.join(os.path.abspath(dump_hlo), name)}",
                  "--xla_dump_hlo_as_text"]
    env["XLA_FLAGS"] = " ".join(flag for flag in flags if flag)
    return env


def _keep_step_hlo(folder: str) -> None:
    """Leaves only the optimized HLO of the training step and the forward pass in `folder`
    (XLA also dumps every eager op and, on a CPU, LLVM IR)."""
    for entry in os.listdir(folder) if os.path.isdir(folder) else []:
        wanted = any(step in entry for step in ("jit_train_step", "jit_forward"))
        path = os.path.join(folder, entry)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif not (wanted and entry.endswith("after_optimizations.txt")):
            os.remove(path)


def run_rows(names, args) -> dict:
    """{row: rates or {'skipped'|'failed': why}}, each row in its own subprocess."""
    results = {}
    for name in ["peak", *names]:
        command = [sys.executable, os.path.abspath(__file__), "--child", name,
                   "--model", args.model, "--image-size", str(args.image_size),
                   "--batch", str(args.batch), "--steps", str(args.steps),
                   "--peak-size", str(args.peak_size), "--depth", str(args.depth)]
        done = subprocess.run(command, env=_child_env(name, args.dump_hlo), capture_output=True,
                              text=True)
        if args.dump_hlo and name != "peak":
            _keep_step_hlo(os.path.join(args.dump_hlo, name))
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode == 0 and lines:
            results[name] = json.loads(lines[-1][len("RESULT "):])
        elif _last_error(done.stderr).startswith("ModuleNotFoundError"):
            results[name] = {"skipped": _last_error(done.stderr)}
        else:
            results[name] = {"failed": done.stderr[-3000:]}
    return results


def _last_error(text: str) -> str:
    """The last 'SomeError: ...' line of a traceback (else its last line), shortened."""
    lines = text.strip().splitlines() or [""]
    errors = [line for line in lines if re.match(r"^[\w.]+(Error|Exception)\b", line)]
    return (errors or lines)[-1][:200].replace("|", "/")


def table(results: dict, args) -> list[str]:
    """The Markdown table of `results` (ratios to timm and keras-hub in this run)."""
    peak = results["peak"].get("peak_tflops")
    flops = {ours: training_flops_per_image(args, ours)
             for ours in (True, False)}

    def ratio(name, other, key):
        if other not in results or key not in results[other] or key not in results[name]:
            return "n/a"
        return f"{results[name][key] / results[other][key]:.2f}x"

    depth = f" at depth {args.depth}" if args.depth else ""
    lines = [f"ViT-{args.model}{depth} {args.image_size}px, batch {args.batch}, bf16, {args.steps} "
             f"steps; matmul peak {peak:.0f} TFLOP/s; GFLOP per training image "
             f"{flops[True] / 1e9:.1f} ours (last block: class token only), "
             f"{flops[False] / 1e9:.1f} keras-hub and timm",
             json.dumps(results["peak"]["versions"]),
             "| row | train img/s | infer img/s | train MFU | train vs timm | infer vs timm | "
             "train vs keras-hub |", "|---|---|---|---|---|---|---|"]
    for name, rates in results.items():
        if name == "peak":
            continue
        if "train_img_s" not in rates and "infer_img_s" not in rates:
            outcome = "skipped" if "skipped" in rates else "failed"
            lines.append(f"| {name} | {outcome}: {_last_error(rates[outcome])} | | | | | |")
            continue
        train, infer = rates.get("train_img_s"), rates.get("infer_img_s")
        work = flops[name.startswith("ours")]
        mfu = f"{100 * train * work / (peak * 1e12):.1f}%" if train and peak else "n/a"
        lines.append(f"| {name} | {train or float('nan'):.0f} | {infer or float('nan'):.0f} | "
                     f"{mfu} | {ratio(name, 'timm', 'train_img_s')} | "
                     f"{ratio(name, 'timm', 'infer_img_s')} | "
                     f"{ratio(name, 'keras_hub', 'train_img_s')} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="B/16", help="a variant: Ti/16, S/16, B/16, L/16...")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--peak-size", type=int, default=8192,
                        help="side of the bf16 matrix product whose speed is the MFU's peak")
    parser.add_argument("--depth", type=int, default=0,
                        help="encoder blocks of every contender (default 0: the variant's; "
                             "fewer for a quick check of the script, not a figure)")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"any of {','.join(ROWS)}")
    parser.add_argument("--json", help="also write the results (and versions) to this file")
    parser.add_argument("--dump-hlo", metavar="DIR",
                        help="XLA's optimized HLO of each JAX row into DIR/ROW (as text)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("RESULT " + json.dumps(run_child(args.child, args)))
        return
    names = [name for name in args.rows.split(",") if name]
    unknown = sorted(set(names) - set(ROWS))
    if unknown:
        parser.error(f"unknown rows {unknown}: expected some of {ROWS}")
    results = run_rows(names, args)
    if "peak_tflops" not in results["peak"]:
        sys.exit(f"the matmul peak could not be measured:\n{results['peak']}")
    if args.json:  # first: the rows took the GPU time
        from vit_keras import atomic

        atomic.write_bytes(args.json, json.dumps({"args": vars(args), "results": results},
                                                 indent=1).encode())
    print("\n".join(table(results, args)))


if __name__ == "__main__":
    main()
