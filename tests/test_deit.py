"""DeiT: the distillation token and its head, the hard-label loss, one training step with a
teacher, timm DeiT parity, and the deit_distill preset."""

import json
import os

import numpy as np
import pytest
from helpers import to_numpy

import keras
import vit_keras
from vit_keras import VisionTransformer
from vit_keras.core.deit import DistillationTrainer, hard_distillation_loss, two_head_model

DATA = os.path.join(os.path.dirname(__file__), "data")


def _teacher(num_classes, size=32):
    """Any Keras classifier can teach: here a tiny CNN."""
    inputs = keras.Input((size, size, 3))
    hidden = keras.layers.Conv2D(4, 3, strides=4, activation="relu")(inputs)
    hidden = keras.layers.GlobalAveragePooling2D()(hidden)
    return keras.Model(inputs, keras.layers.Dense(num_classes)(hidden))


def test_inference_averages_both_heads(tiny_config):
    config = tiny_config.replace(distilled=True)
    model = VisionTransformer(config)
    rng = np.random.default_rng(0)
    for name in ("head", "head_dist"):
        for weight in model.get_layer(name).weights:
            weight.assign(rng.normal(0, 0.5, weight.shape).astype("float32"))
    assert config.seq_len == config.num_patches + 2
    images = rng.uniform(-1, 1, (3, 32, 32, 3)).astype("float32")
    class_logits, distill_logits = (to_numpy(t) for t in two_head_model(model)(images))
    assert np.abs(class_logits - distill_logits).max() > 1e-2
    np.testing.assert_allclose(to_numpy(model(images)), (class_logits + distill_logits) / 2,
                               atol=1e-6)
    with pytest.raises(ValueError, match="distilled=True needs classifier='token'"):
        config.replace(classifier="gap")


def test_hard_distillation_loss_by_hand():
    labels = np.array([[1.0, 0.0], [0.0, 1.0]], "float32")
    teacher = np.array([[0.2, 3.0], [5.0, -1.0]], "float32")   # argmax: 1, 0
    zeros = np.zeros((2, 2), "float32")
    class_logits = np.array([[2.0, 0.0], [0.0, 0.0]], "float32")
    loss = float(hard_distillation_loss(labels, teacher, class_logits, zeros))
    true_term = np.mean([np.log(1 + np.exp(-2.0)), np.log(2.0)])
    assert loss == pytest.approx(0.5 * true_term + 0.5 * np.log(2.0), rel=1e-5)


def test_tiny_deit_trains_one_step_with_a_teacher(tiny_config):
    config = tiny_config.replace(distilled=True, drop_path_rate=0.1)
    student = VisionTransformer(config)
    teacher = _teacher(config.num_classes)
    teacher_weights = [w.copy() for w in teacher.get_weights()]
    trainer = DistillationTrainer(student, teacher)
    trainer.compile(optimizer=keras.optimizers.Adam(1e-2),
                    metrics=[keras.metrics.CategoricalAccuracy(name="accuracy")],
                    # One step: tracing costs TensorFlow more than it saves; JAX's eager
                    # dispatch is slower than its compiled step.
                    run_eagerly=keras.backend.backend() == "tensorflow")
    rng = np.random.default_rng(1)
    images = rng.uniform(-1, 1, (8, 32, 32, 3)).astype("float32")
    labels = np.eye(config.num_classes, dtype="float32")[rng.integers(0, 5, 8)]
    before = to_numpy(student.get_layer("head_dist").kernel).copy()
    logs = trainer.fit(images, labels, batch_size=8, epochs=1, verbose=0).history
    assert np.isfinite(logs["loss"][0]) and "accuracy" in logs
    assert np.abs(to_numpy(student.get_layer("head_dist").kernel) - before).max() > 0
    for old, new in zip(teacher_weights, teacher.get_weights()):  # the teacher stays frozen
        np.testing.assert_array_equal(old, new)
    results = trainer.evaluate(images, labels, verbose=0, return_dict=True)
    assert set(results) >= {"loss", "accuracy"}


def test_matches_timm_deit():
    with open(os.path.join(DATA, "hybrid_deit_configs.json")) as file:
        case = dict(json.load(file)["timm_deit"])
    weights = os.path.join(DATA, case.pop("weights"))
    model = VisionTransformer(vit_keras.ViTConfig(**case))
    vit_keras.load_weights(model, weights, skip_head=False)
    with np.load(os.path.join(DATA, "hybrid_deit_vectors.npz"), allow_pickle=False) as vectors:
        images, reference = vectors["timm_deit/images"], vectors["timm_deit/outputs"]
    assert np.abs(reference).max() > 0.1
    assert np.abs(to_numpy(model(images)) - reference).max() < 2e-5


@pytest.mark.slow
def test_deit_distill_preset_trains_a_student(tmp_path):
    from training import presets, run

    teacher_path = str(tmp_path / "teacher.keras")
    _teacher(10, size=8).save(teacher_path)
    preset = presets.get_preset("deit_distill").replace(
        objective={"teacher": teacher_path}, schedule={"epochs": 1, "batch_size": 128},
        augment={"translate": 0.0, "rotate": 0.0, "zoom": 0.0},
        model={"image_size": 8, "hidden_size": 32, "mlp_dim": 32, "num_layers": 1})
    assert run.train(preset, output=str(tmp_path / "out"), strategy="default",
                     export=False, inspect=False) == 0
    with open(tmp_path / "out" / "metrics.json") as file:
        metrics = json.load(file)
    assert 0.0 <= metrics["val_top1"] <= 1.0 and "teacher_val_top1" in metrics
    student = keras.saving.load_model(str(tmp_path / "out" / "model.keras"), safe_mode=True)
    assert vit_keras.config_from_model(student).distilled
    with pytest.raises(ValueError, match="needs a teacher"):
        run.train(preset.replace(objective={"teacher": ""}), output=str(tmp_path / "none"))
