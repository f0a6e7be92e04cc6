"""The sections of a preset, each a frozen dataclass that validates its own fields when created.

A value out of range or not among a field's choices raises ValueError naming the field as
`--set` spells it (`optim.lr must be ...`), what was expected and what came.
"""

from __future__ import annotations

import dataclasses
import functools

from vit_keras import tasks
from vit_keras.preprocessing import OFFICIAL, Preprocessing

OPTIMIZERS = ("adamw", "adam", "sgd")
DECAYS = ("cosine", "linear", "constant")
CROPS = ("resize", "inception", "pad_crop")
# Objective kinds that vary the classify task's training, beside the tasks themselves
# (`vit_keras.tasks.TASKS`): kind -> the fewest classes their (classification) data may have.
CLASSIFY_VARIANTS = {"mpp": 1, "distill": 2, "multilabel": 1}
DISTILL_MODES = ("hard", "soft")
FINETUNE_MODES = ("full", "lora", "head", "probe")
MIXED_PRECISIONS = ("", "auto", "mixed_bfloat16", "mixed_float16")
KEEPS = ("best", "last")
INFINITY = float("inf")
# Range rules: name -> (check, what is expected). Written as `not (...)` checks so that NaN fails.
RANGES = {">=1": (lambda v: v >= 1, "must be >= 1"),
          ">=0": (lambda v: 0 <= v < INFINITY, "must be a finite number >= 0"),
          ">0": (lambda v: 0 < v < INFINITY, "must be a finite number > 0"),
          "[0,1)": (lambda v: 0 <= v < 1, "must be in [0, 1)"),
          "[0,1]": (lambda v: 0 <= v <= 1, "must be in [0, 1]"),
          "(0,1]": (lambda v: 0 < v <= 1, "must be in (0, 1]")}


def objective_kinds() -> tuple[str, ...]:
    """Every `objective.kind`: the registered tasks, then classify's variants."""
    return (*tasks.TASKS, *CLASSIFY_VARIANTS)


def objective_data(kind: str) -> tuple[str, int]:
    """(the task whose data `objective.kind` trains on, the fewest classes it needs)."""
    if kind in CLASSIFY_VARIANTS:
        return tasks.CLASSIFY, CLASSIFY_VARIANTS[kind]
    return kind, tasks.parts(kind).fewest_classes


class Section:
    """Validation shared by the sections: subclasses list their rules in `RULES`, field name ->
    a key of `RANGES`, a tuple of choices or a function giving them."""

    NAME = ""
    RULES: dict = {}

    def __post_init__(self):
        problems = [problem for field, rule in self.RULES.items()
                    if (problem := self._problem(field, rule))]
        if problems:
            raise ValueError("; ".join(problems))

    def _problem(self, field: str, rule) -> str | None:
        value, key = getattr(self, field), f"{self.NAME}.{field}"
        if callable(rule):  # choices read when checked (a registry)
            rule = rule()
        if isinstance(rule, tuple):
            return None if value in rule else f"{key} must be one of {rule}, got {value!r}"
        check, expected = RANGES[rule]
        return None if check(value) else f"{key} {expected}, got {value!r}"

    def replace(self, **changes):
        """A copy with `changes` applied (validated); unknown field names raise ValueError."""
        unknown = sorted(set(changes) - {field.name for field in dataclasses.fields(self)})
        if unknown:
            raise ValueError(f"unknown {self.NAME} field(s) {unknown}; expected some of "
                             f"{[field.name for field in dataclasses.fields(self)]}")
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class Data(Section):
    """What the run trains and validates on.

    Attributes:
        train: training data spec (`digits`, `folder:PATH`, `csv:PATH`, `tfds:NAME[:SPLIT]`,
            `tfrecord:GLOB`).
        val: validation data spec; '' picks the source's natural held-out split (digits: the
            20% test split, tfds: `validation` else `test`, folder: `val_split`).
        val_split: fraction of a `folder:` or `csv:` source held out for validation
            (stratified, seeded).
        classes: comma-separated class names to keep (the others' examples are dropped from
            the training and validation data); '' = every class.
        shuffle_buffer: tf.data shuffle buffer (elements) of streamed sources.
        adapt: fit the model (image size, patch size, stem, width) and the epochs to the
            training data by the small-data rule (`training.adapt`) where they differ
            from what it gives; fields set on the command line stay. For presets made to
            train from scratch on small data (`digits_tiny`).
        preprocessing: how images become the model's inputs (a
            `vit_keras.preprocessing.Preprocessing`; `--preprocessing NAME`); the official
            [-1, 1] by default, a family's or a keras-hub preset's own with its weights. The
            trained model carries it beside its `ViTConfig`.
    """

    NAME = "data"
    RULES = {"val_split": "[0,1)", "shuffle_buffer": ">=1"}

    train: str = "digits"
    val: str = ""
    val_split: float = 0.1
    classes: str = ""
    shuffle_buffer: int = 10_000
    adapt: bool = False
    preprocessing: Preprocessing = OFFICIAL

    def __post_init__(self):
        object.__setattr__(self, "preprocessing", Preprocessing.from_dict(self.preprocessing))
        super().__post_init__()


@dataclasses.dataclass(frozen=True)
class Optim(Section):
    """The optimiser.

    Attributes:
        optimizer: 'adamw', 'adam' or 'sgd' (momentum).
        lr: peak learning rate (after warmup).
        beta1, beta2: Adam moments.
        momentum: SGD momentum.
        weight_decay: decoupled weight decay (AdamW, Adam, SGD), never on the weights the model
            exempts (`vit_keras.no_weight_decay`: biases, norms, tokens, position embeddings,
            the MAP probe, layer-scale gammas).
        clipnorm: global gradient-norm clipping (0 = off).
        ema_momentum: keep an exponential moving average of the weights with this momentum
            and use it as the final model (0 = off).
        layer_decay: layer-wise learning-rate decay (BEiT/timm): the head and the final norm
            train at the full rate, encoder block i (0-based, of L) at decay^(L - i), the
            embeddings at decay^(L + 1); 1 = off.
    """

    NAME = "optim"
    RULES = {"optimizer": OPTIMIZERS, "lr": ">=0", "weight_decay": ">=0", "clipnorm": ">=0",
             "ema_momentum": "[0,1)", "layer_decay": "(0,1]"}

    optimizer: str = "adamw"
    lr: float = 1e-3
    beta1: float = 0.9
    beta2: float = 0.999
    momentum: float = 0.9
    weight_decay: float = 0.05
    clipnorm: float = 1.0
    ema_momentum: float = 0.0
    layer_decay: float = 1.0


@dataclasses.dataclass(frozen=True)
class Schedule(Section):
    """How long, in what batches, at what learning rate over time.

    Attributes:
        epochs: passes over the training data.
        batch_size: GLOBAL batch size (per-replica batch x replicas x accumulation steps).
        grad_accum_steps: gradient accumulation steps (1 = off); the device batch is
            batch_size / grad_accum_steps.
        decay: 'cosine' or 'linear' decay after warmup; 'constant' keeps the peak.
        warmup_steps: linear warmup steps (optimizer steps).
        warmup_epochs: linear warmup epochs, added to warmup_steps.
        min_lr: learning rate at the end of the decay.
    """

    NAME = "schedule"
    RULES = {"epochs": ">=1", "batch_size": ">=1", "grad_accum_steps": ">=1", "decay": DECAYS,
             "warmup_steps": ">=0", "warmup_epochs": ">=0", "min_lr": ">=0"}

    epochs: int = 10
    batch_size: int = 128
    grad_accum_steps: int = 1
    decay: str = "cosine"
    warmup_steps: int = 0
    warmup_epochs: float = 0.0
    min_lr: float = 0.0


@dataclasses.dataclass(frozen=True)
class Augment(Section):
    """Training-time augmentation (evaluation always plain-resizes).

    Attributes:
        crop: 'inception' (random-area crop, resized), 'resize' (plain resize) or 'pad_crop'
            (resize, zero-pad `pad` pixels, random crop back).
        crop_area_min: smallest crop area of the inception crop.
        pad: padding of 'pad_crop'.
        flip: random horizontal flips.
        translate, rotate, zoom: RandomTranslation / RandomRotation / RandomZoom factors (0 = off).
        randaugment_ops, randaugment_magnitude: keras.layers.RandAugment (0 ops = off).
        mixup_alpha, cutmix_alpha: MixUp / CutMix strength (0 = off; both on: one per batch).
        erasing_prob: keras.layers.RandomErasing probability (0 = off).
    """

    NAME = "augment"
    RULES = {"crop": CROPS, "crop_area_min": "(0,1]", "pad": ">=0", "translate": ">=0",
             "rotate": ">=0", "zoom": ">=0", "randaugment_ops": ">=0",
             "randaugment_magnitude": ">=0", "mixup_alpha": ">=0", "cutmix_alpha": ">=0",
             "erasing_prob": "[0,1]"}

    crop: str = "resize"
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


@dataclasses.dataclass(frozen=True)
class Objective(Section):
    """What the model learns.

    Attributes:
        kind: 'classify' (supervised), 'mpp' (masked patch prediction pre-training, writes
            encoder.npz to fine-tune from), 'distill' (DeiT distillation from `teacher`) or
            'multilabel' (independent sigmoid classes, binary cross-entropy, mAP and F1; e.g.
            `csv:` data), or another registered task's name (`vit_keras.tasks.TASKS`: 'segment',
            'detect'), whose own options are its section (`segment.head`, `detect.queries`).
        label_smoothing: label smoothing of the cross-entropy.
        teacher: 'distill' only: a `.keras` model mapping the same [-1, 1] images to class
            scores.
        distill_mode: 'distill' only: 'hard' (DeiT: the distillation head learns the
            teacher's argmax) or 'soft' (it learns the teacher's softened distribution: KL
            divergence at `distill_temperature`, scaled by its square).
        distill_temperature: 'soft' distillation temperature (> 0).
    """

    NAME = "objective"
    RULES = {"kind": objective_kinds, "label_smoothing": "[0,1)", "distill_mode": DISTILL_MODES,
             "distill_temperature": ">0"}

    kind: str = "classify"
    label_smoothing: float = 0.0
    teacher: str = ""
    distill_mode: str = "hard"
    distill_temperature: float = 1.0


@dataclasses.dataclass(frozen=True)
class Finetune(Section):
    """Where the weights start and which of them train.

    Attributes:
        weights: pre-trained weights to start from ('' = random init): a name from `vit
            weights list`, a URL, hf://ORG/REPO, a checkpoint file or a `model.keras` of an
            earlier run; the head is replaced.
        mode: what trains: 'full' (every weight), 'lora' (low-rank adapters on
            `lora_targets` and the head; every other weight frozen), 'head' (the head and
            pre_logits only) or 'probe' (no gradient steps: the head is a linear classifier
            fitted once on the frozen features of the training images).
        lora_rank: 'lora': rank of the adapters.
        lora_alpha: 'lora': scale numerator of the adapters (alpha / rank); 0 = the rank.
        lora_targets: 'lora': comma-separated projections that get adapters: query, key,
            value, out, mlp, embedding, pre_logits, head, or 'all'.
        probe_l2: 'probe': L2 penalty of the linear classifier on standardised features;
            0 = chosen from 1e-6..1 on a held-out fifth of the training features.
    """

    NAME = "finetune"
    RULES = {"mode": FINETUNE_MODES, "lora_rank": ">=1", "lora_alpha": ">=0", "probe_l2": ">=0"}

    weights: str = ""
    mode: str = "full"
    lora_rank: int = 8
    lora_alpha: float = 0.0
    lora_targets: str = "query,value"
    probe_l2: float = 0.0


@dataclasses.dataclass(frozen=True)
class Loop(Section):
    """How the training loop runs: precision, compiled steps, validation and backups.

    Attributes:
        mixed_precision: '' (float32), 'mixed_bfloat16' or 'mixed_float16'; 'auto' picks the
            fastest for the hardware (`vit_app.hardware.fastest_policy`): bfloat16 on TPUs,
            Ampere+ GPUs and CPUs with AMX/AVX512-BF16, float16 on older GPUs, else float32.
        steps_per_execution: training steps per compiled call (TPUs want > 1).
        eval_every: validate every N epochs (the last epoch is always validated).
        keep: which weights the run's model.keras and exports hold: 'best' (default), those of
            the validated epoch with the best validation score (the latest of ties), or
            'last', the last epoch's. Without validation data both are the last epoch's.
        backup_every: steps between resumable backups (0 = at each epoch end only).
        check_every: steps between checks that the loss is finite (also at every backup and
            epoch end). Only a checked step's loss is read on the host, which waits for that
            step to finish; 1 checks every step, the host then never runs a step ahead.
        fused_qkv: on JAX, the attention's query, key and value as one matrix product
            (`vit_keras.fast_paths.training_forms`; same numbers, same weights).
        attention_kernel: on JAX, training attention as one fused kernel: on a GPU cuDNN's
            flash attention at padded lengths, an error where it refuses; not with attention
            dropout.
        lean_activations: on JAX, GELU and LayerNorm keep only their inputs for the backward
            pass (`vit_keras.fast_paths.jax_kernels`; same numbers, less memory).
    """

    NAME = "loop"
    RULES = {"mixed_precision": MIXED_PRECISIONS, "steps_per_execution": ">=1",
             "eval_every": ">=1", "backup_every": ">=0", "check_every": ">=1", "keep": KEEPS}

    mixed_precision: str = ""
    steps_per_execution: int = 1
    eval_every: int = 1
    keep: str = "best"
    backup_every: int = 0
    check_every: int = 20
    fused_qkv: bool = False
    attention_kernel: bool = False
    lean_activations: bool = False


SECTIONS = {section.NAME: section
            for section in (Data, Optim, Schedule, Augment, Objective, Finetune, Loop)}


def task_sections() -> dict[str, type]:
    """Each registered task's own section (its `TaskParts.section`), by name; no framework.
    A task registered while the program runs is included from then on."""
    return _sections_named(tuple(parts.section for parts in tasks.TASKS.values()
                                 if parts.section))


@functools.cache
def _sections_named(references: tuple[str, ...]) -> dict[str, type]:
    return {section.NAME: section for section in map(tasks.load_part, references)}


def all_sections() -> dict[str, type]:
    """Every section: the shared ones, then each task's."""
    return {**SECTIONS, **task_sections()}
