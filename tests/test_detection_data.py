"""Detection data as users have it: the same boxes written as COCO JSON, YOLO text and Pascal VOC
XML read back alike; broken annotation files named with the file and what is wrong; the
built-in digit boxes; and the crops and flips that move the boxes with the pixels."""

import json

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from training.tasks.detect import pipeline as detect_pipeline
from vit_app.data import specs
from vit_app.tasks.detect.data import box_files
from vit_app.tasks.detect.data import sources as detection
from vit_app.tasks.detect.data import box_layout

# Two images of 40x30 px (width x height): two boxes, then none.
BOXES = {"a": [(2, 3, 12, 20, 0), (20, 5, 38, 29, 1)], "b": []}
CLASSES = ["cat", "dog"]
WIDTH, HEIGHT = 40, 30


def _images(folder):
    folder.mkdir(parents=True, exist_ok=True)
    for stem in BOXES:
        Image.fromarray(np.full((HEIGHT, WIDTH, 3), 90, np.uint8)).save(folder / f"{stem}.jpg")


def write_coco(root):
    _images(root / "images")
    document = {"images": [{"id": i + 1, "file_name": f"{stem}.jpg", "width": WIDTH,
                            "height": HEIGHT} for i, stem in enumerate(BOXES)],
                "categories": [{"id": 7 + i, "name": name} for i, name in enumerate(CLASSES)],
                "annotations": []}
    for image_id, stem in enumerate(BOXES, 1):
        for x0, y0, x1, y1, class_id in BOXES[stem]:
            document["annotations"].append({
                "id": len(document["annotations"]) + 1, "image_id": image_id,
                "category_id": 7 + class_id, "bbox": [x0, y0, x1 - x0, y1 - y0],
                "iscrowd": 0, "area": (x1 - x0) * (y1 - y0)})
    (root / "_annotations.coco.json").write_text(json.dumps(document))
    return root


def write_yolo(root):
    _images(root / "images")
    (root / "labels").mkdir()
    (root / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    for stem, boxes in BOXES.items():
        lines = [f"{c} {(x0 + x1) / 2 / WIDTH} {(y0 + y1) / 2 / HEIGHT} {(x1 - x0) / WIDTH} "
                 f"{(y1 - y0) / HEIGHT}" for x0, y0, x1, y1, c in boxes]
        if lines:  # an image without objects has no label file
            (root / "labels" / f"{stem}.txt").write_text("\n".join(lines) + "\n")
    return root


def write_voc(root):
    _images(root / "JPEGImages")
    (root / "Annotations").mkdir()
    for stem, boxes in BOXES.items():
        objects = "".join(
            f"<object><name>{CLASSES[c]}</name><bndbox><xmin>{x0 + 1}</xmin><ymin>{y0 + 1}"
            f"</ymin><xmax>{x1}</xmax><ymax>{y1}</ymax></bndbox></object>"
            for x0, y0, x1, y1, c in boxes)
        (root / "Annotations" / f"{stem}.xml").write_text(
            f"<annotation><filename>{stem}.jpg</filename><size><width>{WIDTH}</width><height>"
            f"{HEIGHT}</height><depth>3</depth></size>{objects}</annotation>")
    return root


WRITERS = {"coco": write_coco, "yolo": write_yolo, "voc": write_voc}


@pytest.mark.parametrize("layout", sorted(WRITERS))
def test_each_format_reads_back_the_same_boxes(layout, tmp_path):
    root = WRITERS[layout](tmp_path / layout)
    assert box_layout(str(root)) == layout
    assert specs.spec_task(f"folder:{root}") == "detect"
    files, boxes, names = box_files.read_folder(str(root))
    assert names == CLASSES
    assert [name.rsplit("/", 1)[-1] for name in files] == ["a.jpg", "b.jpg"]
    assert boxes.shape == (2, 2, 5)
    np.testing.assert_allclose(boxes[0], np.asarray(BOXES["a"], np.float32), atol=1e-4)
    assert (boxes[1, :, 4] == -1).all()   # no objects: padding only


def test_a_folder_source_holds_out_a_seeded_fraction(tmp_path):
    root = write_yolo(tmp_path / "yolo")
    data = detection.open_detection_data(f"folder:{root}", val_split=0.5, seed=0)
    assert data.train.boxes and data.train.num_examples == 1 and data.val.num_examples == 1
    assert data.train.class_names == CLASSES


def _problems(root):
    with pytest.raises(ValueError) as raised:
        box_files.read_folder(str(root))
    return str(raised.value)


def test_broken_coco_files_name_each_problem(tmp_path):
    root = write_coco(tmp_path / "coco")
    document = json.loads((root / "_annotations.coco.json").read_text())
    document["annotations"][0]["bbox"] = [30, 5, 20, 10]          # reaches x = 50 > 40
    document["annotations"][1]["category_id"] = 99                 # unknown class
    document["images"].append({"id": 3, "file_name": "gone.jpg", "width": 5, "height": 5})
    (root / "_annotations.coco.json").write_text(json.dumps(document))
    message = _problems(root)
    assert "3 problems in the COCO boxes" in message
    assert "box (30, 5, 50, 15) reaches outside the image of 40x30 px" in message
    assert "category_id 99 is not in 'categories' ([7, 8])" in message
    assert "gone.jpg: is named by an annotation but does not exist" in message


def test_a_json_file_that_is_not_coco_is_named(tmp_path):
    root = tmp_path / "coco"
    root.mkdir()
    (root / "boxes.json").write_text('{"images": 3}')
    with pytest.raises(ValueError, match=r"boxes.json: not a COCO detection file"):
        box_files.read_folder(str(root))


def test_broken_yolo_files_name_the_line(tmp_path):
    root = write_yolo(tmp_path / "yolo")
    (root / "labels" / "a.txt").write_text("0 0.5 0.5 0.2\n5 0.5 0.5 0.2 0.2\n0 1.2 0.5 0.4 0.4\n")
    (root / "labels" / "c.txt").write_text("0 0.5 0.5 0.2 0.2\n")
    message = _problems(root)
    assert "a.txt:1: expected 'class cx cy w h' (5 numbers), got '0 0.5 0.5 0.2'" in message
    assert "a.txt:2: class 5 is not one of the 2 named" in message
    assert "reaches outside the image" in message
    assert "c.txt: has no image c.* in" in message


def test_yolo_class_names_come_from_data_yaml(tmp_path):
    root = write_yolo(tmp_path / "yolo")
    (root / "classes.txt").unlink()
    (root / "data.yaml").write_text("names:\n  0: cat\n  1: dog\n")
    assert box_files.read_folder(str(root))[2] == CLASSES
    (root / "data.yaml").unlink()
    with pytest.raises(ValueError, match="YOLO labels need their class names"):
        box_files.read_folder(str(root))


def test_broken_voc_files_name_the_file(tmp_path):
    root = write_voc(tmp_path / "voc")
    (root / "Annotations" / "b.xml").write_text("<annotation><object>")
    (root / "classes.txt").write_text("cat\n")   # 'dog' is not listed
    message = _problems(root)
    assert "b.xml: does not parse as VOC XML" in message
    assert "a.xml: class 'dog' is not in" in message


def test_a_size_stated_wrongly_and_an_unreadable_image_are_named(tmp_path):
    root = write_voc(tmp_path / "voc")
    xml = root / "Annotations" / "a.xml"
    xml.write_text(xml.read_text().replace("<width>40</width>", "<width>41</width>"))
    (root / "JPEGImages" / "b.jpg").write_bytes(b"not an image")
    message = _problems(root)
    assert "a.jpg: is 40x30 px, its annotation says 41x30" in message
    assert "b.jpg:" in message


def test_a_folder_without_boxes_names_the_layouts(tmp_path):
    with pytest.raises(ValueError, match="no boxes found. Expected one of: a COCO JSON file"):
        specs.check_spec(f"folder:{tmp_path}", task="detect")
    specs.check_spec("digit-boxes", task="detect")
    with pytest.raises(ValueError, match="digit-boxes is detection data.*--task detect"):
        specs.check_spec("digit-boxes")


def test_vit_export_reads_a_detectors_data_as_its_run_read_it(tmp_path):
    """`vit export` of a detector calibrates on the run's training folder (YOLO here) and
    checks on its --val-data (VOC): images resized whole, targets (class, centre, size) in
    fractions of the image, -1 for no object; the task's inference part reads them."""
    from vit_app.inference.export import data as export_data
    from vit_app.inference import inference_task as tasks

    train, val = write_yolo(tmp_path / "train"), write_voc(tmp_path / "val")
    got = export_data.load(f"folder:{train}", (32, 32), 5, 5,
                           {"val_data": f"folder:{val}", "val_split": 0.1, "seed": 0},
                           task=tasks.get("detect"))
    assert got.calibration.shape == got.eval_images.shape == (2, 32, 32, 3)
    (x0, y0, x1, y1, class_id), _ = BOXES["a"]
    np.testing.assert_allclose(got.eval_labels[0, 0], [
        class_id, (x0 + x1) / 2 / WIDTH, (y0 + y1) / 2 / HEIGHT, (x1 - x0) / WIDTH,
        (y1 - y0) / HEIGHT], atol=1e-6)
    assert (got.eval_labels[1, :, 0] == -1).all()   # the image without boxes
    with pytest.raises(ValueError, match="a data spec is read by the model's task"):
        export_data.load(f"folder:{train}", (32, 32))


def test_evaluating_on_the_digit_boxes_reads_their_validation_scenes():
    from vit_app.data import training_data

    assert training_data.evaluation_subset("digit-boxes") == "val"
    assert detection.load_detection_source("digit-boxes", "val").num_examples == 400


def test_the_built_in_digit_boxes_bound_their_ink():
    scenes, boxes = detection.digit_box_arrays("test")
    assert scenes.shape == (400, 64, 64, 3) and boxes.shape == (400, 4, 5)
    present = boxes[..., 4] >= 0
    assert present.sum(axis=1).min() >= 1
    x0, y0, x1, y1, _ = boxes[0][present[0]][0]
    inside = scenes[0, int(y0):int(y1), int(x0):int(x1)].astype(int)
    background = scenes[0, 0, 0].astype(int)
    assert np.abs(inside - background).max() > 60   # ink in the box
    # The scenes are the same every time.
    np.testing.assert_array_equal(detection.digit_box_arrays("test")[1], boxes)


def test_a_crop_and_a_flip_move_the_boxes_with_the_pixels():
    image = np.zeros((60, 80, 3), np.float32)
    image[10:30, 50:70] = 255.0          # one white box
    boxes = tf.constant([[50, 10, 70, 30, 1], [-1, -1, -1, -1, -1]], tf.float32)
    for seed in range(20):
        cropped, moved = detect_pipeline.random_crop(tf.constant(image), boxes, 0.3,
                                                     tf.constant([seed, 0], tf.int64))
        flipped, moved = detect_pipeline.flip_boxes(cropped, moved, tf.constant([seed, 1],
                                                                                tf.int64))
        flipped, moved = flipped.numpy(), moved.numpy()
        assert moved[1, 4] == -1
        if moved[0, 4] < 0:   # less than half of the box stayed in the crop
            continue
        x0, y0, x1, y1 = np.round(moved[0, :4]).astype(int)
        assert (flipped[y0:y1, x0:x1] == 255).all()
        assert flipped.sum() == pytest.approx(255.0 * 3 * (x1 - x0) * (y1 - y0))
