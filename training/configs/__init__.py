"""Named experiment presets: one `Preset` dataclass, one module per preset, one registry.

A preset is the whole recipe of a run (data, model, optimiser, schedule, augmentation, logging).
Its `model` is a `vit_keras.ViTConfig`, so every model option is a preset option too, spelled
`model.FIELD`. `vit train --config NAME` starts from one; command-line flags and
`--set key=value` / `--set model.FIELD=value` override single fields. Add a preset by writing
`training/configs/<name>.py` with a `PRESET = Preset(...)` and listing its name in
`PRESET_NAMES`.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import types
import typing
from typing import Any

from vit_keras.config import ARCHITECTURE_FIELDS, ViTConfig, get_variant

PRESET_NAMES = ("digits_tiny", "cifar10_scratch", "finetune_384", "imagenet_s16", "pretrain_b16",
                "mpp_digits", "mpp_digits_finetune", "deit_distill", "digits_upstream",
                "digits_transfer")
DEFAULT_PRESET = "digits_tiny"
FINETUNE_MODES = ("full", "lora", "head", "probe")
DISTILL_MODES = ("hard", "soft")
MODEL_PREFIX = "model."


@dataclasses.dataclass(frozen=True)
class Preset:
    """Everything a training run needs to know.

    Attributes:
        name: preset name; also the default output folder `saved_models/<name>/`.
        data: training data spec (`digits`, `folder:PATH`, `tfds:NAME[:SPLIT]`, `tfrecord:GLOB`).
        val_data: validation data spec; '' picks the source's natural held-out split (digits:
            the 20% test split, tfds: `validation` else `test`, folder: `val_split`).
        val_split: fraction of a `folder:` source held out for validation (stratified, seeded).
        model: the `vit_keras.ViTConfig` of the model (set a field with `--set model.FIELD=...`,
            take a named variant's shape with `--model S/16`); `num_classes` comes from the
            data.
        weights: pre-trained weights to start from ('' = random init); the head is replaced.
        epochs: passes over the training data.
        batch_size: GLOBAL batch size (per-replica batch x replicas x accumulation steps).
        grad_accum_steps: gradient accumulation steps (1 = off); the device batch is
            batch_size / grad_accum_steps.
        optimizer: 'adamw', 'adam' or 'sgd' (momentum).
        lr: peak learning rate (after warmup).
        beta1, beta2: Adam moments.
        momentum: SGD momentum.
        weight_decay: decoupled weight decay (AdamW, Adam, SGD), never on the weights the model
            exempts (`vit_keras.no_weight_decay`: biases, norms, tokens, position embeddings,
            the MAP probe, layer-scale gammas).
        schedule: 'cosine' or 'linear' decay after warmup; 'constant' keeps the peak.
        warmup_steps: linear warmup steps (optimizer steps).
        warmup_epochs: linear warmup epochs, added to warmup_steps.
        min_lr: learning rate at the end of the decay.
        clipnorm: global gradient-norm clipping (0 = off).
        ema_momentum: keep an exponential moving average of the weights with this momentum
            and use it as the final model (0 = off).
        label_smoothing: label smoothing of the cross-entropy.
        train_crop: 'inception' (random-area crop, resized), 'resize' (plain resize) or
            'pad_crop' (resize, zero-pad `pad` pixels, random crop back).
        crop_area_min: smallest crop area of the inception crop.
        pad: padding of 'pad_crop'.
        flip: random horizontal flips.
        translate, rotate, zoom: RandomTranslation / RandomRotation / RandomZoom factors (0 = off).
        randaugment_ops, randaugment_magnitude: keras.layers.RandAugment (0 ops = off).
        mixup_alpha, cutmix_alpha: MixUp / CutMix strength (0 = off; both on: one per batch).
        erasing_prob: keras.layers.RandomErasing probability (0 = off).
        mixed_precision: '' (float32), 'mixed_bfloat16' or 'mixed_float16'; 'auto' picks the
            fastest for the hardware (`training.hardware.fastest_policy`): bfloat16 on TPUs,
            Ampere+ GPUs and CPUs with AMX/AVX512-BF16, float16 on older GPUs, else float32.
        steps_per_execution: training steps per tf.function call (TPUs want > 1).
        eval_every: validate every N epochs (the last epoch is always validated).
        backup_every: steps between resumable backups (0 = at each epoch end only).
        seed: seed of the split, the initialisation, the shuffles and the augmentation.
        shuffle_buffer: tf.data shuffle buffer (elements).
        objective: 'classify' (supervised), 'mpp' (masked patch prediction pre-training,
            writes encoder.npz to fine-tune from), 'distill' (DeiT hard-label distillation
            from `teacher`) or 'multilabel' (independent sigmoid classes, binary
            cross-entropy, mAP and F1; e.g. `csv:` data).
        teacher: 'distill' only: a `.keras` model mapping the same [-1, 1] images to class
            scores.
        distill_mode: 'distill' only: 'hard' (DeiT: the distillation head learns the
            teacher's argmax) or 'soft' (it learns the teacher's softened distribution: KL
            divergence at `distill_temperature`, scaled by its square).
        distill_temperature: 'soft' distillation temperature (> 0).
        finetune: what trains: 'full' (every weight), 'lora' (low-rank adapters on
            `lora_targets` and the head; every other weight frozen), 'head' (the head and
            pre_logits only) or 'probe' (no gradient steps: the head is a linear classifier
            fitted once on the frozen features of the training images).
        lora_rank: 'lora': rank of the adapters.
        lora_alpha: 'lora': scale numerator of the adapters (alpha / rank); 0 = the rank.
        lora_targets: 'lora': comma-separated projections that get adapters: query, key,
            value, out, mlp, embedding, pre_logits, head, or 'all'.
        probe_l2: 'probe': L2 penalty of the linear classifier on standardised features;
            0 = chosen from 1e-6..1 on a held-out fifth of the training features.
        layer_decay: layer-wise learning-rate decay (BEiT/timm): the head and the final norm
            train at the full rate, encoder block i (0-based, of L) at decay^(L - i), the
            embeddings at decay^(L + 1); 1 = off.
        classes: comma-separated class names to keep (the others' examples are dropped from
            the training and validation data); '' = every class.
    """

    name: str = "custom"
    data: str = "digits"
    val_data: str = ""
    val_split: float = 0.1
    model: ViTConfig = ViTConfig()
    weights: str = ""
    epochs: int = 10
    batch_size: int = 128
    grad_accum_steps: int = 1
    optimizer: str = "adamw"
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    momentum: float = 0.9
    weight_decay: float = 0.05
    schedule: str = "cosine"
    warmup_steps: int = 0
    warmup_epochs: float = 0.0
    min_lr: float = 0.0
    clipnorm: float = 1.0
    ema_momentum: float = 0.0
    label_smoothing: float = 0.0
    train_crop: str = "resize"
    crop_area_min: float = 0.05
    pad: int = 0
    flip: bool = False
    translate: float = 0.0
    rotate: float = 0.0
    zoom: float = 0.0
    randaugment_ops: int = 0
    randaugment_magnitude: float = 0.0
    mixup_alpha: float = 0.0
    cutmix_alpha: float = 0.0
    erasing_prob: float = 0.0
    mixed_precision: str = ""
    steps_per_execution: int = 1
    eval_every: int = 1
    backup_every: int = 0
    seed: int = 0
    shuffle_buffer: int = 10_000
    objective: str = "classify"
    teacher: str = ""
    distill_mode: str = "hard"
    distill_temperature: float = 1.0
    finetune: str = "full"
    lora_rank: int = 8
    lora_alpha: float = 0.0
    lora_targets: str = "query,value"
    probe_l2: float = 0.0
    layer_decay: float = 1.0
    classes: str = ""

    def __post_init__(self):
        problems = self.problems()
        if problems:
            raise ValueError("; ".join(problems))

    def problems(self) -> list[str]:
        """Every out-of-range value, each saying what was expected and what came."""
        at_least_one = ("epochs", "batch_size", "grad_accum_steps", "steps_per_execution",
                        "eval_every", "shuffle_buffer", "lora_rank")
        non_negative = ("lr", "weight_decay", "warmup_steps", "warmup_epochs", "min_lr",
                        "clipnorm", "pad", "translate", "rotate", "zoom", "randaugment_ops",
                        "randaugment_magnitude", "mixup_alpha", "cutmix_alpha", "backup_every",
                        "lora_alpha", "probe_l2")
        below_one = ("val_split", "label_smoothing", "ema_momentum")
        # Written as `not (... )` so that NaN fails every check.
        found = [f"{name} must be >= 1, got {getattr(self, name)}"
                 for name in at_least_one if not getattr(self, name) >= 1]
        found += [f"{name} must be a finite number >= 0, got {getattr(self, name)}"
                  for name in non_negative
                  if not 0 <= getattr(self, name) < float("inf")]
        found += [f"{name} must be in [0, 1), got {getattr(self, name)}"
                  for name in below_one if not 0 <= getattr(self, name) < 1]
        if not 0 <= self.erasing_prob <= 1:
            found.append(f"erasing_prob must be in [0, 1], got {self.erasing_prob}")
        if not 0 < self.layer_decay <= 1:
            found.append(f"layer_decay must be in (0, 1] (1 = off), got {self.layer_decay}")
        if not 0 < self.distill_temperature < float("inf"):
            found.append(f"distill_temperature must be a finite number > 0, got "
                         f"{self.distill_temperature}")
        for name, allowed in (("finetune", FINETUNE_MODES), ("distill_mode", DISTILL_MODES)):
            if getattr(self, name) not in allowed:
                found.append(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        return found

    def replace(self, **changes) -> "Preset":
        """A copy with `changes` applied; unknown field names raise ValueError."""
        unknown = sorted(set(changes) - set(field_names()))
        if unknown:
            raise ValueError(f"unknown preset field(s) {unknown}; expected some of "
                             f"{list(field_names())}")
        return dataclasses.replace(self, **changes)

    def replace_model(self, **changes) -> "Preset":
        """A copy whose `model` has `changes` applied (validated by `ViTConfig`)."""
        return dataclasses.replace(self, model=self.model.replace(**changes))

    def with_variant(self, name: str) -> "Preset":
        """A copy whose model takes the architecture of the variant `name` ('S/16', 'B/16',
        'R50+B/16', ...): its `ARCHITECTURE_FIELDS`. The model's other options (image size,
        pooling, dropout, stochastic depth, position embedding, ...) stay the preset's."""
        variant = get_variant(name)
        return self.replace_model(**{field: getattr(variant, field)
                                     for field in ARCHITECTURE_FIELDS})

    def to_dict(self) -> dict:
        """A JSON-friendly dict of every field (`model` as `ViTConfig.to_dict`)."""
        data = {field: getattr(self, field) for field in field_names()}
        data["model"] = self.model.to_dict()
        return data


def field_names() -> tuple[str, ...]:
    """The names of every `Preset` field, in declaration order."""
    return tuple(field.name for field in dataclasses.fields(Preset))


def model_field_names() -> tuple[str, ...]:
    """The `ViTConfig` fields, as `--set model.FIELD` spells them."""
    return tuple(MODEL_PREFIX + field.name for field in dataclasses.fields(ViTConfig))


def get_preset(name: str) -> Preset:
    """Returns the preset called `name` (one of `PRESET_NAMES`)."""
    if name not in PRESET_NAMES:
        raise ValueError(f"unknown preset {name!r}; expected one of {list(PRESET_NAMES)}")
    return importlib.import_module(f"training.configs.{name}").PRESET


def parse_value(text: str, kind: Any) -> Any:
    """Converts the command-line string `text` to the annotated type `kind`.

    Understands bool, int, float, str, `X | None` ('none' = None), `tuple[int, ...]`
    ('3,4,9'; '' or '()' = ()) and `int | tuple[int, int]` ('224' or '224x320').
    """
    text = text.strip()
    options = typing.get_args(kind) if isinstance(kind, types.UnionType) else (kind,)
    if type(None) in options:
        if text.lower() == "none":
            return None
        options = tuple(option for option in options if option is not type(None))
    errors = []
    for option in options:
        try:
            return _parse_one(text, option)
        except ValueError as error:
            errors.append(str(error))
    raise ValueError(" or ".join(errors))


def _parse_one(text: str, kind: Any) -> Any:
    if kind is bool:
        if text.lower() in ("1", "true", "yes", "on"):
            return True
        if text.lower() in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected a boolean (true/false), got {text!r}")
    if typing.get_origin(kind) is tuple:
        parts = [part for part in text.strip("()").replace("x", ",").split(",") if part.strip()]
        return tuple(_parse_one(part.strip(), int) for part in parts)
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            noun = "an integer" if kind is int else "a number"
            raise ValueError(f"expected {noun}, got {text!r}") from None
    return text


def apply_overrides(preset: Preset, assignments: list[str]) -> Preset:
    """Applies `key=value` strings (from `--set`) to `preset`, typed like the fields.

    `model.FIELD=value` sets a field of the preset's `ViTConfig`; other keys set preset fields.

    Raises:
        ValueError: on a malformed assignment, an unknown key or a value of the wrong type.
    """
    changes, model_changes = {}, {}
    preset_types, model_types = typing.get_type_hints(Preset), typing.get_type_hints(ViTConfig)
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--set expects key=value, got {assignment!r}")
        if key.startswith(MODEL_PREFIX):
            field, types_, target = key[len(MODEL_PREFIX):], model_types, model_changes
        else:
            field, types_, target = key, preset_types, changes
        if field not in types_ or field == "model":
            raise ValueError(_unknown_key_message(key, model_types))
        try:
            target[field] = parse_value(value, types_[field])
        except ValueError as error:
            raise ValueError(f"--set {key}: {error}") from None
    if "num_classes" in model_changes:
        raise ValueError("--set model.num_classes: the number of classes comes from the data")
    preset = preset.replace(**changes)
    return preset.replace_model(**model_changes) if model_changes else preset


def _unknown_key_message(key: str, model_types: dict) -> str:
    if key in model_types:
        return f"--set: {key!r} is a model option: write --set model.{key}=..."
    return (f"--set: unknown key {key!r}; expected one of {list(field_names())} or "
            f"model.FIELD with FIELD one of {list(model_types)}")


def field_help(cls) -> dict[str, str]:
    """The one-line description of each field, read from the 'Attributes:' section of
    `cls`'s docstring (entries 'name: text' or 'name1, name2: text')."""
    doc = (cls.__doc__ or "").split("Attributes:", 1)[-1]
    entries, current = {}, None
    for line in doc.splitlines():
        stripped = line.strip()
        head, sep, text = stripped.partition(": ")
        names = [name.strip() for name in head.split(",")]
        if sep and line.startswith(" " * 8) and not line.startswith(" " * 12) and all(
                name.isidentifier() for name in names):
            current = names
            for name in names:
                entries[name] = text
        elif current and stripped:
            for name in current:
                entries[name] += " " + stripped
    return entries


def describe(preset: Preset) -> str:
    """The preset as indented JSON (for logs and `config.json`)."""
    return json.dumps(preset.to_dict(), indent=2, sort_keys=False)
