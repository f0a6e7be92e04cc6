"""Fine-tuning modes, layer-wise learning-rate decay and soft distillation, on every backend.

Each mode is checked by what a few optimizer steps change: every weight it must not train is
bitwise unchanged, every weight it trains moved. Layer decay is checked weight by weight: on
the first step each optimizer's update of a weight is exactly its multiplier times the
undecayed update.
"""

import keras
import numpy as np
import pytest
from helpers import random_images, randomize_weights, to_numpy

from training import finetune, probe, recipe
from training.presets import Preset, get_preset
from vit_keras import VisionTransformer, ViTConfig, keras_compat, lora
from vit_keras.core.deit import DistillationTrainer, soft_distillation_loss

CONFIG = ViTConfig(image_size=8, patch_size=4, hidden_size=16, mlp_dim=32, num_heads=2,
                   num_layers=2, num_classes=3, representation_size=8, num_register_tokens=1)


def _preset(changes=None):
    """A constant-rate preset of `CONFIG` with `changes` ('SECTION.FIELD': value) on top."""
    return Preset().replace(model=CONFIG,
                            optim={"lr": 0.1, "weight_decay": 0.1, "clipnorm": 0.0},
                            schedule={"warmup_steps": 0, "decay": "constant"}
                            ).with_values(changes or {})


def _model(config=CONFIG):
    model = VisionTransformer(config)
    randomize_weights(model, seed=1)
    return model


def _train(model, preset, steps=2):
    model.compile(optimizer=recipe.make_optimizer(preset, 10, model),
                  loss=keras.losses.CategoricalCrossentropy(from_logits=True))
    images = random_images(CONFIG, batch=4, seed=2)
    labels = np.eye(3, dtype="float32")[[0, 1, 2, 0]]
    for _ in range(steps):
        model.train_on_batch(images, labels)


def _snapshot(model):
    return {variable.path: to_numpy(variable).copy() for variable in model.weights}


def _changed(model, before):
    return {path for path, value in _snapshot(model).items()
            if path in before and not np.array_equal(value, before[path])}


def _stored_kernels(model):
    return {keras_compat.stored_kernel(layer).path: to_numpy(keras_compat.stored_kernel(layer))
            for layer in lora.lora_layers(model)}


def test_head_mode_trains_only_the_head_and_pre_logits():
    model = _model()
    finetune.prepare(model, _preset({"finetune.mode": "head"}))
    before = _snapshot(model)
    _train(model, _preset({"finetune.mode": "head"}))
    expected = {"pre_logits/kernel", "pre_logits/bias", "head/kernel", "head/bias"}
    assert _changed(model, before) == expected
    assert finetune.count_weights(model)[0] == 16 * 8 + 8 + 8 * 3 + 3


def test_lora_mode_trains_the_adapters_and_the_head_only():
    model = _model()
    preset = _preset({"finetune.mode": "lora", "finetune.lora_rank": 2})
    finetune.prepare(model, preset)
    base = {path: value.copy() for path, value in _stored_kernels(model).items()}
    before = _snapshot(model)
    _train(model, preset)
    changed = _changed(model, before)
    adapters = {path for path in before if "lora_kernel" in path}
    assert len(adapters) == 2 * 2 * CONFIG.num_layers       # A and B of query and value
    # The first step moves only B (A's gradient is zero while B is); the second moves A.
    assert changed == adapters | {"head/kernel", "head/bias", "pre_logits/kernel",
                                  "pre_logits/bias"}
    for path, value in _stored_kernels(model).items():      # frozen base kernels
        np.testing.assert_array_equal(value, base[path])


@pytest.mark.slow
def test_full_mode_trains_everything():
    model = _model()
    finetune.prepare(model, _preset())
    before = _snapshot(model)
    _train(model, _preset())
    assert _changed(model, before) == set(before)


def test_lora_targets_all_and_a_lora_head():
    model = _model()
    finetune.prepare(model, _preset({"finetune.mode": "lora", "finetune.lora_rank": 1,
                                     "finetune.lora_targets": "all"}))
    kinds = {lora.projection_kind(layer) for layer in lora.lora_layers(model)}
    assert kinds == set(lora.TARGETS)
    head = model.get_layer("head")
    assert head.trainable and not keras_compat.stored_kernel(head).trainable


@pytest.mark.parametrize("changes, message", [
    ({"finetune.lora_rank": 0}, "finetune.lora_rank must be >= 1, got 0"),
    ({"finetune.mode": "partial"}, "finetune.mode must be one of ('full', 'lora', 'head', "
                                   "'probe'), got 'partial'"),
    ({"optim.layer_decay": 0.0}, "optim.layer_decay must be in (0, 1], got 0.0"),
    ({"objective.distill_mode": "medium"}, "objective.distill_mode must be one of ('hard', 'soft')"),
    ({"objective.distill_temperature": 0.0},
     "objective.distill_temperature must be a finite number > 0"),
])
def test_bad_finetune_fields_are_refused(changes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        get_preset("digits_tiny").with_values(changes)


def test_unknown_lora_target_is_refused_naming_the_targets():
    with pytest.raises(ValueError, match="LoRA targets must be some of"):
        finetune.prepare(_model(), _preset({"finetune.mode": "lora",
                                          "finetune.lora_targets": "query,values"}))


def test_layer_decay_multipliers_follow_beit():
    model = _model()
    decay, layers = 0.5, CONFIG.num_layers
    multipliers = recipe.layer_decay_multipliers(model, layers, decay)
    assert set(multipliers) == {variable.path for variable in model.trainable_variables}
    for path, value in multipliers.items():
        owner = path.split("/")[0]
        if owner in ("embedding", "cls", "posembed_input", "registers"):
            expected = decay ** (layers + 1)
        elif owner.startswith("encoderblock_"):
            expected = decay ** (layers - int(owner.split("_")[1]))
        else:
            assert owner in ("encoder_norm", "pre_logits", "head"), owner
            expected = 1.0
        assert value == expected, path


@pytest.mark.parametrize("optimizer", ["sgd", "adam", "adamw"])
def test_layer_decay_scales_each_update_by_its_multiplier(optimizer):
    """On the first step every optimizer's update (weight decay included) is linear in the
    learning rate, so the decayed update is the multiplier times the plain one."""
    start = _snapshot(_model())
    updates = {}
    for decay in (1.0, 0.6):
        model = _model()
        preset = _preset({"optim.optimizer": optimizer, "optim.momentum": 0.0,
                          "optim.layer_decay": decay})
        _train(model, preset, steps=1)
        updates[decay] = {path: value - start[path] for path, value in _snapshot(model).items()}
    multipliers = recipe.layer_decay_multipliers(_model(), CONFIG.num_layers, 0.6)
    for path, multiplier in multipliers.items():
        np.testing.assert_allclose(updates[0.6][path], multiplier * updates[1.0][path],
                                   rtol=2e-4, atol=1e-7, err_msg=path)


def test_probe_recovers_a_linear_rule():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(300, 5)) * [1, 10, 0.1, 1, 1] + 3.0
    labels = np.argmax(features[:, :3] * [1, 0.1, 10], axis=1)
    kernel, bias = probe.fit_linear(features, np.eye(3)[labels], l2=1e-6)
    assert np.mean(np.argmax(features @ kernel + bias, axis=1) == labels) > 0.97
    assert probe.choose_l2(features, np.eye(3)[labels]) in probe.L2_GRID


def test_multilabel_probe_fits_independent_sigmoids():
    rng = np.random.default_rng(1)
    features = rng.normal(size=(400, 4))
    targets = (features[:, :2] > 0).astype(float)              # two independent labels
    kernel, bias = probe.fit_linear(features, targets, l2=1e-4, multilabel=True)
    predicted = (features @ kernel + bias) > 0
    assert np.mean(predicted == targets.astype(bool)) > 0.97


def test_soft_distillation_loss_is_the_tempered_kl():
    rng = np.random.default_rng(3)
    labels = np.eye(4, dtype="float32")[[0, 1, 2, 3]]
    teacher, cls, dist = (rng.normal(size=(4, 4)).astype("float32") for _ in range(3))
    temperature = 2.0

    def softmax(x):
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    p, q = softmax(teacher / temperature), softmax(dist / temperature)
    kl = np.mean(np.sum(p * np.log(p / q), axis=1))
    ce = -np.mean(np.sum(labels * np.log(softmax(cls)), axis=1))
    expected = 0.5 * ce + 0.5 * temperature ** 2 * kl
    loss = soft_distillation_loss(labels, teacher, cls, dist, temperature)
    np.testing.assert_allclose(to_numpy(loss), expected, rtol=1e-5)


def test_soft_distillation_trains_the_student():
    student = _model(CONFIG.replace(distilled=True, representation_size=None))
    teacher = _model(CONFIG)
    trainer = DistillationTrainer(student, teacher, mode="soft", temperature=3.0)
    before = _snapshot(student)
    trainer.compile(optimizer=keras.optimizers.SGD(0.1))
    trainer.train_on_batch(random_images(CONFIG, batch=4), np.eye(3, dtype="float32")[[0, 1, 2, 0]])
    assert "head_dist/kernel" in _changed(student, before)
    with pytest.raises(ValueError, match="distillation mode must be one of"):
        DistillationTrainer(student, teacher, mode="warm")
