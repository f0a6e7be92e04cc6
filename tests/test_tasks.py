"""A task added by the recipe of docs/architecture.md ("Add a task"): its own modules (here,
this file) and one line in `vit_keras.tasks.TASKS`. Nothing else changes, and `vit train
--task`, the model file, `vit predict`, `vit serve` and the SavedModel export all take it up.

The toy task, 'toptwo', is a classifier whose answers are its two best classes: a head of its
own (a `VisionTransformer` subclass recording the task), an export contract adding a
`top_two` output and signature, an inference part writing and serving the two classes, and
an objective training it like a classifier.
"""

import json
import os

import httpx
import keras
import numpy as np
import pytest
from keras import ops
from localhost import served
from PIL import Image

from training.objective import float32_twin
from training.tasks.classify.objective import Classification
from vit import cli
from vit_app.data import specs
from vit_app.data import training_data
from vit_app.tasks.classify.data import readers
from vit_app.inference import classifier
from vit_app.inference import inference_task as inference_tasks
from vit_app.inference.server import create_app
from vit_app.tasks.classify.inference import Classify
from vit_keras import VisionTransformer, tasks

TOY = "toptwo"
TINY = ["--set", "model.image_size=8", "--set", "model.patch_size=4",
        "--set", "model.hidden_size=16", "--set", "model.mlp_dim=32",
        "--set", "model.num_heads=2", "--set", "model.num_layers=1"]


# --- the task's head and library contract ------------------------------------------------------

@keras.saving.register_keras_serializable(package="toptwo_task")
class TopTwoViT(VisionTransformer):
    """The toy task's model: the classifier, recording its own task."""

    vit_task = TOY


def _top_two(logits) -> dict:
    return {"top_two": ops.cast(ops.flip(ops.argsort(logits, axis=-1), axis=-1)[:, :2], "int32")}


CONTRACT = tasks.TaskContract(TOY, derived_outputs=_top_two, derived_endpoint="serve_top_two")


# --- its inference part --------------------------------------------------------------------------

class TopTwo(Classify):
    """Writes and serves each image's two best classes, by name."""

    name = TOY

    def predict(self, model, readable, args):
        rows, _ = super().predict(model, readable, args)
        rows = [dict(row, top=row["top"][:2]) for row in rows]
        return rows, "\n".join(f"{row['file']}: {row['top'][0][0]} then {row['top'][1][0]}"
                               for row in rows)

    def answer(self, model, kind, inputs, outputs):
        order = np.argsort(-outputs["logits"], axis=-1, kind="stable")[:, :2]
        return {"top_two": order.astype(np.int32)}

    def serving_outputs(self, height, width, num_classes):
        return {"top_two": ("DT_INT32", [-1, 2])}


INFERENCE = TopTwo()


# --- its training objective ----------------------------------------------------------------------

class TopTwoObjective(Classification):
    """Trains the toy model as a classifier."""

    name = TOY

    def build(self, config):
        return TopTwoViT(config)

    def classifier(self, model, config):
        return float32_twin(model, lambda: TopTwoViT(config))


# --- the one registration line, and what it gives -----------------------------------------------

@pytest.fixture
def registered(monkeypatch):
    module = __name__
    monkeypatch.setitem(tasks.TASKS, TOY, tasks.TaskParts(
        head=f"{module}:CONTRACT", inference=f"{module}:INFERENCE",
        objective=f"{module}:TopTwoObjective"))


def test_a_task_registered_by_one_line_trains_predicts_and_serves(registered, tmp_path,
                                                                  capsys):
    output = tmp_path / "run"
    assert cli.main(["train", "--task", TOY, *TINY, "--epochs", "1", "--no-export",
                     "--no-inspect", "--output", str(output)]) == 0
    config = json.loads((output / "config.json").read_text())
    assert config["task"] == TOY and config["preset"]["objective"]["kind"] == TOY
    model = keras.saving.load_model(output / "model.keras", safe_mode=True)
    assert isinstance(model, TopTwoViT) and tasks.task_of(model) == TOY

    image = tmp_path / "seven.png"
    Image.fromarray(np.full((8, 8, 3), 200, np.uint8)).save(image)
    capsys.readouterr()
    assert cli.main(["predict", str(image), "--model", str(output / "model.keras")]) == 0
    printed = capsys.readouterr().out
    assert f"{image}: " in printed and " then " in printed, printed

    loaded = classifier.load(str(output / "model.keras"))
    assert inference_tasks.get(loaded.task) is INFERENCE
    with served(create_app(loaded, "toy")) as url, httpx.Client(base_url=url) as client:
        assert client.get("/api/model").json()["task"] == TOY
        answer = client.post("/v1/models/toy:predict",
                             json={"instances": np.zeros((1, 8, 8, 3)).tolist()}).json()
        assert set(answer["predictions"][0]) == {"top_two"}


@pytest.mark.slow  # a SavedModel export (5-8 s); the task's other parts run in the default tier
def test_a_registered_tasks_contract_adds_its_serving_signature(registered, tmp_path):
    from vit_keras import ViTConfig, export
    import tensorflow as tf

    model = TopTwoViT(ViTConfig(image_size=8, patch_size=4, hidden_size=16, mlp_dim=32,
                                num_heads=2, num_layers=1, num_classes=3))
    path = export.saved_model(model, str(tmp_path / "saved_model"))
    signatures = tf.saved_model.load(path).signatures
    assert "serve_top_two" in signatures
    top_two = signatures["serve_top_two"](images=tf.zeros((1, 8, 8, 3)))["top_two"]
    assert top_two.shape == (1, 2)


def test_the_help_lists_what_each_registered_task_learns_and_reads(registered, capsys):
    """`vit train --help` and `vit evaluate --help` take each task's words from its line."""
    parts = tasks.TASKS[TOY]
    for command in ("train", "evaluate"):
        with pytest.raises(SystemExit):
            cli.build_parser().parse_args([command, "--help"])
        printed = _unwrapped(capsys.readouterr().out)  # argparse wraps at hyphens too
        assert _unwrapped(f"{TOY}: {parts.data}") in printed or _unwrapped(
            f"'{TOY}' ({parts.summary}, on {parts.data})") in printed, printed
        for name in ("segment", "detect"):
            assert _unwrapped(tasks.TASKS[name].data) in printed, (command, name)


def _unwrapped(text: str) -> str:
    return "".join(text.split())


def test_an_unregistered_task_is_named_with_the_registry():
    with pytest.raises(ValueError, match="unknown task 'toptwo'.*vit_keras.tasks.TASKS"):
        tasks.contract(TOY)


# --- a task's data: its own module, asked by the shared spec code ------------------------------

PAIRS_FILE = "pairs.txt"


def _holds_pairs(path: str) -> bool:
    return os.path.isfile(os.path.join(path, PAIRS_FILE))


def _check_pairs(kind: str, argument: str, path: str, min_classes: int) -> None:
    if kind != "toy-pairs" and not _holds_pairs(path):
        raise ValueError(f"pair data {argument!r}: expected {argument}/{PAIRS_FILE}")


# The toy data task's `TaskData` (its `TaskParts.specs` names this module).
DATA = specs.TaskData(noun="pair", labels="pairs", built_in="toy-pairs", check=_check_pairs,
                      recognises=_holds_pairs)


def test_a_tasks_data_is_its_own_and_the_shared_spec_code_asks_it(monkeypatch, tmp_path):
    """A task registered with its own data module: its built-in set parses, its folders are
    recognised as its data, its check answers a wrong spec, and classification refuses its
    data by name, with no line of the shared data code naming it."""
    monkeypatch.setitem(tasks.TASKS, "pairs", tasks.TaskParts(
        head=f"{__name__}:CONTRACT", inference=f"{__name__}:INFERENCE",
        objective=f"{__name__}:TopTwoObjective", specs=__name__))
    folder = tmp_path / "pairs"
    folder.mkdir()
    (folder / PAIRS_FILE).write_text("a.png b.png\n")
    assert specs.parse_spec("toy-pairs") == ("toy-pairs", "")
    assert specs.built_in_sets()["toy-pairs"] == "pairs"
    assert specs.spec_task("toy-pairs") == specs.spec_task(f"folder:{folder}") == "pairs"
    assert specs.spec_task(f"folder:{tmp_path}") == "classify"  # no task claims it
    assert training_data.evaluation_subset("toy-pairs") == "val"
    specs.check_spec(f"folder:{folder}", task="pairs")
    specs.check_spec("toy-pairs", task="pairs")
    with pytest.raises(ValueError, match=f"pair data .*: expected .*/{PAIRS_FILE}"):
        specs.check_spec(f"folder:{tmp_path}", task="pairs")
    refused = r"is pair data \(images with pairs, not classes\): train it with --task pairs"
    for spec in ("toy-pairs", f"folder:{folder}"):
        with pytest.raises(ValueError, match=refused):
            specs.check_spec(spec)
    with pytest.raises(ValueError, match=refused):
        readers.load_source("toy-pairs")
    with pytest.raises(ValueError, match="expected 'digits', 'digit-scenes', 'digit-boxes', "
                                         "'moving-sprites', 'toy-pairs', 'folder:PATH'"):
        specs.parse_spec("nothing:here")


def test_a_task_reading_anothers_data_shares_it(registered):
    """The toy classifier names no data module of its own: it reads classification's, and
    neither refuses the other's specs."""
    assert specs.built_in_sets()["digits"] == "classify"
    specs.check_spec("digits", task=TOY)
    specs.refuse_other_tasks_data("digits", TOY, model="toy.keras")


# --- the encoder apart from a task's head ---------------------------------------------------

@pytest.mark.parametrize("model_class", ["ViTSegmenter", "ViTDetector"])
def test_a_task_model_keeps_the_encoder_and_none_of_the_classifiers_head(model_class):
    """A config carrying a classification head (a pre-logits layer, a projection, a head bias)
    builds a task's model on its encoder alone: the model and its file record none of them,
    while the classifier built from the same config keeps its head."""
    import vit_keras
    from vit_keras import ViTConfig
    from vit_keras.config import CLASSIFIER_HEAD_FIELDS

    config = ViTConfig(image_size=8, patch_size=4, hidden_size=16, mlp_dim=32, num_heads=2,
                       num_layers=1, num_classes=3, representation_size=8, projection_size=8,
                       head_bias_init=-1.0)
    head = {"ViTDetector": {"num_queries": 4, "decoder_layers": 1, "decoder_width": 16}}
    model = getattr(vit_keras, model_class)(config, **head.get(model_class, {}))
    assert model.config == config.encoder() and model.config.num_classes == 3
    assert all(model.get_config()["config"][name] == getattr(ViTConfig(), name)
               for name in CLASSIFIER_HEAD_FIELDS)
    assert type(model).from_config(model.get_config()).config == model.config
    assert VisionTransformer(config).config.representation_size == 8
