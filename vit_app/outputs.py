"""Files a run leaves behind: labels.txt, metrics.json, history.csv, curves.png, the summary."""

from __future__ import annotations

import csv
import io
import json
import os

import tensorflow as tf

from vit_keras import atomic


def write_labels(output_dir: str, class_names: list[str]) -> str:
    """`labels.txt`: one class name per line, line i = class i."""
    path = os.path.join(output_dir, "labels.txt")
    atomic.write_bytes(path, "".join(f"{name}\n" for name in class_names).encode())
    return path


def read_labels(path: str) -> list[str]:
    """The class names of a `labels.txt`."""
    with tf.io.gfile.GFile(path) as file:
        return [line.rstrip("\n") for line in file if line.strip()]


def write_json(path: str, data: dict) -> None:
    """Indented JSON, written atomically."""
    atomic.write_bytes(path, (json.dumps(data, indent=2, sort_keys=False) + "\n").encode())


def read_history(path: str) -> dict[str, list[float]]:
    """`history.csv` as columns; a repeated epoch (after a resume) keeps its last row."""
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as file:
        rows = list(csv.DictReader(io.StringIO(file.read())))
    by_epoch = {}
    for row in rows:
        by_epoch[int(row["epoch"])] = row
    columns: dict[str, list[float]] = {}
    for epoch in sorted(by_epoch):
        for key, value in by_epoch[epoch].items():
            columns.setdefault(key, []).append(_number(value))
    return columns


def _number(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):  # CSVLogger writes 'NA' for epochs without validation
        return float("nan")


def plot_curves(history: dict[str, list[float]], path: str,
                score: str = "accuracy") -> str | None:
    """The loss and a score per epoch, train and validation, as a PNG.

    Args:
        history: the run's history.csv as columns (`read_history`).
        path: the PNG file written.
        score: the metric drawn beside the loss, as logged in training (its `val_` twin is
            drawn too): the objective's own ('accuracy', 'mean_iou', 'box_f1').

    Returns:
        `path`, or None without history.
    """
    if not history.get("epoch"):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    epochs = [epoch + 1 for epoch in history["epoch"]]
    figure, axes = plt.subplots(1, 2, figsize=(10, 4))
    for axis, metric in zip(axes, ("loss", score)):
        for key, style in ((metric, "-"), (f"val_{metric}", "o-")):
            values = history.get(key)
            if values:
                points = [(e, v) for e, v in zip(epochs, values) if v == v]  # drop NaN
                axis.plot([p[0] for p in points], [p[1] for p in points], style, label=key,
                          markersize=3)
        axis.set_xlabel("epoch")
        axis.set_title(metric)
        axis.grid(alpha=0.3)
        axis.legend()
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    atomic.write_bytes(path, buffer.getvalue())
    return path


def summary_table(rows: list[tuple[str, str]]) -> str:
    """A two-column text table."""
    key_width = max(len(key) for key, _ in rows)
    value_width = max(len(value) for _, value in rows)
    rule = f"+{'-' * (key_width + 2)}+{'-' * (value_width + 2)}+"
    body = [f"| {key:<{key_width}} | {value:<{value_width}} |" for key, value in rows]
    return "\n".join([rule, *body, rule])


# What a run writes into its output folder (export and analysis included): `--overwrite`
# removes these and nothing else, the backup first (a kill while clearing must not leave an
# old backup beside a half-cleared run).
RUN_FILES = ("backup", "model.keras", "labels.txt", "metrics.json", "history.csv",
             "curves.png", "config.json", "best.weights.h5", "best.lora.npz", "final.weights.h5", "encoder.npz",
             "logs", "inspect", "saved_model", "model.tflite", "model_fp16.tflite",
             "model_dynamic_int8.tflite", "model_int8.tflite", "model.onnx",
             "model_dynamic_int8.onnx", "model_int8.onnx", "rejected", "export.json")


# The file that makes a backup folder a backup: `training.callbacks` writes it last.
BACKUP_STATE_FILE = "state.json"


def start_mode(output: str, resume: bool | str, overwrite: bool) -> str:
    """How a run starts in `output`, from what the folder holds (read-only: every process of
    a run may call it).

    A finished run has metrics.json and no backup; a run killed during its export has both (it
    is unfinished). A backup is a `backup/` folder with its state.json (a folder without it was
    killed while writing its first backup: there is nothing to resume). A folder holding a run
    is refused unless `overwrite`; `--resume` needs a backup to continue from; `--resume auto`
    (`resume='auto'`, for schedulers that restart the same command) continues from a backup
    when there is one, starts afresh when there is none (clearing a killed run's files), and
    does nothing to a finished run.

    Args:
        output: the run's output folder (local or gs://).
        resume: False, True (`--resume`) or 'auto' (`--resume auto`).
        overwrite: `--overwrite` was given.

    Returns:
        'fresh' (nothing there), 'replace' (clear an earlier run's files first), 'resume' or
        'finished' (`--resume auto` found a finished run: nothing to do).

    Raises:
        ValueError: the folder and the flags disagree.
    """
    if resume not in (False, True, "auto"):
        raise ValueError(f"resume must be False, True or 'auto', got {resume!r}")
    if resume and overwrite:
        raise ValueError("--resume continues the run in the output folder, --overwrite "
                         "replaces it: give one of them")
    found = [name for name in RUN_FILES if atomic.exists(os.path.join(output, name))]
    finished = "metrics.json" in found and "backup" not in found
    resumable = atomic.exists(os.path.join(output, "backup", BACKUP_STATE_FILE))
    if overwrite:
        return "replace"
    if resume == "auto" and finished:
        return "finished"
    if resume and resumable:
        return "resume"
    if resume == "auto":
        return "replace" if found else "fresh"
    if finished:
        raise ValueError(f"{output} already holds a finished run (metrics.json); pass "
                         f"--overwrite to replace it, or --output for a new folder" +
                         ("" if not resume else " (--resume: there is nothing to continue)"))
    if resume:
        raise ValueError(f"--resume: {output} holds no backup to continue from" +
                         (f" (only {', '.join(found[:4])}: the run stopped before its first "
                          "backup)" if found else "") + "; --resume auto starts afresh when "
                         "there is none" + (", --overwrite replaces the run" if found else ""))
    if not found:
        return "fresh"
    hint = "--resume continues it, " if resumable else ""
    raise ValueError(f"{output} holds an unfinished run ({', '.join(found[:4])}); {hint}"
                     "--overwrite replaces it, --output starts elsewhere")


def clear_run_files(output: str) -> None:
    """Removes an earlier run's files (`RUN_FILES`, so TensorBoard logs never mix), nothing
    else: other files in the folder and other processes' `.worker-N` stay."""
    for name in RUN_FILES:
        atomic.remove(os.path.join(output, name))
