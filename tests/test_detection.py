"""Object detection's parts: the Hungarian matching against brute force, the set loss and its
invariance to the queries' order, boxes decoded to pixels, COCO's scores from pycocotools, the
`ViTDetector` (shapes, `.keras` round trip, LoRA, int8), the crops and flips that move the boxes
with the pixels, and the export check on boxes."""

import itertools
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from vit_app.tasks.detect import baseline
from vit_app.tasks.detect import evaluate as detection_eval
from vit_app.tasks.detect import inference as detect_task
from vit_keras import ViTConfig
from vit_keras.tasks.detect import boxes as detection_boxes
from vit_keras.tasks.detect.model import ViTDetector, grid_positions, patch_anchors
from vit_keras.tasks.detect.loss import (BoxF1, SetPredictionLoss, corners, generalized_iou,
                                      hungarian)

from helpers import script_module

TINY = ViTConfig(image_size=16, patch_size=4, hidden_size=16, mlp_dim=32, num_heads=2,
                 num_layers=1, num_classes=3)


# --- matching ------------------------------------------------------------------------------------

def _brute_force(cost, valid):
    objects = np.flatnonzero(valid)
    best, choice = np.inf, None
    for queries in itertools.permutations(range(cost.shape[0]), len(objects)):
        total = cost[list(queries), objects].sum()
        if total < best:
            best, choice = total, queries
    return best, choice


@pytest.mark.parametrize("seed", range(5))
def test_hungarian_finds_the_least_total_cost_and_skips_padding(seed):
    rng = np.random.default_rng(seed)
    cost = rng.normal(size=(2, 5, 3))
    valid = np.array([[True, False, True], [True, True, True]])
    matched = hungarian(cost, valid)
    assert matched.shape == (2, 5) and matched.dtype == np.int32
    for image in range(2):
        best, _ = _brute_force(cost[image], valid[image])
        queries = np.flatnonzero(matched[image] >= 0)
        assert sorted(matched[image][queries]) == sorted(np.flatnonzero(valid[image]))
        assert np.isclose(cost[image][queries, matched[image][queries]].sum(), best)


def test_an_image_without_objects_matches_no_query():
    assert (hungarian(np.zeros((1, 4, 2)), np.zeros((1, 2), bool)) == -1).all()


# --- the loss ------------------------------------------------------------------------------------

def _targets():
    """Two images: two objects, and one (the second row pads)."""
    return np.array([[[0, 0.3, 0.3, 0.2, 0.2], [2, 0.7, 0.6, 0.3, 0.4]],
                     [[1, 0.5, 0.5, 0.4, 0.4], [-1, 0, 0, 0, 0]]], np.float32)


def _outputs_for(targets, queries=4, classes=3, sure=6.0):
    """Outputs whose queries 1 and 3 name the targets' objects exactly, the rest nothing."""
    outputs = np.full((len(targets), queries, classes + 4), -sure, np.float32)
    for image, rows in enumerate(targets):
        for query, row in zip((3, 1), rows):
            if row[0] >= 0:
                outputs[image, query, int(row[0])] = sure
                outputs[image, query, classes:] = np.log(row[1:] / (1 - row[1:]))
    return outputs


def test_the_loss_is_least_for_the_right_boxes_and_ignores_the_queries_order():
    loss = SetPredictionLoss(3)
    targets = _targets()
    right = _outputs_for(targets)
    found = float(loss(targets, right))
    shuffled = float(loss(targets, right[:, ::-1]))
    assert found == pytest.approx(shuffled, rel=1e-5)
    wrong = right.copy()
    wrong[..., 3:] += 1.0   # every box moved
    assert float(loss(targets, wrong)) > found + 1.0
    noise = np.random.default_rng(0).normal(size=right.shape).astype(np.float32)
    assert float(loss(targets, noise)) > found + 1.0


def test_every_decoder_block_adds_its_loss():
    loss = SetPredictionLoss(3)
    targets = _targets()
    one = _outputs_for(targets, sure=1.0)
    stacked = np.stack([one, one], axis=1)
    assert float(loss(targets, stacked)) == pytest.approx(2 * float(loss(targets, one)),
                                                          rel=1e-5)


def _duplicated_outputs(targets, sure=6.0):
    """Four queries: 0 and 1 name the first object exactly, 2 and 3 the second."""
    outputs = np.full((len(targets), 4, 7), -sure, np.float32)
    for image, rows in enumerate(targets):
        for queries, row in zip(((0, 1), (2, 3)), rows):
            if row[0] >= 0:
                outputs[image, queries, int(row[0])] = sure
                outputs[image, queries, 3:] = np.log(row[1:] / (1 - row[1:]))
    return outputs


def test_one_to_many_matching_rewards_duplicates_in_auxiliary_blocks_only():
    targets = _targets()
    one_each, twice_each = _outputs_for(targets), _duplicated_outputs(targets)
    one_to_one, one_to_many = SetPredictionLoss(3), SetPredictionLoss(3, auxiliary_matches=2)
    # the last block (a block alone is the last) stays one-to-one: duplicates cost
    assert float(one_to_many(targets, twice_each)) == pytest.approx(
        float(one_to_one(targets, twice_each)), rel=1e-5)
    assert float(one_to_one(targets, twice_each)) > float(one_to_one(targets, one_each)) + 1
    # an auxiliary block's loss is least with two queries on each object
    auxiliary = [float(one_to_many(targets, np.stack([outputs, one_each], axis=1))) -
                 float(one_to_one(targets, one_each)) for outputs in (one_each, twice_each)]
    assert auxiliary[1] < auxiliary[0] - 1
    assert SetPredictionLoss.from_config(one_to_many.get_config()).auxiliary_matches == 2
    with pytest.raises(ValueError, match="auxiliary_matches must be at least 1, got 0"):
        SetPredictionLoss(3, auxiliary_matches=0)


def test_the_loss_gives_gradients_to_the_classes_and_boxes():
    outputs = tf.Variable(np.random.default_rng(1).normal(size=(2, 4, 7)).astype(np.float32))
    with tf.GradientTape() as tape:
        value = SetPredictionLoss(3)(_targets(), outputs)
    gradient = tape.gradient(value, outputs).numpy()
    assert np.isfinite(gradient).all()
    assert np.abs(gradient[..., :3]).sum() > 0 and np.abs(gradient[..., 3:]).sum() > 0


def test_generalized_iou_is_iou_for_nested_boxes_and_negative_apart():
    inner = np.array([0.2, 0.2, 0.4, 0.4], np.float32)
    outer = np.array([0.0, 0.0, 1.0, 1.0], np.float32)
    assert float(generalized_iou(inner, outer)) == pytest.approx(0.04, abs=1e-6)
    apart = np.array([0.6, 0.6, 0.8, 0.8], np.float32)
    assert float(generalized_iou(inner, apart)) < 0
    centre = np.array([0.5, 0.5, 0.2, 0.4], np.float32)
    np.testing.assert_allclose(corners(centre), [0.4, 0.3, 0.6, 0.7], atol=1e-6)


def test_box_f1_is_one_for_the_right_boxes_and_zero_for_none():
    metric = BoxF1(3)
    metric.update_state(_targets(), _outputs_for(_targets()))
    assert float(metric.result()) == pytest.approx(1.0)
    metric.reset_state()
    metric.update_state(_targets(), np.full((2, 4, 7), -8.0, np.float32))
    assert float(metric.result()) == 0.0


# --- boxes and scores ----------------------------------------------------------------------------

def test_decode_gives_the_best_boxes_in_pixels_of_each_image():
    outputs = _outputs_for(_targets())
    found = detection_boxes.decode(outputs, [(100, 200), (50, 50)], min_score=0.5)
    np.testing.assert_allclose(found[0]["boxes"][np.argsort(found[0]["classes"])],
                               [[40, 20, 80, 40], [110, 40, 170, 80]], atol=1e-3)
    assert list(found[1]["classes"]) == [1] and found[1]["scores"][0] > 0.99
    np.testing.assert_allclose(found[1]["boxes"], [[15, 15, 35, 35]], atol=1e-3)


def test_every_box_answered_lies_within_its_image():
    """A box whose centre sits near the border and whose size reaches past it: the REST
    answer and the page cut it to the image, as `decode` (predict, evaluate) does."""
    from types import SimpleNamespace

    task = detect_task.TASK
    model = SimpleNamespace(class_names=["a", "b"], num_classes=2 + detection_boxes.BOX_CHANNELS)
    probabilities = np.array([[[0.9, 0.1, 0.95, 0.5, 0.3, 0.2],     # reaches past the right
                               [0.1, 0.8, 0.05, 0.02, 0.4, 0.5],    # past the left and the top
                               [0.7, 0.2, 0.5, 0.5, 0.2, 0.2]]], np.float32)   # inside
    answered = task.answer(model, "images", None, {"probabilities": probabilities})
    corners = detection_boxes.cxcywh_to_xyxy(answered["boxes"])
    assert corners.min() >= 0 and corners.max() <= 1 + 1e-6
    np.testing.assert_allclose(corners[0, 2], [0.4, 0.4, 0.6, 0.6], atol=1e-6)  # kept as it was
    page = task.page_answer("m", model, answered)
    assert len(page["boxes"]) == 3
    assert all(0 <= value <= 1 for box in page["boxes"] for value in box["box"])
    np.testing.assert_allclose(page["boxes"][0]["box"], [0.8, 0.4, 1.0, 0.6], atol=1e-6)
    raw = task.page_answer("m", model, {"scores": probabilities[..., :2],
                                        "boxes": probabilities[..., 2:]})
    assert all(0 <= value <= 1 for box in raw["boxes"] for value in box["box"])
    logits = np.log(probabilities / (1 - probabilities))
    for image in detection_boxes.decode(logits, (60, 80)):
        assert (image["boxes"] >= 0).all() and (image["boxes"][:, [0, 2]] <= 80).all()
        assert (image["boxes"][:, [1, 3]] <= 60).all()


def test_coco_scores_of_the_truth_itself_are_perfect_and_of_nothing_zero():
    truth = [np.array([[10, 10, 30, 40, 0], [50, 50, 90, 80, 1]], np.float32),
             np.zeros((0, 5), np.float32)]
    detections = [{"boxes": truth[0][:, :4], "scores": np.array([0.9, 0.8]),
                   "classes": np.array([0, 1])},
                  {"boxes": np.zeros((0, 4)), "scores": np.zeros(0), "classes": np.zeros(0)}]
    scores = detection_eval.coco_scores(truth, detections, [(100, 100)] * 2, ["a", "b"])
    assert scores["mAP"] == pytest.approx(1.0) and scores["mAP50"] == pytest.approx(1.0)
    assert scores["class_ap"] == {"a": pytest.approx(1.0), "b": pytest.approx(1.0)}
    assert scores["objects"] == 2 and scores["AP_large"] is None
    empty = [{"boxes": np.zeros((0, 4)), "scores": np.zeros(0), "classes": np.zeros(0)}] * 2
    assert detection_eval.coco_scores(truth, empty, [(100, 100)] * 2, ["a", "b"])["mAP"] == 0


def test_a_resample_of_one_evaluation_scores_as_cocoeval_on_the_resampled_images():
    """The bootstrap accumulates each image's evaluation, done once, over a resample with
    repeats: the same scores as pycocotools on those images from scratch."""
    rng = np.random.default_rng(3)
    truth, detections = [], []
    for _ in range(12):
        corners = np.sort(rng.uniform(0, 100, (3, 2, 2)), axis=1).reshape(3, 4)[:, [0, 2, 1, 3]]
        truth.append(np.concatenate([corners, rng.integers(0, 2, (3, 1))], axis=1))
        detections.append({"boxes": corners + rng.normal(0, 2, corners.shape),
                           "scores": rng.uniform(0, 1, 3),
                           "classes": truth[-1][:, 4].astype(int)})
    sizes, names = [(100, 100)] * 12, ["a", "b"]
    evaluation = detection_eval.evaluated(truth, detections, sizes, len(names))
    assert detection_eval.accumulated_scores(evaluation, names) == \
        detection_eval.coco_scores(truth, detections, sizes, names)
    picked = [4, 4, 0, 11, 7, 7, 7, 2, 9, 1, 1, 5]
    resampled = detection_eval.accumulated_scores(evaluation, names, picked)
    direct = detection_eval.coco_scores([truth[i] for i in picked],
                                        [detections[i] for i in picked], sizes, names)
    assert resampled.pop("class_ap") == pytest.approx(direct.pop("class_ap"))
    assert resampled == pytest.approx(direct) and resampled["objects"] == 36
    assert 0 < resampled["mAP"] < 1
    assert detection_eval.accumulated_scores(evaluation, names) == \
        detection_eval.coco_scores(truth, detections, sizes, names)   # left as it was


def test_the_constant_box_is_each_class_mean_box_scored_by_its_share():
    objects = np.array([[0, 0.5, 0.5, 0.2, 0.4], [0, 0.3, 0.7, 0.4, 0.2],
                        [1, 0.1, 0.1, 0.1, 0.1]])
    (first, share, box), (second, other, _) = baseline.mean_boxes(objects, num_classes=3)
    assert (first, second) == (0, 1) and (share, other) == pytest.approx((2 / 3, 1 / 3))
    np.testing.assert_allclose(box, [0.4, 0.6, 0.3, 0.3])
    found = baseline.detections(baseline.mean_boxes(objects, 3), [(100, 200)])[0]
    np.testing.assert_allclose(found["boxes"][0], [50, 45, 110, 75])
    assert list(found["classes"]) == [0, 1]


def test_a_detector_beats_the_constant_box_only_by_scoring_above_it_on_both_scores():
    # Two images of 100 px, the same object in each at different places: the mean box is
    # between them and overlaps neither well.
    truth = [np.array([[0, 0, 30, 30, 0]], np.float32), np.array([[60, 60, 90, 90, 0]],
                                                                  np.float32)]
    objects = np.array([[0, 0.15, 0.15, 0.3, 0.3], [0, 0.75, 0.75, 0.3, 0.3]])
    constant = baseline.scores(objects, truth, [(100, 100)] * 2, ["a"])
    assert constant == {"mAP": 0.0, "mAP50": 0.0}
    perfect = {"mAP": 1.0, "mAP50": 1.0}
    assert baseline.shortfall(perfect, constant) is None
    assert "beaten" in baseline.table_cell(perfect, constant)
    assert baseline.shortfall(constant, constant).startswith(   # a tie is not a win
        "the detector does not beat a constant box (mAP 0.00% <= 0.00%, mAP@0.5 0.00%")
    half = baseline.shortfall({"mAP": 0.5, "mAP50": 0.4}, {"mAP": 0.1, "mAP50": 0.6})
    assert "mAP@0.5 40.00% <= 60.00%" in half and "mAP 50.00%" not in half
    assert "NOT BEATEN" in baseline.table_cell({"mAP": 0.5, "mAP50": 0.4},
                                               {"mAP": 0.1, "mAP50": 0.6})
    nothing = baseline.scores(objects, [np.zeros((0, 5))] * 2, [(100, 100)] * 2, ["a"])
    assert nothing == {"mAP": None, "mAP50": None}   # images without objects judge nothing
    assert baseline.shortfall({"mAP": None, "mAP50": None}, nothing) is None
    assert baseline.beats({"mAP": None, "mAP50": None}, nothing) is None
    assert baseline.beats(perfect, constant) is True
    assert baseline.beats(constant, constant) is False
    assert baseline.table_cell({"mAP": None, "mAP50": None}, nothing) == "n/a (no object to find)"


def test_the_real_photo_benchmark_wants_ten_points_over_the_constant_box_in_both_maps():
    bench = script_module("benchmarks", "detection")
    vit = {"val_mAP": 0.20, "val_mAP50": 0.50, "val_constant_box_mAP": 0.08,
           "val_constant_box_mAP50": 0.37}
    rows = [(f"{bench.FOLDER}: ViT", vit), (f"{bench.FOLDER}: constant box",
                                            bench.constant_box(vit))]
    assert bench.verdicts(rows) == [f"{bench.FOLDER}: ViT - constant box +12.0 mAP points, "
                                    "+13.0 mAP@0.5 points (at least 10 in both: holds)"]
    close = {**vit, "val_mAP50": 0.45}   # 8 points at IoU 0.5 are not enough
    rows = [(f"{bench.FOLDER}: ViT", close), (f"{bench.FOLDER}: constant box",
                                              bench.constant_box(close))]
    assert "DOES NOT HOLD" in bench.verdicts(rows)[0]
    assert bench._row("constant box", bench.constant_box(vit)).split()[-2:] == ["8.00%",
                                                                                 "37.00%"]


def test_retinanet_gets_the_vit_batches_padded_to_its_pyramid_with_boxes_in_pixels():
    bench = script_module("benchmarks", "detection")
    assert bench.pyramid_size((56, 64)) == (64, 64) and bench.pyramid_size((64, 80)) == (64, 80)
    found = tf.constant([[[0, 0.5, 0.5, 0.5, 0.5], [-1, -1, -1, -1, -1]]], tf.float32)
    images, targets = bench.keras_hub_targets((56, 64))(tf.ones((1, 56, 64, 3)), found)
    assert images.shape == (1, 64, 64, 3) and float(tf.reduce_sum(images[:, 56:])) == 0
    np.testing.assert_allclose(targets["boxes"][0], [[16, 14, 48, 42], [-1, -1, -1, -1]])
    np.testing.assert_allclose(targets["labels"][0], [0, -1])


# --- the model -----------------------------------------------------------------------------------

def test_the_detector_gives_queries_classes_and_boxes_and_every_block_in_training():
    model = ViTDetector(TINY, num_queries=5, decoder_layers=2, decoder_width=16,
                        decoder_heads=2)
    images = np.random.default_rng(0).normal(size=(2, 16, 16, 3)).astype(np.float32)
    assert model.predict(images, verbose=0).shape == (2, 5, 3 + 4)
    training = ViTDetector(TINY, num_queries=5, decoder_layers=2, decoder_width=16,
                           decoder_heads=2, all_layers=True)
    # the chosen proposals' outputs, then each block's
    assert training.predict(images, verbose=0).shape == (2, 3, 5, 7)
    # the same weights in the same order: the saved model is the trained one's last block
    model.set_weights(training.get_weights())
    np.testing.assert_allclose(model.predict(images, verbose=0),
                               training.predict(images, verbose=0)[:, -1], atol=1e-5)


def test_the_detector_round_trips_through_keras_files_under_safe_mode(tmp_path):
    model = ViTDetector(TINY, num_queries=4, decoder_layers=1, decoder_width=16,
                        decoder_heads=2)
    path = tmp_path / "detector.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    images = np.random.default_rng(0).normal(size=(1, 16, 16, 3)).astype(np.float32)
    assert isinstance(loaded, ViTDetector) and loaded.vit_task == "detect"
    np.testing.assert_allclose(loaded.predict(images, verbose=0),
                               model.predict(images, verbose=0), atol=1e-6)
    assert loaded.get_config() == model.get_config()


def test_lora_freezes_the_encoder_and_trains_the_head():
    model = ViTDetector(TINY, num_queries=4, decoder_layers=1, decoder_width=16,
                        decoder_heads=2)
    model.enable_lora(2)
    trainable = {weight.path.split("/")[0] for weight in model.trainable_weights}
    assert trainable and all(name.startswith("det_") or "lora" in name or name in
                             {layer.name for layer in model.layers if not layer.name.startswith(
                                 "det_")} for name in trainable)
    assert any(name.startswith("det_decoder") for name in trainable)
    frozen = [weight for weight in model.weights if not weight.trainable]
    assert any("encoderblock" in weight.path.lower() for weight in frozen)


def test_learned_queries_are_the_alternative_to_proposals():
    model = ViTDetector(TINY, num_queries=20, decoder_layers=1, decoder_width=16,
                        decoder_heads=2, query_selection=False, all_layers=True)
    images = np.zeros((1, 16, 16, 3), np.float32)
    assert model.predict(images, verbose=0).shape == (1, 1, 20, 7)


def test_the_detector_checks_its_options():
    with pytest.raises(ValueError, match="num_queries must be an int >= 1"):
        ViTDetector(TINY, num_queries=0)
    with pytest.raises(ValueError, match=r"num_queries=20 are chosen among the 16 patches "
                                         r"\(4x4\)"):
        ViTDetector(TINY, num_queries=20, decoder_width=16, decoder_heads=2)
    with pytest.raises(ValueError, match="decoder_width must be a multiple of 8"):
        ViTDetector(TINY, decoder_width=20, decoder_heads=2)


def test_the_patches_anchor_box_is_the_size_given_and_saved():
    """Each patch's proposal, and each block after it, starts at its anchor (their last box
    layers start at zero): at the patch's centre, `anchor_size` wide and high."""
    model = ViTDetector(TINY, num_queries=4, decoder_layers=1, decoder_width=16,
                        decoder_heads=2, anchor_size=(0.6, 0.8), all_layers=True)
    images = np.random.default_rng(0).normal(size=(2, 16, 16, 3)).astype(np.float32)
    sides = keras.ops.convert_to_numpy(keras.ops.sigmoid(model.predict(images, verbose=0)))
    np.testing.assert_allclose(sides[..., -2:], np.broadcast_to([0.6, 0.8], sides[..., -2:].shape),
                               atol=1e-5)
    assert ViTDetector.from_config(model.get_config()).anchor_size == (0.6, 0.8)
    default = keras.ops.convert_to_numpy(keras.ops.sigmoid(patch_anchors(4, 4)))
    np.testing.assert_allclose(default[..., -2:], 0.5, atol=1e-6)   # two of 4 patches a side
    with pytest.raises(ValueError, match=r"anchor_size is \(width, height\) in fractions of the "
                                         r"image, each in \(0, 1\), got \(0.5, 1.2\)"):
        ViTDetector(TINY, num_queries=4, decoder_width=16, decoder_heads=2,
                    anchor_size=(0.5, 1.2))
    with pytest.raises(ValueError, match="learned queries .* learn their own anchors"):
        ViTDetector(TINY, num_queries=4, decoder_width=16, decoder_heads=2,
                    query_selection=False, anchor_size=(0.5, 0.5))


def test_the_memory_positions_are_sines_of_the_patch_centres():
    positions = grid_positions(2, 3, 16)
    assert positions.shape == (1, 6, 16)
    # the first frequency of y: sin(2 pi (row + 0.5) / rows), cos after the sines
    np.testing.assert_allclose(positions[0, :, 0], np.sin(2 * np.pi * np.repeat(
        [0.25, 0.75], 3)), atol=1e-6)
    np.testing.assert_allclose(positions[0, :, 8], np.sin(2 * np.pi * np.tile(
        [1 / 6, 0.5, 5 / 6], 2)), atol=1e-6)


# --- the export check ----------------------------------------------------------------------------

def test_the_export_check_wants_keras_boxes_repeated_with_the_same_class():
    task = detect_task.TASK
    keras_outputs = _outputs_for(_targets())
    same = task.file_agreement(keras_outputs, keras_outputs, _targets())
    assert same["box_agreement"] == 1.0 and same["keras_boxes"] == 3
    assert same["mAP_delta"] == 0.0
    assert task.check({"top1_agreement": 1.0, **same}, 0.98, "int8") == (None, False)
    moved = keras_outputs.copy()
    moved[0, 3, 3] += 0.8   # one box's centre moves: IoU < 0.9
    found = task.file_agreement(moved, keras_outputs, None)
    assert found["box_agreement"] == pytest.approx(2 / 3)
    failure, computes_otherwise = task.check(found, 0.98, "int8")
    assert "box agreement with the Keras model 66.67% < 98.00%" in failure and computes_otherwise
    renamed = keras_outputs.copy()
    renamed[1, 3, [0, 1]] = renamed[1, 3, [1, 0]]   # the same box, another class
    assert task.file_agreement(renamed, keras_outputs, None)["box_agreement"] == \
        pytest.approx(2 / 3)


def test_a_detector_file_is_refused_for_its_map_only_when_worse_beyond_the_noise():
    task = detect_task.TASK
    entry = {"top1_agreement": 1.0, "box_agreement": 1.0, "keras_boxes": 40,
             "scored_images": 40, "scores_judged": True}
    better = {**entry, "mAP_delta": 0.08, "mAP50_delta": 0.03}
    assert task.check(better, 0.98, "int8") == (None, False)
    worse = {**entry, "mAP_delta": -0.02, "mAP50_delta": -0.06, "mAP_noise": 0.01,
             "mAP50_noise": 0.015}
    failure, computes_otherwise = task.check(worse, 0.98, "int8")
    assert failure.startswith("mAP50 -6.00 points from Keras' (a int8 file may lose 2.0, plus "
                              "1.50 of sampling noise on 40 images)") and not computes_otherwise
    assert task.check({**worse, "mAP50_noise": 0.05}, 0.98, "int8") == (None, False)
    assert task.check({**worse, "scored_images": 3, "scores_judged": False}, 0.98,
                      "int8") == (None, False)
    outputs = _outputs_for(_targets())
    lost = outputs.copy()
    lost[0, :, :2] = -20.0   # the file finds nothing in the first image
    found = task.file_agreement(lost, outputs, _targets())
    assert found["mAP_delta"] < -0.2 and "mAP_noise" in found and not found["scores_judged"]


def test_export_labels_must_be_targets_per_image():
    with pytest.raises(ValueError, match=r"eval labels must be \[2, max_objects, 5\]"):
        detect_task.TASK.checked_labels(np.zeros((2, 16, 16)), np.zeros((2, 16, 16, 3)))


def test_the_full_integer_top_k_picks_what_top_k_picks():
    from vit_keras.fast_paths import export_forms, top_k_indices

    scores = np.random.default_rng(0).uniform(0.01, 1, size=(3, 40)).astype(np.float32)
    scores[0, 5] = scores[0, 9]   # a tie: the lower index first, as top_k
    expected = np.asarray(top_k_indices(scores, 7))
    with export_forms.tflite_form(integer=True):
        found = np.asarray(top_k_indices(scores, 7))
    np.testing.assert_array_equal(found, expected)
    np.testing.assert_array_equal(expected, np.argsort(-scores, axis=-1, kind="stable")[:, :7])


def test_a_small_box_moved_by_a_fraction_of_a_pixel_still_counts():
    """At IoU 0.9 alone, half a pixel fails a 4 px box; within a pixel of the model's input it
    is the same box."""
    outputs = np.full((1, 2, 1 + 4), -8.0, np.float32)
    outputs[0, 0, 0] = 5.0
    box = np.array([0.5, 0.5, 0.125, 0.125])   # 4 px in a 32 px input
    outputs[0, 0, 1:] = np.log(box / (1 - box))
    moved = outputs.copy()
    shifted = box + [0.5 / 32, 0, 0, 0]           # half a pixel to the right
    moved[0, 0, 1:] = np.log(shifted / (1 - shifted))
    task = detect_task.TASK
    assert task.file_agreement(moved, outputs, None)["box_agreement"] == 0.0
    assert task.file_agreement(moved, outputs, None, (32, 32))["box_agreement"] == 1.0
    farther = box + [1.5 / 32, 0, 0, 0]
    moved[0, 0, 1:] = np.log(farther / (1 - farther))
    assert task.file_agreement(moved, outputs, None, (32, 32))["box_agreement"] == 0.0


def test_a_file_computing_keras_boxes_agrees_however_low_their_scores():
    """An early model's best box may score under every bar (a photo detector after two epochs:
    0.1): a file giving the same outputs repeats it; one that loses it does not."""
    outputs = np.full((2, 3, 2 + 4), -8.0, np.float32)
    outputs[:, 0, 0] = -2.2   # the best box scores 0.10
    box = np.array([0.4, 0.5, 0.3, 0.2])
    outputs[:, :, 2:] = np.log(box / (1 - box))
    task = detect_task.TASK
    same = task.file_agreement(outputs.copy(), outputs, None, (48, 64))
    assert same == {"box_agreement": 1.0, "keras_boxes": 2}
    lost = outputs.copy()
    lost[0, 0, 0] = -8.0
    assert task.file_agreement(lost, outputs, None, (48, 64))["box_agreement"] == 0.5


@pytest.mark.slow
def test_the_set_loss_trains_on_jax_through_a_host_callback(tmp_path):
    """JAX compiles the step whole and calls SciPy's matching through `pure_callback`."""
    script = tmp_path / "fit.py"
    script.write_text(
        "import numpy as np, keras\n"
        "from vit_keras import ViTConfig\n"
        "from vit_keras.tasks.detect.model import ViTDetector\n"
        "from vit_keras.tasks.detect.loss import BoxF1, SetPredictionLoss\n"
        "config = ViTConfig(image_size=16, patch_size=4, hidden_size=16, mlp_dim=32,"
        " num_heads=2, num_layers=1, num_classes=3)\n"
        "model = ViTDetector(config, num_queries=4, decoder_layers=1, decoder_width=16,"
        " decoder_heads=2, all_layers=True)\n"
        "model.compile(keras.optimizers.Adam(1e-2), loss=SetPredictionLoss(3),"
        " metrics=[BoxF1(3)])\n"
        "x = np.random.default_rng(0).normal(size=(8, 16, 16, 3)).astype('float32')\n"
        "y = np.array([[[0, .3, .3, .2, .2], [-1, 0, 0, 0, 0]]] * 8, 'float32')\n"
        "losses = model.fit(x, y, epochs=5, batch_size=4, verbose=0).history['loss']\n"
        "assert keras.backend.backend() == 'jax' and losses[-1] < losses[0], losses\n"
        "print('trained', losses[0], losses[-1])\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "KERAS_BACKEND": "jax"})
    assert done.returncode == 0 and "trained" in done.stdout, done.stderr[-3000:]
