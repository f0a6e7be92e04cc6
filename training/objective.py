"""`Objective`: what every training objective supplies to the run, and the pieces they share.

`training.run.Run` trains every objective the same way (strategy, data, plan, precision,
optimizer, backups and `--resume`, the NaN stop, history, best weights, evaluation, export and
inspection); an objective supplies its data, model, loss, metrics, small-data rule and the
float32 model `model.keras` holds. A task's objective subclasses `Objective` directly
(each task's `training/tasks/<task>/objective.py`: `Classification`, `Segmentation`,
`Detection`), named by the task's line in `vit_keras.tasks.TASKS`; a variant of a task
(distillation, multi-label) subclasses that task's objective.
"""

from __future__ import annotations

import importlib

import keras
import numpy as np

from training import adapt, finetune
from training.presets import sections
from vit_keras import ViTConfig, tasks


class Objective:
    """The interface of a training objective, with the defaults every task shares.

    Attributes:
        name: the `objective.kind` that selects it.
        metric_label: how the result table names its validation score.
        metric_key: that score's key in metrics.json.
        monitor: the logged metric that chooses the best weights (higher = better).
        epoch_metrics: the logged metrics each epoch's line shows before `monitor`.
        exports: whether the run exports its model; `export_skipped` says why not.
        activation: what turns the model's logits into its scores, in every format.
        multilabel: each class scored on its own (sigmoid), e.g. for the linear probe.
        closed_form_probe: finetune 'probe' fits the head once, without gradient steps.
        probe_description: what finetune 'probe' trains, for the run's header.
        small_data_rule: how the small-data rule fits its presets (`training.adapt`).
        hints_fine_tuning: a run from scratch on a few of the user's images is told that
            fine-tuning pre-trained weights is the usual route.
        other_networks: it builds `vit_keras.build_classifier`'s networks, so a
            `model.architecture` other than 'vit' (a MobileViT) trains it; the others build
            on the ViT's patch tokens.
    """

    name = ""
    metric_label = ""
    metric_key = ""
    monitor = ""
    epoch_metrics = ("loss", "val_loss")
    exports = True
    export_skipped = ""
    activation = "softmax"
    multilabel = False
    closed_form_probe = False
    probe_description = "a linear head on frozen features"
    small_data_rule = adapt.CLASSIFY_RULE
    hints_fine_tuning = False
    other_networks = False

    def __init__(self, preset):
        self.preset = preset

    @property
    def epoch_line_keys(self) -> tuple[str, ...]:
        """The logged metrics each epoch's line shows: `epoch_metrics`, then `monitor`."""
        return tuple(dict.fromkeys((*self.epoch_metrics, self.monitor)))

    @property
    def monitor_label(self) -> str:
        """How the result table names the `monitor` metric."""
        return self.metric_label

    def open_data(self, data_dir: str | None):
        """The training and validation data (`vit_app.data.training_data.TrainingData`)."""
        raise NotImplementedError

    def check_data(self, data) -> None:
        """Refuses training data this objective cannot learn from."""
        raise NotImplementedError

    def model_preprocessing(self, preprocessing):
        """The `Preprocessing` the model records, from the data's (`data.preprocessing`)."""
        return preprocessing

    def data_choices(self, source) -> tuple[dict, str]:
        """What this objective reads off the training `source` where the preset fits the data
        (`data.adapt`): ({'SECTION.FIELD': value}, why) (none)."""
        return {}, ""

    def epoch_examples(self, source, num_examples: int) -> int:
        """Training examples an epoch draws from `source` (its `num_examples`, once each)."""
        return num_examples

    def train_batches(self, source, image_size, batch_size: int, **options):
        """The augmented training batches."""
        raise NotImplementedError

    def eval_batches(self, source, image_size, batch_size: int, num_classes: int, **options):
        """The validation batches."""
        raise NotImplementedError

    def sample_targets(self, batch: int, config: ViTConfig) -> np.ndarray:
        """Zero targets of one batch, to build a model without reading the data."""
        raise NotImplementedError

    def sample_inputs(self, batch: int, config: ViTConfig) -> np.ndarray:
        """Zero inputs of one batch (images [batch, height, width, channels]), beside
        `sample_targets`."""
        return np.zeros((batch, *config.image_hw, config.channels), np.float32)

    def sample_images(self, source) -> list[np.ndarray]:
        """Up to 64 uint8 images spread over `source`, whose sizes and texture the small-data
        rule reads (`training.adapt.shapes_and_crops`)."""
        return adapt.sampled_images(source)

    def build(self, config: ViTConfig) -> keras.Model:
        """The trained model (called inside the strategy scope), with its starting weights."""
        raise NotImplementedError

    def compile_args(self, config: ViTConfig) -> dict:
        """The loss and metrics `compile` gets."""
        raise NotImplementedError

    def classifier(self, model: keras.Model, config: ViTConfig) -> keras.Model:
        """The float32 model `model.keras` holds and exports get (LoRA merged)."""
        raise NotImplementedError

    def export_samples(self, source, image_size, count: int, preprocessing):
        """Up to `count` raw examples the exports calibrate and are checked on: (float32
        images in 0..255 at `image_size`, their labels)."""
        raise NotImplementedError

    def report(self, results: dict) -> dict:
        """metrics.json entries from `evaluate`'s results on the validation data."""
        raise NotImplementedError

    def model_config(self, num_classes: int) -> ViTConfig:
        """The model's config for data with `num_classes` classes; a frozen backbone
        (`finetune` head or probe) runs without dropout, stochastic depth or patch dropout,
        whose noise would only blur the features its head learns from."""
        config = self.preset.model.replace(num_classes=num_classes)
        if self.preset.finetune.mode in finetune.FROZEN_BACKBONE:
            config = config.replace(**{name: 0.0 for name in finetune.BACKBONE_NOISE
                                       if hasattr(config, name)})
        return config

    def loss_note(self) -> str:
        """The header's line on how the epoch lines' loss differs from the table's ('' when
        it does not)."""
        return ""

    def network(self, model: keras.Model) -> keras.Model:
        """The network inside the trained model (`--finetune` freezes it)."""
        return model

    def write_extras(self, classifier: keras.Model, output: str) -> None:
        """Files only this objective writes (none)."""

    def evaluate_extras(self, model, val_dataset, val_source=None, train_source=None) -> dict:
        """metrics.json entries measured beyond `evaluate` (none); `val_source` is the
        validation `Source` the batches come from, `train_source` the training one."""
        return {}

    def baseline_rows(self, metrics: dict) -> list[tuple[str, str]]:
        """The result table's rows comparing the run with a model that ignores the image
        (none)."""
        return []

    def shortfall(self, metrics: dict) -> str | None:
        """Why the run's score does not beat that model, for the run's last line; None when it
        does (or there is none)."""
        return None


def float32_twin(model: keras.Model, make) -> keras.Model:
    """`make()` built under the float32 policy, holding `model`'s weights."""
    policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("float32")
    try:
        copy = make()
    finally:
        keras.mixed_precision.set_global_policy(policy)
    copy.set_weights([np.asarray(weight) for weight in model.get_weights()])
    return copy


def get_objective(preset) -> Objective:
    """The objective `preset.objective.kind` names, set up for `preset`: a registered task's
    own (its line in `vit_keras.tasks.TASKS`), or a variant of one (its objective module's
    `VARIANTS`)."""
    kind = preset.objective.kind
    task, _ = sections.objective_data(kind)
    module_name, _, class_name = tasks.parts(task).objective.partition(":")
    module = importlib.import_module(module_name)
    objective = getattr(module, class_name) if kind == task else module.VARIANTS[kind]
    architecture = preset.model.architecture
    if architecture != "vit" and not objective.other_networks:
        raise ValueError(f"objective {kind!r} builds on the ViT's patch tokens; "
                         f"model.architecture {architecture!r} trains the classify and "
                         "multilabel objectives: drop --model, or use --task classify")
    return objective(preset)
