"""MobileViT through the `vit` commands: `--model mobilevit_xs` names the network (its
preprocessing, a size it takes), objectives that build on the ViT's tokens refuse it,
`build_classifier` loads timm's files and MobileViT `.keras` files with the head rule of the
ViT's weights, a bare timm file ranks a real photo as timm does under `vit predict`, and a
MobileViT file is predicted, evaluated, served, inspected and costed;
in the slow tier `vit train --model mobilevit_xxs` end to end: its float exports equal Keras,
its int8 files are built from the plain interpreter's operators, and a head fine-tuned from
its model.keras."""

import base64
import csv
import json
import os
import subprocess
import sys
import warnings

import httpx
import keras
import numpy as np
import pytest
from helpers import randomize_weights
from localhost import served
from mobilevit_reference import VECTORS, keys_of, seeded_state
from PIL import Image
from runs import vit_env
from safetensors.numpy import save_file
from weights_server import serving

import vit_keras
from training import finetune, objective, run
from training.presets import get_preset
from training.presets.command_line import resolve_preset
from vit import cli
from vit.commands import train as train_command
from vit_app.inference import classifier
from vit_app.inference.server import ServeOptions, create_app
from vit_keras import ViTConfig
from vit_keras.mobilevit.config import PREPROCESSING
from vit_keras.pretrained.references import check_weights_reference
from vit_keras.pretrained.labels import imagenet_classes

SIZE, CLASSES = 32, 10
PHOTO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "photo_coffee.jpg")


def _train_args(*argv):
    return cli.build_parser().parse_args(["train", *argv])


def test_the_model_option_names_the_network_its_preprocessing_and_a_size_it_takes():
    preset = resolve_preset(_train_args("--model", "mobilevit_xs"))
    assert preset.model.architecture == "mobilevit_xs"
    assert preset.data.preprocessing == PREPROCESSING[1]
    assert preset.model.image_hw == (32, 32)  # the digits preset's 16 px is under its 32
    preset = resolve_preset(_train_args("--model", "mobilevitv2_050.cvnets_in1k",
                                        "--image-size", "64"))
    assert (preset.model.architecture, preset.model.image_hw) == ("mobilevitv2_050", (64, 64))
    assert preset.data.preprocessing == PREPROCESSING[2]
    with pytest.raises(ValueError, match="builds on the ViT's patch tokens"):
        objective.get_objective(resolve_preset(_train_args("--task", "segment", "--model",
                                                           "mobilevit_xxs")))
    assert objective.get_objective(preset).name == "classify"


def test_pretrained_weights_are_timms_file_of_a_mobilevit_alone():
    """Checked before anything is imported: `--weights pretrained` names timm's file for a
    MobileViT; for a ViT it is no weight name."""
    check_weights_reference("pretrained", "mobilevit_xs.cvnets_in1k")
    train_command.check(_train_args("--model", "mobilevitv2_050", "--weights", "pretrained"))
    with pytest.raises(ValueError, match=r"\('pretrained' for a MobileViT\)"):
        check_weights_reference("pretrained", "B/16")
    with pytest.raises(ValueError, match="'pretrained' is no file"):
        train_command.check(_train_args("--weights", "pretrained"))


def test_the_architecture_field_is_checked_and_round_trips():
    config = ViTConfig(architecture="mobilevit_s", image_size=96, num_classes=3)
    assert ViTConfig.from_dict(config.to_dict()) == config
    assert "architecture" not in ViTConfig().to_dict()  # a ViT's files read as before
    with pytest.raises(ValueError, match="architecture must be 'vit' or a MobileViT"):
        ViTConfig(architecture="mobilenet")
    with pytest.raises(ValueError, match="square images of at least 32 px"):
        ViTConfig(architecture="mobilevit_xs", image_size=16)
    with pytest.raises(ValueError, match="square images"):
        ViTConfig(architecture="mobilevit_xs", image_size=(64, 32))


def _timm_file(tmp_path) -> str:
    path = str(tmp_path / "mobilevit_xxs.safetensors")
    save_file(seeded_state(keys_of("mobilevit_xxs")), path)
    return path


def test_build_classifier_loads_timms_file_and_a_mobilevit_keras_file(tmp_path):
    path = _timm_file(tmp_path)
    state = seeded_state(keys_of("mobilevit_xxs"))
    same = vit_keras.build_classifier(ViTConfig(architecture="mobilevit_xxs", image_size=64,
                                                num_classes=1000), weights=path)
    np.testing.assert_array_equal(same.get_layer("head_fc").kernel.numpy(),
                                  state["head.fc.weight"].T)
    config = ViTConfig(architecture="mobilevit_xxs", image_size=SIZE, num_classes=CLASSES)
    with pytest.warns(UserWarning, match="its head has 1000 classes, the model 10"):
        other = vit_keras.build_classifier(config, weights=path)
    np.testing.assert_array_equal(other.get_layer("stem_conv").kernel.numpy(),
                                  same.get_layer("stem_conv").kernel.numpy())
    other.save(str(tmp_path / "model.keras"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the same classes: the head loads, nothing said
        again = vit_keras.build_classifier(config, weights=str(tmp_path / "model.keras"))
    for left, right in zip(again.weights, other.weights):
        np.testing.assert_array_equal(left.numpy(), right.numpy())
    wrong = ViTConfig(architecture="mobilevit_xs", image_size=SIZE, num_classes=CLASSES)
    with pytest.raises(ValueError, match="not a mobilevit_xs"):
        vit_keras.build_classifier(wrong, weights=str(tmp_path / "model.keras"))


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """A MobileViT XXS of 32 px and 10 classes, random weights, as `vit train` leaves it:
    model.keras and labels.txt."""
    folder = tmp_path_factory.mktemp("mobilevit_run")
    config = ViTConfig(architecture="mobilevit_xxs", image_size=SIZE, num_classes=CLASSES)
    model = randomize_weights(vit_keras.build_classifier(config), stddev=0.2)
    model.save(str(folder / "model.keras"))
    (folder / "labels.txt").write_text("".join(f"{digit}\n" for digit in range(CLASSES)))
    return folder


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mobilevit_images")
    pixels = np.random.default_rng(3).integers(0, 256, (3, 48, 40, 3), dtype=np.uint8)
    for index, image in enumerate(pixels):
        Image.fromarray(image).save(folder / f"image{index}.png")
    return sorted(folder.glob("*.png"))


@pytest.mark.slow
def test_vit_predict_and_vit_serve_answer_with_the_models_scores(model_folder, images,
                                                                 tmp_path):
    path = str(model_folder / "model.keras")
    table = tmp_path / "predictions.csv"
    assert cli.main(["predict", *map(str, images), "--model", path, "--output",
                     str(table), "--top-k", "1"]) == 0
    with open(table) as file:
        predicted = [row["class_1"] for row in csv.DictReader(file)]
    loaded = classifier.load(path)
    assert loaded.preprocessing == PREPROCESSING[1]
    scores = loaded.predict_encoded([image.read_bytes() for image in images])["probabilities"]
    assert predicted == [str(row.argmax()) for row in scores]
    app = create_app(loaded, "mobilevit", ServeOptions(max_request_bytes=2**20),
                     allowed_hosts=["127.0.0.1", "localhost"])
    instances = [{"b64": base64.b64encode(image.read_bytes()).decode()} for image in images]
    with served(app) as url, httpx.Client(base_url=url, timeout=60) as session:
        answer = session.post("/v1/models/mobilevit:predict",
                              json={"signature_name": "serve_bytes", "instances": instances})
    assert answer.status_code == 200, answer.text
    served_scores = [row["probabilities"] for row in answer.json()["predictions"]]
    np.testing.assert_allclose(served_scores, scores, atol=1e-5)


def _timm_top5(name: str) -> list[str]:
    """ImageNet's labels of timm's top-5 classes of the photo under the seeded weights."""
    with np.load(VECTORS) as vectors:
        logits = vectors[f"{name}/photo_logits"][0]
    names = [label for _, label in imagenet_classes(1000)]
    return [names[index] for index in np.argsort(-logits)[:5]]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mobilevit_xxs", "mobilevitv2_050"])
def test_vit_predict_ranks_a_photo_as_timm_does_from_timms_file(name, tmp_path):
    """A bare timm file by its name, as a user brings it: the JPEG decoded, resized and
    cropped as timm's eval transform does (tests/data/make_mobilevit_vectors.py recorded
    timm's logits of this photo under the same seeded weights), ImageNet's labels named.
    Seeded weights spread the probabilities thinly, so every class's log-probability is
    held too: a crop of 0.875 or a bilinear resize moves them by 4e-5 or more."""
    weights = str(tmp_path / f"{name}.safetensors")
    save_file(seeded_state(keys_of(name)), weights)
    table = tmp_path / "top5.csv"
    assert cli.main(["predict", PHOTO, "--model", name, "--weights", weights, "--output",
                     str(table)]) == 0
    with open(table) as file:
        (row,) = list(csv.DictReader(file))
    assert [row[f"class_{rank}"] for rank in range(1, 6)] == _timm_top5(name)
    with np.load(VECTORS) as vectors:
        logits = vectors[f"{name}/photo_logits"][0].astype(np.float64)
    expected = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    with open(PHOTO, "rb") as file:
        scores = classifier.load(name, weights=weights).predict_encoded([file.read()])
    np.testing.assert_allclose(np.log(scores["probabilities"][0]), expected, atol=1e-5)


@pytest.mark.slow
def test_pretrained_weights_download_from_the_hub_and_predict_the_photo(tmp_path):
    """`--weights pretrained` fetches timm's `cvnets_in1k` file through huggingface_hub (here
    from a loopback server answering as the Hub, HF_ENDPOINT), in a fresh process."""
    pytest.importorskip("huggingface_hub")
    name = "mobilevit_xxs"
    weights = tmp_path / "model.safetensors"
    save_file(seeded_state(keys_of(name)), str(weights))
    served_path = f"/timm/{name}.cvnets_in1k/resolve/main/model.safetensors"
    table = tmp_path / "top5.csv"
    with serving() as server:
        server.files[served_path] = weights.read_bytes()
        server.headers[served_path] = {"X-Repo-Commit": "0" * 40, "ETag": '"mobilevit-xxs"'}
        done = subprocess.run(
            [sys.executable, "-m", "vit", "predict", PHOTO, "--model", f"{name}.cvnets_in1k",
             "--weights", "pretrained", "--output", str(table)],
            env=dict(vit_env(), HF_ENDPOINT=server.url, HF_HOME=str(tmp_path / "hf"),
                     HF_HUB_OFFLINE="0"), cwd=tmp_path, capture_output=True, text=True,
            timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        assert server.gets(served_path) == 1
    with open(table) as file:
        (row,) = list(csv.DictReader(file))
    assert [row[f"class_{rank}"] for rank in range(1, 6)] == _timm_top5(name)


@pytest.mark.slow
def test_vit_inspect_writes_the_predictions_and_cost_and_says_why_no_maps(model_folder, images,
                                                                         tmp_path, capsys):
    assert cli.main(["inspect", "--model", str(model_folder / "model.keras"),
                     str(images[0]), "--output", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "inspect.json").read_text())
    assert summary["figures"] == {} and set(summary["skipped"]) >= {"rollout", "filters"}
    assert "not over the image's patches" in summary["skipped"]["rollout"]
    model = keras.saving.load_model(str(model_folder / "model.keras"), safe_mode=True)
    assert summary["complexity"]["params"] == model.count_params()
    assert summary["complexity"]["flops"] > 0
    assert len(summary["predicted_class"]) == 1
    capsys.readouterr()
    assert cli.main(["inspect", "--complexity", "mobilevit_xxs", "--image-size", "64"]) == 0
    report = capsys.readouterr().out
    assert "68.9%" in report and "64x64" in report and "1.28M" in report


def test_head_mode_trains_only_the_mobilevits_classifier():
    config = ViTConfig(architecture="mobilevit_xxs", image_size=SIZE, num_classes=CLASSES)
    model = vit_keras.build_classifier(config)
    preset = get_preset("digits_tiny").with_values({"finetune.mode": "head"})
    finetune.prepare(model, preset)
    head = model.get_layer("head_fc")
    assert [variable.path for variable in model.trainable_weights] == [
        variable.path for variable in head.trainable_weights]


def _mobilevit_preset(changes=None):
    base = get_preset("digits_tiny").with_variant("mobilevit_xxs").replace(
        schedule={"epochs": 1, "batch_size": 64, "warmup_epochs": 0},
        loop={"eval_every": 1, "mixed_precision": ""})
    return base.with_values(changes or {})


@pytest.mark.slow
def test_vit_train_on_a_mobilevit_exports_files_of_the_plain_interpreters_ops(tmp_path):
    output = tmp_path / "run"
    run.train(_mobilevit_preset(), output=str(output), strategy="default", inspect=False,
              formats="saved_model,tflite,tflite_int8,onnx")
    report = json.loads((output / "export.json").read_text())
    for name in ("saved_model", "tflite", "onnx"):  # float files equal Keras, trained or not
        assert report["formats"][name]["passed"], report["formats"][name]
    int8 = report["formats"]["tflite_int8"]
    assert int8["top1_agreement"] is not None and not int8["float_ops"]
    assert not [op for op in int8["ops"] if op.startswith("FLEX") or op == "CUSTOM"]
    config = json.loads((output / "config.json").read_text())
    assert config["preset"]["model"]["architecture"] == "mobilevit_xxs"
    tuned = tmp_path / "tuned"
    run.train(_mobilevit_preset({"finetune.weights": str(output / "model.keras"),
                                 "finetune.mode": "head"}),
              output=str(tuned), strategy="default", export=False, inspect=False)
    before = keras.saving.load_model(str(output / "model.keras"), safe_mode=True)
    after = keras.saving.load_model(str(tuned / "model.keras"), safe_mode=True)
    np.testing.assert_array_equal(after.get_layer("stem_conv").kernel.numpy(),
                                  before.get_layer("stem_conv").kernel.numpy())
    assert not np.array_equal(after.get_layer("head_fc").kernel.numpy(),
                              before.get_layer("head_fc").kernel.numpy())
