"""Train a ViT: `vit train` with no arguments runs the offline `digits_tiny` preset.

Examples:
  vit train                                         # digits_tiny, offline, a few minutes on CPU
  vit train --config cifar10_scratch --data-dir ~/tensorflow_datasets
  vit train --data folder:~/flowers --model S/16 --image-size 224 --set val_split=0.1
  vit train --data folder:~/train --val-data folder:~/test   # trains on all of ~/train
  vit train --config finetune_384 --data tfds:oxford_iiit_pet --weights augreg-in21k
  vit train --weights augreg-in21k --model B/16 --data folder:~/pets --finetune lora
  vit train --config digits_transfer --weights saved_models/digits_0_4/model.keras --finetune probe
  vit train --set layer_decay=0.75 --set objective=distill --set distill_mode=soft ...
  vit train --data csv:~/photos/tags.csv --set objective=multilabel   # several labels per image
  vit train --resume                                # continue a killed run where it stopped
  vit train --backend jax --model-parallel 2        # JAX: data parallel, each model on 2 devices
  vit train --set lr=3e-3 --set translate=0.1       # override any preset field
  vit train --set model.classifier=map --set model.num_register_tokens=4   # any model option

Outputs go to saved_models/<preset>/ (or --output DIR, local or gs://): model.keras,
labels.txt, metrics.json, history.csv, curves.png, config.json, best.weights.h5, logs/
(TensorBoard), backup/ (resumable state, removed when the run completes), the exports and
inspect/. Every objective (classify, mpp, distill, multilabel) runs through the same pipeline.
"""

from __future__ import annotations

import argparse
import sys

from training import configs

_FLAG_FIELDS = {  # command-line flag -> preset field
    "data": "data", "val_data": "val_data", "epochs": "epochs", "batch_size": "batch_size",
    "lr": "lr", "weights": "weights", "seed": "seed", "finetune": "finetune",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Registers the `vit train` options."""
    parser.add_argument("--config", default=configs.DEFAULT_PRESET, choices=configs.PRESET_NAMES,
                        help="preset to start from (default: %(default)s)")
    parser.add_argument("--data", help="training data: digits | folder:PATH | csv:PATH "
                        "(multi-label) | tfds:NAME[:SPLIT] | tfrecord:GLOB")
    parser.add_argument("--val-data", help="validation data spec; when given, the training "
                        "data keeps all of its examples (default: the source's held-out split)")
    parser.add_argument("--data-dir", help="tfds data_dir (local or gs://)")
    parser.add_argument("--model", help="take the architecture of a ViT variant (Ti/16, S/16, "
                        "B/16, B/32, L/16, R50+B/16, ...): patch size, width, depth, heads, MLP, "
                        "ResNet; the preset's other model options stay (default: the preset's "
                        "model)")
    parser.add_argument("--image-size", type=int, help="model resolution in pixels (sets "
                        "model.image_size)")
    parser.add_argument("--epochs", type=int, help="number of epochs")
    parser.add_argument("--batch-size", type=int, help="GLOBAL batch size (all replicas, all "
                        "accumulation steps)")
    parser.add_argument("--lr", type=float, help="peak learning rate")
    parser.add_argument("--weights", help="pre-trained weights to start from: a name from "
                        "`vit weights list` (for --model's architecture), an https:// URL, "
                        "hf://ORG/REPO or a checkpoint file; the head is re-initialised, posemb "
                        "resized to --image-size")
    parser.add_argument("--finetune", choices=configs.FINETUNE_MODES,
                        help="what trains: full (every weight), lora (adapters on lora_targets "
                        "+ the head; writes lora.npz too), head (head and pre_logits), probe "
                        "(a linear head fitted once on frozen features) (default: the "
                        "preset's, full)")
    parser.add_argument("--strategy", default="auto",
                        choices=("auto", "default", "mirrored", "multi_worker", "tpu"),
                        help="tf.distribute strategy, TensorFlow backend (default: %(default)s)")
    parser.add_argument("--tpu", help="TPU name or grpc:// address (Cloud TPU); not needed on "
                        "Colab or a TPU VM")
    add_backend_arguments(parser)
    parser.add_argument("--mixed-precision", nargs="?", const="auto",
                        choices=("auto", "mixed_bfloat16", "mixed_float16", "float32"),
                        help="mixed precision; alone (auto): the fastest for this hardware")
    parser.add_argument("--output", help="output folder (default: saved_models/<preset>)")
    parser.add_argument("--resume", action="store_true",
                        help="continue from the backup in the output folder")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace the output folder of an earlier run (refused otherwise)")
    parser.add_argument("--seed", type=int, help="random seed (folder hold-out, init, shuffle, augmentation)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a preset field or, as model.FIELD=VALUE, a model option "
                        "(repeatable), e.g. --set translate=0.1 --set model.drop_path_rate=0.1; "
                        "every key is listed below")
    parser.epilog = _fields_epilog()
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--no-export", action="store_true",
                        help="skip the SavedModel/TFLite export at the end")
    parser.add_argument("--no-inspect", action="store_true",
                        help="skip the attention/embedding analysis at the end")
    parser.add_argument("--verbose", type=int, nargs="?", const=1, default=0, choices=(0, 1, 2),
                        help="show every TensorFlow/absl log line, and Keras' progress bar "
                        "(1, the default with --verbose) or its per-epoch line (2); without "
                        "it vit prints one line per epoch")


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    """The backend and JAX placement options (`training.cli` reads --backend before Keras
    is imported)."""
    from training.backend import BACKENDS

    parser.add_argument("--backend", default="auto", choices=BACKENDS,
                        help="Keras backend; auto: KERAS_BACKEND if set, else JAX on TPUs and "
                        "GPUs, TensorFlow on CPUs (default: %(default)s)")
    parser.add_argument("--model-parallel", type=int, default=1, metavar="N",
                        help="JAX: shard attention heads and MLP units of each model over N "
                        "devices (for models that do not fit one device; default: 1)")
    parser.add_argument("--coordinator", metavar="HOST:PORT",
                        help="JAX multi-host: address of process 0 (found by itself on a Cloud "
                        "TPU VM)")
    parser.add_argument("--num-processes", type=int, help="JAX multi-host: number of processes")
    parser.add_argument("--process-id", type=int, help="JAX multi-host: this process's index")


def _fields_epilog() -> str:
    """Every --set key with its description, from the Preset and ViTConfig docstrings."""
    from vit_keras import ViTConfig

    def listing(names, docs, prefix=""):
        return "\n".join(f"  {prefix}{name:<26} {docs.get(name, '')}" for name in names)

    model_names = [name[len(configs.MODEL_PREFIX):] for name in configs.model_field_names()]
    preset_names = [name for name in configs.field_names() if name != "model"]
    return ("preset fields (--set KEY=VALUE):\n"
            + listing(preset_names, configs.field_help(configs.Preset))
            + "\n\nmodel options (--set model.FIELD=VALUE; num_classes comes from the data; "
            "'none' for an unset optional value; image_size '224' or '224x320'; resnet_layers "
            "'3,4,9'):\n"
            + listing(model_names, configs.field_help(ViTConfig), configs.MODEL_PREFIX))


def resolve_preset(args: argparse.Namespace) -> configs.Preset:
    """The preset of `--config`, then `--model`'s variant, then `--set`, then the other flags."""
    preset = configs.get_preset(args.config)
    if args.model:
        preset = preset.with_variant(args.model)
    preset = configs.apply_overrides(preset, args.set)
    changes = {field: getattr(args, flag) for flag, field in _FLAG_FIELDS.items()
               if getattr(args, flag, None) is not None}
    if args.mixed_precision:
        changes["mixed_precision"] = "" if args.mixed_precision == "float32" else \
            args.mixed_precision
    preset = preset.replace(**changes)
    if args.image_size is not None:
        preset = preset.replace_model(image_size=args.image_size)
    check_weight_name(preset)
    return preset


def check_weight_name(preset: configs.Preset) -> None:
    """A released weight name must exist for the model's architecture (checked before any
    data is read or anything is downloaded)."""
    from vit_keras.config import variant_of
    from vit_keras.pretrained import registry

    if preset.weights and registry.is_weight_name(preset.weights):
        variant = variant_of(preset.model)
        if variant is None:
            raise ValueError(f"--weights {preset.weights} names a release for an official "
                             "architecture; this preset's model is not one: add --model B/16 "
                             "(or another from `vit weights list`)")
        release = registry.find(preset.weights, variant)
        if preset.model.classifier != release.classifier:
            raise ValueError(f"--weights {preset.weights} was trained with classifier="
                             f"{release.classifier!r}, this preset's model has "
                             f"{preset.model.classifier!r}: add --set model.classifier="
                             f"{release.classifier}")


def run(args: argparse.Namespace) -> int:
    """Runs `vit train`; returns the exit status (errors: see `training.cli`)."""
    preset = resolve_preset(args)
    from training import run as training_run

    return training_run.train(preset, output=args.output, resume=args.resume,
                              overwrite=args.overwrite, strategy_name=args.strategy, tpu=args.tpu,
                              data_dir=args.data_dir, export=not args.no_export,
                              inspect=not args.no_inspect, verbose=args.verbose,
                              model_parallel=args.model_parallel, coordinator=args.coordinator,
                              num_processes=args.num_processes, process_id=args.process_id)


if __name__ == "__main__":  # pragma: no cover
    parser = argparse.ArgumentParser(prog="vit train")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
