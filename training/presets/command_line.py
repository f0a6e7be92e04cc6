"""The preset and run options a `vit train` command line makes: `--config`, then `--model`,
`--set` and the other flags. Read without a framework, so that `vit train` answers a bad flag,
key, value or name before TensorFlow is imported (`vit.commands.train.check`).
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from training import presets
from training.presets import overrides, sections
from vit_app.data import specs
from vit_app.inference.export import formats as export_formats
from vit_keras import families
from vit_keras.checkpoints import keras_hub_config
from vit_keras.config import ARCHITECTURE_FIELDS, variant_of
from vit_keras.pretrained import registry

_FLAG_KEYS = {  # command-line flag -> preset key
    "seed": "seed", "data": "data.train", "val_data": "data.val", "image_size": "model.image_size",
    "preprocessing": "data.preprocessing", "weights": "finetune.weights",
    "finetune": "finetune.mode", "epochs": "schedule.epochs", "batch_size": "schedule.batch_size",
    "lr": "optim.lr", "mixed_precision": "loop.mixed_precision",
}
# What a user wrote outright: a later source (the weights' own preprocessing or image size)
# leaves a key these set.
_EXPLICIT_SOURCES = ("--set", *(f"--{flag.replace('_', '-')}" for flag in _FLAG_KEYS))


def resolve_preset(args: argparse.Namespace) -> presets.Preset:
    """The one preset of a `vit train` command line, resolved in one ordered step: the preset
    of `--config` (default: `--task`'s), `--task`, `--model`'s architecture, `--set`, the
    flags, then what `--weights` fixes (a keras-hub preset's architecture, the weights'
    preprocessing and image size where the user set none). Each value is logged with its
    source in `Preset.sources` (config.json's `resolution`); the small-data rule and batch
    fitting follow at set-up, once the data is read.

    Raises:
        ValueError: an unknown preset, key, flag value or weight name.
    """
    task = getattr(args, "task", None)
    preset = presets.get_preset(getattr(args, "config", None) or presets.task_preset(task))
    if task:
        preset = preset.with_values({"objective.kind": task}, "--task")
    if args.model:
        preset = preset.with_variant(args.model, "--model")
    preset = overrides.apply_overrides(preset, args.set)
    for flag, key in _FLAG_KEYS.items():
        value = getattr(args, flag, None)
        if value is not None:
            preset = preset.with_values({key: _flag_value(flag, value)},
                                        f"--{flag.replace('_', '-')}")
    check_weight_name(preset)
    preset = preset.with_values(preset_architecture(preset), "--weights (keras-hub preset)")
    config_named = getattr(args, "config", None) is not None
    preset = preset.with_values(release_model(preset, config_named), "--weights (release)")
    preset = preset.with_values(weights_preprocessing(preset), "--weights (family tag)")
    if not config_named:
        preset = preset.with_values(finetune_recipe(preset), presets.FINETUNE_RECIPE_SOURCE)
    return preset


def _flag_value(flag: str, value):
    if flag == "mixed_precision" and value == "float32":
        return ""
    return value


def explicit_keys(preset: presets.Preset) -> set[str]:
    """The keys the user wrote outright (`--set` and the flags)."""
    return {key for key, source, _ in preset.sources if source in _EXPLICIT_SOURCES}


def run_options(args: argparse.Namespace) -> presets.RunOptions:
    """The `RunOptions` of the command line (a bad --formats or --min-agreement fails here,
    before training)."""
    formats = export_formats.check_formats(args.formats)
    export_formats.min_agreements(formats, export_formats.parse_min_agreement(args.min_agreement))
    return presets.RunOptions(
        output=args.output or "", resume=args.resume, overwrite=args.overwrite,
        strategy=args.strategy, tpu=args.tpu, data_dir=args.data_dir,
        export=not args.no_export, min_agreement=args.min_agreement,
        formats="" if formats == export_formats.DEFAULT_FORMATS else ",".join(formats),
        inspect=not args.no_inspect, verbose=args.verbose,
        model_parallel=args.model_parallel, coordinator=args.coordinator,
        num_processes=args.num_processes, process_id=args.process_id)


def check_weight_name(preset: presets.Preset) -> None:
    """A released weight name must exist for the model's architecture (checked before any
    data is read or anything is downloaded)."""
    weights = preset.finetune.weights
    if weights and families.weights_file_reference(weights):
        spec, _ = families.split_name(weights)
        if any(getattr(preset.model, field) != getattr(spec.config, field)
               for field in ARCHITECTURE_FIELDS):
            raise ValueError(f"--weights {weights} are {spec.name}'s; this preset's model has "
                             f"another architecture: add --model {spec.name}")
    if preset.finetune.weights and registry.is_weight_name(preset.finetune.weights):
        variant = variant_of(preset.model)
        if variant is None:
            raise ValueError(f"--weights {preset.finetune.weights} names a release for an official "
                             "architecture; this preset's model is not one: add --model B/16 "
                             "(or another from `vit weights list`)")
        release = registry.find(preset.finetune.weights, variant)
        if "model.classifier" in explicit_keys(preset) and \
                preset.model.classifier != release.classifier:
            raise ValueError(f"--weights {preset.finetune.weights} was trained with classifier="
                             f"{release.classifier!r}; --set model.classifier="
                             f"{preset.model.classifier} asks for another pooling, which its "
                             "encoder never learned: drop that --set")


def release_model(preset: presets.Preset, config_named: bool = False) -> dict:
    """`--weights` naming an official release, as preset values: the model pools as the
    release was trained (`classifier`) and takes the release's image size, unless the user
    set one (`--image-size`, `--set`) or named a preset (`--config finetune_384`: 384 px)
    whose size the patch divides."""
    weights = preset.finetune.weights
    variant = variant_of(preset.model)
    if not (weights and registry.is_weight_name(weights) and variant):
        return {}
    release = registry.find(weights, variant)
    values = {"model.classifier": release.classifier}
    if not (config_named or "model.image_size" in explicit_keys(preset)) or \
            any(side % preset.model.patch_size for side in preset.model.image_hw):
        values["model.image_size"] = release.image_size
    return values


# The official fine-tuning recipe (finetune_384: SGD momentum 0.9, lr 0.01, no weight decay,
# clip 1.0, batch 512 in 8 accumulated steps, cosine, inception crop and flip, no stochastic
# depth) with its warmup in epochs: a folder of a few thousand images is a few dozen steps of
# 512, which finetune_384's 500 warmup steps would cover whole.
RECIPE_PRESET = "finetune_384"
RECIPE_SECTIONS = ("optim", "schedule", "augment")
RECIPE_WARMUP = {"schedule.warmup_steps": 0, "schedule.warmup_epochs": 1.0}


def finetune_recipe(preset: presets.Preset) -> dict:
    """The recipe of a model fine-tuned on classes from `--weights` when no `--config` names
    one, as preset values: the task's default preset trains from scratch (the digits' 80
    epochs of AdamW at 3e-3 would undo the pre-training), so `RECIPE_PRESET`'s optimizer,
    schedule and augmentation replace its own, except the keys the user set."""
    task, _ = sections.objective_data(preset.objective.kind)
    if not preset.finetune.weights or specs.task_data(task).labels != "classes":
        return {}  # the recipe's crops move no masks or boxes
    recipe = presets.get_preset(RECIPE_PRESET)
    values = {f"{name}.{field.name}": getattr(getattr(recipe, name), field.name)
              for name in RECIPE_SECTIONS
              for field in dataclasses.fields(getattr(recipe, name))}
    values.update(RECIPE_WARMUP, **{"model.drop_path_rate": recipe.model.drop_path_rate})
    explicit = explicit_keys(preset)
    return {key: value for key, value in values.items()
            if key not in explicit and preset.value(key) != value}


def weights_preprocessing(preset: presets.Preset) -> dict:
    """The preprocessing of the family weights' tag (`--weights NAME.TAG`), as preset values:
    e.g. OpenCLIP's laion2b crop differs from OpenAI's. A preprocessing the user set
    (`--preprocessing`, `--set data.preprocessing=...`) stays."""
    weights = preset.finetune.weights
    if not (weights and families.weights_file_reference(weights)) or \
            "data.preprocessing" in explicit_keys(preset):
        return {}
    spec, tag = families.split_name(weights)
    return {"data.preprocessing": spec.tags[tag]}


def preset_architecture(preset: presets.Preset) -> dict:
    """`--weights` naming a keras-hub preset folder, as preset values: the model takes the
    preset's architecture (whatever `--model` said: no other loads its weights), pooling,
    GELU, registers and layer scale; and its preprocessing and image size unless the user set
    them (`--preprocessing`, `--image-size`, `--set`), the image size also when the preset's
    patch does not divide it."""
    weights = preset.finetune.weights
    if not weights or not keras_hub_config.is_preset(os.path.expanduser(weights)):
        return {}
    architecture = keras_hub_config.preset_architecture(os.path.expanduser(weights))
    kept = (*ARCHITECTURE_FIELDS, *families.FAMILY_FIELDS, *keras_hub_config.PLAIN_VIT,
            "dropout_rate", "attention_dropout_rate")
    fields = {name: value for name, value in architecture.fields.items() if name in kept}
    explicit = explicit_keys(preset)
    patch = fields["patch_size"]
    if "model.image_size" not in explicit or \
            any(side % patch for side in preset.model.image_hw):
        fields["image_size"] = architecture.fields["image_size"]
    values = {f"model.{name}": value for name, value in fields.items()}
    if architecture.preprocessing is not None and "data.preprocessing" not in explicit:
        values["data.preprocessing"] = architecture.preprocessing
    return values


def check_data_specs(preset: presets.Preset) -> None:
    """The preset's training and validation data specs, as far as they can be checked without
    reading images (`vit_app.data.specs.check_spec`); a classifier needs 2 classes."""
    task, classes_needed = sections.objective_data(preset.objective.kind)
    specs.check_spec(preset.data.train, min_classes=classes_needed, task=task)
    if preset.data.val:
        specs.check_spec(preset.data.val, task=task)
