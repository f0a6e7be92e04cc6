"""timm's MobileViT state dicts onto a `MobileViT`: each tensor to the layer of its module's
name, in Keras' layout (convolutions HWIO, depthwise kernels (3, 3, C, 1), linear and 1x1
kernels transposed, v1's fused `qkv` split per head); `create_mobilevit` builds one by name
with timm's file (from the Hub, a URL or a path).
"""

from __future__ import annotations

import warnings

import keras
import numpy as np
from safetensors.numpy import load_file

from vit_keras.checkpoints.assign import assign
from vit_keras.mobilevit.config import HEADS, PRETRAINED, WEIGHTS_TAG, get_config
from vit_keras.mobilevit.model import MobileViT
from vit_keras.pretrained.sources import weights_file

_NORM = {"weight": "gamma", "bias": "beta", "running_mean": "moving_mean",
         "running_var": "moving_variance"}
_SKIPPED = ("num_batches_tracked",)
_NORMS = (keras.layers.BatchNormalization, keras.layers.LayerNormalization,
          keras.layers.GroupNormalization)
_ENCODER_PARTS = {"norm1": "layer_norm_0", "norm2": "layer_norm_2", "mlp.fc1": "mlp.dense_0",
                  "mlp.fc2": "mlp.dense_1"}


def read_state(path: str) -> dict[str, np.ndarray]:
    """A timm checkpoint file's tensors: `.safetensors`, or `.npz` of the same names.

    Raises:
        ValueError: another kind of file, or one that cannot be read, naming it.
    """
    try:
        if path.endswith(".safetensors"):
            return load_file(path)
        if path.endswith(".npz"):
            with np.load(path, allow_pickle=False) as archive:
                return {name: archive[name] for name in archive.files}
    except Exception as error:
        raise ValueError(f"{path}: not a readable checkpoint ({type(error).__name__}: "
                         f"{error})") from None
    raise ValueError(f"{path}: expected timm's .safetensors (or an .npz of its tensors)")


def load_timm_state(model, state: dict, skip_head: bool = False) -> None:
    """Assigns a timm MobileViT state dict to `model`, every tensor checked.

    Args:
        model: a `MobileViT` of the state's variant.
        state: {timm key: array in PyTorch's layout} (`read_state`).
        skip_head: leave `head.fc` out (a new head of other classes, or none).

    Raises:
        ValueError: keys the model has no place for, layers the state leaves unset, or a
            tensor of another shape, each named.
    """
    pending = {variable.path: variable for variable in model.weights}
    unknown, assignments = [], []
    for key, value in state.items():
        module, _, param = key.rpartition(".")
        if param in _SKIPPED or (skip_head and module == "head.fc"):
            continue
        targets = _targets(model, module, param, np.asarray(value))
        if targets is None:
            unknown.append(key)
        assignments += [(key, variable, array) for variable, array in targets or ()]
    if unknown:
        raise ValueError(f"{len(unknown)} checkpoint tensors have no place in {model.name}: "
                         f"{', '.join(unknown[:5])}; is it a checkpoint of this variant?")
    for key, variable, array in assignments:
        if tuple(variable.shape) != array.shape:
            raise ValueError(f"{key}: shape {array.shape} in Keras' layout, but {model.name}'s "
                             f"{variable.path} is {tuple(variable.shape)}: another variant?")
        variable.assign(array.astype(variable.dtype))
        pending.pop(variable.path, None)
    if skip_head:
        pending = {path: variable for path, variable in pending.items()
                   if not path.startswith("head_fc")}
    if pending:
        raise ValueError(f"the checkpoint leaves {len(pending)} weights of {model.name} unset: "
                         f"{', '.join(sorted(pending)[:5])}")


def _targets(model, module: str, param: str, value: np.ndarray):
    """[(Keras variable, array)] of one tensor; None when the model has no such layer."""
    if ".transformer." in module and _encoder_block(model, module):
        return _encoder_targets(_encoder_block(model, module), module, param, value)
    if module.endswith(".attn.qkv_proj") or module.endswith(".attn.out_proj"):
        attention = _layer(model, module.rpartition(".")[0])
        dense = None if attention is None else (
            attention.qkv if module.endswith("qkv_proj") else attention.out)
        return None if dense is None else [_dense(dense, param, value[:, :, 0, 0]
                                                  if value.ndim == 4 else value)]
    layer = _layer(model, module)
    if layer is None:
        return None
    kind = type(layer).__name__
    if isinstance(layer, _NORMS):
        return [(getattr(layer, _NORM[param]), value)]
    if kind == "DepthwiseConv2D":
        return [(layer.kernel, value.transpose(2, 3, 0, 1))]
    if kind == "Conv2D":
        return [(layer.kernel, value.transpose(2, 3, 1, 0))]
    if kind == "Dense":
        return [_dense(layer, param, value[:, :, 0, 0] if value.ndim == 4 else value)]
    return None


def _dense(layer, param: str, value: np.ndarray):
    return (layer.kernel, value.T) if param == "weight" else (layer.bias, value)


def _layer(model, module: str):
    try:
        return model.get_layer(module.replace(".", "_"))
    except ValueError:
        return None


def _encoder_block(model, module: str):
    """The v1 transformer block (an `EncoderBlock`) a module path lies in, or None."""
    head, _, rest = module.partition(".transformer.")
    index = rest.partition(".")[0]
    layer = _layer(model, f"{head}.transformer.{index}")
    return layer if type(layer).__name__ == "EncoderBlock" else None


def _encoder_targets(block, module: str, param: str, value: np.ndarray):
    part = module.partition(".transformer.")[2].partition(".")[2]
    attention = block.attention
    width = value.shape[0] // 3 if part == "attn.qkv" else value.shape[0]
    head_dim = width // HEADS
    if part == "attn.qkv":
        pieces = np.split(value, 3, axis=0)
        return [(projection.kernel if param == "weight" else projection.bias,
                 piece.T.reshape(width, HEADS, head_dim) if param == "weight"
                 else piece.reshape(HEADS, head_dim))
                for projection, piece in zip((attention.query, attention.key, attention.value),
                                             pieces)]
    if part == "attn.proj":
        if param == "weight":
            return [(attention.out.kernel, value.T.reshape(HEADS, head_dim, value.shape[0]))]
        return [(attention.out.bias, value)]
    target = _ENCODER_PARTS.get(part)
    if target is None:
        return None
    layer = block
    for attribute in target.split("."):
        layer = getattr(layer, attribute)
    if part.startswith("norm"):
        return [(getattr(layer, _NORM[param]), value)]
    return [_dense(layer, param, value)]


def load_mobilevit_weights(model, weights: str, skip_head: bool | None = None) -> None:
    """Loads weights into a `MobileViT`: timm's, or another MobileViT's `.keras` file.

    Args:
        model: the `MobileViT`.
        weights: 'pretrained' (timm's `cvnets_in1k` file of the model's variant on the
            Hugging Face Hub, downloaded once), an `hf://` reference, a URL or the path of a
            timm `.safetensors` file; or a `.keras` file of a MobileViT of the same variant.
        skip_head: None (default): load the head when its classes match the model's, else
            leave the model's at its initial values with a warning; True: never load it;
            False: it must load.

    Raises:
        ValueError: a file of another variant or kind, each tensor named.
    """
    reference = f"hf://timm/{model.mobilevit_config.name}.{WEIGHTS_TAG}" \
        if weights == PRETRAINED else weights
    path = weights_file(reference)
    keras_file = path.endswith(".keras")
    state = _keras_state(path, model) if keras_file else read_state(path)
    # The classes are the kernel's last axis in Keras' layout, the first in PyTorch's.
    head = state.get("head_fc/kernel" if keras_file else "head.fc.weight")
    classes = None if head is None else head.shape[-1 if keras_file else 0]
    wanted = model.mobilevit_config.num_classes
    if skip_head is None:
        skip_head = not model.include_top or (classes is not None and classes != wanted)
        if skip_head and classes is not None and model.include_top:
            warnings.warn(f"{weights}: its head has {classes} classes, the model {wanted}: "
                          "the head starts at its initial values", stacklevel=2)
    if keras_file:
        _assign_by_path(model, state, skip_head, path)
    else:
        load_timm_state(model, state, skip_head=skip_head)


def _keras_state(path: str, model) -> dict[str, np.ndarray]:
    source = keras.saving.load_model(path, safe_mode=True, compile=False)
    if getattr(source, "mobilevit_config", None) is None or \
            source.mobilevit_config.name != model.mobilevit_config.name:
        raise ValueError(f"{path} holds {source.name}, not a {model.mobilevit_config.name}: "
                         "expected a .keras file of the same MobileViT variant")
    return {variable.path: np.asarray(variable) for variable in source.weights}


def _assign_by_path(model, state: dict, skip_head: bool, path: str) -> None:
    """All or nothing, every problem listed (`checkpoints.assign`)."""
    targets = {variable.path: variable for variable in model.weights
               if not (skip_head and variable.path.startswith("head_fc"))}
    assign({name: state[name] for name in targets if name in state}, targets,
           f"{path} does not fit {model.name}")


def create_mobilevit(name: str, weights: str | None = None, num_classes: int | None = None,
                     image_size: int | None = None):
    """A `MobileViT` by name, with timm's weights when asked.

    Args:
        name: timm's name ('mobilevit_xs', 'mobilevitv2_100') or a short one ('xs',
            'v2-100').
        weights: None (random init); 'pretrained' (timm's `cvnets_in1k` file on the Hugging
            Face Hub, downloaded once); an `hf://` reference, a URL or the path of a timm
            `.safetensors` file (`load_mobilevit_weights`).
        num_classes: a new head of this many classes (timm's head left out); default: the
            variant's 1000, with the file's head.
        image_size: the input side (default 256, the weights' resolution).

    Returns:
        The model, its weights checked key by key (`load_timm_state`).
    """
    changes = {key: value for key, value in (("num_classes", num_classes),
                                              ("image_size", image_size)) if value is not None}
    model = MobileViT(get_config(name, **changes))
    if weights is not None:
        new_head = num_classes is not None and num_classes != 1000
        load_mobilevit_weights(model, weights, skip_head=new_head)
    return model
