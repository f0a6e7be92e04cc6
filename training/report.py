"""What a training run tells its user: the header before it trains and the result table after.

Text made from the run's values; `training.run` prints it through `vit_app.console`.
"""

from __future__ import annotations

from vit_app.data.specs import built_in_sets, parse_spec
from vit_keras.config import variant_of

FEW_IMAGES = 2000


def describe_model(config) -> str:
    """'S/16 224x224px' for a named variant's shape, else the custom shape, and the options.

    Args:
        config: the run's `ViTConfig`.
    """
    if config.architecture != "vit":  # its name is its whole shape
        return f"{config.architecture} {config.image_hw[0]}x{config.image_hw[1]}px"
    name = variant_of(config) or (f"custom patch {config.patch_size} D={config.hidden_size} "
                                  f"L={config.num_layers} heads={config.num_heads}")
    height, width = config.image_hw
    locality = [f"{config.stem} stem"] if config.stem != "patchify" else []
    locality += ["locality attention"] if config.locality_attention else []
    return ", ".join([f"{name} {height}x{width}px", *locality, f"{config.classifier} pooling",
                      f"posemb {config.posemb}"])


def describe_step_forms(forms: dict, config, backend: str) -> str:
    """The header's account of the step's opt-in forms and remat policy ('' when none), with
    what each does in this run.

    Args:
        forms: `training.run.step_forms`' keywords.
        config: the run's `ViTConfig`.
        backend: the Keras backend of the run.

    Returns:
        e.g. 'fused_qkv, attention_kernel, remat=dots'.
    """
    parts = [name for name, on in forms.items() if on]
    if forms.get("attention_kernel") and config.attention_dropout_rate:
        parts[parts.index("attention_kernel")] += (
            f" (not taken: attention_dropout_rate {config.attention_dropout_rate})")
    if config.remat == "dots":
        parts.append("remat=dots" if backend == "jax" else
                     f"remat=dots (a JAX policy: {backend} rematerialises whole blocks)")
    return ", ".join(parts)


def header_lines(setup, forms: dict) -> list[str]:
    """The lines a run prints before it trains: preset, model, placement, batch, data.

    Args:
        setup: the run's `training.setup.Setup`.
        forms: `training.run.step_forms`' keywords.
    """
    preset, plan, data = setup.preset, setup.plan, setup.data
    accumulated = f" (accumulated {plan.accum}x{plan.step_batch})" if plan.accum > 1 else ""
    lines = [f"vit train: preset {preset.name}, objective {setup.objective.name}, model "
             f"{describe_model(setup.config)}, {setup.backend}: {setup.placement.name} "
             f"x{plan.replicas}, batch {plan.global_batch}{accumulated}, "
             f"{preset.schedule.epochs} epochs x {plan.steps_per_epoch} steps, {setup.policy}"]
    if setup.adaptation:
        lines.append(setup.adaptation)
    hint = few_images_hint(setup)
    if hint:
        lines.append(hint)
    described = describe_step_forms(forms, setup.config, setup.backend)
    if described:
        lines.append(f"step forms: {described} (vit_keras.fast_paths.training_forms)")
    validation = "none" if data.val is None else (
        f"{data.val.num_examples or 'uncounted'} examples")
    lines.append(f"data: train {setup.num_examples} examples of {preset.data.train} "
                 f"({data.train.num_classes} classes); validation {validation} from "
                 f"{data.val_origin}")
    for source in (data.train, data.val):
        lines.extend(note for note in (source.notes if source else ()) if note not in lines)
    note = setup.objective.loss_note()
    return lines + ([note] if note else [])


def few_images_hint(setup) -> str:
    """The header's pointer to fine-tuning when a classifier trains from scratch on fewer
    than `FEW_IMAGES` of the user's images ('' otherwise, and for the built-in data sets,
    which the from-scratch presets were made for)."""
    preset = setup.preset
    kind, _ = parse_spec(preset.data.train)
    if preset.finetune.weights or setup.num_examples >= FEW_IMAGES or kind in built_in_sets() \
            or not setup.objective.hints_fine_tuning:
        return ""
    data = f"--data {preset.data.train}" + (f" --val-data {preset.data.val}"
                                             if preset.data.val else "")
    return (f"hint: {setup.num_examples} training images are few for a ViT from scratch, "
            "which has to learn from the data the locality a CNN is built with; fine-tuning "
            "pre-trained weights is the usual route: vit train "
            f"{data} --model S/16 --weights augreg-in21k --finetune lora (224 px; "
            "docs/pretrained.md lists the weights, docs/training.md the modes)")


def loss_row(metrics: dict) -> tuple[str, str]:
    """The table's loss: plain cross-entropy (as `vit evaluate` reports it) for classifiers,
    else the objective's own loss, named."""
    if metrics.get("val_cross_entropy") is not None:
        return ("cross-entropy (val/test)", f"{metrics['val_cross_entropy']:.4f}")
    key = next((key for key in metrics if key.startswith("val_") and key.endswith("loss")),
               None)
    name = "loss" if key is None else key[len("val_"):].replace("_", " ")
    return (f"{name} (val/test)", "n/a" if key is None else f"{metrics[key]:.4f}")


def kept_row(metrics: dict) -> str:
    """Which epoch's weights the run's files hold, and why."""
    kept, last, best = metrics.get("kept_epoch"), metrics["epochs"], metrics.get("best_epoch")
    if "probe_l2" in metrics:
        return "the fitted linear probe"
    if kept != last:
        return f"epoch {kept} of {last}: the best validated (--set loop.keep=last: the last)"
    return f"epoch {kept} of {last}: the last" + (", also the best validated" if best == last
                                                   else "")


def summary_rows(metrics: dict, output: str, objective) -> list[tuple[str, str]]:
    """The result table printed at the end of a run.

    Args:
        metrics: the run's metrics.json.
        output: the run's output folder.
        objective: the run's objective (`training.objective.Objective`): its metric names and
            labels.
    """
    def percent(key):
        value = metrics.get(key)
        return "n/a" if value is None else f"{100 * value:.2f}%"

    rows = [(f"{objective.metric_label} (val/test)", percent(objective.metric_key))]
    if "val_top5" in metrics:
        rows.append(("top-5 (val/test)", percent("val_top5")))
    if "val_f1_micro" in metrics:
        rows.append(("F1 micro / macro (val/test)",
                     f"{percent('val_f1_micro')} / {percent('val_f1_macro')}"))
    rows += objective.baseline_rows(metrics)
    rows.append(loss_row(metrics))
    rows += [(f"best val {objective.monitor_label}",
              f"{percent('best_val_accuracy')} (epoch {metrics['best_epoch']})"),
             ("weights (model.keras, exports)", kept_row(metrics)),
             ("train time", f"{metrics['train_seconds']:.1f} s"),
             ("wall time", f"{metrics['wall_seconds']:.1f} s"),
             ("train img/s", f"{metrics['train_images_per_second']:.0f}"),
             ("output", output)]
    return rows
