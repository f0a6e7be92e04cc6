"""Recipe: LR schedule values, weight-decay exclusions, gradient accumulation == large batch."""

import numpy as np
import pytest

import keras

from training import recipe
from training.configs import Preset, apply_overrides, get_preset, PRESET_NAMES


def test_warmup_cosine_values_at_key_steps():
    schedule = recipe.WarmupDecay(peak=1.0, total_steps=110, warmup_steps=10, decay="cosine",
                                  end=0.1)
    values = {step: float(schedule(step)) for step in (0, 4, 9, 10, 60, 110, 200)}
    assert values[0] == pytest.approx(0.1)          # (step + 1) / warmup
    assert values[4] == pytest.approx(0.5)
    assert values[9] == pytest.approx(1.0)
    assert values[10] == pytest.approx(1.0)         # decay starts at the peak
    assert values[60] == pytest.approx(0.55)        # half way: end + (peak - end) / 2
    assert values[110] == pytest.approx(0.1)
    assert values[200] == pytest.approx(0.1)        # clamped after the end


def test_warmup_linear_values_and_roundtrip():
    schedule = recipe.WarmupDecay(peak=2.0, total_steps=100, warmup_steps=0, decay="linear")
    assert float(schedule(0)) == pytest.approx(2.0)
    assert float(schedule(25)) == pytest.approx(1.5)
    assert float(schedule(100)) == pytest.approx(0.0)
    clone = recipe.WarmupDecay.from_config(schedule.get_config())
    assert float(clone(50)) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="schedule must be one of"):
        recipe.WarmupDecay(1.0, 10, decay="step")


def test_schedule_from_preset_counts_warmup_epochs():
    preset = Preset(lr=0.5, epochs=4, warmup_epochs=1, warmup_steps=2, schedule="constant")
    schedule = recipe.make_schedule(preset, steps_per_epoch=10)
    assert schedule.total_steps == 40 and schedule.warmup_steps == 12
    assert float(schedule(5)) == pytest.approx(0.25)
    assert float(schedule(30)) == pytest.approx(0.5)


def _tiny_model(seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, activation="tanh")(inputs)
    hidden = keras.layers.LayerNormalization()(hidden)
    return keras.Model(inputs, keras.layers.Dense(3)(hidden))


@pytest.mark.parametrize("name", ["adamw", "sgd"])
def test_gradient_accumulation_equals_the_large_batch(name):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(16, 4)).astype("float32")
    y = keras.utils.to_categorical(rng.integers(0, 3, 16), 3)
    weights = {}
    for accum, batch in ((1, 16), (4, 4)):
        preset = Preset(optimizer=name, lr=0.05, weight_decay=0.1, epochs=1, warmup_steps=1,
                        grad_accum_steps=accum, clipnorm=0.5, label_smoothing=0.1)
        model = _tiny_model()
        model.compile(recipe.make_optimizer(preset, steps_per_epoch=2), recipe.make_loss(preset))
        model.fit(np.concatenate([x, x[::-1]]), np.concatenate([y, y[::-1]]), batch_size=batch,
                  epochs=1, shuffle=False, verbose=0)
        assert int(model.optimizer.iterations) == 2
        weights[accum] = model.get_weights()
    for large, accumulated in zip(weights[1], weights[4]):
        np.testing.assert_allclose(large, accumulated, rtol=1e-5, atol=1e-6)


def test_weight_decay_skips_biases_norms_posemb_and_cls(tiny_config):
    import vit_keras

    model = vit_keras.VisionTransformer(tiny_config)
    optimizer = recipe.make_optimizer(Preset(weight_decay=0.1), steps_per_epoch=10)
    optimizer.build(model.trainable_variables)
    decayed = {v.path for v in model.trainable_variables if optimizer._use_weight_decay(v)}
    assert "posembed_input/pos_embedding" not in decayed and "cls/cls" not in decayed
    assert not any(path.endswith(("bias", "gamma", "beta")) for path in decayed)
    assert "embedding/kernel" in decayed and "head/kernel" in decayed
    assert any("query_kernel" in path for path in decayed)


def test_presets_load_and_overrides_are_typed():
    for name in PRESET_NAMES:
        assert get_preset(name).name == name
    preset = apply_overrides(get_preset("digits_tiny"),
                             ["lr=0.01", "epochs=3", "flip=true", "data=folder:/x"])
    assert (preset.lr, preset.epochs, preset.flip, preset.data) == (0.01, 3, True, "folder:/x")
    with pytest.raises(ValueError, match="unknown key"):
        apply_overrides(preset, ["learning_rate=1"])
    with pytest.raises(ValueError, match="expected an integer"):
        apply_overrides(preset, ["epochs=many"])
    with pytest.raises(ValueError, match="key=value"):
        apply_overrides(preset, ["epochs"])
