"""The memory savers in training: ViT-B/16 at 224 px without them, with `remat`, with
`patch_drop_rate=0.5` and with both: training img/s and peak memory.

    python benchmarks/memory_savers.py [--backend tensorflow|jax|torch] [--batch 8]
        [--steps 3] [--warmup 3] [--model B/16] [--image-size 224]

Each configuration trains in its own subprocess, so that each peak is its own: an AdamW step
(forward, backward, update) through `train_on_batch` on random images, `--warmup` untimed
steps (compilation) and the median of `--steps` timed ones. Memory: the process's peak
resident set (`ru_maxrss`), the part of it added by training (peak minus the resident set once
the model is built), and on a GPU the device's peak (JAX `memory_stats()`, PyTorch
`max_memory_allocated`, TensorFlow `get_memory_info`). The jax and torch backends never import
TensorFlow, so the script also runs on a GPU machine without it.

Results go to benchmarks/results/memory_savers.{txt,json}.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CONFIGS = {
    "baseline": {},
    "remat": {"remat": True},
    "patch_drop_0.5": {"patch_drop_rate": 0.5},
    "remat+patch_drop_0.5": {"remat": True, "patch_drop_rate": 0.5},
}
CLASSES = 1000


def _resident_mb() -> float:
    """The current resident set of this process, MB (Linux)."""
    with open("/proc/self/statm") as file:
        pages = int(file.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_resident_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KB on Linux


def _device_name(backend: str) -> str:
    """The accelerator's name, or 'CPU'."""
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return "CPU" if device.platform == "cpu" else device.device_kind
    if backend == "torch":
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU") \
        if gpus else "CPU"


def _device_peak_mb(backend: str) -> float | None:
    """Peak accelerator memory of this process, MB; None on a CPU."""
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        stats = device.memory_stats() if device.platform != "cpu" else None
        return stats["peak_bytes_in_use"] / 2**20 if stats else None
    if backend == "torch":
        import torch

        return torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None
    import tensorflow as tf

    if not tf.config.list_physical_devices("GPU"):
        return None
    return tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2**20


def train_rates(name: str, variant: str, image_size: int, batch: int, steps: int,
                warmup: int) -> dict:
    """Training img/s and memory of one configuration, in this process's Keras backend.

    Args:
        name: a `CONFIGS` key.
        variant: the ViT variant ('B/16').
        image_size: input side in pixels.
        batch: images per step.
        steps: timed steps (their median is taken).
        warmup: untimed steps before them.

    Returns:
        img_per_s, peak_rss_mb, training_rss_mb, device_peak_mb (None on a CPU) and
        device (its name, or 'CPU').
    """
    import keras
    import numpy as np

    sys.path.insert(0, REPO)
    sys.path.insert(0, HERE)
    from vit_keras.timing import median_seconds
    from vit_keras import VisionTransformer, get_variant

    keras.utils.set_random_seed(0)
    config = get_variant(variant, image_size=image_size, num_classes=CLASSES, **CONFIGS[name])
    model = VisionTransformer(config)
    model.compile(optimizer=keras.optimizers.AdamW(1e-4), metrics=[],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    images = rng.uniform(-1, 1, (batch, image_size, image_size, 3)).astype("float32")
    labels = (np.arange(batch) % CLASSES).astype("int32")
    built = _resident_mb()
    seconds = median_seconds(lambda: model.train_on_batch(images, labels), steps, warmup)
    peak, backend = _peak_resident_mb(), keras.backend.backend()
    return {"img_per_s": batch / seconds, "peak_rss_mb": peak, "training_rss_mb": peak - built,
            "device_peak_mb": _device_peak_mb(backend), "device": _device_name(backend)}


def _in_subprocess(name: str, args) -> dict:
    code = (f"import sys, json; sys.path.insert(0, {HERE!r}); import memory_savers as m; "
            f"print(json.dumps(m.train_rates({name!r}, {args.model!r}, {args.image_size}, "
            f"{args.batch}, {args.steps}, {args.warmup})))")
    env = dict(os.environ, KERAS_BACKEND=args.backend, TF_CPP_MIN_LOG_LEVEL="3")
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, cwd=REPO)
    if result.returncode:
        lines = result.stderr.strip().splitlines() or [f"exit status {result.returncode}"]
        return {"error": lines[-1]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def _with_ratios(rows: dict) -> dict:
    """Adds each row's ratios to the baseline row."""
    base = rows.get("baseline", {})
    for row in rows.values():
        if "error" in row or "error" in base:
            continue
        row["speed_vs_baseline"] = row["img_per_s"] / base["img_per_s"]
        for key in ("peak_rss_mb", "training_rss_mb", "device_peak_mb"):
            if row[key] is not None and base[key]:
                row[key.replace("_mb", "_vs_baseline")] = row[key] / base[key]
    return rows


def _mb(row: dict, key: str) -> str:
    if row.get(key) is None:
        return "-"
    ratio = row.get(key.replace("_mb", "_vs_baseline"))
    return f"{row[key]:.0f} ({ratio:.2f}x)" if ratio is not None else f"{row[key]:.0f}"


def table(rows: dict, title: str) -> str:
    """The results as a Markdown table under `title`."""
    lines = [title, "",
             "| configuration | train img/s | peak RSS MB | RSS added by training MB "
             "| device peak MB |", "|---|---|---|---|---|"]
    for name, row in rows.items():
        if "error" in row:
            lines.append(f"| {name} | failed: {row['error']} | | | |")
            continue
        lines.append(f"| {name} | {row['img_per_s']:.2f} ({row['speed_vs_baseline']:.2f}x) "
                     f"| {_mb(row, 'peak_rss_mb')} | {_mb(row, 'training_rss_mb')} "
                     f"| {_mb(row, 'device_peak_mb')} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="tensorflow", choices=("tensorflow", "jax", "torch"))
    parser.add_argument("--model", default="B/16", help="a ViT variant, e.g. S/16 or B/16")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3, help="timed steps (median)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    parser.add_argument("--note", default="", help="a line written under the table")
    parser.add_argument("--output", default=os.path.join(HERE, "results", "memory_savers"),
                        help="path of the results without extension (.txt and .json); a run "
                             "replaces its own backend and device's section, keeps the others")
    args = parser.parse_args(argv)
    rows = {}
    for name in CONFIGS:
        rows[name] = _in_subprocess(name, args)
        print(f"{name:22s} {json.dumps(rows[name])}", flush=True)
    rows = _with_ratios(rows)
    device = next((row["device"] for row in rows.values() if "device" in row), "unknown")
    title = (f"ViT-{args.model} {args.image_size}px training on {args.backend} ({device}), "
             f"batch {args.batch}: AdamW `train_on_batch`, median of {args.steps} steps after "
             f"{args.warmup} warm-up steps; each configuration in its own process")
    section = {"title": title, "note": args.note, "settings": vars(args), "results": rows}
    print(_section_text(section))
    _save(args.output, f"{args.backend} {device}", section)


def _section_text(section: dict) -> str:
    text = table(section["results"], section["title"])
    return text + (f"\n{section['note']}\n" if section["note"] else "")


def _save(output: str, key: str, section: dict) -> None:
    """Writes `section` under `key` into output.json (keeping other keys) and output.txt."""
    sections = {}
    if os.path.exists(output + ".json"):
        with open(output + ".json") as file:
            sections = json.load(file)
    sections[key] = section
    os.makedirs(os.path.dirname(output), exist_ok=True)
    with open(output + ".json", "w") as file:
        json.dump(sections, file, indent=2)
    with open(output + ".txt", "w") as file:
        file.write("\n".join(_section_text(value) for value in sections.values()))


if __name__ == "__main__":
    main()
