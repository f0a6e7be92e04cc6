"""Multi-label training end to end: the `csv:` source (good files and every malformed case),
multi-hot targets through the pipeline and MixUp/CutMix, the exact mAP and F1 against
scikit-learn, timm's label smoothing, and a `--set objective.kind=multilabel` run whose model gives
sigmoid scores in every format (.keras, SavedModel, .tflite, .onnx), in `vit predict` and in
`vit evaluate`, also after a separate `vit export`."""

import json

import keras
import numpy as np
import pytest
from PIL import Image

from helpers import vit_predict
from vit import cli
from vit_app.data import evaluation
from vit_app.tasks.classify.data import csv_source, readers
from vit_app.images import scale
from vit_app.tasks.classify import multilabel_scores
from training import pipeline, run
from training.tasks.classify import multilabel
from training.objective import get_objective
from training.presets import get_preset

CLASSES = ("cat", "dog", "owl")
TINY_MODEL = dict(image_size=8, patch_size=4, hidden_size=16, mlp_dim=32, num_heads=2,
                  num_layers=1)


def _write_images(folder, count, size=(12, 10)):
    """`count` small PNGs with distinct colours; returns their names."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    names = []
    for index in range(count):
        pixels = rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
        pixels[..., index % 3] = 40 * (index % 7)  # a colour cue the labels follow
        name = f"img_{index:02d}.png"
        Image.fromarray(pixels).save(folder / name)
        names.append(name)
    return names


def _labels_of(index):
    """Row `index`'s labels: one class, two classes, or none (every 8th row)."""
    if index % 8 == 7:
        return ""
    first, second = CLASSES[index % 3], CLASSES[(index + 1) % 3]
    return f"{first};{second}" if index % 4 == 1 else first


def _write_csv(path, rows):
    path.write_text("file,labels\n" + "".join(f"{file},{labels}\n" for file, labels in rows))
    return path


@pytest.fixture
def image_list(tmp_path):
    """A folder of 24 PNGs and `train.csv` (relative paths, mixed separators, empty labels)."""
    names = _write_images(tmp_path / "images", 24)
    rows = [(f"images/{name}", _labels_of(index)) for index, name in enumerate(names)]
    return _write_csv(tmp_path / "train.csv", rows)


# --- the CSV source ---------------------------------------------------------------------------

def test_labels_are_split_on_spaces_semicolons_and_bars():
    assert csv_source.split_labels(" cat; dog|owl  cat ") == ["cat", "dog", "owl"]
    assert csv_source.split_labels("") == []


def test_csv_source_reads_classes_and_multi_hot_labels(tmp_path, image_list):
    absolute = tmp_path / "images" / "img_00.png"
    (tmp_path / "more.csv").write_text(
        f'labels,file,note\n"dog | owl",{absolute},x\n\ncat,images/img_01.png,"a, b"\n,'
        'images/img_02.png,\n')
    listed = csv_source.read_image_list(str(tmp_path / "more.csv"))
    assert listed.class_names == ["cat", "dog", "owl"]
    assert listed.files[0] == str(absolute)
    np.testing.assert_array_equal(listed.targets, [[0, 1, 1], [1, 0, 0], [0, 0, 0]])
    assert listed.targets.dtype == np.float32

    train = readers.load_source(f"csv:{image_list}", "train", val_split=0.25, seed=1)
    val = readers.load_source(f"csv:{image_list}", "val", val_split=0.25, seed=1)
    assert (train.multilabel, val.multilabel) == (True, True)
    assert (train.num_examples, val.num_examples) == (18, 6)
    assert set(train.arrays[0]) | set(val.arrays[0]) == set(
        csv_source.read_image_list(str(image_list)).files)
    again = readers.load_source(f"csv:{image_list}", "val", val_split=0.25, seed=1)
    np.testing.assert_array_equal(again.arrays[0], val.arrays[0])
    everything = readers.load_source(f"csv:{image_list}", "train", val_split=0.0)
    assert everything.num_examples == 24 and everything.arrays[1].shape == (24, 3)
    assert everything.arrays[1].sum(axis=1).max() == 2  # some images have two labels


def test_labels_txt_fixes_the_classes(tmp_path, image_list):
    (tmp_path / "labels.txt").write_text("owl\ncat\ndog\nbat\n")
    listed = csv_source.read_image_list(str(image_list))
    assert listed.class_names == ["owl", "cat", "dog", "bat"]
    assert listed.targets[:, 3].sum() == 0  # a known class without examples is fine
    np.testing.assert_array_equal(listed.targets[0], [0, 1, 0, 0])  # row 0: cat


def _bad_case(tmp_path, text, labels_txt=None):
    _write_images(tmp_path / "images", 1)
    if labels_txt is not None:
        (tmp_path / "labels.txt").write_text(labels_txt)
    (tmp_path / "bad.csv").write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError) as error:
        readers.load_source(f"csv:{tmp_path / 'bad.csv'}", "train", val_split=0.0)
    return str(error.value)


@pytest.mark.parametrize("text, labels_txt, expected", [
    ("", None, ["is empty: expected a header row file,labels"]),
    ("\n\n", None, ["is empty"]),
    ("file,tags\nimages/img_00.png,cat\n", None,
     ["line 1", "lacks the column(s) ['labels']", "naming the columns 'file' and 'labels'"]),
    ("file,labels\nimages/img_00.png,cat,dog\n", None,
     ["line 2: 3 fields, expected 2 as in the header", "double quotes"]),
    ("file,labels\nimages/img_00.png,cat\n  ,dog\n", None,
     ["line 3: the file name is empty: expected the path of an image"]),
    ("file,labels\nimages/img_00.png,cat\nimages/gone.png,dog\n", None,
     ["1 of 2 image files do not exist", "line 3:", "gone.png"]),
    ("file,labels\n", None, ["has a header but no rows: expected one row per image"]),
    ("file,labels\nimages/img_00.png,\n", None, ["no row has a label"]),
    ("file,labels\nimages/img_00.png,cat\nimages/img_00.png,cat cow\n", "cat\ndog\n",
     ["line 3: label 'cow' is not a class of", "labels.txt", "known classes: 'cat', 'dog'"]),
    ("file,labels\nimages/img_00.png,cat\n", "cat\ncat\n", ["repeats of 'cat'"]),
    ("file,labels\nimages/img_00.png,cat\n", "big cat\n", ["'big cat' holds a space"]),
    (b"file,labels\nimages/img_00.png,caf\xe9\n", None, ["is not UTF-8 text"]),
])
def test_malformed_csv_files_are_refused_saying_what_was_expected(tmp_path, text, labels_txt,
                                                                   expected):
    message = _bad_case(tmp_path, text, labels_txt)
    for fragment in expected:
        assert fragment in message, message


def test_unreadable_images_and_missing_csv_are_refused(tmp_path):
    (tmp_path / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 20)
    _write_csv(tmp_path / "list.csv", [("broken.png", "cat")])
    with pytest.raises(ValueError, match="broken.png: is a corrupt image"):
        readers.load_source(f"csv:{tmp_path / 'list.csv'}")
    with pytest.raises(ValueError, match="is not a file: expected a CSV file"):
        readers.load_source(f"csv:{tmp_path / 'nowhere.csv'}")


def test_validation_csv_needs_the_same_classes(tmp_path, image_list):
    _write_csv(tmp_path / "val.csv", [("images/img_00.png", "cat"), ("images/img_01.png", "dog"),
                                      ("images/img_02.png", "bat")])
    with pytest.raises(ValueError, match="expected the same classes in the same order"):
        readers.open_training_data(f"csv:{image_list}", f"csv:{tmp_path / 'val.csv'}")


def test_single_label_objectives_refuse_multi_label_data(image_list):
    data = readers.open_training_data(f"csv:{image_list}", val_split=0.25)
    assert data.val_origin.startswith("25% of the CSV rows held out")
    with pytest.raises(ValueError, match="--set objective.kind=multilabel, not 'classify'"):
        get_objective(get_preset("digits_tiny")).check_data(data)
    multilabel = get_preset("digits_tiny").replace(objective={"kind": "multilabel"})
    get_objective(multilabel).check_data(data)


def test_pipeline_gives_multi_hot_targets_mixed_by_mixup_and_cutmix(image_list):
    source = readers.load_source(f"csv:{image_list}", val_split=0.0)
    evaluated = np.concatenate([labels for _, labels in evaluation.eval_dataset(source, 8, 5)])
    np.testing.assert_array_equal(evaluated, source.arrays[1])
    preset = get_preset("digits_tiny").replace(augment={"mixup_alpha": 0.8, "cutmix_alpha": 1.0})
    batches = pipeline.train_dataset(source, 8, 8, preset.replace(schedule={"epochs": 1}))
    for images, targets in batches:
        assert images.shape == (8, 8, 8, 3) and targets.shape == (8, 3)
        assert targets.dtype == np.float32
        assert np.all((targets >= 0) & (targets <= 1))
    _, raw_labels = evaluation.take_raw_images(source, 8, 4)
    assert raw_labels.shape == (4, 3) and raw_labels.dtype == np.float32


# --- scores and loss ----------------------------------------------------------------------------

def test_exact_map_and_f1_equal_scikit_learn():
    from sklearn.metrics import average_precision_score, f1_score

    rng = np.random.default_rng(0)
    targets = (rng.random((60, 6)) < 0.3).astype(np.float32)
    targets[:, 5] = 0  # a class without positives is left out
    logits = np.round(rng.normal(size=(60, 6)) + 1.5 * targets, 1)  # rounded: many ties
    mean, per_class = multilabel_scores.mean_average_precision(targets, logits)
    scored = targets.sum(axis=0) > 0
    assert np.isnan(per_class[5]) and scored.sum() == 5
    assert mean == pytest.approx(average_precision_score(targets[:, scored], logits[:, scored],
                                                         average="macro"), abs=1e-12)
    for index in np.flatnonzero(scored):
        assert per_class[index] == pytest.approx(
            average_precision_score(targets[:, index], logits[:, index]), abs=1e-12)
    micro, macro = multilabel_scores.f1_scores(targets, logits)
    predicted = (1 / (1 + np.exp(-logits)) > 0.5).astype(int)
    assert micro == pytest.approx(f1_score(targets, predicted, average="micro"))
    assert macro == pytest.approx(f1_score(targets, predicted, average="macro",
                                           zero_division=np.nan))
    assert multilabel_scores.average_precision(np.array([1, 0, 1, 0]), np.array([4, 3, 2, 1])) == \
        pytest.approx((1 + 2 / 3) / 2)


def test_keras_metrics_follow_the_exact_scores():
    rng = np.random.default_rng(1)
    targets = (rng.random((40, 4)) < 0.4).astype(np.float32)
    logits = (rng.normal(size=(40, 4)) + 2 * targets).astype(np.float32)
    results = {}
    for metric in multilabel.make_metrics(4):
        metric.update_state(targets, logits)
        results[metric.name] = float(metric.result())
    exact = multilabel_scores.report(targets, logits)
    assert results["f1_micro"] == pytest.approx(exact["f1_micro"], abs=1e-5)
    assert results["f1_macro"] == pytest.approx(exact["f1_macro"], abs=1e-5)
    assert results["pr_auc"] == pytest.approx(exact["mAP"], abs=0.05)  # binned
    assert results["cross_entropy"] == pytest.approx(exact["cross_entropy"], abs=1e-5)


def test_label_smoothing_is_timms():
    targets = np.array([[1.0, 0.0, 0.0, 1.0]], np.float32)
    logits = np.array([[2.0, -1.0, 0.5, -3.0]], np.float32)
    loss = multilabel.SigmoidCrossEntropy(label_smoothing=0.2)
    smoothed = targets * 0.8 + 0.2 / 4
    expected = np.mean(np.logaddexp(0, logits) - smoothed * logits)
    assert float(loss(targets, logits)) == pytest.approx(expected, rel=1e-5)
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert restored.label_smoothing == 0.2


def test_export_graph_takes_the_activation_and_refuses_a_conflicting_one(tiny_config):
    import vit_keras
    from vit_keras.export import graph

    logits_model = vit_keras.VisionTransformer(tiny_config)
    assert graph.split_activation(logits_model, "sigmoid")[1] is keras.activations.sigmoid
    assert graph.split_activation(logits_model)[1] is keras.activations.softmax
    softmax_model = vit_keras.VisionTransformer(tiny_config, classifier_activation="softmax")
    with pytest.raises(ValueError, match="ends in the activation 'softmax', but 'sigmoid'"):
        graph.split_activation(softmax_model, "sigmoid")


# --- a multilabel run, its exports, predict and evaluate -------------------------------------

def _sigmoid(logits):
    return 1 / (1 + np.exp(-np.asarray(logits, np.float64)))


@pytest.mark.slow
def test_multilabel_run_predict_export_and_evaluate(tmp_path, image_list, capsys):
    from vit_app.inference import classifier

    names = [f"images/img_{index:02d}.png" for index in range(24)]
    val_csv = _write_csv(tmp_path / "val.csv", [(name, _labels_of(index))
                                                 for index, name in enumerate(names[::3])])
    preset = get_preset("digits_tiny").replace(
        data={"train": f"csv:{image_list}", "val": f"csv:{val_csv}"},
        objective={"kind": "multilabel", "label_smoothing": 0.1},
        schedule={"epochs": 2, "batch_size": 8, "warmup_epochs": 0}, loop={"mixed_precision": ""},
        augment={"translate": 0.0, "zoom": 0.0, "mixup_alpha": 0.5}, model=TINY_MODEL)
    output = tmp_path / "run"
    run.train(preset, output=str(output), strategy="default", export=False, inspect=False)
    table = capsys.readouterr().out
    assert "mAP (val/test)" in table and "F1 micro / macro" in table and "top-1" not in table
    metrics = json.loads((output / "metrics.json").read_text())
    for key in ("val_mAP", "val_f1_micro", "val_f1_macro", "val_pr_auc", "val_cross_entropy"):
        assert 0 <= metrics[key] <= 1 or key == "val_cross_entropy", key
    assert metrics["val_classes_scored"] == 3 and "val_top1" not in metrics
    assert json.loads((output / "config.json").read_text())["activation"] == "sigmoid"

    # The exports, by a separate `vit export` (the run's config.json gives the activation).
    assert cli.main(["export", "--model", str(output / "model.keras"),
                     "--formats", "saved_model,tflite,onnx", "--latency-runs", "1"]) == 0
    report = json.loads((output / "export.json").read_text())
    assert report["activation"] == "sigmoid" and report["keras"]["accuracy"] is None
    assert report["keras"]["mAP"] == pytest.approx(metrics["val_mAP"], abs=1e-5)
    keras_model = keras.saving.load_model(str(output / "model.keras"), compile=False)
    images = evaluation.take_raw_images(readers.load_source(f"csv:{val_csv}"), 8, 5)[0]
    expected = _sigmoid(keras_model(scale(images)))
    for path in ("model.keras", "saved_model", "model.tflite", "model.onnx"):
        loaded = classifier.load(str(output / path))
        scores = loaded.predict(images)["probabilities"]
        assert loaded.activation == "sigmoid"
        assert np.all((scores >= 0) & (scores <= 1)), path
        assert not np.allclose(scores.sum(axis=1), 1.0, atol=1e-3), path
        np.testing.assert_allclose(scores, expected, atol=2e-4, err_msg=path)

    # An export elsewhere keeps its activation in export.json.
    elsewhere = tmp_path / "elsewhere"
    assert cli.main(["export", "--model", str(output / "model.keras"), "--output",
                     str(elsewhere), "--formats", "tflite", "--latency-runs", "1"]) == 0
    lite = classifier.load(str(elsewhere / "model.tflite"))
    np.testing.assert_allclose(lite.predict(images)["probabilities"], expected, atol=2e-4)

    capsys.readouterr()
    first = tmp_path / "images" / "img_00.png"
    status, predictions = vit_predict([str(first), "--model", str(output / "model.keras")],
                                      tmp_path)
    assert status == 0
    shown = {top["class"]: top["score"] for top in predictions[0]["top"]}
    assert set(shown) == set(CLASSES)
    assert sum(shown.values()) != pytest.approx(1.0, abs=1e-3)

    assert cli.main(["evaluate", "--model", str(output / "model.keras"), "--data",
                     f"csv:{val_csv}", "--output", str(tmp_path / "eval.json")]) == 0
    assert "mAP" in capsys.readouterr().out
    evaluated = json.loads((tmp_path / "eval.json").read_text())
    assert evaluated["mAP"] == pytest.approx(metrics["val_mAP"], abs=1e-5)
    assert evaluated["f1_micro"] == pytest.approx(metrics["val_f1_micro"], abs=1e-6)
    assert [row["name"] for row in evaluated["per_class"]] == list(CLASSES)


@pytest.mark.slow
def test_single_label_data_trains_multilabel(tmp_path):
    preset = get_preset("digits_tiny").replace(objective={"kind": "multilabel"},
                                               schedule={"epochs": 1, "batch_size": 64,
                                                         "warmup_epochs": 0},
                                               loop={"mixed_precision": ""},
                                               augment={"translate": 0.0,
                                                        "zoom": 0.0}).replace_model(**TINY_MODEL)
    run.train(preset, output=str(tmp_path), strategy="default", export=False,
              inspect=False)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["val_classes_scored"] == 10 and 0 <= metrics["val_mAP"] <= 1
