"""The training run behind `vit train`: strategy, data, model, fit, evaluation and outputs."""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np

from training import configs

EVAL_SAMPLES = 2000  # export.json accuracy: the whole validation split, up to this many
CALIBRATION_SAMPLES = 300  # int8 calibration images from the training split
INSPECT_SAMPLES = 4


def log(*parts, **kwargs) -> None:
    """Prints a line and flushes (progress must show up when piped)."""
    print(*parts, flush=True, **kwargs)


@dataclasses.dataclass
class Plan:
    """Batch and step arithmetic of a run under a strategy."""

    replicas: int
    global_batch: int        # examples per optimizer update
    step_batch: int          # examples per training step (global, all replicas)
    per_replica_batch: int   # examples per replica per step
    accum: int               # gradient accumulation steps
    steps_per_epoch: int     # training steps (batches) per epoch
    updates_per_epoch: int   # optimizer updates per epoch


def make_plan(preset: configs.Preset, num_examples: int, replicas: int) -> Plan:
    """Splits the global batch over accumulation steps and replicas; checks divisibility."""
    accum = max(1, preset.grad_accum_steps)
    if preset.batch_size % (accum * replicas):
        raise ValueError(f"batch_size {preset.batch_size} must be divisible by "
                         f"grad_accum_steps x replicas = {accum} x {replicas}")
    step_batch = preset.batch_size // accum
    if num_examples < step_batch:
        raise ValueError(f"the training data has {num_examples} examples, fewer than one "
                         f"batch of {step_batch}")
    steps = (num_examples // step_batch) // accum * accum
    return Plan(replicas=replicas, global_batch=preset.batch_size, step_batch=step_batch,
                per_replica_batch=step_batch // replicas, accum=accum, steps_per_epoch=steps,
                updates_per_epoch=steps // accum)


def model_config(preset: configs.Preset, num_classes: int):
    """The `ViTConfig` of the preset's model with `num_classes` outputs."""
    import vit_keras

    common = dict(image_size=preset.image_size, num_classes=num_classes,
                  classifier=preset.classifier, dropout_rate=preset.dropout_rate,
                  attention_dropout_rate=preset.attention_dropout_rate,
                  representation_size=preset.representation_size or None,
                  head_bias_init=preset.head_bias_init,
                  drop_path_rate=getattr(preset, "drop_path_rate", 0.0),
                  posemb=getattr(preset, "posemb", "learn"))
    if preset.model == "custom":
        return vit_keras.ViTConfig(patch_size=preset.patch_size, hidden_size=preset.hidden_size,
                                   mlp_dim=preset.mlp_dim, num_heads=preset.num_heads,
                                   num_layers=preset.num_layers, **common)
    return vit_keras.get_variant(preset.model, **common)


def load_pretrained(model, path: str) -> None:
    """Loads `path` into `model` through `vit_keras.load_weights` (head skipped, posemb resized)."""
    import vit_keras

    loader = getattr(vit_keras, "load_weights", None)
    if loader is None:
        raise RuntimeError("--weights needs vit_keras.load_weights, which this version lacks")
    loader(model, path, skip_head=None)


def resolve_precision(preset: configs.Preset, on_tpu: bool) -> str:
    """The Keras dtype policy name for the run."""
    from training.hardware import fastest_policy

    wanted = preset.mixed_precision
    if on_tpu:
        return "mixed_bfloat16"
    if wanted == "auto":
        return fastest_policy()
    if wanted not in ("", "float32", "mixed_bfloat16", "mixed_float16"):
        raise ValueError(f"mixed_precision must be '', 'auto', 'mixed_bfloat16' or "
                         f"'mixed_float16', got {wanted!r}")
    return wanted or "float32"


def count_examples(source) -> int:
    """Examples in `source` (one pass over its records when the size is not known)."""
    if source.num_examples:
        return source.num_examples
    log(f"counting the examples of {source.spec} (one pass) ...")
    return int(source.records().reduce(np.int64(0), lambda count, _: count + 1))


def open_data(preset: configs.Preset, data_dir: str | None):
    """(train source, validation source or None)."""
    from training import data

    train_source = data.load_source(preset.data, "train", data_dir, preset.val_split,
                                    preset.seed)
    if preset.val_data:
        # digits / tfds without a split: their held-out part; folder / tfrecord: all of it.
        subset = "val" if data.parse_spec(preset.val_data)[0] in ("digits", "tfds") else "train"
        val_source = data.load_source(preset.val_data, subset, data_dir, 0.0, preset.seed)
    elif data.has_natural_val(preset.data, preset.val_split):
        val_source = data.load_source(preset.data, "val", data_dir, preset.val_split,
                                      preset.seed)
    else:
        val_source = None
    if val_source is not None and val_source.num_classes != train_source.num_classes:
        raise ValueError(f"validation data has {val_source.num_classes} classes, training data "
                         f"{train_source.num_classes}")
    return train_source, val_source


def build_and_compile(preset, config, plan: Plan, strategy, steps_per_execution: int):
    """Model and optimizer built in the strategy scope, compiled."""
    import tensorflow as tf
    import vit_keras
    from training import keras_compat, recipe

    with strategy.scope():
        model = vit_keras.VisionTransformer(config)
        if preset.weights:
            load_pretrained(model, preset.weights)
        model.compile(optimizer=recipe.make_optimizer(preset, plan.updates_per_epoch),
                      loss=recipe.make_loss(preset), metrics=recipe.make_metrics(
                          config.num_classes), steps_per_execution=steps_per_execution)
        model.optimizer.build(model.trainable_variables)
    if strategy is not tf.distribute.get_strategy():  # see training/keras_compat.py
        keras_compat.build_without_peeking(model, (*config.image_hw, config.channels),
                                           config.num_classes, plan.per_replica_batch)
        if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
            keras_compat.vector_logs(model)
    return model


def clean_copy(model, config):
    """A float32, uncompiled copy of `model` (what model.keras holds and exports get)."""
    import keras
    import vit_keras

    policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("float32")
    try:
        copy = vit_keras.VisionTransformer(config)
    finally:
        keras.mixed_precision.set_global_policy(policy)
    copy.set_weights([np.asarray(w) for w in model.get_weights()])
    return copy


def save_model(model, path: str) -> None:
    """`model.save(path)` atomically (through a local temp file for gs:// paths)."""
    import tempfile

    import tensorflow as tf

    directory = os.path.dirname(path) or "."
    if "://" in path:
        local = os.path.join(tempfile.mkdtemp(), os.path.basename(path))
        model.save(local)
        tf.io.gfile.copy(local, path + ".tmp", overwrite=True)
    else:
        local = os.path.join(directory, f".tmp-{os.getpid()}-{os.path.basename(path)}")
        model.save(local)
        tf.io.gfile.rename(local, path + ".tmp", overwrite=True)
    tf.io.gfile.rename(path + ".tmp", path, overwrite=True)


def run_hook(module_name: str, function_name: str, *args, **kwargs) -> None:
    """Calls training.<module>.<function> if that module exists; prints a notice otherwise."""
    import importlib

    try:
        module = importlib.import_module(module_name)
        function = getattr(module, function_name)
    except (ModuleNotFoundError, AttributeError):
        log(f"note: {module_name}.{function_name} is not available in this version; skipped")
        return
    function(*args, **kwargs)


def train(preset: configs.Preset, output: str | None = None, resume: bool = False,
          strategy_name: str = "auto", tpu: str | None = None, data_dir: str | None = None,
          export: bool = True, inspect: bool = True, verbose: int = 0) -> int:
    """Runs one training job end to end; returns 0 on success.

    Args:
        preset: the fully resolved preset.
        output: output folder (default saved_models/<preset.name>); local or gs://.
        resume: continue from `<output>/backup` when there is a backup.
        strategy_name, tpu: see `training.distribute.get_strategy`.
        data_dir: tfds data_dir.
        export, inspect: run the export and the analysis at the end.
        verbose: Keras fit verbosity (0 = one line per epoch from `EpochLog`).
    """
    started = time.perf_counter()
    from training import distribute

    strategy = distribute.get_strategy(strategy_name, tpu)  # first: it may reset the runtime

    import keras
    import tensorflow as tf

    from training import augment, callbacks, data, outputs

    on_tpu = distribute.is_tpu(strategy)
    chief = distribute.is_chief(strategy)
    policy = resolve_precision(preset, on_tpu)
    keras.mixed_precision.set_global_policy(policy)
    keras.utils.set_random_seed(preset.seed)
    output = output or os.path.join("saved_models", preset.name)
    write_dir = output if chief else os.path.join(
        output, f".worker-{strategy.cluster_resolver.task_id}")
    backup_dir = os.path.join(output, "backup")
    tf.io.gfile.makedirs(write_dir)

    train_source, val_source = open_data(preset, data_dir)
    num_examples = count_examples(train_source)
    plan = make_plan(preset, num_examples, strategy.num_replicas_in_sync)
    steps_per_execution = preset.steps_per_execution
    if on_tpu and steps_per_execution == 1:
        steps_per_execution = min(64, plan.steps_per_epoch)
    config = model_config(preset, train_source.num_classes)
    log(f"vit train: preset {preset.name}, data {preset.data} ({num_examples} examples, "
        f"{train_source.num_classes} classes), model {preset.model} {config.image_hw[0]}px "
        f"patch {config.patch_size} D={config.hidden_size} L={config.num_layers}, "
        f"{distribute.strategy_name(strategy)} x{plan.replicas}, batch {plan.global_batch}"
        f"{f' (accumulated {plan.accum}x{plan.step_batch})' if plan.accum > 1 else ''}, "
        f"{preset.epochs} epochs x {plan.steps_per_epoch} steps, {policy}")

    model = build_and_compile(preset, config, plan, strategy, steps_per_execution)
    state = None
    if resume:
        state = callbacks.restore_backup(model, backup_dir)
        if state is None:
            log(f"--resume: no backup in {backup_dir}; starting from scratch")
        else:
            log(f"--resume: continuing at epoch {state['epoch'] + 1}, step {state['step']} "
                f"(global step {state['global_step']})")
    elif chief and tf.io.gfile.exists(backup_dir):
        tf.io.gfile.rmtree(backup_dir)  # a fresh run does not inherit an old backup
    start_epoch, start_step = (state["epoch"], state["step"]) if state else (0, 0)

    def train_stream(first_epoch: int, first_step: int):
        return data.train_dataset(
            train_source, preset.image_size, plan.step_batch, epochs=preset.epochs,
            seed=preset.seed, crop=preset.train_crop, crop_area_min=preset.crop_area_min,
            pad=preset.pad, augment=augment.build_augment(preset), start_epoch=first_epoch,
            start_step=first_step, steps_per_epoch=plan.steps_per_epoch,
            shuffle_buffer=preset.shuffle_buffer)

    val_ds = None
    if val_source is not None:
        val_ds = data.eval_dataset(val_source, preset.image_size, plan.step_batch,
                                   num_classes=train_source.num_classes, drop_remainder=on_tpu)

    history_path = os.path.join(write_dir, "history.csv")
    best = callbacks.BestModel(os.path.join(write_dir, "best.weights.h5"), write=chief)
    best.restore(state)
    backup = callbacks.ResumableBackup(backup_dir, plan.steps_per_epoch, preset.backup_every,
                                       write=chief, step_offset=start_step, best_model=best)
    finite = callbacks.StopOnNonFinite(plan.steps_per_epoch, step_offset=start_step,
                                       backup_dir=backup_dir if chief else "")
    # `finite` first: a NaN step is never backed up. The backup last: an epoch's history row
    # and best weights are on disk before its backup marks it done, so a kill in between
    # reruns the epoch on --resume instead of losing them.
    fit_callbacks = [finite, best, keras.callbacks.CSVLogger(history_path, append=bool(state)),
                     backup]
    if _tensorboard_available():
        fit_callbacks.append(keras.callbacks.TensorBoard(os.path.join(write_dir, "logs")))
    else:
        log("note: tensorboard is not installed; no TensorBoard logs (pip install tensorboard)")
    if verbose == 0:
        fit_callbacks.append(callbacks.EpochLog(preset.epochs))

    train_started = time.perf_counter()
    epoch = start_epoch
    if start_step and epoch < preset.epochs:  # finish the interrupted epoch first
        model.fit(train_stream(epoch, start_step), epochs=epoch + 1, initial_epoch=epoch,
                  steps_per_epoch=plan.steps_per_epoch - start_step,
                  validation_data=val_ds, callbacks=fit_callbacks, verbose=verbose, shuffle=False)
        epoch += 1
    if epoch < preset.epochs:
        model.fit(train_stream(epoch, 0), epochs=preset.epochs, initial_epoch=epoch,
                  steps_per_epoch=plan.steps_per_epoch, validation_data=val_ds,
                  validation_freq=_validation_epochs(preset, epoch), callbacks=fit_callbacks,
                  verbose=verbose, shuffle=False)
    train_seconds = time.perf_counter() - train_started
    trained_images = (preset.epochs * plan.steps_per_epoch - (start_epoch * plan.steps_per_epoch
                                                              + start_step)) * plan.step_batch

    metrics = {"preset": preset.name, "data": preset.data, "num_train_examples": num_examples,
               "epochs": preset.epochs, "global_batch": plan.global_batch,
               "replicas": plan.replicas, "strategy": distribute.strategy_name(strategy),
               "precision": policy, "train_seconds": round(train_seconds, 2),
               "train_images_per_second": round(trained_images / max(train_seconds, 1e-9), 1),
               "best_val_accuracy": best.best, "best_epoch": best.best_epoch}
    if val_ds is not None:
        results = model.evaluate(val_ds, verbose=0, return_dict=True)
        metrics.update({"val_top1": float(results["accuracy"]), "val_loss": float(
            results["loss"]), "val_top5": float(results["top5"]) if "top5" in results else None,
            "val_examples": val_source.num_examples})
    metrics["wall_seconds"] = round(time.perf_counter() - started, 2)

    if chief:
        final = clean_copy(model, config)
        save_model(final, os.path.join(output, "model.keras"))
        outputs.write_labels(output, train_source.class_names)
        outputs.write_json(os.path.join(output, "config.json"),
                           {"preset": preset.to_dict(), "model": config.to_dict()})
        outputs.plot_curves(outputs.read_history(history_path), os.path.join(output,
                                                                              "curves.png"))
        outputs.write_json(os.path.join(output, "metrics.json"), metrics)
        log(outputs.summary_table(_summary_rows(metrics, output)))
        _post_training(final, train_source, val_source, preset, output, export, inspect)
        if tf.io.gfile.exists(backup_dir):
            tf.io.gfile.rmtree(backup_dir)
    else:  # non-chief workers keep their final weights in their scratch folder only
        callbacks.save_weights_atomic(clean_copy(model, config),
                                      os.path.join(write_dir, "final.weights.h5"))
    return 0


def _tensorboard_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("tensorboard") is not None


def _validation_epochs(preset: configs.Preset, first_epoch: int) -> list[int]:
    """1-based epochs that validate: every `eval_every` and always the last."""
    every = max(1, preset.eval_every)
    chosen = [e for e in range(first_epoch + 1, preset.epochs + 1) if e % every == 0]
    if preset.epochs not in chosen:
        chosen.append(preset.epochs)
    return chosen


def _summary_rows(metrics: dict, output: str) -> list[tuple[str, str]]:
    def percent(key):
        value = metrics.get(key)
        return "n/a" if value is None else f"{100 * value:.2f}%"

    rows = [("top-1 (val/test)", percent("val_top1")), ("top-5 (val/test)", percent("val_top5")),
            ("loss (val/test)", "n/a" if metrics.get("val_loss") is None
             else f"{metrics['val_loss']:.4f}"),
            ("best val top-1", f"{percent('best_val_accuracy')} (epoch {metrics['best_epoch']})"),
            ("train time", f"{metrics['train_seconds']:.1f} s"),
            ("wall time", f"{metrics['wall_seconds']:.1f} s"),
            ("train img/s", f"{metrics['train_images_per_second']:.0f}"),
            ("output", output)]
    return rows


def _post_training(model, train_source, val_source, preset, output, export, inspect) -> None:
    """Export (SavedModel/TFLite) and analysis hooks on a few raw 0..255 images."""
    from training import data

    if not (export or inspect):
        return
    source = val_source or train_source
    images, labels = data.take_raw_images(source, preset.image_size, EVAL_SAMPLES)
    if export:
        representative, _ = data.take_raw_images(train_source, preset.image_size,
                                                 CALIBRATION_SAMPLES)
        run_hook("training.export", "export_model", model, output,
                 representative_images=representative, eval_images=images, eval_labels=labels)
    if inspect:
        run_hook("training.inspect", "inspect_model", model, images[:INSPECT_SAMPLES],
                 os.path.join(output, "inspect"))
