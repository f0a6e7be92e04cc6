"""Masked patch prediction: corruption statistics (50%, then 80/10/10), the 3-bit mean-colour
targets on a hand-made image, the corruption layer, the encoder transfer and `vit train`."""

import json

import numpy as np
import pytest
from helpers import to_numpy

import keras
from vit_keras import VisionTransformer, ViTConfig
from vit_keras.core import masked_patch as mpp


def test_corruption_statistics():
    corruption = to_numpy(mpp.sample_corruption(2000, 64, seed=3))
    selected = corruption != mpp.NOT_SELECTED
    assert (selected.sum(axis=1) == 32).all()                       # exactly 50% per image
    positions = np.broadcast_to(np.arange(64), corruption.shape)
    masked = (corruption == mpp.MASKED).sum() / selected.sum()
    unchanged = (selected & (corruption == positions)).sum() / selected.sum()
    swapped = (selected & (corruption >= 0) & (corruption != positions)).sum() / selected.sum()
    # 64 000 selected patches: 3 standard deviations of a 10% proportion are 0.36%.
    assert masked == pytest.approx(0.8, abs=0.006)
    assert unchanged == pytest.approx(0.1, abs=0.005)
    assert swapped == pytest.approx(0.1, abs=0.005)
    assert corruption.max() < 64 and corruption.min() >= mpp.MASKED
    # The selection is spread over all positions, not a fixed set.
    assert selected.mean(axis=0).min() > 0.4


def test_colour_targets_on_a_hand_made_image():
    image = np.zeros((1, 4, 8, 3), "float32")                       # two 4x4 patches
    image[0, :, :4] = [1.0, 0.0, 0.0]                               # pure red (0..1 scale)
    image[0, :, 4:, 0] = 0.5                                        # r = 0.5: level 4
    image[0, :2, 4:, 1] = 1.0                                       # g: half 1, half 0 -> 0.5
    image[0, :, 4:, 2] = 0.99                                       # b: level 7
    targets = to_numpy(mpp.patch_color_targets(image * 2.0 - 1.0, 4))
    assert targets.shape == (1, 2) and targets.dtype == np.int32
    assert targets[0, 0] == 7 * 64 + 0 * 8 + 0                      # red: (7, 0, 0)
    assert targets[0, 1] == 4 * 64 + 4 * 8 + 7
    grey = np.full((1, 4, 4, 3), 0.3, "float32") * 2 - 1            # a grey patch: r = g = b
    assert int(to_numpy(mpp.patch_color_targets(grey, 4))[0, 0]) == 2 * 64 + 2 * 8 + 2


def test_corruption_layer():
    layer = mpp.MaskedPatchCorruption()
    tokens = np.arange(2 * 4 * 3, dtype="float32").reshape(2, 4, 3)
    corruption = np.array([[-1, -2, 0, 3], [2, -1, -1, -2]], "int32")
    out = to_numpy(layer([tokens, corruption]))
    mask = to_numpy(layer.mask_token)[0, 0]
    np.testing.assert_array_equal(out[0, 0], tokens[0, 0])          # not selected
    np.testing.assert_array_equal(out[0, 1], mask)                  # [mask]
    np.testing.assert_array_equal(out[0, 2], tokens[0, 0])          # patch 0's embedding
    np.testing.assert_array_equal(out[0, 3], tokens[0, 3])          # selected, unchanged
    np.testing.assert_array_equal(out[1, 0], tokens[1, 2])          # same image only
    np.testing.assert_array_equal(out[1, 3], mask)


def test_pretrain_step_and_transfer_to_a_classifier(tiny_config):
    trainer = mpp.MaskedPatchPretrainer(tiny_config, seed=0)
    # One step: eager on TensorFlow (tracing costs more than it saves), compiled elsewhere.
    trainer.compile(optimizer=keras.optimizers.Adam(1e-3),
                    run_eagerly=keras.backend.backend() == "tensorflow")
    images = np.random.default_rng(0).uniform(-1, 1, (4, 32, 32, 3)).astype("float32")
    logs = trainer.fit(images, batch_size=4, epochs=1, verbose=0).history
    assert np.isfinite(logs["loss"][0]) and 0.0 <= logs["accuracy"][0] <= 1.0
    assert trainer.network.output_shape == (None, tiny_config.num_patches, 512)
    classifier = mpp.to_classifier(trainer.network, tiny_config)
    for name in ("embedding", "cls", "posembed_input", "encoderblock_1", "encoder_norm"):
        for got, want in zip(classifier.get_layer(name).get_weights(),
                             trainer.network.get_layer(name).get_weights()):
            np.testing.assert_array_equal(got, want)
    assert not to_numpy(classifier.get_layer("head").kernel).any()
    with pytest.raises(ValueError, match="plain ViT"):
        mpp.build_network(tiny_config.replace(resnet_layers=(), patch_size=1))


@pytest.mark.slow
def test_mpp_encoder_fine_tunes_through_weights(tmp_path):
    """The encoder.npz an mpp run writes loads into the fine-tuning preset's classifier."""
    import vit_keras
    from training import presets, run

    tiny = dict(image_size=8, hidden_size=32, mlp_dim=32, num_layers=1)
    preset = presets.get_preset("mpp_digits").replace(schedule={"epochs": 1,
                                                                "batch_size": 256}).replace_model(
        **tiny)
    assert run.train(preset, output=str(tmp_path), strategy="default", export=False,
                     inspect=False) == 0
    with open(tmp_path / "metrics.json") as file:
        metrics = json.load(file)
    assert 0.0 <= metrics["val_mpp_accuracy"] <= 1.0
    finetune = presets.get_preset("mpp_digits_finetune").replace_model(**tiny)
    model = VisionTransformer(finetune.model)
    vit_keras.load_weights(model, str(tmp_path / "encoder.npz"))
    encoder = keras.saving.load_model(str(tmp_path / "model.keras"), safe_mode=True)
    for name in ("embedding", "encoderblock_0", "encoder_norm"):
        for got, want in zip(model.get_layer(name).get_weights(),
                             encoder.get_layer(name).get_weights()):
            np.testing.assert_array_equal(got, want)


def test_patch_dropout_is_refused_with_a_clear_error():
    from vit_keras.core.masked_patch import build_network

    config = ViTConfig(image_size=8, patch_size=4, hidden_size=16, mlp_dim=32, num_heads=2,
                       num_layers=1, patch_drop_rate=0.5)
    with pytest.raises(ValueError, match="needs patch_drop_rate=0, got 0.5"):
        build_network(config)
