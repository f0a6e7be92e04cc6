"""The proof that a task is a folder: a task written from nothing but docs/architecture.md's
"Add a task" (`tests/data/count_task`: how many dots an image holds, with its own head,
objective, preset section and preset, data kind and built-in set, `vit predict` output and
flags, and page drawing; nothing of the classifier's) is copied into a temporary package
outside the project, registered by one line of `vit_keras.tasks.TASKS` (`LINE`), and every
`vit` command takes it: train, predict, evaluate, serve (REST and the page) and export.

The tests assert what the product promises of any task (the commands run, the files load, the
answers have the task's form, each exported file passes its own check), not how well a model
trained for seconds counts.
"""

import json
import os
import shutil
import sys

import browser
import httpx
import keras
import numpy as np
import pytest
from localhost import served
from PIL import Image

from vit import cli
from vit_app.inference import classifier
from vit_app.inference.server import create_app
from vit_keras import tasks

TASK_FILES = os.path.join(os.path.dirname(__file__), "data", "count_task")
# The one line that registers the task (as it would stand in `vit_keras/tasks/__init__.py`).
LINE = tasks.TaskParts(
    "count_task.model", "count_task.inference", "count_task.objective:Counting",
    specs="count_task.data", fewest_classes=1, preset="dots_count",
    preset_module="count_task.preset", summary="how many dots an image holds",
    data="dot-counts | folder:DIR with counts.csv", exports=("ViTCounter",),
    options="count_task.options", section="count_task.section:Count")
EPOCHS = ["--epochs", "2"]


@pytest.fixture(scope="module")
def count_task(tmp_path_factory):
    """The task's package in a temporary folder on `sys.path`, registered by `LINE`."""
    folder = tmp_path_factory.mktemp("elsewhere")
    shutil.copytree(TASK_FILES, folder / "count_task")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(folder))
        patch.setitem(tasks.TASKS, "count", LINE)
        yield folder
        for name in [name for name in sys.modules if name.split(".")[0] == "count_task"]:
            del sys.modules[name]


@pytest.fixture(scope="module")
def trained(count_task, tmp_path_factory):
    """`vit train --task count` (its own preset, two epochs) into a temporary folder."""
    output = tmp_path_factory.mktemp("count_run")
    assert cli.main(["train", "--task", "count", *EPOCHS, "--no-export", "--no-inspect",
                     "--output", str(output)]) == 0
    return output


def dots(path, number: int, side: int = 16) -> str:
    """A dark PNG with `number` white 3x3 dots in cells of a 4x4 grid."""
    image = np.full((side, side, 3), 20, np.uint8)
    for cell in range(number):
        top, left = 4 * (cell // 4), 4 * (cell % 4)
        image[top:top + 3, left:left + 3] = 255
    Image.fromarray(image).save(path)
    return str(path)


@pytest.fixture(scope="module")
def counted_folder(count_task):
    """A folder of counted images as a user brings one: PNGs and a counts.csv."""
    folder = count_task / "my_dots"
    folder.mkdir()
    rows = ["file,count"] + [f"{dots(folder / f'{i}.png', i % 4) and f'{i}.png'},{i % 4}"
                             for i in range(12)]
    (folder / "counts.csv").write_text("\n".join(rows) + "\n")
    return folder


def test_the_new_task_trains_from_its_own_preset_and_its_file_loads(trained):
    config = json.loads((trained / "config.json").read_text())
    assert config["task"] == "count" and config["preset"]["name"] == "dots_count"
    assert config["preset"]["objective"]["kind"] == "count"
    assert config["preset"]["count"] == {"loss": "huber", "flip": True}
    metrics = json.loads((trained / "metrics.json").read_text())
    assert 0.0 <= metrics["val_exact"] <= 1.0 and metrics["val_mae"] >= 0.0
    import vit_keras

    model = keras.saving.load_model(trained / "model.keras", safe_mode=True)
    assert isinstance(model, vit_keras.ViTCounter)  # exported from its line
    assert tasks.task_of(model) == "count" and model.output.shape == (None, 1)


def test_its_preset_section_and_its_data_are_its_own(count_task, counted_folder, tmp_path,
                                                     capsys):
    """`--set count.loss=...` is checked by its section; its folders are recognised as its
    data; a bad counts.csv is named before training; another task's data is refused."""
    assert cli.main(["train", "--task", "count", "--set", "count.loss=hinge", "--output",
                     str(tmp_path / "run")]) != 0
    assert "count.loss must be one of ('huber', 'mse')" in capsys.readouterr().err
    bad = tmp_path / "bad"
    shutil.copytree(counted_folder, bad)
    (bad / "counts.csv").write_text("file,count\n0.png,many\n")
    assert cli.main(["train", "--task", "count", "--data", f"folder:{bad}", *EPOCHS,
                     "--no-export", "--no-inspect", "--output", str(tmp_path / "run")]) != 0
    assert "counts.csv:2: expected 'file,count' with a number, got '0.png,many'" in \
        capsys.readouterr().err
    assert cli.main(["train", "--task", "count", "--data", "digits", "--output",
                     str(tmp_path / "run")]) != 0
    assert "digits is classification data (images with classes, not counts)" in \
        capsys.readouterr().err


def test_predict_writes_its_counts_with_its_own_flag(trained, tmp_path, capsys):
    images = [dots(tmp_path / f"{n}.png", n) for n in (1, 3)]
    table = tmp_path / "counts.csv"
    capsys.readouterr()
    assert cli.main(["predict", *images, "--model", str(trained / "model.keras"),
                     "--decimals", "1", "--output", str(table)]) == 0
    printed = capsys.readouterr().out
    for image in images:
        line = next(line for line in printed.splitlines() if line.startswith(image))
        count, estimate = line.split(": ")[1].split(" dots (estimate ")
        assert int(count) >= 0 and len(estimate.rstrip(")").split(".")[1]) == 1, line
    assert table.read_text().splitlines()[0] == "file,count,estimate"
    assert cli.main(["predict", images[0], "--model", str(trained / "model.keras"),
                     "--decimals", "-1"]) != 0
    assert "--decimals must be >= 0" in capsys.readouterr().err


def test_predict_help_shows_its_flags_in_its_own_group(count_task, capsys):
    with pytest.raises(SystemExit):
        cli.main(["predict", "--help"])
    printed = capsys.readouterr().out
    assert "--decimals" in printed and "A counter (`vit train --task count`)" in printed


def test_evaluate_scores_it_on_a_users_folder_and_its_built_in_set(trained, counted_folder,
                                                                   capsys):
    model = str(trained / "model.keras")
    for spec, images in ((f"folder:{counted_folder}", 12), ("dot-counts", 80)):
        output = trained / f"evaluate_{images}.json"
        assert cli.main(["evaluate", "--model", model, "--data", spec,
                         "--output", str(output)]) == 0
        results = json.loads(output.read_text())
        assert results["examples"] == images and 0 <= results["exact"] <= 1
        assert "exact counts" in capsys.readouterr().out


def test_serve_answers_its_counts_and_the_page_gets_its_drawing(trained, tmp_path):
    loaded = classifier.load(str(trained / "model.keras"))
    assert loaded.task == "count"
    with served(create_app(loaded, "dots")) as url, httpx.Client(base_url=url) as client:
        described = client.get("/api/model").json()
        assert described["task"] == "count" and described["drawing_script"] is True
        script = client.get("/static/task.js")
        assert script.status_code == 200 and "export function draw" in script.text
        assert script.headers["content-type"].startswith("text/javascript")
        answer = client.post("/v1/models/dots:predict",
                             json={"instances": np.zeros((2, 16, 16, 3)).tolist()}).json()
        assert [set(one) for one in answer["predictions"]] == [{"count", "estimate"}] * 2
        page = client.post("/api/explain", content=open(dots(tmp_path / "d.png", 2), "rb").read(),
                           headers={"Content-Type": "image/png"}).json()
        assert page["drawing"] == "count" and page["count"] >= 0
        assert page["top"][0]["label"] == f"{page['count']} dots"


@pytest.mark.slow  # a Chromium of its own (about 10 s); the REST answers run in the default tier
def test_the_page_draws_the_answer_with_the_tasks_own_script(trained, tmp_path):
    browser.skip_without_browser()
    loaded = classifier.load(str(trained / "model.keras"))
    image = dots(tmp_path / "three.png", 3)
    with served(create_app(loaded, "dots")) as url:
        driver = browser.start_chromium()
        try:
            assert browser.classify_in_page(driver, url, image) == "done"
            drawn = driver.find_element("tag name", "body").get_attribute("data-drawn")
            width, height, opaque, _ = driver.execute_script(browser.HEATMAP_PIXELS)
            errors = [entry for entry in driver.get_log("browser") if entry["level"] == "SEVERE"]
        finally:
            driver.quit()
    assert drawn and drawn.startswith("count ") and opaque > 0, (drawn, opaque)
    assert not errors, errors


@pytest.mark.slow  # a SavedModel and a TFLite file (about 15 s)
def test_export_writes_files_each_checked_by_the_tasks_own_gate(trained, tmp_path):
    output = tmp_path / "exported"
    assert cli.main(["export", "--model", str(trained / "model.keras"), "--formats",
                     "saved_model,tflite", "--data", "dot-counts", "--output",
                     str(output)]) == 0
    report = json.loads((output / "export.json").read_text())
    assert report["task"] == "count" and report["agreement"] == "counts"
    import tensorflow as tf

    for entry in report["formats"].values():
        assert entry["count_agreement"] == 1.0 and entry["passed"], entry
    signatures = tf.saved_model.load(str(output / "saved_model")).signatures
    counts = signatures["serve_count"](images=tf.zeros((1, 16, 16, 3)))["count"]
    assert counts.shape == (1,) and counts.dtype == tf.int32
