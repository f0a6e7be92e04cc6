"""Recipe: LR schedule values, weight-decay exclusions, gradient accumulation == large batch."""

import dataclasses

import numpy as np
import pytest

import keras

from training import recipe
from training.presets import Preset, get_preset, preset_names
from training.presets.overrides import apply_overrides


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
    with pytest.raises(ValueError, match="decay must be one of"):
        recipe.WarmupDecay(1.0, 10, decay="step")


def test_schedule_from_preset_counts_warmup_epochs():
    preset = Preset().replace(optim={"lr": 0.5},
                              schedule={"epochs": 4, "warmup_epochs": 1, "warmup_steps": 2,
                                        "decay": "constant"})
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
        preset = Preset().replace(optim={"optimizer": name, "lr": 0.05, "weight_decay": 0.1,
                                         "clipnorm": 0.5},
                                  schedule={"epochs": 1, "warmup_steps": 1,
                                            "grad_accum_steps": accum},
                                  objective={"label_smoothing": 0.1})
        model = _tiny_model()
        model.compile(recipe.make_optimizer(preset, steps_per_epoch=2, model=model),
                      recipe.make_loss(preset))
        model.fit(np.concatenate([x, x[::-1]]), np.concatenate([y, y[::-1]]), batch_size=batch,
                  epochs=1, shuffle=False, verbose=0)
        assert int(model.optimizer.iterations) == 2
        weights[accum] = model.get_weights()
    for large, accumulated in zip(weights[1], weights[4]):
        np.testing.assert_allclose(large, accumulated, rtol=1e-5, atol=1e-6)


def test_presets_load_and_overrides_are_typed():
    for name in preset_names():
        assert get_preset(name).name == name
    preset = apply_overrides(get_preset("digits_tiny"),
                             ["optim.lr=0.01", "schedule.epochs=3", "augment.flip=true",
                              "data.train=folder:/x", "augment.crop=inception"])
    assert (preset.optim.lr, preset.schedule.epochs, preset.augment.flip, preset.data.train,
            preset.augment.crop) == (0.01, 3, True, "folder:/x", "inception")
    for flat, sectioned in [("lr", "optim.lr"), ("epochs", "schedule.epochs"),
                            ("data", "data.train"), ("train_crop", "augment.crop")]:
        with pytest.raises(ValueError, match=f"flat keys of earlier versions are gone; write "
                                             f"'{sectioned}'"):
            apply_overrides(preset, [f"{flat}=1"])
        with pytest.raises(ValueError, match=f"write '{sectioned}'"):
            preset.replace(**{flat: 1})
    with pytest.raises(ValueError, match="unknown key"):
        apply_overrides(preset, ["learning_rate=1"])
    with pytest.raises(ValueError, match="unknown key"):
        apply_overrides(preset, ["optim.learning_rate=1"])
    with pytest.raises(ValueError, match=r"optim.optimizer must be one of \('adamw', 'adam', "
                                         r"'sgd'\), got 'lamb'"):
        apply_overrides(preset, ["optim.optimizer=lamb"])       # enums: when the preset is made
    with pytest.raises(ValueError, match="unknown key"):
        apply_overrides(preset, ["model.depth=1"])
    with pytest.raises(ValueError, match="expected an integer"):
        apply_overrides(preset, ["schedule.epochs=many"])
    with pytest.raises(ValueError, match="key=value"):
        apply_overrides(preset, ["epochs"])


def test_every_model_option_is_settable_and_typed():
    preset = apply_overrides(get_preset("digits_tiny"), [
        "model.classifier=map", "model.num_register_tokens=4", "model.layer_scale_init=1e-4",
        "model.representation_size=32", "model.image_size=16x24", "model.gelu_approximate=false",
        "model.posemb=sincos2d", "model.drop_path_rate=0.2"])
    model = preset.model
    assert (model.classifier, model.num_register_tokens, model.layer_scale_init) == \
        ("map", 4, 1e-4)
    assert (model.representation_size, model.image_size, model.gelu_approximate) == \
        (32, (16, 24), False)
    assert apply_overrides(preset, ["model.representation_size=none"]).model \
        .representation_size is None
    hybrid = apply_overrides(preset, ["model.resnet_layers=1,1", "model.patch_size=1",
                                      "model.image_size=16", "model.stem=patchify"])
    assert hybrid.model.resnet_layers == (1, 1)
    with pytest.raises(ValueError, match="stem='conv' replaces the patch projection"):
        apply_overrides(preset, ["model.resnet_layers=1,1", "model.patch_size=1"])
    stem_only = apply_overrides(preset, ["model.resnet_layers=", "model.patch_size=1",
                                         "model.image_size=16", "model.stem=patchify"])
    assert stem_only.model.resnet_layers == ()                  # the hybrid's stem alone
    with pytest.raises(ValueError, match="model option: write --set model.hidden_size"):
        apply_overrides(preset, ["hidden_size=32"])
    with pytest.raises(ValueError, match="classifier must be one of"):
        apply_overrides(preset, ["model.classifier=cls"])       # ViTConfig validates
    with pytest.raises(ValueError, match="comes from the data"):
        apply_overrides(preset, ["model.num_classes=3"])
    with pytest.raises(ValueError, match="expected an integer"):
        apply_overrides(preset, ["model.num_layers=deep"])


def test_model_flag_takes_a_variants_shape_and_keeps_the_presets_options():
    import dataclasses

    from training.presets import command_line
    from vit.commands import train as train_command
    from vit_keras import ViTConfig, get_variant

    parser = __import__("argparse").ArgumentParser()
    train_command.add_arguments(parser)
    preset = command_line.resolve_preset(parser.parse_args(
        ["--model", "S/16", "--image-size", "64", "--set", "model.num_layers=2"]))
    s16 = get_variant("S/16")
    assert (preset.model.hidden_size, preset.model.num_heads, preset.model.patch_size) == \
        (s16.hidden_size, s16.num_heads, 16)
    assert preset.model.num_layers == 2 and preset.model.image_size == 64
    assert preset.model.classifier == "gap" and preset.model.drop_path_rate == 0.1  # digits_tiny
    help_text = parser.format_help()
    for field in dataclasses.fields(ViTConfig):                 # every option is documented
        assert f"model.{field.name}" in help_text, field.name
    for key in ("objective.label_smoothing", "data.val_split", "objective.kind", "optim.lr",
                "augment.crop", "loop.backup_every", "finetune.lora_rank"):
        assert key in help_text
    for group in ("recipe", "data:", "model and fine-tuning:", "optim and schedule:", "run ("):
        assert group in help_text


def test_preset_to_dict_nests_the_model_config():
    from vit_keras import ViTConfig

    data = get_preset("finetune_384").to_dict()
    assert data["model"]["image_size"] == 384 and data["optim"]["optimizer"] == "sgd"
    assert ViTConfig.from_dict(data["model"]) == get_preset("finetune_384").model


def test_sections_validate_their_own_fields_when_created():
    from training.presets import sections

    for section, changes, message in [
            (sections.Optim, dict(optimizer="lamb"), "optim.optimizer must be one of"),
            (sections.Schedule, dict(decay="step"), "schedule.decay must be one of"),
            (sections.Augment, dict(crop="center"), "augment.crop must be one of"),
            (sections.Objective, dict(kind="panoptic"), "objective.kind must be one of"),
            (sections.Loop, dict(mixed_precision="fp8"), "loop.mixed_precision must be one of"),
            (sections.Data, dict(val_split=1.0), r"data.val_split must be in \[0, 1\)")]:
        with pytest.raises(ValueError, match=message):
            section(**changes)
    preset = get_preset("digits_tiny")
    with pytest.raises(dataclasses.FrozenInstanceError):
        preset.optim.lr = 1.0
    assert preset.replace(optim=sections.Optim(lr=0.5)).optim.lr == 0.5
    assert preset.with_values({"optim.lr": 0.5}).optim == \
        dataclasses.replace(preset.optim, lr=0.5)


def test_run_options_gather_the_flags_apart_from_the_recipe():
    import argparse

    from training.presets import RunOptions, command_line
    from vit.commands import train as train_command

    parser = argparse.ArgumentParser()
    train_command.add_arguments(parser)
    args = parser.parse_args(["--output", "out", "--resume", "--strategy", "mirrored",
                              "--no-export", "--set", "optim.lr=0.1", "--seed", "4"])
    assert command_line.run_options(args) == RunOptions(output="out", resume=True,
                                                        strategy="mirrored", export=False)
    preset = command_line.resolve_preset(args)
    assert preset.optim.lr == 0.1 and preset.seed == 4
