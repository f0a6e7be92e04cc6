"""The non-classification objectives of `vit train`: masked patch prediction pre-training
(`objective='mpp'`) and DeiT distillation (`objective='distill'`).

Both reuse the data, recipe and outputs of the supervised loop on one device, without its
backups and strategies:

- mpp: trains `vit_keras.masked_patch.MaskedPatchPretrainer` on the images (labels unused) and
  writes `encoder.npz` (the pre-trained encoder as an official-layout checkpoint); fine-tune
  with `vit train --config mpp_digits_finetune --weights <output>/encoder.npz`.
- distill: trains a `distilled=True` ViT with `vit_keras.deit.DistillationTrainer` against the
  `teacher` `.keras` model and writes `model.keras` (the student, heads averaged).
"""

from __future__ import annotations

import os
import time

from training import configs, loop


def _setup(preset: configs.Preset, data_dir: str | None):
    import keras

    from training import augment, data

    keras.mixed_precision.set_global_policy(loop.resolve_precision(preset, on_tpu=False))
    keras.utils.set_random_seed(preset.seed)
    train_source, val_source = loop.open_data(preset, data_dir)
    plan = loop.make_plan(preset, loop.count_examples(train_source), replicas=1)
    train_ds = data.train_dataset(
        train_source, preset.image_size, plan.step_batch, epochs=preset.epochs,
        seed=preset.seed, crop=preset.train_crop, crop_area_min=preset.crop_area_min,
        pad=preset.pad, augment=augment.build_augment(preset),
        steps_per_epoch=plan.steps_per_epoch, shuffle_buffer=preset.shuffle_buffer)
    val_ds = None
    if val_source is not None:
        val_ds = data.eval_dataset(val_source, preset.image_size, plan.step_batch,
                                   num_classes=train_source.num_classes)
    return train_source, train_ds, val_ds, plan


def _finish(output: str, metrics: dict, started: float, preset, config) -> None:
    from training import outputs

    outputs.write_json(os.path.join(output, "config.json"),
                       {"preset": preset.to_dict(), "model": config.to_dict()})
    metrics["wall_seconds"] = round(time.perf_counter() - started, 2)
    outputs.write_json(os.path.join(output, "metrics.json"), metrics)
    loop.log(outputs.summary_table([(key, str(value)) for key, value in metrics.items()]))


def pretrain_mpp(preset: configs.Preset, output: str, data_dir: str | None = None,
                 verbose: int = 0) -> int:
    """Masked patch prediction pre-training; writes encoder.npz and metrics.json."""
    import tensorflow as tf

    import vit_keras
    from vit_keras import masked_patch
    from training import recipe

    started = time.perf_counter()
    train_source, train_ds, val_ds, plan = _setup(preset, data_dir)
    config = loop.model_config(preset, train_source.num_classes)
    loop.log(f"vit train (mpp): {preset.epochs} epochs x {plan.steps_per_epoch} steps, "
             f"{config.num_patches} patches, {2 ** (3 * config.channels)} colour classes")
    trainer = masked_patch.MaskedPatchPretrainer(config, seed=preset.seed)
    trainer.compile(optimizer=recipe.make_optimizer(preset, plan.updates_per_epoch))
    images_only = train_ds.map(lambda images, labels: images)
    history = trainer.fit(images_only, epochs=preset.epochs, steps_per_epoch=plan.steps_per_epoch,
                          verbose=verbose)
    metrics = {"preset": preset.name, "objective": "mpp",
               "train_mpp_loss": round(float(history.history["loss"][-1]), 4),
               "train_mpp_accuracy": round(float(history.history["accuracy"][-1]), 4)}
    if val_ds is not None:
        results = trainer.evaluate(val_ds.map(lambda images, labels: images), verbose=0,
                                   return_dict=True)
        metrics.update(val_mpp_loss=round(float(results["loss"]), 4),
                       val_mpp_accuracy=round(float(results["accuracy"]), 4))
    tf.io.gfile.makedirs(output)
    classifier = masked_patch.to_classifier(trainer.network, config)
    vit_keras.checkpoints.save_npz(classifier, os.path.join(output, "encoder.npz"))
    _finish(output, metrics, started, preset, config)
    return 0


def train_distilled(preset: configs.Preset, output: str, data_dir: str | None = None,
                    verbose: int = 0) -> int:
    """DeiT hard-label distillation from `preset.teacher`; writes model.keras, metrics.json."""
    import keras
    import tensorflow as tf

    import vit_keras
    from vit_keras.deit import DistillationTrainer
    from training import recipe

    if not preset.teacher:
        raise ValueError("objective 'distill' needs a teacher: --set teacher=PATH.keras (any "
                         "Keras classifier of [-1, 1] images, e.g. a model.keras of vit train)")
    started = time.perf_counter()
    train_source, train_ds, val_ds, plan = _setup(preset, data_dir)
    teacher = keras.saving.load_model(preset.teacher, safe_mode=True)
    config = loop.model_config(preset, train_source.num_classes).replace(distilled=True)
    student = vit_keras.VisionTransformer(config)
    if preset.weights:
        loop.load_pretrained(student, preset.weights)
    trainer = DistillationTrainer(student, teacher, label_smoothing=preset.label_smoothing)
    trainer.compile(optimizer=recipe.make_optimizer(preset, plan.updates_per_epoch),
                    metrics=recipe.make_metrics(config.num_classes))
    trainer.fit(train_ds, epochs=preset.epochs, steps_per_epoch=plan.steps_per_epoch,
                verbose=verbose)
    metrics = {"preset": preset.name, "objective": "distill", "teacher": preset.teacher}
    if val_ds is not None:
        results = trainer.evaluate(val_ds, verbose=0, return_dict=True)
        metrics["val_top1"] = round(float(results["accuracy"]), 4)
        teacher_hits = keras.metrics.CategoricalAccuracy()
        for images, labels in val_ds:
            teacher_hits.update_state(labels, teacher(images, training=False))
        metrics["teacher_val_top1"] = round(float(teacher_hits.result()), 4)
    tf.io.gfile.makedirs(output)
    loop.save_model(loop.clean_copy(student, config), os.path.join(output, "model.keras"))
    _finish(output, metrics, started, preset, config)
    return 0


def run(preset: configs.Preset, output: str | None = None, data_dir: str | None = None,
        verbose: int = 0) -> int:
    """Runs the preset's objective ('mpp' or 'distill')."""
    output = output or os.path.join("saved_models", preset.name)
    if preset.objective == "mpp":
        return pretrain_mpp(preset, output, data_dir, verbose)
    if preset.objective == "distill":
        return train_distilled(preset, output, data_dir, verbose)
    raise ValueError(f"objective must be 'classify', 'mpp' or 'distill', got "
                     f"{preset.objective!r}")
