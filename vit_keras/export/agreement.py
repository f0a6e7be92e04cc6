"""Whether an exported file is still its model: top-1 agreement with Keras, and the bar each
kind of file must clear.

A float file (float32, or float16 weights) computes what Keras computes up to rounding, so it
must name the same class as Keras on at least 99.9% of images; an int8 file (dynamic-range or
full-integer) on at least 98%. A file below its bar answers differently from the model it was
made from and must not be shipped as that model without anyone saying so.
"""

from __future__ import annotations

import warnings

import numpy as np

from vit_keras import atomic
from vit_keras.export import graph
from vit_keras.export.bars import default_min_agreement

class LowAgreementError(RuntimeError):
    """An exported file names another class than its Keras model too often.

    Attributes:
        report: the export's report (path, top1_agreement, min_agreement, ...).
    """

    def __init__(self, message: str, report: dict):
        super().__init__(message)
        self.report = report


def logit_agreement(logits, expected) -> dict:
    """How closely an exported file's logits follow the Keras model's on the same images.

    Args:
        logits, expected: [N, classes] of the file and of Keras.

    Returns:
        {'max_abs_logit_diff': float, 'top1_agreement': the fraction of equal argmaxes}.
    """
    logits, expected = np.asarray(logits), np.asarray(expected)
    return {"max_abs_logit_diff": float(np.max(np.abs(logits - expected))),
            "top1_agreement": float(np.mean(logits.argmax(-1) == expected.argmax(-1)))}


def compare_with_keras(logits_model, runner, images, include_preprocessing: bool = True) -> dict:
    """Runs the same images through Keras and an exported file.

    Args:
        logits_model: the Keras model returning logits.
        runner: the file's runner (`TFLiteModel`, `ONNXModel`): float32 pixels in, logits out.
        images: float32 [N, H, W, 3] in 0..255.
        include_preprocessing: whether the Keras model needs [-1, 1] inputs.

    Returns:
        {'max_abs_logit_diff': float, 'top1_agreement': float in [0, 1], 'verified_images': N}.
    """
    images = np.asarray(images, dtype=np.float32)
    logits_fn = graph.logits_function(logits_model, include_preprocessing)
    expected = np.concatenate([np.asarray(logits_fn(images[i:i + 64]))
                               for i in range(0, len(images), 64)])
    return {**logit_agreement(runner(images), expected), "verified_images": int(len(images))}


def enforce(report: dict, quantization: str | None, min_agreement, on_low_agreement: str,
            advice: str = "") -> None:
    """Raises or warns when the report's top-1 agreement is below the file's bar.

    Args:
        report: an export report with 'path' and 'top1_agreement'; gets 'min_agreement'.
        quantization: the file's quantization (its default bar).
        min_agreement: the bar; None: `default_min_agreement(quantization)`.
        on_low_agreement: 'raise' (`LowAgreementError`) or 'warn' (a `UserWarning`).
        advice: what to try instead, appended to the message.
    """
    minimum = default_min_agreement(quantization) if min_agreement is None else min_agreement
    report["min_agreement"] = float(minimum)
    if report["top1_agreement"] >= minimum:
        return
    message = (f"{report['path']} names the Keras model's class on only "
               f"{100 * report['top1_agreement']:.1f}% of {report['verified_images']} images "
               f"(max logit difference {report['max_abs_logit_diff']:.3g}); a "
               f"{quantization or 'float32'} file must reach {100 * minimum:.1f}%. {advice}")
    if on_low_agreement == "raise":
        raise LowAgreementError(message.strip() + " The file was not written.", report)
    warnings.warn(message.strip(), UserWarning, stacklevel=3)


def publish_verified(path: str, content: bytes, report: dict, *, runner, logits_model, images,
                     include_preprocessing: bool = True, bar=None) -> dict:
    """Writes a converted file beside `path`, compares it with Keras there, and publishes it
    under `path` only if it clears its bar (a raise leaves nothing at `path`).

    Args:
        path: the final file name.
        content: the file's bytes.
        report: the export's report; gets the agreement figures.
        runner: opens a file for inference (`TFLiteModel`, `ONNXModel`).
        logits_model, images, include_preprocessing: as `compare_with_keras` takes them.
        bar: None (figures reported only) or (quantization, min_agreement, on_low_agreement,
            advice) for `enforce`.

    Returns:
        `report`.
    """
    with atomic.staged_path(path) as staged:
        with open(staged, "wb") as handle:
            handle.write(content)
        report.update(compare_with_keras(logits_model, runner(staged), images,
                                         include_preprocessing))
        if bar is not None:
            enforce(report, *bar)
    return report
