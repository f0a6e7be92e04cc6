"""Named experiment presets: one `Preset` in sections, one module per preset, one registry.

A preset is the whole recipe of a run, in sections (`training.presets.sections`): `data`,
`model` (a `vit_keras.ViTConfig`), `optim`, `schedule`, `augment`, `objective`, `finetune` and
`loop`, each validated when created. `vit train --config NAME` starts from one; command-line
flags and `--set SECTION.FIELD=value` override single fields (`training.presets.overrides`).
Add a preset by writing `training/presets/<name>.py` with a `PRESET = Preset(...)` and
listing its name in `SHARED_PRESETS`. A task's own preset (the one `vit train --task TASK`
starts from, named by its line in `vit_keras.tasks.TASKS`) lives in its folder,
`training/tasks/<task>/preset.py`, and is listed from the registry.

This module imports neither Keras nor TensorFlow (`vit train --help` reads it).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json

from training.presets.sections import (SECTIONS, Augment, Data, Finetune, Loop, Objective,
                                           Optim, Schedule, all_sections, task_sections)
from vit_keras import families, tasks
from vit_keras.config import ARCHITECTURE_FIELDS, ViTConfig, get_variant
from vit_keras.mobilevit.config import MIN_IMAGE_SIZE as MOBILEVIT_MIN_SIZE
from vit_keras.mobilevit.config import VARIANTS as MOBILEVIT_VARIANTS
from vit_keras.mobilevit.config import timm_name as mobilevit_name

SHARED_PRESETS = ("digits_tiny", "cifar10_scratch", "finetune_384", "imagenet_s16",
                  "pretrain_b16", "mpp_digits", "mpp_digits_finetune", "deit_distill",
                  "digits_upstream", "digits_transfer")


def preset_modules() -> dict[str, str]:
    """Every preset's name -> its module: the shared ones, then each registered task's own."""
    modules = {name: f"training.presets.{name}" for name in SHARED_PRESETS}
    for task, parts in tasks.TASKS.items():
        modules.setdefault(parts.preset, parts.preset_module or f"training.tasks.{task}.preset")
    return modules


def preset_names() -> tuple[str, ...]:
    """Every preset's name (`vit train --config`'s choices), a registered task's included."""
    return tuple(preset_modules())


DEFAULT_PRESET = "digits_tiny"
# The flat keys of the presets before they had sections, where the sectioned name differs from
# `SECTION.<the same name>`. They are no longer accepted: `flat_keys` serves only the error
# that names a flat key's sectioned form.
RENAMED_FLAT_KEYS = {"data": "data.train", "val_data": "data.val", "schedule": "schedule.decay",
                     "train_crop": "augment.crop", "objective": "objective.kind",
                     "finetune": "finetune.mode"}
# Keys that moved to another section, with their new place: the model's preprocessing is its
# data contract, apart from the architecture (`ViTConfig`); a task's options left the
# `objective` section for the task's own (`moved_keys`).
MOVED_KEYS = {"model.preprocessing": "data.preprocessing"}
# Sources that choose for the user rather than express the user's choice (fitting a preset to
# its data, the recipe `--weights` brings): the fields they set stay free for the next such
# step (batch fitting, a resumed run's rule), unlike a user's.
FINETUNE_RECIPE_SOURCE = "--weights (fine-tuning recipe)"
DERIVED_SOURCES = ("small-data rule", "batch fitting", FINETUNE_RECIPE_SOURCE)
TOP_LEVEL_KEYS = ("name", "seed")


@dataclasses.dataclass(frozen=True)
class Preset:
    """Everything a training run needs to know.

    Attributes:
        name: preset name; also the default output folder `saved_models/<name>/` on the
            preset's built-in data (`training.run.default_output`).
        seed: seed of the split, the initialisation, the shuffles and the augmentation.
        model: the `vit_keras.ViTConfig` of the model (set a field with `--set
            model.FIELD=...`, take a named variant's shape with `--model S/16`); `num_classes`
            comes from the data.
        data, optim, schedule, augment, objective, finetune, loop: the sections.
        tasks: the task sections set here (`segment`, `detect`: each registered task's own,
            `training.presets.sections.task_sections`); a task's section not set is its
            defaults. Read each by its name (`preset.segment.head`).
        sources: the resolution log: ('SECTION.FIELD' or 'seed', source, the value it set, as
            text) for every value set on top of the preset's module, in the order applied (`--set`, the flags,
            `--model`, the weights, the small-data rule, batch fitting). The keys a user's
            source set are `pinned`: the small-data rule leaves them.
    """

    name: str = "custom"
    seed: int = 0
    model: ViTConfig = dataclasses.field(default_factory=ViTConfig)
    data: Data = Data()
    optim: Optim = Optim()
    schedule: Schedule = Schedule()
    augment: Augment = Augment()
    objective: Objective = Objective()
    finetune: Finetune = Finetune()
    loop: Loop = Loop()
    tasks: tuple = ()
    sources: tuple[tuple[str, str, str], ...] = ()

    def __getattr__(self, name: str):
        """A task's section by its name (its defaults where this preset sets none)."""
        if name in task_sections():
            return next((section for section in self.__dict__.get("tasks", ())
                         if section.NAME == name), None) or task_sections()[name]()
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def _with_sections(self, sections: dict) -> "Preset":
        """A copy with `sections` ({name: section}: `model`, a shared one or a task's) in
        place."""
        own = {name: value for name, value in sections.items() if name in task_sections()}
        shared = {name: value for name, value in sections.items() if name not in own}
        kept = tuple(section for section in self.tasks if section.NAME not in own)
        changed = tuple(section for section in own.values()  # its defaults: nothing to keep
                        if section != type(section)())
        return dataclasses.replace(self, **shared, tasks=kept + changed)

    @property
    def pinned(self) -> tuple[str, ...]:
        """The keys a user's source set (every source but `DERIVED_SOURCES`), sorted."""
        return tuple(sorted({key for key, source, _ in self.sources
                             if source not in DERIVED_SOURCES}))

    def replace(self, source: str = "preset", **changes) -> "Preset":
        """A copy with `changes` applied: `name`, `seed`, `model` (a `ViTConfig`), or a
        section by its name, whole (`optim=Optim(...)`) or some of its fields as a dict
        (`schedule={"epochs": 3}`, `model={"image_size": 32}`).

        Args:
            source: what set the fields given as dicts, for `sources`.
            **changes: see above.

        Raises:
            ValueError: an unknown key (a flat key of earlier versions: naming its sectioned
                form), or a value its section refuses.
        """
        whole, sections, fields = {}, {}, {}
        for key, value in changes.items():
            if key in ("name", "seed") or (key == "model" and isinstance(value, ViTConfig)):
                whole[key] = value
            elif isinstance(value, all_sections().get(key, ())):
                sections[key] = value
            elif key in (*all_sections(), "model") and isinstance(value, dict):
                fields.update({f"{key}.{field}": item for field, item in value.items()})
            else:
                raise ValueError(unknown_key_message(key, "Preset"))
        return dataclasses.replace(self, **whole)._with_sections(sections).with_values(
            fields, source)

    def with_values(self, values: dict, source: str = "preset") -> "Preset":
        """A copy with `{'SECTION.FIELD': value}` applied (`model.FIELD` and `seed`
        included), each key logged in `sources` as set by `source`.

        Raises:
            ValueError: an unknown key, or values their sections refuse (all of them named).
        """
        grouped: dict[str, dict] = {}
        top = {key: value for key, value in values.items() if key in TOP_LEVEL_KEYS}
        for key, value in values.items():
            section, _, field = key.partition(".")
            if key in TOP_LEVEL_KEYS:
                continue
            if section not in (*all_sections(), "model") or not field or key in moved_keys():
                raise ValueError(unknown_key_message(key, "Preset"))
            grouped.setdefault(section, {})[field] = value
        changed, problems = {}, []
        for section, fields in grouped.items():  # every section's problems in one error
            try:
                changed[section] = getattr(self, section).replace(**fields)
            except ValueError as error:
                problems.append(str(error))
        if problems:
            raise ValueError("; ".join(problems))
        applied = dataclasses.replace(self, **top)._with_sections(changed)
        log = tuple((key, source, _describe(applied.value(key))) for key in values)
        return dataclasses.replace(applied, sources=self.sources + log)

    def replace_model(self, source: str = "preset", **changes) -> "Preset":
        """A copy whose `model` has `changes` applied (validated by `ViTConfig`)."""
        return self.with_values({f"model.{name}": value for name, value in changes.items()},
                                source)

    def with_variant(self, name: str, source: str = "--model") -> "Preset":
        """A copy whose model takes the architecture of the variant `name` ('S/16', 'B/16',
        'R50+B/16', ...): its `ARCHITECTURE_FIELDS`. The model's other options (image size,
        pooling, dropout, stochastic depth, position embedding, ...) stay the preset's. A
        family model ('vit_small_patch14_dinov2') also gives its pooling, registers, layer
        scale and GELU (`vit_keras.families.FAMILY_FIELDS`), its preprocessing
        (`data.preprocessing`), and its weights' image size when the preset's is no multiple
        of its patch size. A MobileViT of timm ('mobilevit_xs', 'mobilevitv2_100') sets
        `model.architecture`, its preprocessing (timm's: [0, 1], bicubic) and a square image
        size of at least 32 px (its five stride-2 stages)."""
        if variant := mobilevit_name(name):  # a convolutional network: its name is its shape
            values = {"model.architecture": variant,
                      "data.preprocessing": MOBILEVIT_VARIANTS[variant].preprocessing}
            if min(self.model.image_hw) < MOBILEVIT_MIN_SIZE or \
                    self.model.image_hw[0] != self.model.image_hw[1]:
                values["model.image_size"] = max(MOBILEVIT_MIN_SIZE, *self.model.image_hw)
            return self.with_values(values, source)
        if families.is_family_name(name):  # DINOv2, SigLIP, ...: also its pooling, registers,
            spec, _ = families.split_name(name)  # layer scale and preprocessing
            values = {f"model.{field}": getattr(spec.config, field) for field in
                      (*ARCHITECTURE_FIELDS, *families.FAMILY_FIELDS)}
            if any(side % spec.config.patch_size for side in self.model.image_hw):
                values["model.image_size"] = spec.config.image_size  # the weights' own
            values["data.preprocessing"] = spec.preprocessing
            return self.with_values(values, source)
        variant = get_variant(name)
        return self.replace_model(source, **{field: getattr(variant, field)
                                             for field in ARCHITECTURE_FIELDS})

    def resolution(self) -> list[str]:
        """The resolution log as lines 'KEY = VALUE  (SOURCE)', in the order applied."""
        return [f"{key} = {value}  ({source})" for key, source, value in self.sources]

    def value(self, key: str):
        """The value of 'SECTION.FIELD' (`model.FIELD` included) or of 'seed'/'name'."""
        if key in TOP_LEVEL_KEYS:
            return getattr(self, key)
        section, _, field = key.partition(".")
        return getattr(getattr(self, section), field)

    def to_dict(self) -> dict:
        """A JSON-friendly dict: name, seed, then each section as a dict (`model` as
        `ViTConfig.to_dict`)."""
        data = {"name": self.name, "seed": self.seed, "model": self.model.to_dict()}
        data.update({name: _section_dict(getattr(self, name)) for name in all_sections()})
        data["pinned"] = list(self.pinned)
        data["resolution"] = self.resolution()
        return data


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How and where one run executes, apart from its recipe (`vit train`'s other flags).

    Attributes:
        output: output folder ('' = `training.run.default_output`; local or gs://).
        resume: True: continue from the backup in the output folder (there must be one);
            'auto': continue when there is one, else start afresh (a finished run: nothing to
            do); False: start afresh.
        overwrite: replace the output folder of an earlier run.
        strategy: tf.distribute strategy on TensorFlow ('auto', 'default', 'mirrored',
            'multi_worker', 'tpu').
        tpu: TPU name or grpc:// address.
        data_dir: tfds data_dir.
        export: export SavedModel/TFLite/ONNX at the end.
        formats: the formats that export writes, as `vit export --formats` takes them ('' =
            its default formats).
        min_agreement: the export's bars, as `vit export --min-agreement` takes them ('' =
            0.999 top-1 agreement with Keras for float files, 0.98 for int8 ones).
        inspect: write the attention/embedding analysis at the end.
        verbose: Keras' verbosity (0 = vit's own one line per epoch).
        model_parallel: JAX: devices each model is sharded over.
        coordinator, num_processes, process_id: JAX multi-host.
    """

    output: str = ""
    resume: bool | str = False
    overwrite: bool = False
    strategy: str = "auto"
    tpu: str | None = None
    data_dir: str | None = None
    export: bool = True
    formats: str = ""
    min_agreement: str = ""
    inspect: bool = True
    verbose: int = 0
    model_parallel: int = 1
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None


def moved_keys() -> dict[str, str]:
    """Every key that moved -> its new 'SECTION.FIELD': `MOVED_KEYS`, and each task option
    that left the `objective` section for the task's own (`objective.segment_head` ->
    `segment.head`)."""
    return _moved_keys(tuple(task_sections().items()))


@functools.cache
def _moved_keys(named_sections: tuple) -> dict[str, str]:
    moved = dict(MOVED_KEYS)
    for name, section in named_sections:
        moved.update({f"{section.RENAMED_FROM}{field.name}": f"{name}.{field.name}"
                      for field in dataclasses.fields(section)
                      if getattr(section, "RENAMED_FROM", "")})
    return moved


def flat_keys() -> dict[str, str]:
    """Every flat key (the names before sections, no longer accepted) -> its
    `SECTION.FIELD`, for the error that names it."""
    return _flat_keys(tuple(all_sections().items()))


@functools.cache
def _flat_keys(named_sections: tuple) -> dict[str, str]:
    renamed = set(RENAMED_FLAT_KEYS.values())  # 'train', 'kind', ... alone say too little
    keys = {field.name: path for name, section in named_sections
            for field in dataclasses.fields(section)
            if (path := f"{name}.{field.name}") not in renamed}
    return {**keys, **RENAMED_FLAT_KEYS}


def task_preset(task: str | None) -> str:
    """The preset `vit train --task TASK` starts from (`DEFAULT_PRESET` without `--task`)."""
    return tasks.parts(task).preset if task else DEFAULT_PRESET


def get_preset(name: str) -> Preset:
    """Returns the preset called `name` (one of `preset_names()`)."""
    modules = preset_modules()
    if name not in modules:
        raise ValueError(f"unknown preset {name!r}; expected one of {list(modules)}")
    return importlib.import_module(modules[name]).PRESET


def describe(preset: Preset) -> str:
    """The preset as indented JSON (for logs and `config.json`)."""
    return json.dumps(preset.to_dict(), indent=2, sort_keys=False)


def unknown_key_message(key: str, what: str) -> str:
    """The error for a key that is no 'SECTION.FIELD': a flat key of earlier versions names
    its sectioned form, a model field its `model.` form, a moved key its new place."""
    if key in moved_keys():
        new = moved_keys()[key]
        return (f"{what} {key!r} has moved: write {new!r} (--set {new}=...); the "
                f"{key.partition('.')[0]} section no longer holds it")
    if key in flat_keys():
        return (f"{what} {key!r}: the flat keys of earlier versions are gone; write "
                f"{flat_keys()[key]!r} (--set {flat_keys()[key]}=...)")
    if key in {field.name for field in dataclasses.fields(ViTConfig)}:
        return f"{what} {key!r} is a model option: write --set model.{key}=... ('model.{key}')"
    return (f"{what}: unknown key {key!r}; expected SECTION.FIELD with SECTION one of "
            f"{['model', *all_sections()]}, or seed (`vit train --help` lists every key)")


def _section_dict(section) -> dict:
    """A section's fields as JSON-friendly values (a `Preprocessing` as its `to_dict`)."""
    values = {field.name: getattr(section, field.name) for field in dataclasses.fields(section)}
    return {name: value.to_dict() if hasattr(value, "to_dict") else value
            for name, value in values.items()}


def _describe(value) -> str:
    describe_ = getattr(value, "describe", None)
    return describe_() if callable(describe_) else repr(value)
