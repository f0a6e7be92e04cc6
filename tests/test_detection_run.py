"""`vit train --task detect` on a folder of the user's boxes (YOLO labels to train on, Pascal
VOC XML to validate on), and its model in use: `vit predict` writes boxes and drawn images,
`vit evaluate` gives COCO's mAP, `vit serve` answers boxes and its page gets them to draw.
The default tier's run is a few epochs, for the plumbing; the slow tier trains until the
squares are found, exports every format and checks each file's boxes against Keras'."""

import base64
import contextlib
import csv
import io
import json
import pathlib
import re

import numpy as np
import pytest
from PIL import Image

from vit_keras import ViTConfig
from vit_keras.tasks.detect import boxes as detection_boxes

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

SIDE = 32
CLASSES = ["red", "green"]
COLOURS = [(230, 40, 40), (40, 220, 60)]


def _scene(rng):
    """A dark 32x32 image with one or two squares (red or green, 9-14 px), apart; their boxes
    (x0, y0, x1, y1, class)."""
    image = np.full((SIDE, SIDE, 3), 30, np.uint8)
    boxes = []
    for _ in range(int(rng.integers(1, 3))):
        side = int(rng.integers(9, 15))
        x0, y0 = (int(value) for value in rng.integers(0, SIDE - side + 1, size=2))
        if any(x0 < b[2] + 1 and b[0] < x0 + side + 1 and y0 < b[3] + 1 and b[1] < y0 + side + 1
               for b in boxes):
            continue
        class_id = int(rng.integers(0, 2))
        image[y0:y0 + side, x0:x0 + side] = COLOURS[class_id]
        boxes.append((x0, y0, x0 + side, y0 + side, class_id))
    return image, boxes


def write_yolo_squares(root, count, seed):
    rng = np.random.default_rng(seed)
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    (root / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    for index in range(count):
        image, boxes = _scene(rng)
        Image.fromarray(image).save(root / "images" / f"{index}.png")
        (root / "labels" / f"{index}.txt").write_text("".join(
            f"{c} {(x0 + x1) / 2 / SIDE} {(y0 + y1) / 2 / SIDE} {(x1 - x0) / SIDE} "
            f"{(y1 - y0) / SIDE}\n" for x0, y0, x1, y1, c in boxes))
    return root


def write_voc_squares(root, count, seed):
    rng = np.random.default_rng(seed)
    (root / "JPEGImages").mkdir(parents=True)
    (root / "Annotations").mkdir()
    (root / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    for index in range(count):
        image, boxes = _scene(rng)
        Image.fromarray(image).save(root / "JPEGImages" / f"{index}.png")
        objects = "".join(f"<object><name>{CLASSES[c]}</name><bndbox><xmin>{x0 + 1}</xmin>"
                          f"<ymin>{y0 + 1}</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox>"
                          "</object>" for x0, y0, x1, y1, c in boxes)
        (root / "Annotations" / f"{index}.xml").write_text(f"<annotation>{objects}</annotation>")
    return root


TINY = ["--set", "model.num_layers=2", "--set", "model.hidden_size=32", "--set",
        "model.mlp_dim=64", "--set", "detect.width=32", "--set",
        "detect.layers=2", "--set", "detect.queries=6"]
# The plumbing run's encoder and decoder have a block each: its first epoch is mostly the
# tracing of the training step, which grows with the blocks (11.7 -> 8.6 s for the run).
PLUMBING = [*TINY, "--set", "model.num_layers=1", "--set", "detect.layers=1"]


# The default tier's run checks the plumbing (a few epochs); the slow tier's trains long
# enough to find the squares (mAP@0.5 0.9 measured at 40 epochs) and exports every format.
PLUMBING_EPOCHS, QUALITY_EPOCHS = 4, 40


def _train(root, export: bool, epochs: int = QUALITY_EPOCHS, images: int = 96,
           allowed=(0,), model=TINY) -> int:
    """Trains on `images` squares (YOLO) validated on 16 (VOC); the exit status, one of
    `allowed`."""
    from vit import cli

    train = write_yolo_squares(root / "train", images, seed=0)
    val = write_voc_squares(root / "val", 16, seed=1)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        status = cli.main(["train", "--task", "detect", "--data", f"folder:{train}",
                           "--val-data", f"folder:{val}", "--epochs", str(epochs), *model,
                           *([] if export else ["--no-export"]), "--no-inspect",
                           "--output", str(root / "run")])
    (root / "printed.txt").write_text(printed.getvalue())
    assert status in allowed, printed.getvalue()[-3000:]
    return status


@pytest.fixture(scope="module")
def squares_run():
    from artifacts import shared

    return shared("detector-squares", {"images": 48, "epochs": PLUMBING_EPOCHS, "tiny": PLUMBING},
                  lambda root: _train(root, export=False, epochs=PLUMBING_EPOCHS, images=48,
                                      model=PLUMBING))


def test_a_folder_of_yolo_boxes_trains_a_detector_scored_by_coco_map(squares_run):
    printed = (squares_run / "printed.txt").read_text()
    assert "objective detect" in printed and "| mAP (val/test)" in printed
    assert re.search(rf"epoch +{PLUMBING_EPOCHS}/{PLUMBING_EPOCHS} +loss [\d.]+ +val_loss "
                     r"[\d.]+ +val_box_f1 [\d.]+ +lr", printed)
    config = json.loads((squares_run / "run" / "config.json").read_text())
    assert config["task"] == "detect"
    metrics = json.loads((squares_run / "run" / "metrics.json").read_text())
    assert 0 <= metrics["val_mAP"] <= metrics["val_mAP50"] <= 1, metrics
    assert set(metrics["val_class_ap"]) == set(CLASSES) and metrics["val_objects"] > 16


def test_a_detector_run_reports_the_constant_box_and_says_when_it_does_not_beat_it(squares_run):
    """The table compares the run with a box at the training boxes' mean in every image; a run
    that does not beat it on mAP and mAP@0.5 says so on its last line (its files still
    written)."""
    printed = (squares_run / "printed.txt").read_text()
    metrics = json.loads((squares_run / "run" / "metrics.json").read_text())
    constant = {key: metrics[f"val_constant_box_{key}"] for key in ("mAP", "mAP50")}
    assert all(0 <= value <= 1 for value in constant.values()), metrics
    beats = all(metrics[f"val_{key}"] > value for key, value in constant.items())
    assert metrics["val_beats_constant_box"] is beats
    row = re.search(r"\| constant box \(val/test\) +\| mAP ([\d.]+)% .*: (beaten|NOT BEATEN)",
                    printed)
    assert row and float(row.group(1)) == pytest.approx(100 * constant["mAP"], abs=0.01), printed
    assert row.group(2) == ("beaten" if beats else "NOT BEATEN")
    last = printed.strip().splitlines()[-1]
    assert last.startswith("WARNING: the detector does not beat a constant box") is not beats
    assert (squares_run / "run" / "model.keras").exists()


def test_the_run_fits_its_anchors_to_the_training_boxes_and_says_so(squares_run):
    """The run's anchors are what `anchor_for_boxes` makes of the training labels, on the
    'fitted to the data' line when they move (squares of 9-14 px on 32 px: they do not)."""
    from training.tasks.detect.objective import anchor_for_boxes

    fractions = np.array([[float(value) for value in line.split()]
                          for label in (squares_run / "train" / "labels").glob("*.txt")
                          for line in label.read_text().splitlines()])
    saved = json.loads((squares_run / "run" / "config.json").read_text())
    choices, why = anchor_for_boxes(fractions, ViTConfig.from_dict(saved["model"]))
    assert (saved["preset"]["detect"]["anchor_width"],
            saved["preset"]["detect"]["anchor_height"]) == (
        choices.get("detect.anchor_width", 0.0), choices.get("detect.anchor_height", 0.0))
    printed = (squares_run / "printed.txt").read_text()
    assert ("detect.anchor_width" in printed) is bool(choices) and (why in printed)


def _boxes_within(rows, width, height):
    for row in rows:
        x0, y0, x1, y1 = (float(row[key]) for key in ("x0", "y0", "x1", "y1"))
        assert 0 <= x0 <= x1 <= width and 0 <= y0 <= y1 <= height, row


def test_predict_writes_boxes_in_pixels_and_drawn_images(squares_run, tmp_path, capsys):
    from vit import cli

    image, _ = _scene(np.random.default_rng(5))
    big = tmp_path / "big.png"   # four times the training size: boxes scale with it
    Image.fromarray(image).resize((4 * SIDE, 4 * SIDE), Image.NEAREST).save(big)
    output = tmp_path / "boxes.csv"
    capsys.readouterr()
    assert cli.main(["predict", str(big), "--model", str(squares_run / "run" / "model.keras"),
                     "--output", str(output), "--drawn", str(tmp_path / "drawn"),
                     "--min-score", "0"]) == 0
    printed = capsys.readouterr().out
    assert str(big) in printed and "boxes drawn:" in printed
    rows = list(csv.DictReader(output.open()))
    assert list(rows[0]) == ["file", "class", "score", "x0", "y0", "x1", "y1"]
    found = [row for row in rows if row["class"]]
    assert found and {row["class"] for row in found} <= set(CLASSES), rows
    _boxes_within(found, 4 * SIDE, 4 * SIDE)
    drawn = Image.open(tmp_path / "drawn" / "big_boxes.png")
    assert drawn.size == (4 * SIDE, 4 * SIDE)
    assert (np.asarray(drawn) != np.asarray(Image.open(big).convert("RGB"))).any()

    # Again: the drawn copy exists, so nothing is written; --no-drawn writes none at all.
    again = ["predict", str(big), "--model", str(squares_run / "run" / "model.keras"),
             "--drawn", str(tmp_path / "drawn")]
    assert cli.main(again) == 2
    assert "--drawn" in capsys.readouterr().err
    assert cli.main([*again[:-2], "--no-drawn", "--drawn", str(tmp_path / "none")]) == 0
    assert "boxes drawn:" not in capsys.readouterr().out and not (tmp_path / "none").exists()


def test_evaluate_scores_a_folder_of_voc_boxes(squares_run, tmp_path, capsys):
    from vit import cli

    val = write_voc_squares(tmp_path / "more", 8, seed=9)
    capsys.readouterr()
    output = tmp_path / "scores.json"
    assert cli.main(["evaluate", "--model", str(squares_run / "run" / "model.keras"),
                     "--data", f"folder:{val}", "--output", str(output)]) == 0
    printed = capsys.readouterr().out
    assert "mAP@0.5" in printed and "red" in printed and "green" in printed
    scores = json.loads(output.read_text())
    assert scores["images"] == 8 and 0 <= scores["mAP"] <= 1


def write_voc_fixed_squares(root, count):
    """`count` VOC images, each with one red square at the same place: a constant box finds
    every one."""
    (root / "JPEGImages").mkdir(parents=True)
    (root / "Annotations").mkdir()
    (root / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    image = np.full((SIDE, SIDE, 3), 30, np.uint8)
    image[10:22, 8:20] = COLOURS[0]
    for index in range(count):
        Image.fromarray(image).save(root / "JPEGImages" / f"{index}.png")
        (root / "Annotations" / f"{index}.xml").write_text(
            "<annotation><object><name>red</name><bndbox><xmin>9</xmin><ymin>11</ymin>"
            "<xmax>20</xmax><ymax>22</ymax></bndbox></object></annotation>")
    return root


def test_evaluate_says_when_a_detector_does_not_beat_the_constant_box(squares_run, tmp_path,
                                                                      capsys):
    from vit import cli

    val = write_voc_fixed_squares(tmp_path / "fixed", 8)
    output = tmp_path / "scores.json"
    capsys.readouterr()
    assert cli.main(["evaluate", "--model", str(squares_run / "run" / "model.keras"),
                     "--data", f"folder:{val}", "--output", str(output)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert "constant box" in lines[-2] and "mAP 100.00%" in lines[-2], lines
    assert "NOT BEATEN" in lines[-2] and lines[-1].startswith(
        "WARNING: the detector does not beat a constant box (mAP"), lines
    scores = json.loads(output.read_text())
    assert scores["constant_box"] == {"mAP": 1.0, "mAP50": 1.0}
    assert scores["beats_constant_box"] is False


def test_serve_answers_boxes_and_the_page_gets_them_to_draw(squares_run):
    import httpx
    from localhost import served

    from vit_app.inference import classifier
    from vit_app.inference.server import create_app

    model = classifier.load(str(squares_run / "run" / "model.keras"))
    image, _ = _scene(np.random.default_rng(3))
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, "PNG")
    with served(create_app(model, "squares")) as url, \
            httpx.Client(base_url=url, timeout=60) as client:
        assert client.get("/api/model").json()["task"] == "detect"
        answer = client.post("/v1/models/squares:predict", json={
            "signature_name": "serve_bytes",
            "instances": [{"b64": base64.b64encode(buffer.getvalue()).decode()}]})
        assert answer.status_code == 200, answer.text
        prediction = answer.json()["predictions"][0]
        explained = client.post("/api/explain", content=buffer.getvalue(),
                                headers={"content-type": "image/png"}).json()
    assert np.asarray(prediction["scores"]).shape == (6, 2)
    assert np.asarray(prediction["boxes"]).shape == (6, 4)
    assert all({"label", "score", "box"} <= set(box) and box["score"] >= 0.3
               for box in explained["boxes"])
    assert all(0 <= value <= 1 for box in explained["boxes"] for value in box["box"])
    corners = detection_boxes.cxcywh_to_xyxy(np.asarray(prediction["boxes"]))
    assert corners.min() >= 0 and corners.max() <= 1 + 1e-6


@pytest.mark.slow
def test_every_exported_detector_repeats_keras_boxes(tmp_path):
    """40 epochs of 96 squares (mAP about 47% measured); the run's
    export of all six formats: each file repeats Keras' boxes. A file may still be refused for
    its mAP (an int8 file's low-scoring boxes), and then it is kept only under rejected/ and
    the run exits 3; how well the squares are found is not this test's to judge."""
    status = _train(tmp_path, export=True, allowed=(0, 3))
    report = json.loads((tmp_path / "run" / "export.json").read_text())
    assert report["agreement"] == "boxes" and status == (3 if report["failed"] else 0), report
    for name, entry in report["formats"].items():
        assert entry["keras_boxes"] >= 16, (name, entry)   # each image's best at least
        assert entry["box_agreement"] >= entry["min_agreement"], (name, entry)
        assert entry["passed"] or entry["failed_on"] == "scores", (name, entry)
        assert (tmp_path / "run" / (entry["file"] if entry["passed"]
                                    else entry["rejected_file"])).exists(), (name, entry)


# --- a folder of photographs with Pascal VOC boxes, as a new user brings it --------------------

def write_voc_photos(root, count, seed):
    """benchmarks/dense_sets.py's photographs of Chelsea the cat with Pascal VOC boxes."""
    from runs import dense_sets

    return pathlib.Path(dense_sets().make_voc_photos(str(root), count, seed).split(":", 1)[1])


@pytest.mark.slow
def test_a_folder_of_voc_photographs_trains_with_no_flags_and_reports_coco_map(tmp_path):
    """A new user's first run: `--data folder:train --val-data folder:val` (and here two
    epochs, a float file and an int8 one): the photo recipe, COCO's scores, each file judged.
    How well it finds the cats is `benchmarks/detection.py --only photo-boxes`' check; every
    format of a detector is test_every_exported_detector_repeats_keras_boxes'."""
    from vit import cli

    train = write_voc_photos(tmp_path / "train", 120, seed=0)
    val = write_voc_photos(tmp_path / "val", 24, seed=1)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
        status = cli.main(["train", "--task", "detect", "--data", f"folder:{train}",
                           "--val-data", f"folder:{val}", "--output", str(tmp_path / "run"),
                           "--epochs", "2", "--formats", "tflite,onnx_int8"])
    text = printed.getvalue()
    assert status in (0, 3), text[-3000:]
    assert "photographs of 150x200 px" in text and "flip False -> True" in text, text[:2000]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["val_class_ap"].keys() == {"cat"} and metrics["val_objects"] >= 24
    assert 0 <= metrics["val_mAP"] <= metrics["val_mAP50"] <= 1, metrics
    report = json.loads((tmp_path / "run" / "export.json").read_text())
    assert status == (3 if report["failed"] else 0)
    assert list(report["formats"]) == ["tflite", "onnx_int8"]
    # However early the model, a float file computing its outputs is never refused.
    assert report["formats"]["tflite"]["passed"], report["formats"]["tflite"]
