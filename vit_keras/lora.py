"""LoRA (Hu et al. 2021) on a `VisionTransformer`, through Keras' own `enable_lora`.

`enable_lora(model, rank)` freezes every weight and gives the query and value projections of
every attention layer low-rank adapters (Keras' `EinsumDense.enable_lora`: the kernel becomes
W + alpha/rank * A @ B with B zero at first); any projection can be chosen with `targets`. Only
the adapters train, plus whatever the caller unfreezes afterwards (e.g. the head:
`model.get_layer("head").trainable = True`). The adapters save to a small `.npz` of their own
(`save_lora_weights`, `load_lora_weights`), and `merge_lora` returns a plain model with the
adapters folded into the kernels, for export. (A `.keras` file of a LoRA model holds the merged
kernels too: Keras merges when saving.)
"""

from __future__ import annotations

import keras
import numpy as np

from vit_keras import keras_compat, names
from vit_keras.checkpoints import io
from vit_keras.quantization import QUANTIZABLE, is_quantized

DEFAULT_TARGETS = ("query", "value")
# Target name -> the projection layers it names (see `projection_kind`).
TARGETS = ("query", "key", "value", "out", "mlp", "embedding", "pre_logits", "head")
ALL = "all"
_FORMAT = "vit_keras.lora.v1"


def projection_kind(layer) -> str:
    """The LoRA target name of a projection layer: its own name for the attention projections
    and the top-level Dense layers, 'mlp' for an MLP's Dense_0/Dense_1, 'embedding' for the
    patch embedding's projection (a distillation head 'head_dist' counts as 'head')."""
    if layer.name in names.MLP_DENSES:
        return "mlp"
    if layer.name == names.PATCH_PROJECTION:
        return "embedding"
    if layer.name == names.HEAD_DIST:
        return names.HEAD
    return layer.name


def _check_targets(targets) -> tuple[str, ...]:
    targets = (targets,) if isinstance(targets, str) else tuple(targets)
    if targets == (ALL,):
        return TARGETS
    unknown = sorted(set(targets) - set(TARGETS))
    if unknown or not targets:
        raise ValueError(f"LoRA targets must be some of {TARGETS} or 'all', got {targets!r}")
    return targets


def lora_layers(model, targets=None) -> list:
    """The projection layers of `model` named by `targets` (None: those with LoRA enabled)."""
    layers = [layer for layer in keras_compat.nested_layers(model)
              if isinstance(layer, QUANTIZABLE)]
    if targets is None:
        return [layer for layer in layers if layer.lora_enabled]
    targets = _check_targets(targets)
    return [layer for layer in layers if projection_kind(layer) in targets]


def enable_lora(model, rank: int, targets=DEFAULT_TARGETS, alpha=None) -> None:
    """Freezes `model` and adds rank-`rank` adapters to the projections named by `targets`.

    Args:
        model: a built `VisionTransformer`.
        rank: the adapters' rank, a positive int.
        targets: names from `TARGETS` ('query', 'key', 'value', 'out', 'mlp', 'embedding',
            'pre_logits', 'head'), or 'all'.
        alpha: the adapters' scale numerator (alpha / rank); default: rank.

    Raises:
        ValueError: a bad rank or target, a model with LoRA already enabled, or targets that
            name no layer of the model.
    """
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise ValueError(f"LoRA rank must be a positive int, got {rank!r}")
    if lora_layers(model):
        raise ValueError(f"model {model.name!r} already has LoRA adapters: enable them once")
    chosen = lora_layers(model, targets)
    if not chosen:
        raise ValueError(f"LoRA targets {targets!r} name no layer of model {model.name!r}")
    model.trainable = True
    for layer in keras_compat.nested_layers(model)[1:]:
        layer.trainable = False
    for layer in chosen:
        layer.trainable = True
        layer.enable_lora(rank, lora_alpha=alpha)
        if layer.bias is not None:
            layer.bias.trainable = False  # Keras leaves it trainable; LoRA trains adapters only


def lora_weights(model) -> dict[str, np.ndarray]:
    """The adapters of `model` by variable path ('.../query/lora_kernel_a'), as arrays."""
    weights = {}
    for layer in lora_layers(model):
        for variable in (layer.lora_kernel_a, layer.lora_kernel_b):
            weights[variable.path] = np.asarray(keras.ops.convert_to_numpy(variable))
    return weights


def lora_state(model) -> dict[str, np.ndarray]:
    """What a Keras weights file leaves out of a model with LoRA: the adapters and each adapted
    kernel without its update (Keras saves the merged kernel and zeroes the adapters on load).

    Returns:
        Arrays by variable path; `restore_lora_state` puts them back.
    """
    state = lora_weights(model)
    for layer in lora_layers(model):
        kernel = keras_compat.stored_kernel(layer)
        state[kernel.path] = np.asarray(keras.ops.convert_to_numpy(kernel))
    return state


def restore_lora_state(model, state: dict[str, np.ndarray]) -> None:
    """Assigns a `lora_state` back, after the model's weights file was loaded.

    Raises:
        ValueError: the state does not name exactly the model's adapters and adapted kernels
            with their shapes; nothing is assigned then.
    """
    targets = {}
    for layer in lora_layers(model):
        for variable in (keras_compat.stored_kernel(layer), layer.lora_kernel_a,
                         layer.lora_kernel_b):
            targets[variable.path] = variable
    _check_fit(targets, state, f"the LoRA state does not fit model {model.name!r}")
    for name, variable in targets.items():
        variable.assign(state[name])


def _check_fit(targets: dict, arrays: dict, what: str) -> None:
    """Raises ValueError listing missing, unexpected and mis-shaped arrays for `targets`."""
    problems = ([f"missing: {name}" for name in sorted(set(targets) - set(arrays))]
                + [f"unexpected: {name}" for name in sorted(set(arrays) - set(targets))]
                + [f"{name}: expected {tuple(targets[name].shape)}, found {value.shape}"
                   for name, value in sorted(arrays.items())
                   if name in targets and tuple(targets[name].shape) != value.shape])
    if problems:
        raise ValueError(f"{what}; nothing was loaded:\n  " + "\n  ".join(problems[:20]))


def _trained_alongside(model) -> dict:
    """The trainable weights of a LoRA model that are not adapters (e.g. a new head)."""
    adapters = {id(variable) for layer in lora_layers(model)
                for variable in (layer.lora_kernel_a, layer.lora_kernel_b)}
    return {variable.path: variable for variable in model.trainable_weights
            if id(variable) not in adapters}


def save_lora_weights(model, path: str) -> None:
    """Writes the adapters of `model` (and their rank, alpha and targets) to an `.npz` file,
    atomically, with every other weight that trains beside them (a fine-tune's new head): the
    pre-trained weights and this file make the fine-tuned model.

    Args:
        model: a model with LoRA enabled.
        path: the destination (no suffix is added).
    """
    layers = lora_layers(model)
    if not layers:
        raise ValueError(f"model {model.name!r} has no LoRA adapters: call enable_lora first")
    targets = sorted({projection_kind(layer) for layer in layers})
    metadata = {"__format__": np.array(_FORMAT), "__rank__": np.array(layers[0].lora_rank),
                "__alpha__": np.array(float(layers[0].lora_alpha)),
                "__targets__": np.array(targets)}
    trained = {name: np.asarray(keras.ops.convert_to_numpy(variable))
               for name, variable in _trained_alongside(model).items()}
    metadata["__trained__"] = np.array(sorted(trained), dtype=str)
    io.write_npz(path, {**metadata, **lora_weights(model), **trained})


def load_lora_weights(model, path: str) -> None:
    """Loads adapters written by `save_lora_weights` (and the weights trained beside them),
    enabling LoRA as they were made first when the model has none.

    Raises:
        ValueError: not such a file, another rank, or adapters that do not fit the model
            (missing, unexpected or mis-shaped ones are listed); nothing is assigned then.
    """
    with np.load(path, allow_pickle=False) as archive:
        tensors = {name: archive[name] for name in archive.files}
    if str(tensors.get("__format__", "")) != _FORMAT:
        raise ValueError(f"{path!r} is not a LoRA adapter file of vit_keras (expected "
                         f"__format__={_FORMAT!r}, found keys {sorted(tensors)[:5]})")
    rank, alpha = int(tensors["__rank__"]), float(tensors["__alpha__"])
    if not lora_layers(model):
        enable_lora(model, rank, [str(target) for target in tensors["__targets__"]], alpha)
    adapters = {name: value for name, value in tensors.items() if not name.startswith("__")}
    targets = {variable.path: variable for layer in lora_layers(model)
               for variable in (layer.lora_kernel_a, layer.lora_kernel_b)}
    weights = {variable.path: variable for variable in model.weights}
    targets.update({str(name): weights.get(str(name)) for name in tensors.get("__trained__", [])})
    targets = {name: variable for name, variable in targets.items() if variable is not None}
    _check_fit(targets, adapters, f"LoRA adapters {path!r} (rank {rank}) do not fit model "
               f"{model.name!r}")
    for name, variable in targets.items():
        variable.assign(adapters[name])


def merge_lora(model):
    """A plain copy of `model` with every adapter folded into its kernel: W + alpha/rank A B.

    Args:
        model: a `VisionTransformer` with LoRA enabled (not quantized: merge, then quantize).

    Returns:
        A new `VisionTransformer` of the same config and weights, without LoRA.
    """
    if is_quantized(model):
        raise ValueError("merge_lora takes a float model: merge the adapters first, then "
                         "quantize the merged model")
    merged_kernels = {}
    for layer in lora_layers(model):
        kernel = keras.ops.convert_to_numpy(keras_compat.stored_kernel(layer)).astype(np.float64)
        update = np.matmul(keras.ops.convert_to_numpy(layer.lora_kernel_a).astype(np.float64),
                           keras.ops.convert_to_numpy(layer.lora_kernel_b).astype(np.float64))
        merged_kernels[keras_compat.stored_kernel(layer).path] = kernel + layer.lora_alpha / layer.lora_rank * update
    plain = model.__class__.from_config(model.get_config())
    sources = {variable.path: variable for variable in model.weights}
    for variable in plain.weights:
        value = merged_kernels.get(variable.path)
        if value is None:
            value = keras.ops.convert_to_numpy(sources[variable.path])
        variable.assign(np.asarray(value, dtype=variable.dtype))
    return plain
