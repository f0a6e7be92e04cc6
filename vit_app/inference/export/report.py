"""The report of an export: export.json's fields, its Markdown table, the rows `vit train`'s
result table shows, and the lines and exit status of files that failed their check.
"""

from __future__ import annotations

import json
import os

from vit_app import console
from vit_app.inference import inference_task as tasks
from vit_app.inference.inference_task import percent_or_blank
from vit_app.inference.export.writers import LATENCY_THREADS
from vit_keras import atomic
from vit_keras.core.model import preprocessing_of
from vit_keras.export import graph
from vit_keras.export.agreement import logit_agreement
from vit_keras.tasks import CLASSIFY

REPORT_NAME = "export.json"
EXIT_EXPORT_FAILED = 3  # every other file was written; see the FAILED rows
NOT_WRITTEN_REASON_CHARS = 300  # of a converter's message in a not-written row


def header(eval_images, latency_runs: int, keras_scores: dict, task) -> dict:
    """export.json before the formats: the input contract, the evaluation and timing setup.

    Args:
        eval_images: the images every file is compared with Keras on.
        latency_runs: timed batch-1 calls per file.
        keras_scores: the Keras model's scores (its task's `label_scores`).
        task: the model's `vit_app.inference.inference_task.InferenceTask`: export.json records
            its name and what its files agree with Keras on ('top-1', a segmenter's 'pixels').

    Returns:
        The report, its 'formats' empty.
    """
    return {
        "task": task.name,
        "input": {"shape": list(eval_images.shape[1:]), "dtype": "float32",
                  "range": [0, 255], "layout": "NHWC RGB"},
        "eval_examples": int(len(eval_images)),
        "agreement": task.agreement,
        "columns": {"agreement": task.agreement_column, "score": task.score_column},
        "latency": {"batch_size": 1, "threads": LATENCY_THREADS, "runs": latency_runs,
                    "statistic": "median of 5 interleaved rounds (each a median)"},
        "keras": keras_scores,
        "formats": {},
    }


def model_contract(model, image_size, activation) -> dict:
    """export.json's account of what the runtimes must do around the files."""
    # The exported graphs normalise inside; a runtime still resizes by the weights' rule.
    return {"serving_default_any_size": image_size is None and graph.takes_any_size(model),
            "activation": activation or "softmax",
            "preprocessing": preprocessing_of(model).to_dict()}


def agreement_columns(logits, keras_logits, labels, task, image_hw=None) -> dict:
    """An exported file's logits against Keras': max |difference|, top-1 (or pixel)
    agreement, its scores on `labels` by its `task` (accuracy, mAP or mIoU) and what else the
    task judges a file by (`InferenceTask.file_agreement`; `image_hw`: the images' size)."""
    return {**logit_agreement(logits, keras_logits), **task.label_scores(logits, labels),
            **task.file_agreement(logits, keras_logits, labels, image_hw)}


def write(report: dict, output_dir: str) -> None:
    """Writes `report` as export.json into `output_dir` (atomically)."""
    atomic.write_bytes(os.path.join(output_dir, REPORT_NAME),
                       (json.dumps(report, indent=2) + "\n").encode())


def not_written(file: str, error: Exception, bar) -> dict:
    """The export.json entry of a format whose file could not be written (its converter
    failed): failed, with the converter's reason and what to try."""
    reason = " ".join(f"{type(error).__name__}: {error}".split())
    return {"file": file, "written": False, "passed": False, "min_agreement": bar,
            "latency_ms": None, "failed_on": "writing",
            "failure": f"could not be written ({reason[:NOT_WRITTEN_REASON_CHARS]})",
            "advice": "run with --verbose for the converter's own messages, or leave the "
                      "format out (--formats)"}


def format_report(report: dict) -> str:
    """export.json as a Markdown table: format, size, latency, accuracy, agreement, logit diff
    and the check against the format's bar."""
    lines = [f"| format | size (MB) | latency (ms) | {_score_name(report)} | "
             f"{_agreement_name(report)} | max logit diff | check |",
             "|---|---|---|---|---|---|---|"]
    task = _task(report)
    lines.append(f"| keras | | | {task.score_cell(report['keras'])} | | | |")
    for name, entry in report["formats"].items():
        if not entry.get("written", True):
            lines.append(f"| {name} | | | | | | {check_label(entry)} |")
            continue
        latency = "" if entry["latency_ms"] is None else f"{entry['latency_ms']:.2f}"
        lines.append(f"| {name} | {entry['size_bytes'] / 1e6:.2f} | {latency} | "
                     f"{task.score_cell(entry)} | {task.agreement_cell(entry)} | "
                     f"{entry['max_abs_logit_diff']:.2e} | {check_label(entry)} |")
    return "\n".join(lines)


def summary_rows(report: dict) -> list[tuple[str, str]]:
    """One (file, 'agreement ..., accuracy ..., check') row per exported format, for the result
    table of `vit train`."""
    task, rows = _task(report), []
    for entry in report["formats"].values():
        if not entry.get("written", True):
            rows.append((entry["file"], check_label(entry)))
            continue
        score = task.score_summary(entry)
        rows.append((entry.get("rejected_file") or entry["file"],
                     f"{task.summary_kind}agreement {task.agreement_cell(entry)}"
                     f"{', ' + score if score else ''}, {check_label(entry)}"))
    return rows


def check_label(entry: dict) -> str:
    """'ok (>= 98.00%)', 'FAILED (< 98.00%)' (its agreement), "FAILED (mAP50 -6.02 points
    from Keras')" (a score, its agreement met), or 'not checked' (int8 on random images);
    'scores not judged: 3 images' is added where too few images were scored to judge the
    file's scores against Keras' (`tasks.MIN_JUDGED_IMAGES`), so only its agreement was."""
    if not entry.get("written", True):
        return "FAILED (not written)"
    if entry.get("min_agreement") is None:
        return "not checked"
    unjudged = "" if entry.get("scores_judged", True) else \
        f"; scores not judged: {entry['scored_images']} images"
    if entry["passed"]:
        return f"ok (>= {percent_or_blank(entry['min_agreement'])}{unjudged})"
    if entry.get("failed_on") == "scores":  # the failure's first clause names the score
        return f"FAILED ({entry['failure'].split(' (', 1)[0]})"
    return f"FAILED (< {percent_or_blank(entry['min_agreement'])}{unjudged})"


def failure_line(name: str, entry: dict, agreement: str = "top-1 agreement") -> str:
    """One line saying which file failed its check, by how much, where it went, what to try
    (`agreement`: what was measured, 'top-1 agreement' or 'pixel agreement')."""
    failure = entry.get("failure") or (  # the task's reason (older reports: the agreement)
        f"{agreement} with the Keras model {percent_or_blank(entry['top1_agreement'])} < "
        f"{percent_or_blank(entry['min_agreement'])}")
    if not entry.get("written", True):
        return f"export: {name} FAILED: {failure}; {entry['advice']}"
    return (f"export: {name} FAILED: {failure}; not written as {entry['file']} (kept as "
            f"{entry['rejected_file']} to inspect); {entry['advice']}")


def report_failures(report: dict, command: str = "vit export") -> int:
    """Prints one line per file that failed its check (on stderr).

    Args:
        report: the export's report.
        command: who exported, for the closing line.

    Returns:
        The exit status: 0, or `EXIT_EXPORT_FAILED`.
    """
    for name in report["failed"]:
        console.say(failure_line(name, report["formats"][name], _agreement_name(report)),
                    error=True)
    if not report["failed"]:
        return 0
    console.say(f"{command}: {len(report['failed'])} of {len(report['formats'])} exported files "
                f"FAILED their check (or could not be written) and are not under their names; "
                f"exit status {EXIT_EXPORT_FAILED}", error=True)
    return EXIT_EXPORT_FAILED


def _task(report: dict):
    """The `InferenceTask` whose files `report` lists (it draws their cells)."""
    return tasks.get(report.get("task") or CLASSIFY)


def _agreement_name(report: dict) -> str:
    return report.get("columns", {}).get("agreement", "top-1 agreement")


def _score_name(report: dict) -> str:
    return report.get("columns", {}).get("score", "accuracy")
