"""Keras' own `model.quantize` on our ViT: accuracy, weight memory and inference speed.

    pip install -e . && vit train          # the default job: saved_models/digits_tiny/
    python benchmarks/quantization.py [--model saved_models/digits_tiny/model.keras]
        [--variants S/16,B/16] [--backends tensorflow,jax,torch] [--batch 8] [--repeats 3]

1. Accuracy: the default job's model (float) and copies quantized to int8, int4 and float8,
   top-1 on its evaluation split (the 20% digits test split), on TensorFlow.
2. Memory and speed: S/16 and B/16 at 224 px with random weights, float32 vs int8 vs int4 vs
   float8, weight bytes (every variable, as stored) and inference img/s of the compiled
   `predict_on_batch`, each backend in its own subprocess. Inside a process the modes are timed
   alternately (float, int8, int4, float8, float, ...) so that machine noise hits all alike;
   the table gives the median and the ratio to float.

Results go to benchmarks/results/quantization.json. With `--check` it exits 1 when a quantized
copy loses more top-1 than `ACCURACY_BOUNDS` allows (int8 0.5 points, int4 2 points: Keras'
quantization keeps a trained ViT's accuracy), or when there is no model to check:

    python benchmarks/quantization.py --check --backends ""    # the accuracy check alone
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ("float32", "int8", "int4", "float8")
DEFAULT_OUTPUT = os.path.join(REPO, "benchmarks", "results", "quantization.json")
ACCURACY_BOUNDS = {"int8": 0.005, "int4": 0.02}  # top-1 a quantized copy may lose, as a fraction


def _quantized(model_path: str, mode: str):
    import keras

    import vit_keras  # noqa: F401  registers the layers

    model = keras.saving.load_model(model_path, compile=False, safe_mode=True)
    if mode != "float32":
        model.quantize(mode)
    return model


def accuracy(model_path: str) -> dict:
    """Top-1 of the model and its quantized copies on the digits test split."""
    from vit_app.tasks.classify import evaluate
    from vit_app.tasks.classify.data import readers

    source = readers.digits_source("test")
    return {mode: evaluate.evaluate(_quantized(model_path, mode), source)["top1"]
            for mode in MODES}


def accuracy_failures(top1: dict) -> list[str]:
    """A line per quantized copy that lost more top-1 than `ACCURACY_BOUNDS` allows."""
    return [f"{mode} loses {100 * (top1['float32'] - top1[mode]):.2f} points of top-1 "
            f"(float {100 * top1['float32']:.2f}%, {mode} {100 * top1[mode]:.2f}%), over "
            f"{100 * bound:g}" for mode, bound in ACCURACY_BOUNDS.items()
            if top1["float32"] - top1[mode] > bound + 1e-9]  # a loss at the bound is within


def weight_bytes(model) -> int:
    """Bytes of every variable as stored (int4 kernels are packed two to a byte)."""
    import numpy as np

    return int(sum(np.prod(v.shape) * np.dtype(v.dtype).itemsize for v in model.weights))


def speed(variant: str, batch: int, repeats: int) -> dict:
    """Weight MB and inference img/s of one variant in every mode, in this process's backend."""
    import statistics
    import time

    import keras
    import numpy as np

    sys.path.insert(0, REPO)
    from vit_keras import VisionTransformer, get_variant

    images = np.random.default_rng(0).uniform(-1, 1, (batch, 224, 224, 3)).astype("float32")
    models = {}
    for mode in MODES:
        keras.utils.set_random_seed(0)
        model = VisionTransformer(get_variant(variant))
        if mode != "float32":
            model.quantize(mode)
        model.predict_on_batch(images)  # compile and warm up
        models[mode] = model
    seconds = {mode: [] for mode in MODES}
    for _ in range(repeats):
        for mode, model in models.items():
            start = time.perf_counter()
            model.predict_on_batch(images)
            seconds[mode].append(time.perf_counter() - start)
    rows = {}
    for mode, model in models.items():
        img_s = batch / statistics.median(seconds[mode])
        rows[mode] = {"weight_mb": weight_bytes(model) / 2**20, "img_per_s": img_s}
    for mode in MODES:
        rows[mode]["speed_vs_float"] = rows[mode]["img_per_s"] / rows["float32"]["img_per_s"]
        rows[mode]["memory_vs_float"] = rows[mode]["weight_mb"] / rows["float32"]["weight_mb"]
    return rows


def _in_subprocess(backend: str, variant: str, batch: int, repeats: int) -> dict:
    code = (f"import sys, json; sys.path.insert(0, {REPO!r}); "
            f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); "
            "import quantization as q; "
            f"print(json.dumps(q.speed({variant!r}, {batch}, {repeats})))")
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, cwd=REPO)
    if result.returncode:
        return {"error": result.stderr.strip().splitlines()[-1]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=os.path.join(REPO, "saved_models", "digits_tiny",
                                                        "model.keras"))
    parser.add_argument("--variants", default="S/16,B/16")
    parser.add_argument("--backends", default="tensorflow,jax,torch")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", default=None,
                        help="the results' JSON file (default: benchmarks/results/"
                             "quantization.json when any backend is timed)")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a quantized copy loses more top-1 than "
                             "ACCURACY_BOUNDS allows, or the model is missing")
    args = parser.parse_args(argv)
    results = {"accuracy": None, "speed": {}}
    failures = []
    if os.path.exists(args.model):
        results["accuracy"] = accuracy(args.model)
        print("default job, digits test top-1: " + "  ".join(
            f"{mode} {100 * top1:.2f}%" for mode, top1 in results["accuracy"].items()))
        failures = accuracy_failures(results["accuracy"])
    else:
        print(f"{args.model} not found: run `vit train` first for the accuracy table")
        failures = [f"no model to check at {args.model}"] if args.check else []
    for backend in filter(None, args.backends.split(",")):
        for variant in args.variants.split(","):
            rows = _in_subprocess(backend, variant, args.batch, args.repeats)
            results["speed"][f"{backend} {variant}"] = rows
            if "error" in rows:
                print(f"{backend:10s} {variant:5s} failed: {rows['error']}")
                continue
            for mode, row in rows.items():
                print(f"{backend:10s} {variant:5s} {mode:8s} {row['weight_mb']:8.1f} MB "
                      f"({row['memory_vs_float']:.2f}x)  {row['img_per_s']:6.2f} img/s "
                      f"({row['speed_vs_float']:.2f}x)")
    output = args.output or (DEFAULT_OUTPUT if results["speed"] else None)
    if output:  # the accuracy check alone leaves the quoted results as they are
        sys.path.insert(0, REPO)
        from vit_keras import atomic

        atomic.makedirs(os.path.dirname(output))
        atomic.write_bytes(output, json.dumps(results, indent=2).encode())
    for line in failures:
        print(f"CHECK FAILED: {line}")
    if args.check and failures:
        sys.exit(1)


if __name__ == "__main__":
    main()
