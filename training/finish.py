"""A run's last phases: evaluate the fitted model (metrics.json), then write the run's files,
export and inspect, and print the result table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from training import finetune, report
from training.fitting import Fitted
from training.setup import Setup
from vit_app import console, hardware, outputs
from vit_app.inference.export.command import (DEFAULT_FORMATS, EXIT_EXPORT_FAILED, REPORT_NAME,
                                      ExportOptions, export_model, parse_min_agreement)
from vit_app.inference.export.command import report_failures as report_export_failures
from vit_app.inference.export.command import summary_rows as export_summary_rows
from vit_app.inference.inspect import inspect_model
from vit_keras import atomic, lora, tasks

EVAL_SAMPLES = 2000  # export.json accuracy: the whole validation split, up to this many
CALIBRATION_SAMPLES = 300  # int8 calibration images from the training split
INSPECT_SAMPLES = 4


def evaluate(setup: Setup, fitted: Fitted) -> dict:
    """The run's metrics.json: what was trained, how fast, and the validation scores."""
    preset, plan = setup.preset, setup.plan
    probing = preset.finetune.mode == "probe" and setup.objective.closed_form_probe
    metrics = {"preset": preset.name, "objective": setup.objective.name,
               "data": preset.data.train, "val_data": setup.data.val_origin,
               "num_train_examples": setup.num_examples, "epochs": preset.schedule.epochs,
               "global_batch": plan.global_batch, "replicas": plan.replicas,
               "backend": setup.backend, "placement": setup.placement.name,
               "precision": setup.policy, "train_seconds": round(fitted.train_seconds, 2),
               "train_images_per_second": round(
                   fitted.trained_images / max(fitted.train_seconds, 1e-9), 1),
               "best_val_accuracy": fitted.best.best, "best_epoch": fitted.best.best_epoch,
               "kept_epoch": fitted.kept_epoch, "keep": preset.loop.keep,
               "finetune": preset.finetune.mode,
               **weight_counts(setup, fitted),
               "peak_host_memory_mb": hardware.peak_host_memory_mb()}
    if probing:
        metrics["probe_l2"] = fitted.probe_l2
    if fitted.val_dataset is not None:
        results = fitted.model.evaluate(fitted.val_dataset, verbose=0, return_dict=True)
        metrics.update(setup.objective.report(results))
        if probing:  # one fit: its score is the best
            metrics["best_val_accuracy"] = results.get(fitted.best.monitor[len("val_"):])
            metrics["best_epoch"] = 1
        metrics.update(setup.objective.evaluate_extras(fitted.model, fitted.val_dataset,
                                                       val_source=setup.data.val,
                                                       train_source=setup.data.train))
        metrics["val_examples"] = fitted.val_examples
    return metrics


def weight_counts(setup: Setup, fitted: Fitted) -> dict:
    """metrics.json's trainable and total weight counts."""
    trainable, total = finetune.count_weights(fitted.model)
    return {"trainable_weights": trainable, "total_weights": total}


def finish(setup: Setup, fitted: Fitted, metrics: dict, options) -> int:
    """Writes the run's files (the chief; the other processes into their scratch folder),
    exports, inspects and prints the result table.

    Args:
        setup: the run's `Setup`.
        fitted: the run's `Fitted`.
        metrics: `evaluate`'s metrics (wall_seconds is added).
        options: the run's `RunOptions` (export, min_agreement, inspect).

    Returns:
        The exit status: `EXIT_EXPORT_FAILED` when an exported file failed its agreement
        check, else 0.
    """
    objective, folders = setup.objective, setup.folders
    classifier = objective.classifier(fitted.model, setup.config)
    classifier.set_preprocessing(setup.preprocessing)
    if not setup.placement.chief and setup.placement.strategy is not None:
        atomic.save_weights(classifier, os.path.join(folders.write_dir, "final.weights.h5"))
        return 0  # TensorFlow workers: final weights only
    write_run_files(setup, fitted, classifier)
    # Written before the export (a failed export leaves a finished run), then again with the
    # whole command's time: start-up, data, training, evaluation, export, analysis.
    write_metrics(setup, metrics)
    exported = export_and_inspect(setup, options, classifier)
    write_metrics(setup, metrics)
    if not setup.placement.chief:  # the other JAX processes' scratch folders go at the end
        return 0
    rows = report.summary_rows(metrics, folders.write_dir, objective)
    console.say(outputs.summary_table(rows + (export_summary_rows(exported) if exported else [])))
    if atomic.exists(folders.backup_dir):
        atomic.remove(folders.backup_dir)
    status = 0
    if exported and exported["failed"]:
        console.say(f"the training succeeded: {os.path.join(folders.write_dir, 'model.keras')} "
                    "and the run's files are written; only the export failed its check (below)")
        status = report_export_failures(exported, "vit train")
    shortfall = objective.shortfall(metrics)
    if shortfall:   # the run's files are written; the last line says what they are worth
        console.say(f"WARNING: {shortfall}", error=True)
    return status


def write_run_files(setup: Setup, fitted: Fitted, classifier) -> None:
    """model.keras, the objective's extras, lora.npz, labels, config.json and curves.png."""
    output, objective = setup.folders.write_dir, setup.objective
    atomic.save_model(classifier, os.path.join(output, "model.keras"))
    objective.write_extras(classifier, output)
    if setup.preset.finetune.mode == "lora":
        lora.save_lora_weights(objective.network(fitted.model), os.path.join(output, "lora.npz"))
    outputs.write_labels(output, setup.data.train.class_names)
    # `activation` tells `vit export`, predict, serve and evaluate how scores come from the
    # logits (sigmoid for a multi-label model) in every format; `task` what the exported
    # files beside it are for.
    outputs.write_json(os.path.join(output, "config.json"),
                       {"preset": setup.preset.to_dict(), "model": setup.config.to_dict(),
                        "preprocessing": setup.preprocessing.to_dict(),
                        "task": tasks.task_of(classifier), "activation": objective.activation})
    outputs.plot_curves(outputs.read_history(os.path.join(output, "history.csv")),
                        os.path.join(output, "curves.png"),
                        score=objective.monitor.removeprefix("val_"))


def write_metrics(setup: Setup, metrics: dict) -> None:
    """metrics.json, with the wall time so far."""
    metrics["wall_seconds"] = round(console.elapsed(setup.started), 2)
    outputs.write_json(os.path.join(setup.folders.write_dir, "metrics.json"), metrics)


def export_and_inspect(setup: Setup, options, classifier) -> dict | None:
    """SavedModel/TFLite/ONNX export and the attention/embedding analysis, on raw images;
    returns the export's report (None without an export)."""
    objective, config, output = setup.objective, setup.config, setup.folders.output
    export = options.export and objective.exports
    if options.export and not objective.exports:
        console.say(f"export: skipped for objective {objective.name} "
                    f"({objective.export_skipped})")
    inspect = options.inspect
    if not (export or inspect):
        return None
    report_ = None
    size, rule = config.image_hw, setup.preprocessing
    images, labels = objective.export_samples(setup.data.val or setup.data.train, size,
                                              EVAL_SAMPLES, rule)
    if export and setup.backend != "tensorflow":
        if setup.placement.chief:
            report_ = export_in_tensorflow(os.path.join(output, "model.keras"),
                                           options.min_agreement, options.formats)
    elif export:
        calibration, _ = objective.export_samples(setup.data.train, size, CALIBRATION_SAMPLES,
                                                  rule)
        report_ = export_model(classifier, output, representative_images=calibration,
                               eval_images=images, eval_labels=labels,
                               options=ExportOptions(
                                   formats=options.formats or DEFAULT_FORMATS,
                                   activation=objective.activation,
                                   min_agreement=parse_min_agreement(options.min_agreement)))
    if inspect:
        with console.stage("analysis: attention maps, distances, embeddings (inspect/)"):
            inspect_model(classifier, images[:INSPECT_SAMPLES],
                          os.path.join(setup.folders.write_dir, "inspect"))
    return report_


def export_in_tensorflow(model_path: str, min_agreement: str = "", formats: str = "") -> dict:
    """Runs `vit export` on a saved model in a TensorFlow-backend process.

    SavedModel and TFLite are TensorFlow graphs, so a run on another backend exports its
    trained weights from `model.keras` there (on the CPU, leaving the accelerators alone).

    Args:
        model_path: the run's model.keras.
        min_agreement: `--min-agreement`'s value ('' = the default bars).
        formats: `--formats`' value ('' = the default formats).

    Returns:
        The export's report (export.json), failed files included.

    Raises:
        RuntimeError: the export failed (other than a file failing its agreement check).
    """
    command = [sys.executable, "-m", "vit.cli", "export", "--model", model_path,
               *(["--min-agreement", min_agreement] if min_agreement else []),
               *(["--formats", formats] if formats else []),
               *(["--verbose"] if console.is_verbose() else [])]
    environment = {**os.environ, "KERAS_BACKEND": "tensorflow", "CUDA_VISIBLE_DEVICES": ""}
    console.say("export: SavedModel and TFLite are TensorFlow formats; exporting model.keras "
                "in a TensorFlow process")
    finished = subprocess.run(command, env=environment, check=False)
    if finished.returncode not in (0, EXIT_EXPORT_FAILED):
        raise RuntimeError(f"the export failed (exit status {finished.returncode}); rerun it "
                           f"with: vit export --model {model_path}")
    with open(os.path.join(os.path.dirname(model_path), REPORT_NAME)) as handle:
        return json.load(handle)
