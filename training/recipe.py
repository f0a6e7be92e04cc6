"""The training recipe: learning-rate schedule, optimizer, loss and metrics of a preset."""

from __future__ import annotations

import math

import keras
from keras import ops

from training.presets.sections import DECAYS
from vit_keras import keras_compat, names, no_weight_decay

# Top-level layers before the first encoder block (layer 0 of layer-wise decay), and masked
# patch prediction's corruption layer.
EMBEDDING_LAYERS = (*names.EMBEDDING_LAYERS, "mpp_corruption")


@keras.saving.register_keras_serializable(package="vit_training")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak`, then cosine or linear decay to `end` at `total_steps`.

    Args:
        peak: learning rate reached at the end of the warmup.
        total_steps: optimizer steps of the whole run.
        warmup_steps: steps of the linear warmup (the first step has lr peak / warmup_steps).
        decay: 'cosine', 'linear' or 'constant'.
        end: learning rate at `total_steps` (and after).
        steps_per_update: gradient-accumulation steps per optimizer update. Keras calls the
            schedule with the raw step counter, which counts accumulation steps; dividing it
            gives every micro-step of one update the rate the large batch would use.
    """

    def __init__(self, peak: float, total_steps: int, warmup_steps: int = 0,
                 decay: str = "cosine", end: float = 0.0, steps_per_update: int = 1):
        if decay not in DECAYS:
            raise ValueError(f"decay must be one of {DECAYS}, got {decay!r}")
        if total_steps < 1 or warmup_steps < 0:
            raise ValueError(f"expected total_steps >= 1 and warmup_steps >= 0, got "
                             f"{total_steps} and {warmup_steps}")
        self.peak = float(peak)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(min(warmup_steps, total_steps))
        self.decay = decay
        self.end = float(end)
        self.steps_per_update = int(steps_per_update)

    def __call__(self, step):
        step = ops.floor_divide(step, self.steps_per_update) if self.steps_per_update > 1 else step
        step = ops.cast(step, "float32")
        warmup = self.peak * (step + 1.0) / max(self.warmup_steps, 1)
        decay_steps = max(self.total_steps - self.warmup_steps, 1)
        progress = ops.clip((step - self.warmup_steps) / decay_steps, 0.0, 1.0)
        if self.decay == "cosine":
            shape = 0.5 * (1.0 + ops.cos(math.pi * progress))
        elif self.decay == "linear":
            shape = 1.0 - progress
        else:
            shape = ops.ones_like(progress)
        decayed = self.end + (self.peak - self.end) * shape
        return ops.where(step < self.warmup_steps, warmup, decayed)

    def get_config(self):
        return {"peak": self.peak, "total_steps": self.total_steps,
                "warmup_steps": self.warmup_steps, "decay": self.decay, "end": self.end,
                "steps_per_update": self.steps_per_update}


class _RateOncePerStep:
    """Evaluates the learning-rate schedule once per optimizer step (a mixin for Keras
    optimizers).

    Keras reads `learning_rate` for the update and again for each weight it decays, and with a
    schedule that property builds the schedule's ops each time: a small detector's train step
    held 66 copies of the cosine schedule, a fifth of its graph. Every read within one step
    gets the one rate of that step, as before.
    """

    _rate_of_this_step = None

    def _backend_apply_gradients(self, grads, trainable_variables):
        self._rate_of_this_step = self._get_current_learning_rate()
        try:
            super()._backend_apply_gradients(grads, trainable_variables)
        finally:
            self._rate_of_this_step = None

    def _get_current_learning_rate(self):
        if self._rate_of_this_step is not None:
            return self._rate_of_this_step
        return super()._get_current_learning_rate()


class _FusedAdamUpdate:
    """Adam's per-variable update as one TensorFlow kernel (a mixin for Keras Adam and AdamW).

    Keras writes the update as about ten elementwise ops, each a pass over the weight, m and v;
    TensorFlow's `ResourceApplyAdam` computes the same formula (bias correction folded into the
    step size, epsilon added after the square root) in one pass. The decoupled weight decay of
    AdamW is still applied by Keras before this. Amsgrad, sparse gradients and other backends
    keep the Keras update.
    """

    _scalars_of_this_step = None

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        self._scalars_of_this_step = {}
        try:
            super()._backend_update_step(grads, trainable_variables, learning_rate)
        finally:
            self._scalars_of_this_step = None

    def _step_scalars(self, dtype) -> dict:
        """The step's bias corrections and constants in `dtype`, built once per step and dtype
        (not once per weight: most of a step's optimizer ops otherwise)."""
        cache = self._scalars_of_this_step if self._scalars_of_this_step is not None else {}
        if dtype not in cache:
            step = ops.cast(self.iterations + 1, dtype)
            beta_1, beta_2 = ops.cast(self.beta_1, dtype), ops.cast(self.beta_2, dtype)
            cache[dtype] = dict(beta1_power=ops.power(beta_1, step),
                                beta2_power=ops.power(beta_2, step), beta1=beta_1,
                                beta2=beta_2, epsilon=ops.cast(self.epsilon, dtype))
        return cache[dtype]

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad or keras.backend.backend() != "tensorflow":
            return super().update_step(gradient, variable, learning_rate)
        import tensorflow as tf

        if isinstance(gradient, tf.IndexedSlices):
            return super().update_step(gradient, variable, learning_rate)
        dtype = variable.dtype
        momentum, velocity = keras_compat.adam_slots(self, variable)
        tf.raw_ops.ResourceApplyAdam(
            var=_handle(variable), m=_handle(momentum), v=_handle(velocity),
            lr=ops.cast(learning_rate, dtype), grad=ops.cast(gradient, dtype),
            **self._step_scalars(dtype))


class _LayerwiseRates:
    """Per-weight learning-rate multipliers (layer-wise decay), a mixin for Keras optimizers.

    `set_rate_multipliers({variable path: multiplier})` before the optimizer is built; each
    weight then updates at `learning_rate * multiplier`, and its decoupled weight decay uses the
    same scaled rate (as timm's parameter groups do). Without multipliers the Keras update is
    untouched. Pure `keras.ops` on the rate, so it works on every backend and optimizer.
    """

    _rate_multipliers: dict | None = None

    def set_rate_multipliers(self, multipliers: dict[str, float]) -> None:
        """Sets the multipliers by variable path (a weight not named keeps 1)."""
        if self.built:
            raise ValueError("set the learning-rate multipliers before the optimizer is built")
        self._rate_multipliers = dict(multipliers)

    def build(self, variables):
        super().build(variables)
        if self._rate_multipliers:
            self._multiplier_by_index = {
                self._get_variable_index(variable): float(
                    self._rate_multipliers.get(variable.path, 1.0))
                for variable in variables}

    def _apply_weight_decay(self, variables):
        if not self._rate_multipliers:
            super()._apply_weight_decay(variables)
        # Otherwise `update_step` decays each weight at its own rate.

    def update_step(self, gradient, variable, learning_rate):
        if not self._rate_multipliers:
            return super().update_step(gradient, variable, learning_rate)
        multiplier = self._multiplier_by_index[self._get_variable_index(variable)]
        learning_rate = ops.cast(learning_rate, variable.dtype) * multiplier
        if self.weight_decay and self._use_weight_decay(variable):
            decay = ops.cast(self.weight_decay, variable.dtype)
            variable.assign(variable - variable * decay * learning_rate)
        return super().update_step(gradient, variable, learning_rate)


def layer_decay_multipliers(model: keras.Model, num_layers: int,
                            decay: float) -> dict[str, float]:
    """Layer-wise learning-rate decay (BEiT, timm's `--layer-decay`) per trainable weight.

    Weights are grouped by the top-level layer that owns them (the first part of their path):
    the embeddings (patch embedding, ResNet stem, class/distillation/register tokens, position
    embedding) are layer 0, `encoderblock_i` is layer i + 1, and everything after the blocks
    (final norm, pooling, pre_logits, heads) is layer L + 1; layer l trains at
    decay^(L + 1 - l): the head at the full rate, block i at decay^(L - i), the embeddings at
    decay^(L + 1).

    Args:
        model: the model being trained.
        num_layers: L, the number of encoder blocks.
        decay: the per-layer factor in (0, 1].

    Returns:
        {variable path: multiplier} for every trainable weight.
    """
    def layer_id(path: str) -> int:
        owner = path.split("/")[0]
        if owner in EMBEDDING_LAYERS:
            return 0
        block = names.block_index(owner)
        return num_layers + 1 if block is None else block + 1

    return {variable.path: decay ** (num_layers + 1 - layer_id(variable.path))
            for variable in model.trainable_variables}


def _handle(variable):
    """The resource handle of a Keras or tf variable (the local copy inside a strategy update)."""
    if isinstance(variable, keras.Variable):
        variable = variable.value
    return variable.handle


@keras.saving.register_keras_serializable(package="vit_training")
class AdamW(_LayerwiseRates, _RateOncePerStep, _FusedAdamUpdate,
            keras_compat.ClipAfterAllReduce, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` with a one-kernel update, clipping the all-reduced gradient."""


@keras.saving.register_keras_serializable(package="vit_training")
class Adam(_LayerwiseRates, _RateOncePerStep, _FusedAdamUpdate,
           keras_compat.ClipAfterAllReduce, keras.optimizers.Adam):
    """`keras.optimizers.Adam` with a one-kernel update, clipping the all-reduced gradient."""


@keras.saving.register_keras_serializable(package="vit_training")
class SGD(_LayerwiseRates, _RateOncePerStep, keras_compat.ClipAfterAllReduce,
          keras.optimizers.SGD):
    """`keras.optimizers.SGD` clipping the all-reduced gradient (see
    `keras_compat.ClipAfterAllReduce`)."""


def make_schedule(preset, steps_per_epoch: int) -> WarmupDecay:
    """The preset's schedule, counted in optimizer steps (after gradient accumulation)."""
    schedule = preset.schedule
    total = max(1, schedule.epochs * steps_per_epoch)
    warmup = schedule.warmup_steps + int(round(schedule.warmup_epochs * steps_per_epoch))
    return WarmupDecay(preset.optim.lr, total, warmup, schedule.decay, schedule.min_lr,
                       steps_per_update=schedule.grad_accum_steps)


def make_optimizer(preset, steps_per_epoch: int,
                   model: keras.Model) -> keras.optimizers.Optimizer:
    """AdamW / Adam / SGD-momentum with the schedule, global-norm clipping, weight decay kept off
    what the model exempts (`vit_keras.no_weight_decay`), gradient accumulation when
    `grad_accum_steps` > 1 and layer-wise learning-rate decay when `layer_decay` < 1.

    Args:
        preset: a `training.presets.Preset`.
        steps_per_epoch: optimizer steps per epoch.
        model: the model it will train (built); its exempt weights are never decayed.

    Returns:
        The optimizer, not yet built.
    """
    optim, accumulate = preset.optim, preset.schedule.grad_accum_steps
    common = dict(
        learning_rate=make_schedule(preset, steps_per_epoch),
        global_clipnorm=optim.clipnorm or None,
        gradient_accumulation_steps=accumulate if accumulate > 1 else None,
        use_ema=optim.ema_momentum > 0,
        ema_momentum=optim.ema_momentum or 0.99,
    )
    decay = optim.weight_decay or None
    if optim.optimizer == "adamw":
        optimizer = AdamW(weight_decay=optim.weight_decay, beta_1=optim.beta1,
                          beta_2=optim.beta2, **common)
    elif optim.optimizer == "adam":
        # Adam with decoupled decay when asked (the paper's pre-training uses wd 0.1 with Adam).
        optimizer = Adam(beta_1=optim.beta1, beta_2=optim.beta2, weight_decay=decay, **common)
    else:
        optimizer = SGD(momentum=optim.momentum, weight_decay=decay, **common)
    optimizer.exclude_from_weight_decay(var_list=no_weight_decay(model))
    if preset.optim.layer_decay < 1:
        optimizer.set_rate_multipliers(
            layer_decay_multipliers(model, preset.model.num_layers, preset.optim.layer_decay))
    return optimizer


def make_loss(preset) -> keras.losses.Loss:
    """Softmax cross-entropy on logits with the preset's label smoothing (one-hot labels)."""
    return keras.losses.CategoricalCrossentropy(from_logits=True,
                                                label_smoothing=preset.objective.label_smoothing)


def make_metrics(num_classes: int) -> list:
    """Top-1 `accuracy`, `cross_entropy` (without label smoothing: the loss every report
    shows, as `vit evaluate`) and, with more than 5 classes, `top5` accuracy."""
    metrics = [keras.metrics.CategoricalAccuracy(name="accuracy"),
               keras.metrics.CategoricalCrossentropy(from_logits=True, name="cross_entropy")]
    if num_classes > 5:
        metrics.append(keras.metrics.TopKCategoricalAccuracy(k=5, name="top5"))
    return metrics
