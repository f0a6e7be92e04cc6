"""Every `vit train` flag and every `--set` key reaches the resolved preset (the `Preset`
config.json records, with its source in the resolution log) or is refused with a reason; the
run options reach `RunOptions`. A new flag fails `test_the_table_names_every_flag` until it
is listed here."""

import pytest

from training.presets import command_line, get_preset, sections
from training.presets.overrides import field_types
from vit import cli
from vit_keras.preprocessing import IMAGENET_MEAN, parse_preprocessing

# flag -> (its tokens, the preset key it sets, the value that key then holds)
PRESET_FLAGS = {
    "--task": (["--task", "segment"], "objective.kind", "segment"),
    "--config": (["--config", "cifar10_scratch"], "name", "cifar10_scratch"),
    "--set": (["--set", "optim.lr=0.25"], "optim.lr", 0.25),
    "--seed": (["--seed", "7"], "seed", 7),
    "--data": (["--data", "folder:/photos"], "data.train", "folder:/photos"),
    "--val-data": (["--val-data", "folder:/val"], "data.val", "folder:/val"),
    "--model": (["--model", "S/16"], "model.hidden_size", 384),
    "--image-size": (["--image-size", "32"], "model.image_size", 32),
    "--weights": (["--weights", "model.keras"], "finetune.weights", "model.keras"),
    "--preprocessing": (["--preprocessing", "imagenet"], "data.preprocessing",
                        parse_preprocessing("imagenet")),
    "--finetune": (["--finetune", "lora", "--weights", "model.keras"], "finetune.mode", "lora"),
    "--epochs": (["--epochs", "3"], "schedule.epochs", 3),
    "--batch-size": (["--batch-size", "32"], "schedule.batch_size", 32),
    "--lr": (["--lr", "0.125"], "optim.lr", 0.125),
    "--mixed-precision": (["--mixed-precision", "float32"], "loop.mixed_precision", ""),
}
# flag -> (its tokens, the `RunOptions` field it sets, the value)
RUN_FLAGS = {
    "--output": (["--output", "/tmp/run"], "output", "/tmp/run"),
    "--resume": (["--resume"], "resume", True),
    "--overwrite": (["--overwrite"], "overwrite", True),
    "--strategy": (["--strategy", "mirrored"], "strategy", "mirrored"),
    "--tpu": (["--tpu", "grpc://10.0.0.1:8470"], "tpu", "grpc://10.0.0.1:8470"),
    "--data-dir": (["--data-dir", "/tfds"], "data_dir", "/tfds"),
    "--no-export": (["--no-export"], "export", False),
    "--formats": (["--formats", "tflite, onnx_int8"], "formats", "tflite,onnx_int8"),
    "--min-agreement": (["--min-agreement", "0.99"], "min_agreement", "0.99"),
    "--no-inspect": (["--no-inspect"], "inspect", False),
    "--verbose": (["--verbose", "2"], "verbose", 2),
    "--model-parallel": (["--model-parallel", "2"], "model_parallel", 2),
    "--coordinator": (["--coordinator", "h0:1234"], "coordinator", "h0:1234"),
    "--num-processes": (["--num-processes", "2"], "num_processes", 2),
    "--process-id": (["--process-id", "1"], "process_id", 1),
}
# flags that are neither recipe nor run option, and why
ELSEWHERE = {
    "--help": "argparse's own",
    "--backend": "chosen before any framework is imported (`vit.cli.select_backend`), "
                 "tested in tests/test_backends.py",
    "--debug": "every command's: shows the traceback of an error",
}


def _train_parser():
    subparsers = next(action for action in cli.build_parser()._actions
                      if action.choices and "train" in action.choices)
    return subparsers.choices["train"]


def _resolve(tokens):
    args = cli.build_parser().parse_args(["train", *tokens])
    return command_line.resolve_preset(args), command_line.run_options(args)


def test_the_table_names_every_flag():
    flags = {option for action in _train_parser()._actions
             for option in action.option_strings if option.startswith("--")}
    assert flags == set(PRESET_FLAGS) | set(RUN_FLAGS) | set(ELSEWHERE)


@pytest.mark.parametrize("flag", sorted(PRESET_FLAGS))
def test_a_recipe_flag_reaches_the_preset_and_its_config_json(flag):
    tokens, key, expected = PRESET_FLAGS[flag]
    preset, _ = _resolve(tokens)
    assert preset.value(key) == expected
    recorded = preset.to_dict()  # config.json's "preset"
    section, _, field = key.partition(".")
    saved = recorded[section][field] if field else recorded[section]
    assert saved == (expected.to_dict() if hasattr(expected, "to_dict") else expected)
    if flag != "--config":  # the preset itself, not a value set on it
        assert any(line.startswith(f"{key} = ") and line.endswith(f"({flag})")
                   for line in recorded["resolution"]), recorded["resolution"]


@pytest.mark.parametrize("flag", sorted(RUN_FLAGS))
def test_a_run_flag_reaches_the_run_options(flag):
    tokens, field, expected = RUN_FLAGS[flag]
    preset, options = _resolve(tokens)
    assert getattr(options, field) == expected
    assert preset == get_preset("digits_tiny")  # the recipe is untouched


def test_a_format_out_of_the_list_is_refused_before_training():
    with pytest.raises(ValueError, match="formats must be a non-empty subset of .*'png'"):
        _resolve(["--formats", "tflite,png"])


def test_the_weights_tag_sets_the_preprocessing_unless_the_user_did():
    laion = ["--model", "vit_base_patch16_clip_224", "--weights",
             "vit_base_patch16_clip_224.laion2b"]
    preset, _ = _resolve(laion)  # the tag's crop (1.0), not the --model family's default (0.9)
    assert preset.data.preprocessing.crop_fraction == 1.0
    assert [line for line in preset.to_dict()["resolution"]  # the last that set it
            if line.startswith("data.preprocessing")][-1].endswith("(--weights (family tag))")
    for chosen in (["--preprocessing", "clip"], ["--set", "data.preprocessing=clip"]):
        preset, _ = _resolve([*laion, *chosen])
        assert preset.data.preprocessing == parse_preprocessing("clip")


def _changed_value(key, current):
    """A valid value other than `current` for `key`, by its type and its section's rules."""
    if key in SET_VALUES:
        return SET_VALUES[key]
    section, _, field = key.partition(".")
    rule = getattr(sections.all_sections().get(section), "RULES", {}).get(field)
    rule = rule() if callable(rule) else rule
    if isinstance(rule, tuple):
        return next(choice for choice in rule if choice != current)
    if isinstance(current, bool):
        return not current
    if isinstance(current, int):
        return current + 1
    if isinstance(current, float):
        return current / 2 if current else 0.5
    if isinstance(current, str):
        return current + "x" if current else "x"
    raise AssertionError(f"no sample value for {key} ({current!r}): add it to SET_VALUES")


# keys whose type alone gives no valid value other than the default
SET_VALUES = {
    "model.image_size": (32, 48), "model.resnet_layers": (), "model.patch_size": 8,
    "model.hidden_size": 48, "model.num_heads": 2, "model.mlp_dim": 96,
    "model.representation_size": 16, "model.layer_scale_init": 1e-5,
    "model.projection_size": 16, "data.preprocessing": parse_preprocessing("imagenet"),
    "model.classifier": "token", "model.posemb": "sincos2d", "model.stem": "patchify",
    "model.activation": "quick_gelu", "model.remat": True, "model.channels": 1,
    "data.train": "folder:/photos", "data.val": "folder:/val", "data.classes": "1,2",
    "augment.crop": "inception", "objective.teacher": "teacher.keras",
    "finetune.weights": "model.keras", "finetune.lora_targets": "all",
    "clip.frames": 16, "clip.tubelet_frames": 4,  # frames a multiple of the tubelet's
    "model.architecture": "mobilevit_xxs",
}
# keys that need another set with them: (the other --set, what the key alone is refused with)
COMPANIONS = {
    "model.distilled": ("model.classifier=token", "needs classifier='token'"),
    "model.dynamic_image_pad": ("model.dynamic_image_size=true", "needs dynamic_image_size"),
    "model.resnet_layers": ("model.stem=patchify", "stem='conv' replaces the patch projection"),
    "model.architecture": ("model.image_size=32", "square images of at least 32 px"),
}
# keys a preset refuses, with the reason it names
REFUSED = {"model.num_classes": "comes from the data"}


def _as_text(value):
    if hasattr(value, "to_dict"):
        return "imagenet"
    if isinstance(value, tuple):
        return "x".join(map(str, value)) if len(value) == 2 and value[0] > 8 else \
            ",".join(map(str, value))
    return "none" if value is None else str(value)


@pytest.mark.parametrize("key", sorted(field_types()))
def test_every_set_key_reaches_the_preset_or_is_refused_with_a_reason(key):
    base = get_preset("digits_tiny")
    if key in REFUSED:
        with pytest.raises(ValueError, match=REFUSED[key]):
            _resolve(["--set", f"{key}=1"])
        return
    value = _changed_value(key, base.value(key))
    assignment = ["--set", f"{key}={_as_text(value)}"]
    if key in COMPANIONS:
        companion, reason = COMPANIONS[key]
        with pytest.raises(ValueError, match=reason):
            _resolve(assignment)
        assignment += ["--set", companion]
    preset, _ = _resolve(assignment)
    assert preset.value(key) == value != base.value(key)
    assert f"{key} = " in "\n".join(preset.to_dict()["resolution"])


def test_a_moved_key_names_its_new_place():
    """The preprocessing is the model's data contract, apart from its architecture."""
    with pytest.raises(ValueError, match="'model.preprocessing' has moved: write "
                                         "'data.preprocessing'"):
        _resolve(["--set", "model.preprocessing=imagenet"])
    with pytest.raises(ValueError, match="data.preprocessing"):
        _resolve(["--set", "preprocessing=imagenet"])


def test_a_tasks_options_are_its_own_section_and_the_old_keys_name_it():
    """`segment.*` and `detect.*` are the tasks' own sections (in their folders, listed from
    the registry): a preset that sets none has their defaults, `--set` reaches them, config.json
    records them, and the `objective.segment_*`/`detect_*` keys of before are refused with
    their new names."""
    from training.presets.overrides import apply_overrides
    from training.tasks.detect.section import Detect
    from training.tasks.segment.section import Segment

    segmenting = get_preset("digits_segment")
    assert segmenting.segment.head == "skip" and get_preset("digits_tiny").segment == Segment()
    assert get_preset("digits_detect").detect == Detect(scale_min=0.7)
    changed = apply_overrides(segmenting, ["segment.native=true", "detect.queries=7"])
    assert changed.segment.native and changed.detect.queries == 7
    assert changed.value("segment.native") is True
    assert changed.to_dict()["segment"]["head"] == "skip"
    assert {"segment.head", "detect.queries"} <= set(field_types())
    for old, new in [("objective.segment_head", "segment.head"),
                     ("objective.detect_queries", "detect.queries")]:
        with pytest.raises(ValueError, match=f"write '{new}'"):
            apply_overrides(segmenting, [f"{old}=3"])
    with pytest.raises(ValueError, match="segment.head"):
        apply_overrides(segmenting, ["segment.head=wide"])
