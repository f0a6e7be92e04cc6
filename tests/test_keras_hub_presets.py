"""keras-hub presets both ways, against keras-hub itself (a dev dependency): presets that
keras-hub writes with random weights load here with the same outputs, and the presets written
here load in keras-hub with the same outputs."""

import json
import os

import h5py
import keras
import numpy as np
import pytest

import vit_keras
from vit_keras import hub_presets
from vit_keras.config import ViTConfig
from vit_keras.core.model import VisionTransformer

keras_hub = pytest.importorskip("keras_hub")

ATOL = 1e-5
TINY = dict(patch_size=8, num_layers=2, num_heads=2, hidden_dim=16, mlp_dim=32)


def _images(size, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, size, size, 3)).astype("float32")


def _tokens(model, images):
    """The last block's final-normed tokens, prefix tokens first (keras-hub's order)."""
    found = vit_keras.features(model, images, blocks=[-1], grid=False, norm=True)
    index = model.config.num_layers - 1
    return np.concatenate([found[f"block_{index}_prefix"], found[f"block_{index}"]], axis=1)


def _vit_classifier(directory, *, class_token=True, pooling="token", intermediate_dim=None,
                    **backbone):
    backbone = keras_hub.models.ViTBackbone(image_shape=(32, 32, 3), use_class_token=class_token,
                                            **dict(TINY, **backbone))
    converter = keras_hub.layers.ViTImageConverter(image_size=(32, 32), scale=1 / 127.5,
                                                   offset=-1.0)
    classifier = keras_hub.models.ViTImageClassifier(
        backbone=backbone, num_classes=5, pooling=pooling, intermediate_dim=intermediate_dim,
        preprocessor=keras_hub.models.ViTImageClassifierPreprocessor(image_converter=converter))
    classifier.save_to_preset(str(directory))
    return classifier


@pytest.mark.parametrize("options", [
    dict(),
    dict(class_token=False, pooling="gap", intermediate_dim=12),
    dict(use_mha_bias=False, use_mlp_bias=False),
], ids=["token", "gap_pre_logits", "no_biases"])
def test_a_keras_hub_vit_classifier_preset_loads_and_goes_back_with_the_same_outputs(
        tmp_path, options):
    theirs = _vit_classifier(tmp_path / "theirs", **options)
    images = _images(32)
    ours = vit_keras.from_preset(str(tmp_path / "theirs"))
    assert ours.preprocessing.mean == (0.5, 0.5, 0.5)
    assert np.abs(np.asarray(theirs(images)) - np.asarray(ours(images))).max() < ATOL
    backbone = vit_keras.from_preset(str(tmp_path / "theirs"), include_top=False)
    assert np.abs(np.asarray(theirs.backbone(images)) - _tokens(backbone, images)).max() < ATOL

    vit_keras.save_preset(ours, str(tmp_path / "ours"))
    back = keras_hub.models.ImageClassifier.from_preset(str(tmp_path / "ours"))
    assert np.abs(np.asarray(back(images)) - np.asarray(ours(images))).max() < ATOL
    assert np.abs(np.asarray(back.backbone(images)) - _tokens(backbone, images)).max() < ATOL
    with open(tmp_path / "ours" / "metadata.json") as file:
        assert json.load(file)["exported_by"].startswith("vit_keras ")


def _dinov2(directory, registers):
    backbone = keras_hub.models.DINOV2Backbone(
        patch_size=4, num_layers=2, hidden_dim=16, num_heads=2, intermediate_dim=32,
        num_register_tokens=registers, image_shape=(16, 16, 3),
        position_embedding_shape=(16, 16, 3), layer_scale_init_value=0.5)
    backbone.save_to_preset(str(directory))
    return backbone


@pytest.mark.parametrize("registers", [0, 2])
def test_a_keras_hub_dinov2_preset_gives_the_same_tokens(tmp_path, registers):
    theirs = _dinov2(tmp_path, registers)
    images = _images(16)
    ours = vit_keras.from_preset(str(tmp_path), include_top=False)
    assert ours.config.num_register_tokens == registers
    assert np.abs(np.asarray(theirs({"images": images})) - _tokens(ours, images)).max() < ATOL


def _deit(directory):
    backbone = keras_hub.models.DeiTBackbone(image_shape=(32, 32, 3), patch_size=8,
                                             num_layers=2, num_heads=2, hidden_dim=16,
                                             intermediate_dim=32)
    keras_hub.models.DeiTImageClassifier(backbone=backbone, num_classes=5).save_to_preset(
        str(directory))
    return backbone


def test_a_keras_hub_deit_preset_gives_the_same_tokens_without_its_head(tmp_path):
    """Class and distillation tokens; keras-hub's DeiT classifier reads the class token alone,
    which a distilled ViTConfig (two heads, averaged) cannot, so its task is not loaded."""
    theirs = _deit(tmp_path)
    images = _images(32)
    ours = vit_keras.from_preset(str(tmp_path), include_top=False)
    assert ours.config.distilled
    assert np.abs(np.asarray(theirs(images)) - _tokens(ours, images)).max() < ATOL
    with pytest.raises(ValueError, match="has no task weights"):
        vit_keras.from_preset(str(tmp_path), include_top=True)


def _two_tower(kind, directory, arange_positions):
    from keras_hub.src.models.clip.clip_text_encoder import CLIPTextEncoder
    from keras_hub.src.models.clip.clip_vision_encoder import CLIPVisionEncoder
    from keras_hub.src.models.siglip.siglip_text_encoder import SigLIPTextEncoder
    from keras_hub.src.models.siglip.siglip_vision_encoder import SigLIPVisionEncoder

    tower = dict(patch_size=8, hidden_dim=16, num_layers=2, num_heads=2, intermediate_dim=32,
                 image_shape=(32, 32, 3))
    text = dict(vocabulary_size=50, embedding_dim=16, hidden_dim=16, num_layers=1, num_heads=2,
                intermediate_dim=32)
    if kind == "siglip":
        backbone = keras_hub.models.SigLIPBackbone(SigLIPVisionEncoder(**tower),
                                                   SigLIPTextEncoder(**text))
    else:
        backbone = keras_hub.models.CLIPBackbone(CLIPVisionEncoder(**tower),
                                                 CLIPTextEncoder(**text), projection_dim=12)
        if arange_positions:  # as in keras-hub's converted presets; built from scratch: zeros
            ids = backbone.vision_encoder.embedding.position_ids
            ids.assign(np.arange(ids.shape[1])[None].astype(ids.dtype))
    backbone.save_to_preset(str(directory))
    return backbone


@pytest.mark.parametrize("kind, arange_positions", [("siglip", True), ("clip", True),
                                                    ("clip", False)])
def test_keras_hub_siglip_and_clip_image_towers_give_the_same_embeddings(
        tmp_path, kind, arange_positions):
    theirs = _two_tower(kind, tmp_path, arange_positions)
    images = _images(32)
    reference = theirs.vision_encoder({"images": images}) if kind == "siglip" else \
        theirs.get_vision_embeddings(images)
    ours = vit_keras.from_preset(str(tmp_path), include_top=False)
    assert ours.config.classifier == ("map" if kind == "siglip" else "token")
    assert np.abs(np.asarray(reference) - np.asarray(ours(images))).max() < ATOL


def test_a_preset_folder_is_a_weights_source_for_a_model_of_its_architecture(tmp_path):
    _vit_classifier(tmp_path)
    model = VisionTransformer(ViTConfig(image_size=32, patch_size=8, hidden_size=16, mlp_dim=32,
                                        num_heads=2, num_layers=2, num_classes=5,
                                        gelu_approximate=False))
    vit_keras.load_weights(model, str(tmp_path))
    reference = vit_keras.from_preset(str(tmp_path))
    images = _images(32)
    np.testing.assert_allclose(model(images), reference(images), atol=ATOL)


def test_a_missing_tensor_is_named_and_nothing_is_loaded(tmp_path):
    _vit_classifier(tmp_path)
    with h5py.File(tmp_path / "model.weights.h5", "a") as file:
        del file["layers/vi_t_encoder/layer_norm/vars/0"]
    with pytest.raises(ValueError, match="encoder_norm/scale"):
        vit_keras.from_preset(str(tmp_path))


def test_backbones_that_do_not_map_are_refused_with_the_reason(tmp_path):
    with open(tmp_path / "config.json", "w") as file:
        json.dump({"class_name": "DINOV3Backbone", "config": {},
                   "registered_name": "keras_hub>DINOV3Backbone"}, file)
    with pytest.raises(ValueError, match="DINOV3Backbone backbone, which cannot be loaded here: "
                                         "DINOv3 uses rotary position embeddings"):
        vit_keras.from_preset(str(tmp_path))
    with pytest.raises(ValueError, match="is not a folder"):
        vit_keras.from_preset(str(tmp_path / "nowhere"))


def test_a_backbone_preset_needs_classes_for_a_head(tmp_path):
    keras_hub.models.ViTBackbone(image_shape=(32, 32, 3), **TINY).save_to_preset(str(tmp_path))
    with pytest.raises(ValueError, match="has no task weights"):
        vit_keras.from_preset(str(tmp_path), include_top=True)
    model = vit_keras.from_preset(str(tmp_path), classes=3)
    assert model.output.shape == (None, 3)


def test_what_keras_hub_cannot_express_is_refused_when_writing(tmp_path):
    base = dict(image_size=32, patch_size=8, hidden_size=16, mlp_dim=32, num_heads=2,
                num_layers=1, num_classes=3)
    conv = VisionTransformer(ViTConfig(stem="conv", gelu_approximate=False, **base))
    with pytest.raises(ValueError, match="its stem is 'conv'"):
        hub_presets.save_preset(conv, str(tmp_path / "conv"))
    approximate = VisionTransformer(ViTConfig(**base))
    with pytest.raises(ValueError, match="tanh-approximated GELU"):
        hub_presets.save_preset(approximate, str(tmp_path / "gelu"))
    hub_presets.save_preset(approximate, str(tmp_path / "gelu"), allow_gelu_mismatch=True)
    assert not os.path.exists(tmp_path / "conv")
    assert sorted(os.listdir(tmp_path / "gelu")) == sorted(
        ["config.json", "model.weights.h5", "image_converter.json", "task.json",
         "task.weights.h5", "preprocessor.json", "metadata.json"])
    keras.backend.clear_session()


@pytest.mark.slow
def test_an_hf_preset_downloads_its_files_through_huggingface_hub(tmp_path):
    """hf://ORG/REPO fetches each preset file (absent optional ones skipped) from a loopback
    server answering as the Hub does; the folder loads as the local one."""
    import subprocess
    import sys

    from weights_server import serving

    _vit_classifier(tmp_path / "preset")
    os.remove(tmp_path / "preset" / "metadata.json")  # an optional file the repository lacks
    with serving() as server:
        for name in os.listdir(tmp_path / "preset"):
            served = f"/someone/vit-preset/resolve/main/{name}"
            with open(tmp_path / "preset" / name, "rb") as file:
                server.files[served] = file.read()
            server.headers[served] = {"X-Repo-Commit": "0" * 40, "ETag": f'"{name}"'}
        script = ("import numpy as np, vit_keras; "
                  "m = vit_keras.from_preset('hf://someone/vit-preset'); "
                  "print(float(np.asarray(m(np.ones((1, 32, 32, 3), 'float32'))).sum()))")
        env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="3",
                   HF_ENDPOINT=server.url, HF_HOME=str(tmp_path / "hf"), HF_HUB_OFFLINE="0")
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, timeout=240)
        assert done.returncode == 0, done.stderr
        assert server.gets("/someone/vit-preset/resolve/main/model.weights.h5") == 1
    local = vit_keras.from_preset(str(tmp_path / "preset"))
    expected = float(np.asarray(local(np.ones((1, 32, 32, 3), "float32"))).sum())
    assert abs(float(done.stdout.strip().splitlines()[-1]) - expected) < 1e-4


@pytest.mark.slow
def test_a_preset_fine_tunes_with_vit_train_and_exports_back_to_keras_hub(tmp_path):
    """`vit train --weights PRESET_DIR` takes the preset's architecture and preprocessing;
    `vit export --formats keras_hub_preset` writes a folder keras-hub loads, checked by the
    export's own gate, and keras-hub's logits equal the trained model's."""
    from PIL import Image

    from runs import run_vit

    _vit_classifier(tmp_path / "preset")
    rng = np.random.default_rng(0)
    for label in ("a", "b"):
        (tmp_path / "data" / label).mkdir(parents=True)
        for index in range(8):
            pixels = rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / "data" / label / f"{index}.png")
    done, _ = run_vit(["train", "--weights", "preset", "--data", "folder:data", "--epochs", "1",
                       "--batch-size", "8", "--no-export", "--no-inspect", "--output", "run"],
                      tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp_path / "run" / "config.json") as file:
        model = json.load(file)["model"]
    assert (model["hidden_size"], model["image_size"], model["gelu_approximate"]) == (16, 32, False)
    done, _ = run_vit(["export", "--model", "run/model.keras", "--formats", "keras_hub_preset",
                       "--data", "folder:data"], tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "run" / "export.json").read_text())
    assert report["formats"]["keras_hub_preset"]["passed"]
    assert report["formats"]["keras_hub_preset"]["top1_agreement"] == 1.0
    trained = keras.saving.load_model(tmp_path / "run" / "model.keras", safe_mode=True)
    theirs = keras_hub.models.ImageClassifier.from_preset(str(tmp_path / "run" /
                                                              "keras_hub_preset"))
    images = _images(32)
    assert np.abs(np.asarray(theirs(images)) - np.asarray(trained(images))).max() < ATOL


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_every_family_both_ways_on_the_other_backends(backend):
    """The parity table of benchmarks/keras_hub_parity.py on JAX and PyTorch: it exits 1 when
    a difference passes 1e-5."""
    import importlib.util
    import subprocess
    import sys

    if importlib.util.find_spec(backend) is None:
        pytest.skip(f"{backend} is not installed (the torch extra: pip install -e '.[torch]')")
    script = os.path.join(os.path.dirname(__file__), "..", "benchmarks", "keras_hub_parity.py")
    env = dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3")
    done = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"| vit token | read | {backend} |" in done.stdout


def test_predict_and_embed_read_a_preset_folder(tmp_path, capsys):
    """A preset folder is a --model for the commands that read Keras models; a backbone alone
    cannot classify, and the command says what to use instead."""
    from PIL import Image

    from vit import cli

    _vit_classifier(tmp_path / "preset")
    (tmp_path / "preset" / "labels.txt").write_text("\n".join("abcde") + "\n")
    Image.fromarray(np.full((40, 40, 3), 90, np.uint8)).save(tmp_path / "grey.png")
    assert cli.main(["predict", str(tmp_path / "grey.png"), "--model",
                     str(tmp_path / "preset"), "--top-k", "2"]) == 0
    printed = capsys.readouterr().out
    assert "grey.png" in printed and any(f" {label} " in printed or f"{label}:" in printed
                                         for label in "abcde"), printed
    assert cli.main(["embed", str(tmp_path / "grey.png"), "--model", str(tmp_path / "preset"),
                     "--output", str(tmp_path / "embeddings.npz")]) == 0
    assert np.load(tmp_path / "embeddings.npz").shape == (1, 16)
    keras_hub.models.ViTBackbone(image_shape=(32, 32, 3), **TINY).save_to_preset(
        str(tmp_path / "backbone"))
    assert cli.main(["predict", str(tmp_path / "grey.png"), "--model",
                     str(tmp_path / "backbone")]) != 0
    assert "is a backbone without classifier task weights" in capsys.readouterr().err


def test_the_export_refuses_a_model_keras_hub_cannot_hold_before_writing(tmp_path):
    from vit_app.inference.export import command as export_command

    model = VisionTransformer(ViTConfig(image_size=32, patch_size=8, hidden_size=16, mlp_dim=32,
                                        num_heads=2, num_layers=1, num_classes=3,
                                        num_register_tokens=2))
    with pytest.raises(ValueError, match="format keras_hub_preset: the model cannot be written as "
                                         "a keras-hub preset: its num_register_tokens is 2"):
        export_command.export_model(model, str(tmp_path / "out"), formats="keras_hub_preset")
    assert not os.path.exists(tmp_path / "out")


def test_a_kaggle_preset_goes_through_kagglehub(tmp_path, monkeypatch):
    """kaggle:// hands the handle to kagglehub (its own download and cache; Kaggle's API cannot
    be served here) and reads the folder it returns; its failures and its absence are named."""
    import sys
    import types

    from vit_keras.pretrained import download

    _vit_classifier(tmp_path)
    asked = []

    def model_download(handle):
        asked.append(handle)
        if handle.endswith("/missing"):
            raise RuntimeError("404 Client Error: Not Found")
        return str(tmp_path)

    monkeypatch.setitem(sys.modules, "kagglehub", types.SimpleNamespace(
        model_download=model_download))
    model = vit_keras.from_preset("kaggle://keras/vit/keras/vit_tiny/1")
    assert asked == ["keras/vit/keras/vit_tiny/1"] and model.output.shape == (None, 5)
    with pytest.raises(download.DownloadError, match="cannot download Kaggle model "
                                                     "keras/vit/keras/missing: RuntimeError"):
        vit_keras.from_preset("kaggle://keras/vit/keras/missing")
    monkeypatch.setitem(sys.modules, "kagglehub", None)
    with pytest.raises(ValueError, match=r"kaggle:// presets download through kagglehub"):
        vit_keras.from_preset("kaggle://keras/vit/keras/vit_tiny/1")
