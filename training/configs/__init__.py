"""Named experiment presets: one `Preset` dataclass, one module per preset, one registry.

A preset is the whole recipe of a run (data, model, optimiser, schedule, augmentation, logging).
`vit train --config NAME` starts from one; command-line flags and `--set key=value` override
single fields. Add a preset by writing `training/configs/<name>.py` with a `PRESET = Preset(...)`
and listing its name in `PRESET_NAMES`.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from typing import Any

PRESET_NAMES = ("digits_tiny", "cifar10_scratch", "finetune_384", "imagenet_s16", "pretrain_b16",
                "mpp_digits", "mpp_digits_finetune", "deit_distill")
DEFAULT_PRESET = "digits_tiny"


@dataclasses.dataclass(frozen=True)
class Preset:
    """Everything a training run needs to know.

    Attributes:
        name: preset name; also the default output folder `saved_models/<name>/`.
        data: training data spec (`digits`, `folder:PATH`, `tfds:NAME[:SPLIT]`, `tfrecord:GLOB`).
        val_data: validation data spec; '' picks the source's natural held-out split (digits:
            the 20% test split, tfds: `validation` else `test`, folder: `val_split`).
        val_split: fraction of a `folder:` source held out for validation (stratified, seeded).
        model: a `vit_keras.VARIANTS` name (`S/16`, `B/16`, ...) or 'custom' (fields below).
        image_size: model resolution in pixels (square).
        patch_size, hidden_size, mlp_dim, num_heads, num_layers: the custom model's shape
            (used only when `model` is 'custom').
        classifier: 'token' or 'gap' pooling.
        representation_size: width of the pre_logits layer (0 = none).
        head_bias_init: initial head bias (-10 was used for pre-training).
        dropout_rate, attention_dropout_rate: model regularisation.
        weights: pre-trained weights to start from ('' = random init); the head is replaced.
        epochs: passes over the training data.
        batch_size: GLOBAL batch size (per-replica batch x replicas x accumulation steps).
        grad_accum_steps: gradient accumulation steps (1 = off); the device batch is
            batch_size / grad_accum_steps.
        optimizer: 'adamw', 'adam' or 'sgd' (momentum).
        lr: peak learning rate (after warmup).
        beta1, beta2: Adam moments; momentum: SGD momentum.
        weight_decay: decoupled weight decay (AdamW, SGD), never on biases, LayerNorm, the
            position embedding or the class token.
        schedule: 'cosine' or 'linear' decay after warmup; 'constant' keeps the peak.
        warmup_steps: linear warmup steps (optimizer steps); warmup_epochs adds whole epochs.
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
            writes encoder.npz to fine-tune from) or 'distill' (DeiT hard-label distillation
            from `teacher`).
        teacher: 'distill' only: a `.keras` model mapping the same [-1, 1] images to class
            scores.
        drop_path_rate: stochastic depth rate of the last block (0 = off).
        posemb: 'learn', 'sincos2d' or 'learn2d' position embedding.
    """

    name: str = "custom"
    data: str = "digits"
    val_data: str = ""
    val_split: float = 0.1
    model: str = "custom"
    image_size: int = 224
    patch_size: int = 16
    hidden_size: int = 192
    mlp_dim: int = 768
    num_heads: int = 3
    num_layers: int = 12
    classifier: str = "token"
    representation_size: int = 0
    head_bias_init: float = 0.0
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
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
    drop_path_rate: float = 0.0
    posemb: str = "learn"

    def replace(self, **changes) -> "Preset":
        """A copy with `changes` applied; unknown field names raise ValueError."""
        unknown = sorted(set(changes) - set(field_names()))
        if unknown:
            raise ValueError(f"unknown preset field(s) {unknown}; expected some of "
                             f"{list(field_names())}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """A JSON-friendly dict of every field."""
        return dataclasses.asdict(self)


def field_names() -> tuple[str, ...]:
    """The names of every `Preset` field, in declaration order."""
    return tuple(field.name for field in dataclasses.fields(Preset))


def get_preset(name: str) -> Preset:
    """Returns the preset called `name` (one of `PRESET_NAMES`)."""
    if name not in PRESET_NAMES:
        raise ValueError(f"unknown preset {name!r}; expected one of {list(PRESET_NAMES)}")
    return importlib.import_module(f"training.configs.{name}").PRESET


def parse_value(text: str, like: Any) -> Any:
    """Converts the string `text` to the type of the current value `like`."""
    if isinstance(like, bool):
        lowered = text.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise ValueError(f"expected a boolean (true/false), got {text!r}")
    if isinstance(like, int):
        try:
            return int(text)
        except ValueError:
            raise ValueError(f"expected an integer, got {text!r}") from None
    if isinstance(like, float):
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"expected a number, got {text!r}") from None
    return text


def apply_overrides(preset: Preset, assignments: list[str]) -> Preset:
    """Applies `key=value` strings (from `--set`) to `preset`, typed like the current values.

    Raises:
        ValueError: on a malformed assignment, an unknown key or a value of the wrong type.
    """
    changes = {}
    current = preset.to_dict()
    for assignment in assignments:
        key, sep, value = assignment.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--set expects key=value, got {assignment!r}")
        if key not in current:
            raise ValueError(f"--set: unknown key {key!r}; expected one of {list(current)}")
        try:
            changes[key] = parse_value(value, current[key])
        except ValueError as error:
            raise ValueError(f"--set {key}: {error}") from None
    return preset.replace(**changes)


def describe(preset: Preset) -> str:
    """The preset as indented JSON (for logs and `config.json`)."""
    return json.dumps(preset.to_dict(), indent=2, sort_keys=False)
