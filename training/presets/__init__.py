"""Named experiment presets: one `Preset` in sections, one module per preset, one registry.

A preset is the whole recipe of a run, in sections (`training.presets.sections`): `data`,
`model` (a `vit_keras.ViTConfig`), `optim`, `schedule`, `augment`, `objective`, `finetune` and
`loop`, each validated when created. `vit train --config NAME` starts from one; command-line
flags and `--set SECTION.FIELD=value` override single fields (`training.presets.overrides`).
Add a preset by writing `training/presets/<name>.py` with a `PRESET = Preset(...)` and
listing its name in `PRESET_NAMES`.

This module imports neither Keras nor TensorFlow (`vit train --help` reads it).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json

from training.presets.sections import (SECTIONS, Augment, Data, Finetune, Loop, Objective,
                                           Optim, Schedule)
from vit_keras import families
from vit_keras.config import ARCHITECTURE_FIELDS, ViTConfig, get_variant

PRESET_NAMES = ("digits_tiny", "cifar10_scratch", "finetune_384", "imagenet_s16", "pretrain_b16",
                "mpp_digits", "mpp_digits_finetune", "deit_distill", "digits_upstream",
                "digits_transfer", "digits_segment")
DEFAULT_PRESET = "digits_tiny"
TASK_PRESETS = {"classify": DEFAULT_PRESET, "segment": "digits_segment"}  # `vit train --task`
# Flat keys of the presets before they had sections, where the sectioned name differs from
# `SECTION.<the same name>`; every other flat key is the field's own name (`lr` = `optim.lr`).
RENAMED_FLAT_KEYS = {"data": "data.train", "val_data": "data.val", "schedule": "schedule.decay",
                     "train_crop": "augment.crop", "objective": "objective.kind",
                     "finetune": "finetune.mode"}


@dataclasses.dataclass(frozen=True)
class Preset:
    """Everything a training run needs to know.

    Attributes:
        name: preset name; also the default output folder `saved_models/<name>/`.
        seed: seed of the split, the initialisation, the shuffles and the augmentation.
        model: the `vit_keras.ViTConfig` of the model (set a field with `--set
            model.FIELD=...`, take a named variant's shape with `--model S/16`); `num_classes`
            comes from the data.
        data, optim, schedule, augment, objective, finetune, loop: the sections.
        pinned: the 'SECTION.FIELD' keys set on top of the preset's module (`--set`, the
            flags, `--model`, `--image-size`): the small-data rule (`data.adapt`) leaves them.
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
    pinned: tuple[str, ...] = ()

    def replace(self, **changes) -> "Preset":
        """A copy with `changes` applied: `name`, `seed`, `model` or a whole section by its
        name (`optim=Optim(...)`), or one field of a section by its flat key (`lr=0.1`,
        `epochs=3`, `data="folder:x"`: see `flat_keys`).

        Raises:
            ValueError: an unknown key, or a value its section refuses.
        """
        whole, fields = {}, {}
        for key, value in changes.items():
            if key in ("name", "seed", "model", "pinned") or \
                    isinstance(value, SECTIONS.get(key, ())):
                whole[key] = value
            elif key in flat_keys():
                fields[flat_keys()[key]] = value
            else:
                raise ValueError(f"unknown preset key {key!r}; expected name, seed, model, a "
                                 f"section {sorted(SECTIONS)} or one of {sorted(flat_keys())}")
        return dataclasses.replace(self, **whole).with_values(fields)

    def with_values(self, values: dict) -> "Preset":
        """A copy with `{'SECTION.FIELD': value}` applied (`model.FIELD` included)."""
        grouped: dict[str, dict] = {}
        for key, value in values.items():
            section, _, field = key.partition(".")
            if section not in (*SECTIONS, "model") or not field:
                raise ValueError(f"unknown preset key {key!r}; expected SECTION.FIELD with "
                                 f"SECTION one of {['model', *SECTIONS]}")
            grouped.setdefault(section, {})[field] = value
        changed, problems = {}, []
        for section, fields in grouped.items():  # every section's problems in one error
            try:
                changed[section] = getattr(self, section).replace(**fields)
            except ValueError as error:
                problems.append(str(error))
        if problems:
            raise ValueError("; ".join(problems))
        return dataclasses.replace(self, pinned=self._pin(values), **changed)

    def replace_model(self, **changes) -> "Preset":
        """A copy whose `model` has `changes` applied (validated by `ViTConfig`)."""
        return dataclasses.replace(self, model=self.model.replace(**changes),
                                   pinned=self._pin(f"model.{name}" for name in changes))

    def _pin(self, keys) -> tuple[str, ...]:
        return tuple(sorted(set(self.pinned) | set(keys)))

    def with_variant(self, name: str) -> "Preset":
        """A copy whose model takes the architecture of the variant `name` ('S/16', 'B/16',
        'R50+B/16', ...): its `ARCHITECTURE_FIELDS`. The model's other options (image size,
        pooling, dropout, stochastic depth, position embedding, ...) stay the preset's. A
        family model ('vit_small_patch14_dinov2') also gives its pooling, registers, layer
        scale, GELU and preprocessing (`vit_keras.families.FAMILY_FIELDS`), and its weights'
        image size when the preset's is no multiple of its patch size."""
        if families.is_family_name(name):  # DINOv2, SigLIP, ...: also its pooling, registers,
            spec, _ = families.split_name(name)  # layer scale and preprocessing
            fields = {field: getattr(spec.config, field) for field in
                      (*ARCHITECTURE_FIELDS, *families.FAMILY_FIELDS)}
            if any(side % spec.config.patch_size for side in self.model.image_hw):
                fields["image_size"] = spec.config.image_size  # the weights' own
            return self.replace_model(**fields)
        variant = get_variant(name)
        return self.replace_model(**{field: getattr(variant, field)
                                     for field in ARCHITECTURE_FIELDS})

    def to_dict(self) -> dict:
        """A JSON-friendly dict: name, seed, then each section as a dict (`model` as
        `ViTConfig.to_dict`)."""
        data = {"name": self.name, "seed": self.seed, "model": self.model.to_dict()}
        data.update({name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS})
        data["pinned"] = list(self.pinned)
        return data


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """How and where one run executes, apart from its recipe (`vit train`'s other flags).

    Attributes:
        output: output folder ('' = saved_models/<preset name>; local or gs://).
        resume: True: continue from the backup in the output folder (there must be one);
            'auto': continue when there is one, else start afresh (a finished run: nothing to
            do); False: start afresh.
        overwrite: replace the output folder of an earlier run.
        strategy: tf.distribute strategy on TensorFlow ('auto', 'default', 'mirrored',
            'multi_worker', 'tpu').
        tpu: TPU name or grpc:// address.
        data_dir: tfds data_dir.
        export: export SavedModel/TFLite/ONNX at the end.
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
    min_agreement: str = ""
    inspect: bool = True
    verbose: int = 0
    model_parallel: int = 1
    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None


@functools.cache
def flat_keys() -> dict[str, str]:
    """Every flat key (the names before sections) -> its `SECTION.FIELD`."""
    renamed = set(RENAMED_FLAT_KEYS.values())  # 'train', 'kind', ... alone say too little
    keys = {field.name: path for name, section in SECTIONS.items()
            for field in dataclasses.fields(section)
            if (path := f"{name}.{field.name}") not in renamed}
    return {**keys, **RENAMED_FLAT_KEYS}


def get_preset(name: str) -> Preset:
    """Returns the preset called `name` (one of `PRESET_NAMES`)."""
    if name not in PRESET_NAMES:
        raise ValueError(f"unknown preset {name!r}; expected one of {list(PRESET_NAMES)}")
    return importlib.import_module(f"training.presets.{name}").PRESET


def describe(preset: Preset) -> str:
    """The preset as indented JSON (for logs and `config.json`)."""
    return json.dumps(preset.to_dict(), indent=2, sort_keys=False)
