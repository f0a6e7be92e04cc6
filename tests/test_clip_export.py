"""A clip model's files: TFLite (float32 and full-integer int8, builtin operators only) and ONNX
(float32 and static int8), each checked against Keras by the export's own agreement bar on
held-out clips, as an image model's are."""

import importlib

import pytest
from helpers import randomize_weights

from vit_app.tasks.clip.data.motion import moving_sprites
from vit_keras.config import ViTConfig
from vit_keras.core.model import VisionTransformer
from vit_keras.export import onnx_quantize
from vit_keras.export.lite import tflite
from vit_keras.export.onnx_runtime import ONNXModel
from vit_keras.tasks.clip.inflate import inflate

FRAMES, SIZE = 8, 32
# Five conversions and their checks, about 30 s: the slow tier.
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def clip_model():
    """A divided space-time ViT whose every weight is random (its temporal ones too)."""
    config = ViTConfig(image_size=SIZE, patch_size=4, hidden_size=64, mlp_dim=128, num_heads=4,
                       num_layers=2, num_classes=4)
    image_model = VisionTransformer(config)
    randomize_weights(image_model, seed=0)
    model = inflate(image_model, frames=FRAMES, tubelet_frames=2)
    for layer in model.layers:
        if layer.name.startswith("temporal") or layer.name == "posembed_input":
            randomize_weights(layer, seed=1)
    return model


@pytest.fixture(scope="module")
def clips():
    """64 built-in clips in 0..255: the first 32 calibrate, the others check."""
    return moving_sprites(64, FRAMES, SIZE, seed=0)[0].astype("float32")


def test_tflite_files_of_a_clip_model_repeat_its_classes(clip_model, clips, tmp_path):
    for quantization in (None, "int8"):
        report = tflite(clip_model, str(tmp_path / f"{quantization}.tflite"),
                        quantization=quantization, representative_data=clips[:32],
                        verify_images=clips[32:])
        assert report["top1_agreement"] >= report["min_agreement"], report
        assert report["verified_images"] == 32
    assert "FULLY_CONNECTED" in report["ops"] and "TRANSPOSE" in report["ops"]
    with pytest.raises(ValueError, match=r"must hold clips \[N, 8, 32, 32, 3\] in 0..255, got a "
                                         r"batch of shape \(2, 32, 32, 3\)"):
        tflite(clip_model, str(tmp_path / "bad.tflite"), quantization="int8",
               representative_data=clips[:2, 0])


def test_onnx_files_of_a_clip_model_repeat_its_classes(clip_model, clips, tmp_path):
    export_onnx = importlib.import_module("vit_keras.export.onnx").onnx
    float_path, int8_path = str(tmp_path / "model.onnx"), str(tmp_path / "model_int8.onnx")
    report = export_onnx(clip_model, float_path, verify_images=clips[32:])
    assert report["top1_agreement"] >= report["min_agreement"], report
    assert onnx_quantize.quantize(float_path, int8_path, "int8",
                                  representative_data=clips[:32])["calibration_images"] == 32
    float_file, int8_file = ONNXModel(float_path), ONNXModel(int8_path)
    assert float_file.input_shape == (FRAMES, SIZE, SIZE, 3)
    agreement = (float_file(clips[32:]).argmax(-1) == int8_file(clips[32:]).argmax(-1)).mean()
    assert agreement >= 0.98, agreement
