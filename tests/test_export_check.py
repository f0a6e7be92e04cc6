"""The export gate as each task judges a file: a classifier by its top-1 agreement, a segmenter
by its decisive pixels and by what its masks score. Both directions: a file that computes
something else fails (a float one as a bug), a file whose near-tied pixels flip passes unless
the flips change its scores."""

import numpy as np
import pytest

from vit_app.inference import export_formats, export_pipeline, export_report, tasks
from vit_app.inference.tasks import segment

FP16 = export_formats.EXPORT_FORMATS["tflite_fp16"]
INT8 = export_formats.EXPORT_FORMATS["tflite_int8"]


def _scene(seed=0, size=64, classes=2):
    """Keras' logits over a mask-shaped scene, the labels they mostly get right, and the
    near-tied pixels (lead < 0.02 in probability): the edges of a thin band."""
    rng = np.random.default_rng(seed)
    labels = np.zeros((4, size, size), np.int64)
    labels[:, :, size // 2 - 2:size // 2 + 2] = 1  # a 4 px membrane
    logits = np.zeros((4, size, size, classes), np.float32)
    logits[..., 0] = rng.uniform(1.0, 4.0, labels.shape) * np.where(labels == 0, 1, -1)
    edges = np.zeros_like(labels, bool)
    edges[:, ::16, size // 2 - 3] = edges[:, 8::16, size // 2 + 2] = True  # beside the band
    logits[..., 0][edges] = rng.uniform(-0.03, 0.03, int(edges.sum()))
    return logits, labels, edges


def _entry(logits, keras_logits, labels, task):
    return export_report.agreement_columns(logits, keras_logits, labels, task)


def _flip(logits, where):
    flipped = logits.copy()
    flipped[..., 0][where] = -flipped[..., 0][where]
    return flipped


def test_near_tied_pixels_alone_never_fail_a_segmenter_file():
    keras_logits, labels, edges = _scene()
    task = tasks.get("segment")
    entry = _entry(_flip(keras_logits, edges), keras_logits, labels, task)
    assert entry["top1_agreement"] < 0.999  # the plain pixel gate would have failed it
    assert entry["decisive_agreement"] == 1.0 and entry["decisive_pixels"] < 1.0
    assert abs(entry["mIoU_delta"]) <= segment.SCORE_MARGINS["float"][0]
    assert export_pipeline._check(FP16, entry, 0.999, task) == {"min_agreement": 0.999,
                                                                  "passed": True}


def test_a_segmenter_file_that_disagrees_where_keras_is_sure_fails_as_a_bug():
    keras_logits, labels, edges = _scene()
    task = tasks.get("segment")
    wrong = np.zeros_like(edges)
    wrong[:, 5:9, 5:9] = True  # 16 sure background pixels a float file calls membrane
    entry = _entry(_flip(keras_logits, wrong), keras_logits, labels, task)
    fields = export_pipeline._check(FP16, entry, 0.999, task)
    assert not fields["passed"] and "decisive pixel agreement" in fields["failure"]
    assert "this is a bug" in fields["advice"]
    line = export_report.failure_line("tflite_fp16", {**entry, **fields, "file": "m.tflite",
                                                      "rejected_file": "rejected/m.tflite"})
    assert line.startswith("export: tflite_fp16 FAILED: decisive pixel agreement with the Keras "
                           "model 99.")
    assert "kept as rejected/m.tflite" in line and "this is a bug" in line


def test_near_ties_that_change_the_scores_fail_without_calling_it_a_bug():
    keras_logits, labels, _ = _scene()
    task = tasks.get("segment")
    # Every membrane pixel made a near tie in Keras, then flipped by the file: the decisive
    # pixels still agree, but the membrane's IoU collapses.
    keras_logits[..., 0][labels == 1] = -0.01
    entry = _entry(_flip(keras_logits, labels == 1), keras_logits, labels, task)
    assert entry["decisive_agreement"] == 1.0 and entry["mIoU_delta"] < -0.1
    fields = export_pipeline._check(INT8, entry, 0.98, task)
    assert not fields["passed"] and fields["failure"].startswith("mIoU -")
    assert "bug" not in fields["advice"] and "near-tied" in fields["advice"]


def test_without_labels_a_segmenter_file_is_judged_by_its_decisive_pixels():
    keras_logits, _, edges = _scene()
    task = tasks.get("segment")
    entry = _entry(_flip(keras_logits, edges), keras_logits, None, task)
    assert "mIoU_delta" not in entry
    assert export_pipeline._check(INT8, entry, 0.98, task)["passed"]


@pytest.mark.parametrize("agreement, passed", [(0.9990, True), (0.9989, False)])
def test_the_classifier_check_is_its_top1_agreement(agreement, passed):
    task = tasks.get("classify")
    fields = export_pipeline._check(FP16, {"top1_agreement": agreement}, 0.999, task)
    assert fields["passed"] is passed
    if not passed:
        assert fields["failure"] == "top-1 agreement with the Keras model 99.89% < 99.90%"
        assert fields["advice"] == export_formats.FLOAT_ADVICE
