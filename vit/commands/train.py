"""Train a ViT: `vit train` with no arguments runs the offline `digits_tiny` preset.

Examples:
  vit train                                         # digits_tiny, offline, a few minutes on CPU
  vit train --config cifar10_scratch --data-dir ~/tensorflow_datasets
  vit train --data folder:~/flowers --model S/16 --image-size 224 --set data.val_split=0.1
  vit train --data folder:~/train --val-data folder:~/test   # trains on all of ~/train
  vit train --config finetune_384 --data tfds:oxford_iiit_pet --weights augreg-in21k
  vit train --weights augreg-in21k --model B/16 --data folder:~/pets --finetune lora
  vit train --config digits_transfer --weights saved_models/digits_0_4/model.keras --finetune probe
  vit train --set optim.layer_decay=0.75 --set objective.kind=distill ...
  vit train --data csv:~/photos/tags.csv --set objective.kind=multilabel   # several labels each
  vit train --task segment                          # a class per pixel, on the built-in scenes
  vit train --task segment --data folder:~/scenes   # ~/scenes/images/ + ~/scenes/masks/
  vit train --resume                                # continue a killed run where it stopped
  vit train --resume auto                           # resume if there is a backup, else start
  vit train --backend jax --model-parallel 2        # JAX: data parallel, each model on 2 devices
  vit train --set optim.lr=3e-3 --set augment.translate=0.1   # override any preset field
  vit train --set model.classifier=map --set model.num_register_tokens=4   # any model option

Outputs go to saved_models/<preset>/ on the built-in data, saved_models/<data>_<objective>/
on yours (folder:~/pets -> saved_models/pets_classify/), or --output DIR (local or gs://):
model.keras, labels.txt, metrics.json, history.csv, curves.png, config.json,
best.weights.h5, logs/ (TensorBoard), backup/ (resumable state, removed when the run
completes), the exports and inspect/. Every objective (classify, mpp, distill, multilabel,
segment) runs through the same run.
"""

from __future__ import annotations

import argparse

from training import presets
from training.presets import command_line, overrides, sections
from vit_app.backend import BACKENDS
from vit_app.inference.export.formats import DEFAULT_FORMATS, FORMATS
from vit.commands.checks import add_preprocessing_argument
from vit_keras import tasks
from vit_keras.pretrained.references import check_weights_reference


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Registers the `vit train` options, grouped like the preset's sections."""
    recipe = parser.add_argument_group("recipe (the preset and its fields)")
    recipe.add_argument("--task", choices=tuple(tasks.TASKS),
                        help="what the model learns: " + "; ".join(
                            f"'{name}' ({parts.summary}, on {parts.data})"
                            for name, parts in tasks.TASKS.items()) +
                        "; it sets objective.kind and picks the default preset (default: "
                        "classify, the preset's objective)")
    recipe.add_argument("--config", choices=presets.preset_names(),
                        help=f"preset to start from (default: {presets.DEFAULT_PRESET}, or "
                        "the task's: " + ", ".join(f"{parts.preset} with --task {name}"
                                                   for name, parts in tasks.TASKS.items()) + ")")
    recipe.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a preset field, SECTION.FIELD=VALUE (repeatable), e.g. "
                        "--set augment.translate=0.1 --set model.drop_path_rate=0.1; every key "
                        "is listed below")
    recipe.add_argument("--seed", type=int, help="random seed (folder hold-out, init, shuffle, "
                        "augmentation)")
    _add_data_arguments(parser.add_argument_group("data"))
    _add_model_arguments(parser.add_argument_group("model and fine-tuning"))
    schedule = parser.add_argument_group("optim and schedule")
    schedule.add_argument("--epochs", type=int, help="number of epochs (schedule.epochs)")
    schedule.add_argument("--batch-size", type=int, help="GLOBAL batch size: all replicas, all "
                          "accumulation steps (schedule.batch_size)")
    schedule.add_argument("--lr", type=float, help="peak learning rate (optim.lr)")
    schedule.add_argument("--mixed-precision", nargs="?", const="auto",
                          choices=("auto", "mixed_bfloat16", "mixed_float16", "float32"),
                          help="mixed precision (loop.mixed_precision); alone (auto): the "
                          "fastest for this hardware")
    add_run_arguments(parser.add_argument_group("run (where and how it executes)"))
    parser.epilog = _keys_epilog()


def _add_data_arguments(group) -> None:
    group.add_argument("--data", help="training data (data.train): digits | folder:PATH | "
                       "csv:PATH (multi-label) | tfds:NAME[:SPLIT] | tfrecord:GLOB")
    group.add_argument("--val-data", help="validation data spec (data.val); when given, the "
                       "training data keeps all of its examples (default: the source's "
                       "held-out split)")
    group.add_argument("--data-dir", help="tfds data_dir (local or gs://)")


def _add_model_arguments(group) -> None:
    group.add_argument("--model", help="take the architecture of a ViT variant (Ti/16, S/16, "
                       "B/16, B/32, L/16, R50+B/16, ...): patch size, width, depth, heads, MLP, "
                       "ResNet; the preset's other model options stay (default: the preset's "
                       "model); or a family model (vit_small_patch14_dinov2, ...: `vit weights "
                       "list`), which also sets its pooling, layer scale, registers and "
                       "preprocessing")
    group.add_argument("--image-size", type=int, help="model resolution in pixels "
                       "(model.image_size)")
    group.add_argument("--weights", help="pre-trained weights to start from "
                       "(finetune.weights): a name from `vit weights list` (for --model's "
                       "architecture; family weights as NAME.TAG, e.g. "
                       "vit_small_patch14_dinov2.lvd142m, with --model NAME), an https:// URL, "
                       "hf://ORG/REPO, a checkpoint file or a model.keras; the head is "
                       "re-initialised, posemb resized to --image-size")
    add_preprocessing_argument(group)
    group.add_argument("--finetune", choices=sections.FINETUNE_MODES,
                       help="what trains (finetune.mode): full (every weight), lora (adapters "
                       "on finetune.lora_targets + the head; writes lora.npz too), head (head "
                       "and pre_logits), probe (a linear head fitted once on frozen features) "
                       "(default: the preset's, full)")


def add_run_arguments(group) -> None:
    """The `RunOptions` flags: output, resume, strategy, backend and processes, what runs at
    the end (`vit.cli` reads --backend before Keras is imported)."""
    group.add_argument("--output", help="output folder (default: saved_models/<preset> on "
                       "the built-in data, saved_models/<data name>_<objective> on yours)")
    group.add_argument("--resume", nargs="?", const=True, default=False, type=_resume_value,
                       metavar="auto", help="continue from the backup in the output folder "
                       "(there must be one); --resume auto: continue when there is a backup, "
                       "else start afresh, and do nothing to a finished run (for schedulers "
                       "that restart the same command)")
    group.add_argument("--overwrite", action="store_true",
                       help="replace the output folder of an earlier run (refused otherwise)")
    group.add_argument("--backend", default="auto", choices=BACKENDS,
                       help="Keras backend; auto: KERAS_BACKEND if set, else JAX on TPUs and "
                       "GPUs, TensorFlow on CPUs (default: %(default)s)")
    group.add_argument("--strategy", default="auto",
                       choices=("auto", "default", "mirrored", "multi_worker", "tpu"),
                       help="tf.distribute strategy, TensorFlow backend (default: %(default)s)")
    group.add_argument("--tpu", help="TPU name or grpc:// address (Cloud TPU); not needed on "
                       "Colab or a TPU VM")
    group.add_argument("--model-parallel", type=int, default=1, metavar="N",
                       help="JAX: shard attention heads and MLP units of each model over N "
                       "devices (for models that do not fit one device; default: 1)")
    group.add_argument("--coordinator", metavar="HOST:PORT",
                       help="JAX multi-host: address of process 0 (found by itself on a Cloud "
                       "TPU VM)")
    group.add_argument("--num-processes", type=int, help="JAX multi-host: number of processes")
    group.add_argument("--process-id", type=int, help="JAX multi-host: this process's index")
    group.add_argument("--no-export", action="store_true",
                       help="skip the SavedModel/TFLite/ONNX export at the end")
    group.add_argument("--formats", default=",".join(DEFAULT_FORMATS),
                       help="the formats the export at the end writes, comma-separated, out "
                       f"of {', '.join(FORMATS)} (default: %(default)s)")
    group.add_argument("--min-agreement", default="", metavar="FRACTION|FORMAT=FRACTION,...",
                       help="the top-1 agreement with the trained model an exported file needs "
                       "(default: float=0.999,int8=0.98); a file below it is moved to "
                       "rejected/, marked FAILED, and the run exits with status 3 (its model "
                       "is kept)")
    group.add_argument("--no-inspect", action="store_true",
                       help="skip the attention/embedding analysis at the end")
    group.add_argument("--verbose", type=int, nargs="?", const=1, default=0, choices=(0, 1, 2),
                       help="show every TensorFlow/absl log line, and Keras' progress bar "
                       "(1, the default with --verbose) or its per-epoch line (2); without "
                       "it vit prints one line per epoch")


def _resume_value(text: str) -> str:
    if text != "auto":
        raise argparse.ArgumentTypeError(f"--resume takes no value, or 'auto'; got {text!r}")
    return text


def _keys_epilog() -> str:
    """Every --set key with its description, section by section."""
    def listing(title, fields, prefix):
        rows = "\n".join(f"  {prefix + name:<34} {doc}" for name, doc in fields.items())
        return f"{title}:\n{rows}"

    blocks = [listing(f"{name} (--set {name}.FIELD=VALUE)", overrides.section_fields(section),
                      f"{name}.")
              for name, section in sections.all_sections().items()]
    blocks.append(listing("model (--set model.FIELD=VALUE; num_classes comes from the data; "
                          "'none' for an unset optional value; image_size '224' or '224x320'; "
                          "resnet_layers '3,4,9')", overrides.model_fields(),
                          overrides.MODEL_PREFIX))
    return ("preset keys (the flat names of earlier versions, lr, translate, ..., are gone: "
            "write optim.lr, augment.translate, ...):\n\n" + "\n\n".join(blocks))


def check(args: argparse.Namespace) -> None:
    """Checks the command line before any framework is imported: the preset, every --set key
    and value, the model and weight names, the run options and the data specs."""
    preset = command_line.resolve_preset(args)
    command_line.run_options(args)
    check_weights_reference(preset.finetune.weights, preset.model.architecture)
    command_line.check_data_specs(preset)


def run(args: argparse.Namespace) -> int:
    """Runs `vit train`; returns the exit status: 0; 3 when the model trained but an exported
    file failed its agreement check; 75 (`training.preemption.EXIT_PREEMPTED`) when SIGTERM
    stopped it, 130 when Ctrl+C did (errors: see `vit.cli`)."""
    from training import train

    return train.run(args)
