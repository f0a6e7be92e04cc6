"""How an export runs: every file is written into a staging folder, checked there against the
Keras model, then published under its name or moved to `rejected/`; the published TFLite and
ONNX files are timed side by side, and export.json is written last.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import os
import shutil
import statistics
import tempfile

import numpy as np

from vit_app import console
from vit_app.inference.export import writers as export_writers
from vit_app.inference.export import report as export_report
from vit_app.inference import inference_task as tasks
from vit_app.inference.export.formats import ExportOptions
from vit_app.inference.export.writers import WriteJob
from vit_keras import atomic, hub_presets
from vit_keras import tasks as library_tasks
from vit_keras.core.model import config_from_model
from vit_keras.export import graph, lite

REJECTED_DIR = "rejected"
STAGING_PREFIX = ".export-"  # one export at a time writes into an output folder


@dataclasses.dataclass(frozen=True)
class Evaluation:
    """What every written file is compared on: images, their labels (or None), Keras' logits,
    and the model's task (which scores the labels)."""

    images: object
    labels: object
    keras_logits: object
    task: object


def export(model, output_dir: str, options: ExportOptions, bars: dict, *,
           representative_images=None, eval_images=None, eval_labels=None) -> dict:
    """Writes, checks and publishes every format of `options`, then writes export.json.

    Args:
        model: the trained Keras classifier.
        output_dir: the folder receiving the files (created if missing).
        options: the formats and how to write them.
        bars: {format: the top-1 agreement it must reach, or None: not checked}.
        representative_images, eval_images, eval_labels: as `command.export_model`
            takes them.

    Returns:
        The export.json content.
    """
    _require_calibration(options, representative_images)
    _require_expressible(options, model)
    fixed = graph.at_image_size(model, options.image_size)
    task = tasks.get(library_tasks.task_of(model))
    images, labels = _evaluation_set(fixed, eval_images, eval_labels, representative_images,
                                     task)
    evaluation = Evaluation(images, labels, _keras_logits(fixed, images), task)
    report = export_report.header(images, options.latency_runs,
                                  task.label_scores(evaluation.keras_logits, labels), task)
    report.update(export_report.model_contract(model, options.image_size, options.activation))
    os.makedirs(output_dir, exist_ok=True)
    job = WriteJob(model, options, representative_images)
    with _staging_folder(output_dir) as staging:
        runners = _write_formats(job, (output_dir, staging), report, evaluation, bars)
    report["failed"] = [name for name, entry in report["formats"].items()
                        if not entry["passed"]]
    _add_latencies(report, runners, options.latency_runs)
    export_report.write(report, output_dir)
    return report


def _require_calibration(options: ExportOptions, representative_images) -> None:
    calibrated = [entry.name for entry in options.chosen if entry.calibrated]
    if calibrated and representative_images is None:
        raise ValueError(f"format(s) {', '.join(calibrated)} (full-integer) need "
                         "representative_images: a few hundred training images, float32 "
                         "[N, H, W, 3] in 0..255, to calibrate; got None. Pass them (vit export "
                         "--data ...) or drop those formats.")


def _require_expressible(options: ExportOptions, model) -> None:
    """A keras-hub preset is refused before anything is written when keras-hub's ViT cannot
    hold the model (a conv stem, registers, MAP pooling, ...)."""
    if any(entry.runtime == "keras_hub" for entry in options.chosen):
        problem = hub_presets.preset_problem(config_from_model(model))
        if problem:
            raise ValueError(f"format keras_hub_preset: the model cannot be written as a "
                             f"keras-hub preset: {problem}. Drop that format.")


@contextlib.contextmanager
def _staging_folder(output_dir: str):
    """A hidden folder inside `output_dir` (the same disk, so publishing is a rename); the
    staging folders of an export killed in this folder earlier are removed first."""
    for stale in glob.glob(os.path.join(output_dir, STAGING_PREFIX + "*")):
        shutil.rmtree(stale, ignore_errors=True)
    folder = tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=output_dir)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _write_formats(job: WriteJob, folders, report: dict, evaluation: Evaluation,
                   bars: dict) -> dict:
    """Writes, checks and publishes each format, recording its entry in `report`; returns the
    runners of the published TFLite and ONNX files. `folders` is (output, staging)."""
    runners, written = {}, {}
    with lite.graphs_shared():  # the TFLite files of one model: one trace per graph form
        for export_format in job.options.chosen:
            name = export_format.name
            entry, written[name] = _write_checked(export_format, job, folders, evaluation,
                                                  bars[name], written)
            if entry["passed"] and export_format.timed:
                runners[name] = export_writers.runner(export_format, written[name])
            report["formats"][name] = entry
    return runners


def _write_checked(export_format, job: WriteJob, folders, evaluation: Evaluation, bar,
                   written: dict) -> tuple[dict, str]:
    """Writes one format into the staging folder, checks it against its `bar` and publishes
    or rejects it; returns (its export.json entry, where its file now is)."""
    output_dir, staging = folders
    staged = os.path.join(staging, export_format.file)
    try:
        with console.stage(f"export: {export_format.title}"):
            entry = export_format.writer(export_format, staged, job, written)
            logits = export_writers.file_logits(export_format, staged, evaluation.images)
    except Exception as error:  # noqa: BLE001  a converter's failure fails this file alone
        atomic.remove(os.path.join(output_dir, export_format.file))  # no stale file of its name
        return export_report.not_written(export_format.file, error, bar), None
    entry = {"file": export_format.file, "size_bytes": _size(staged),
             **export_report.agreement_columns(logits, evaluation.keras_logits,
                                               evaluation.labels, evaluation.task,
                                               evaluation.images.shape[1:3]),
             **entry}
    entry.update(_check(export_format, entry, bar, evaluation.task))
    path = _publish(staged, output_dir, export_format.file, entry["passed"])
    if not entry["passed"]:
        entry["rejected_file"] = os.path.join(REJECTED_DIR, export_format.file)
    return entry, path


def _check(export_format, entry: dict, bar, task) -> dict:
    """The gate's fields of a format's entry, as its `task` judges it: min_agreement, passed
    and (failed) why and what to try."""
    if bar is None:
        return {"min_agreement": None, "passed": True}
    failure, computes_otherwise = task.check(entry, bar, export_format.quantization)
    fields = {"min_agreement": bar, "passed": failure is None}
    if failure is not None:
        fields.update(failure=failure, failed_on="agreement" if computes_otherwise else "scores",
                      advice=export_format.advice if computes_otherwise
                      else task.near_tie_advice())
    return fields


def _publish(staged: str, output_dir: str, filename: str, passed: bool) -> str:
    """Moves a checked file to its name (passed) or to rejected/ (failed, and any older file of
    its name is removed); returns where it now is."""
    final = os.path.join(output_dir, filename)
    rejected = os.path.join(output_dir, REJECTED_DIR, filename)
    if passed:
        atomic.remove(rejected)
        atomic.publish(staged, final)
        return final
    atomic.remove(final)
    atomic.makedirs(os.path.dirname(rejected))
    atomic.publish(staged, rejected)
    return rejected


def _add_latencies(report: dict, runners: dict, latency_runs: int) -> None:
    """Times the TFLite and ONNX files side by side and records each median in the report."""
    if not runners:
        return
    with console.stage(f"export: batch-1 latency of {len(runners)} TFLite/ONNX files"):
        latencies = _latencies(runners, latency_runs)
    for name, latency in latencies.items():
        report["formats"][name]["latency_ms"] = round(latency, 4)


def _latencies(runners: dict, runs: int, rounds: int = 5) -> dict:
    """Median batch-1 latency (ms) per runner, measured in interleaved rounds so that load
    from other processes weighs on every file alike."""
    times = {name: [] for name in runners}
    for _ in range(rounds):
        for name, runner in runners.items():
            times[name].append(runner.latency_ms(runs=max(1, runs // rounds), warmup=2))
    return {name: statistics.median(values) for name, values in times.items()}


def _evaluation_set(model, images, labels, representative_images, task):
    """The images (float32 0..255; a clip model's clips) and labels every file is compared
    on: `images`, else the representative images (unlabelled), else 8 random images."""
    shape = graph.sample_shape(model)
    if images is None:
        images = representative_images
        labels = None
    if images is None:
        images = np.random.default_rng(0).uniform(0, 255, (8, *shape))
    images = np.asarray(images, dtype=np.float32)
    if images.shape[1:] != shape:
        raise ValueError(f"eval images must be [N, {', '.join(map(str, shape))}] float32 in "
                         f"0..255, got shape {images.shape}")
    if labels is not None:
        labels = task.checked_labels(np.asarray(labels), images)
    return images, labels


def _keras_logits(model, images):

    logits_model, _ = graph.split_activation(model)
    logits = graph.logits_function(logits_model)
    return np.concatenate([np.asarray(logits(images[i:i + 64]), dtype=np.float32)
                           for i in range(0, len(images), 64)])


def _size(path: str) -> int:
    if not os.path.isdir(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(root, name))
               for root, _, names in os.walk(path) for name in names)
