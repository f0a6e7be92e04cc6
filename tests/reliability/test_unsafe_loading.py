"""Unsafe loading is impossible by default: a pickle payload in every format is refused.

Each payload, if executed, creates a marker directory. Every test checks both that loading
fails with a ValueError and that the marker never appears; one control per format shows the
payload is live (the unsafe loader would run it).
"""

import os
import pickle
import zipfile

import keras
import numpy as np
import pytest

import vit_keras
from vit_keras.checkpoints import io as weight_io


class Payload:
    """Unpickling this object creates the directory `marker`."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def _object_npz(path, marker):
    np.savez(path, kernel=np.array([Payload(marker)], dtype=object))


def _torch_zip(path, marker):
    """The layout of `torch.save` (a zip with archive/data.pkl), without needing torch."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps({"weight": Payload(marker)}))
        archive.writestr("archive/version", "3\n")


def _torch_legacy(path, marker):
    """The legacy `torch.save` format: a bare pickle stream."""
    with open(path, "wb") as file:
        pickle.dump({"weight": Payload(marker)}, file)


@pytest.fixture
def model(tiny_config):
    return vit_keras.VisionTransformer(tiny_config)


def test_object_array_npz_is_refused_and_never_unpickled(tmp_path, model):
    path, marker = tmp_path / "evil.npz", tmp_path / "pwned"
    _object_npz(path, marker)
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(ValueError, match="pickled objects are refused"):
        vit_keras.load_weights(model, str(path))
    assert not marker.exists()
    assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights()))
    # Control: numpy with allow_pickle=True would run the payload.
    with np.load(path, allow_pickle=True) as archive:
        archive["kernel"]
    assert marker.exists()


@pytest.mark.parametrize("name, writer", [("pytorch_model.bin", _torch_zip),
                                          ("model.pt", _torch_zip),
                                          ("legacy.pth", _torch_legacy)])
def test_torch_pickle_checkpoints_are_refused(tmp_path, model, name, writer):
    path, marker = tmp_path / name, tmp_path / "pwned"
    writer(path, marker)
    with pytest.raises(ValueError, match="npz|safetensors"):
        vit_keras.load_weights(model, str(path))
    assert not marker.exists()
    if writer is _torch_legacy:  # control: the file is a live pickle
        with open(path, "rb") as file:
            pickle.load(file)  # noqa: S301 - the point of the control
        assert marker.exists()


def _lambda_model(path, marker):
    """A .keras file whose Lambda layer runs Python code (creates `marker`) when rebuilt."""
    function = eval(f"lambda x: (__import__('os').makedirs({str(marker)!r}, exist_ok=True), "
                    "x)[1]")
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Lambda(function)(inputs))
    model.save(path)
    os.rmdir(marker)  # saving traced the function once


def test_keras_lambda_is_refused_by_every_loader(tmp_path):
    path, marker = tmp_path / "evil.keras", tmp_path / "pwned"
    _lambda_model(str(path), marker)
    with pytest.raises(ValueError, match="[Ll]ambda"):
        keras.saving.load_model(str(path), safe_mode=True)
    from vit_app.inference.model_files import load_model

    with pytest.raises(ValueError, match="[Ll]ambda"):
        load_model(str(path))
    with pytest.raises(ValueError):
        weight_io.read_tensors(str(path))  # a .keras is a zip, but not an .npz of arrays
    assert not marker.exists()
    # Control: the unsafe loader would run the code.
    keras.saving.load_model(str(path), safe_mode=False)
    assert marker.exists()


def test_cli_refuses_unsafe_files(tmp_path, capsys):
    """`vit predict --model evil.keras` and `vit train --weights evil.npz` fail cleanly."""
    from PIL import Image

    from vit import cli

    marker = tmp_path / "pwned"
    _lambda_model(str(tmp_path / "evil.keras"), marker)
    _object_npz(tmp_path / "evil.npz", marker)
    Image.new("RGB", (8, 8)).save(tmp_path / "x.png")
    assert cli.main(["predict", str(tmp_path / "x.png"), "--model",
                     str(tmp_path / "evil.keras")]) == 2
    assert "Lambda" in capsys.readouterr().err
    model = vit_keras.VisionTransformer(vit_keras.ViTConfig(
        image_size=8, patch_size=4, hidden_size=8, mlp_dim=8, num_heads=1, num_layers=1,
        num_classes=2))
    with pytest.raises(ValueError, match="pickled objects are refused"):
        vit_keras.load_weights(model, str(tmp_path / "evil.npz"))
    assert not marker.exists()
