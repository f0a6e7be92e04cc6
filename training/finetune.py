"""What a run trains (`--finetune`): every weight, LoRA adapters, the head, or a linear probe.

- `full`: every weight trains (the default).
- `lora`: Keras' LoRA adapters on `lora_targets` (query and value by default) and the head
  (with pre_logits) train; every other weight is frozen. The run writes the merged model, as
  any run does, and the adapters (`lora.npz`) to load onto the same pre-trained weights.
- `head`: only the head (and `pre_logits`, and a DeiT model's `head_dist`) trains.
- `probe`: no gradient step: the features of the training images are computed once and the
  head is a linear classifier fitted on them (`training.probe`).

`prepare` freezes the network before it is compiled, so the optimizer holds only what trains.
"""

from __future__ import annotations

import keras
import numpy as np

from vit_keras import keras_compat, lora

FROZEN_BACKBONE = ("head", "probe")  # modes whose backbone never trains
# Training-time noise of the backbone, switched off when it is frozen.
BACKBONE_NOISE = ("dropout_rate", "attention_dropout_rate", "drop_path_rate", "patch_drop_rate")


def lora_targets(preset) -> tuple[str, ...]:
    """The `lora_targets` field as a tuple of target names ('all' stays 'all')."""
    names = preset.finetune.lora_targets.split(",")
    targets = tuple(name.strip() for name in names if name.strip())
    return (lora.ALL,) if targets == (lora.ALL,) else targets


def head_layers(network: keras.Model) -> list:
    """The layers of `network` that `head` mode trains, as the model names them
    (`head_layers()`: a classifier's pre_logits, head and head_dist; a segmenter's head)."""
    return network.head_layers()


def prepare(network: keras.Model, preset) -> None:
    """Freezes `network` for `preset.finetune.mode` and adds LoRA adapters in 'lora' mode.

    Args:
        network: the `VisionTransformer` the run trains, built, with its starting weights.
        preset: the run's preset (`finetune`, `lora_rank`, `lora_alpha`, `lora_targets`).

    Raises:
        ValueError: a bad LoRA target, or a network without a head.
    """
    mode = preset.finetune.mode
    if mode == "full":
        return
    heads = head_layers(network)
    if not heads:
        raise ValueError(f"finetune {mode!r} trains the head, and model {network.name!r} has "
                         "none: build it with include_top=True")
    if mode == "lora":
        targets = lora_targets(preset)
        settings = preset.finetune
        lora.enable_lora(network, settings.lora_rank, targets, settings.lora_alpha or None)
        adapted = {id(layer) for layer in lora.lora_layers(network)}
        heads = [layer for layer in heads if id(layer) not in adapted]
    else:
        freeze(network)
    for layer in heads:
        layer.trainable = True


def freeze(network: keras.Model) -> None:
    """Makes every layer of `network` non-trainable (the model itself stays trainable, so
    layers unfrozen afterwards train)."""
    network.trainable = True
    for layer in keras_compat.nested_layers(network)[1:]:
        layer.trainable = False


def count_weights(model: keras.Model) -> tuple[int, int]:
    """(trainable scalars, all scalars) of `model`'s weights (random-seed states excluded)."""
    def size(variables):
        return int(sum(np.prod(variable.shape) for variable in variables))

    return size(model.trainable_weights), size(model.weights)


def describe(model: keras.Model, preset, probe: str) -> str:
    """The header line: the mode and how many weights train, e.g.
    'finetune lora (rank 8 on query,value; the head): 9,610 of 209,354 weights train (4.6%)';
    `probe` is what 'probe' mode fits (the objective's `probe_description`)."""
    trained, total = count_weights(model)
    mode, rank = preset.finetune.mode, preset.finetune.lora_rank
    details = {"full": "", "head": " (the head)", "probe": f" ({probe})",
               "lora": f" (rank {rank} on {','.join(lora_targets(preset))}; the head)"}[mode]
    return (f"finetune {mode}{details}: {trained:,} of {total:,} weights train "
            f"({100 * trained / max(total, 1):.1f}%)")


def mergeable(network: keras.Model) -> keras.Model:
    """`network` with its LoRA adapters folded into the kernels (itself when it has none)."""
    return lora.merge_lora(network) if lora.lora_layers(network) else network
