"""keras-hub preset folders, both ways: read one into canonical names with the architecture and
preprocessing it states (`keras_hub_config`), and write canonical tensors back as a folder
keras-hub loads.

A preset folder holds `config.json` (the backbone's class and arguments), `model.weights.h5`,
optionally `task.json` + `task.weights.h5` (a classifier head), `image_converter.json`
(pixel scale/offset, interpolation, crop) and `metadata.json`. keras-hub stores weights under
Keras' object paths (`layers/<snake_case class>[_N]/<attribute>/vars/<index>`); one table per
family below maps those paths to the canonical names, and serves both directions.

What maps: `ViTBackbone` (with `ViTImageClassifier` task weights), `DeiTBackbone` (its
class-token-only classifier task is left out), `DINOV2Backbone` (with
or without registers, SwiGLU) and the image towers of `SigLIPBackbone` (SigLIP and SigLIP 2,
with the attention-pooling head) and `CLIPBackbone` (with the image projection); only
`ViTBackbone` is written. Anything else is refused with the reason; keras-hub itself is never
imported.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os

import numpy as np

from vit_keras import atomic, names
from vit_keras.checkpoints import keras_hub_config as hub_config
from vit_keras.checkpoints import keys
from vit_keras.checkpoints.keras_hub_config import TASK_WEIGHTS_FILE, WEIGHTS_FILE
from vit_keras.preprocessing import Preprocessing

_ATTENTION_PARTS = (("query", "query_dense"), ("key", "key_dense"), ("value", "value_dense"),
                    ("out", "output_dense"))


@dataclasses.dataclass(frozen=True)
class Preset:
    """A keras-hub preset folder read into what this project builds models from.

    Attributes:
        checkpoint: the weights under canonical names (the head's too when it has task weights).
        fields: the `ViTConfig` fields the preset states (`num_classes` only with a head).
        preprocessing: from `image_converter.json`, or None when the folder has none.
        has_head: whether task weights (a classifier head) came with it.
        backbone_class: keras-hub's class name ('ViTBackbone'), for messages.
    """

    checkpoint: keys.Checkpoint
    fields: dict
    preprocessing: Preprocessing | None
    has_head: bool
    backbone_class: str


def read_preset(directory: str) -> Preset:
    """Reads a keras-hub preset folder: its architecture, preprocessing and weights.

    Args:
        directory: the folder (`config.json`, `model.weights.h5`, ...).

    Returns:
        The `Preset`.

    Raises:
        ValueError: a backbone class that does not map (with the reason), options ViTConfig
            cannot express, or unreadable files.
    """
    architecture = hub_config.preset_architecture(directory)
    fields = architecture.fields
    if architecture.class_name == hub_config.VIT_BACKBONE:
        layout = _vit_weights_layout(architecture.arguments, fields, architecture.has_head)
    else:
        layout = _LAYOUTS[architecture.class_name](architecture.arguments, fields)
    stored = _h5_datasets(os.path.join(directory, WEIGHTS_FILE))
    _gather_positions(stored)
    if architecture.has_head:
        stored.update(_h5_datasets(os.path.join(directory, TASK_WEIGHTS_FILE)))
    checkpoint = keys.Checkpoint(
        _canonical(stored, layout), f"keras-hub {architecture.class_name} preset",
        posemb_has_cls_row=fields["classifier"] == "token",
        posemb_method="official" if architecture.class_name == hub_config.VIT_BACKBONE
        else "bicubic")
    return Preset(checkpoint, fields, architecture.preprocessing, architecture.has_head,
                  architecture.class_name)


def _vit_weights_layout(arguments: dict, fields: dict, has_head: bool) -> dict:
    """The ViT table for this preset: the head's entries only with task weights; no bias
    entries for the projections keras-hub built without one (`use_mha_bias=False`, ...)."""
    layout = vit_layout(fields["num_layers"], class_token=fields["classifier"] == "token",
                        pre_logits=fields.get("representation_size") is not None)
    if not has_head:
        layout = {name: place for name, place in layout.items()
                  if place[0] == WEIGHTS_FILE}
    biases = {"use_mha_bias": names.ATTENTION, "use_mlp_bias": names.MLP,
              "use_patch_bias": names.EMBEDDING}
    absent = tuple(f"/{scope}/" for flag, scope in biases.items()
                   if not arguments.get(flag, True))
    return {name: place for name, place in layout.items()
            if not (name.endswith("/bias") and any(scope in f"/{name}" for scope in absent))}


def _h5_datasets(path: str) -> dict:
    """(file name, dataset path) -> array for every dataset of a Keras `.weights.h5`."""
    import h5py

    if not os.path.isfile(path):
        raise ValueError(f"keras-hub preset weights {path!r} do not exist")
    found = {}
    try:
        with h5py.File(path, "r") as file:
            file.visititems(lambda name, item: found.__setitem__(
                (os.path.basename(path), name), np.asarray(item))
                if isinstance(item, h5py.Dataset) else None)
    except OSError as error:
        raise ValueError(f"{path}: not a readable Keras weights file ({error})") from None
    return found


# --- where each canonical tensor lives in a preset ----------------------------------------------


def _indexed(base: str, index: int) -> str:
    """Keras' saving name of the index-th object of one class in a list ('x', 'x_1', ...)."""
    return base if index == 0 else f"{base}_{index}"


def _dense_paths(canonical: str, stored: str, file: str = WEIGHTS_FILE) -> dict:
    return {f"{canonical}/kernel": (file, f"{stored}/vars/0"),
            f"{canonical}/bias": (file, f"{stored}/vars/1")}


def _norm_paths(canonical: str, stored: str) -> dict:
    return {f"{canonical}/scale": (WEIGHTS_FILE, f"{stored}/vars/0"),
            f"{canonical}/bias": (WEIGHTS_FILE, f"{stored}/vars/1")}


def _attention_paths(canonical: str, stored: str) -> dict:
    found = {}
    for ours, theirs in _ATTENTION_PARTS:
        found.update(_dense_paths(f"{canonical}/{ours}", f"{stored}/{theirs}"))
    return found


def vit_layout(depth: int, *, class_token: bool = True, pre_logits: bool = False) -> dict:
    """Canonical name -> (file, dataset path) for a keras-hub ViTBackbone and its classifier.

    Args:
        depth: encoder blocks.
        class_token: whether the backbone has one.
        pre_logits: whether the classifier has keras-hub's `intermediate_dim` layer.

    Returns:
        The table (the head's entries in `task.weights.h5`).
    """
    embedding = "layers/vi_t_patching_and_embedding"
    layout = _dense_paths(names.EMBEDDING, f"{embedding}/patch_embedding")
    layout[keys.POSEMB] = (WEIGHTS_FILE, f"{embedding}/position_embedding/vars/0")
    if class_token:
        layout[keys.CLS] = (WEIGHTS_FILE, f"{embedding}/vars/0")
    encoder = "layers/vi_t_encoder"
    parts = dict(norm_0="layer_norm_1", attention="mha", norm_2="layer_norm_2",
                 mlp_0="mlp/dense_1", mlp_1="mlp/dense_2")
    for index in range(depth):
        layout.update(_block_paths(
            index, f"{encoder}/encoder_layers/{_indexed('vi_t_encoder_block', index)}", parts))
    layout.update(_norm_paths(keys.ENCODER_NORM_PREFIX.rstrip("/"), f"{encoder}/layer_norm"))
    heads = [names.PRE_LOGITS, names.HEAD] if pre_logits else [names.HEAD]
    for index, head in enumerate(heads):
        layout.update(_dense_paths(head, f"layers/{_indexed('dense', index)}", TASK_WEIGHTS_FILE))
    return layout


def _dinov2_layout(arguments: dict, fields: dict) -> dict:
    """Canonical name -> (file, dataset path) for a keras-hub DINOV2Backbone."""
    embedding = "layers/dinov2_embedding"
    registers = arguments.get("num_register_tokens", 0)
    # The embedding's own variables in creation order: class token, mask token (unused at
    # inference), registers, the stored position embedding, then the resized copy.
    order = ["cls"] + ["mask"] * arguments.get("use_mask_token", True) + \
        ["registers"] * bool(registers) + ["posemb"]
    layout = _dense_paths(names.EMBEDDING, f"{embedding}/patch_embeddings/projection")
    layout[keys.CLS] = (WEIGHTS_FILE, f"{embedding}/vars/{order.index('cls')}")
    layout[keys.POSEMB] = (WEIGHTS_FILE, f"{embedding}/vars/{order.index('posemb')}")
    if registers:
        layout[keys.REGISTERS] = (WEIGHTS_FILE, f"{embedding}/vars/{order.index('registers')}")
    swiglu = arguments.get("use_swiglu_ffn", False)
    mlp_in, mlp_out = ("weights_in", "weights_out") if swiglu else ("fc1", "fc2")
    parts = dict(norm_0="norm1", attention="attention/attention", norm_2="norm2",
                 mlp_0=f"mlp/{mlp_in}", mlp_1=f"mlp/{mlp_out}")
    for index in range(fields["num_layers"]):
        block = f"layers/dinov2_encoder/layers/{_indexed('dinov2_layer', index)}"
        layout.update(_block_paths(index, block, parts))
        for scale in (0, 1):
            layout[f"{keys.block_prefix(index)}LayerScale_{scale}/scale"] = (
                WEIGHTS_FILE, f"{block}/layer_scale{scale + 1}/vars/0")
    layout.update(_norm_paths(keys.ENCODER_NORM_PREFIX.rstrip("/"),
                              "layers/layer_normalization"))
    return layout


def _block_paths(index: int, block: str, parts: dict) -> dict:
    """One encoder block's table; `parts` names keras-hub's sub-layers: 'norm_0', 'attention',
    'norm_2', 'mlp_0' and 'mlp_1'."""
    ours = keys.block_prefix(index)
    layout = _norm_paths(ours + names.LAYER_NORM_0, f"{block}/{parts['norm_0']}")
    layout.update(_attention_paths(ours + keys.ATTENTION, f"{block}/{parts['attention']}"))
    layout.update(_norm_paths(ours + names.LAYER_NORM_2, f"{block}/{parts['norm_2']}"))
    layout.update(_dense_paths(f"{ours}{keys.MLP}/Dense_0", f"{block}/{parts['mlp_0']}"))
    layout.update(_dense_paths(f"{ours}{keys.MLP}/Dense_1", f"{block}/{parts['mlp_1']}"))
    return layout


def _siglip_layout(arguments: dict, fields: dict) -> dict:
    """Canonical name -> (file, dataset path) for a keras-hub SigLIPBackbone's image tower."""
    tower = "layers/sig_lip_vision_encoder/layers"
    layout = _dense_paths(names.EMBEDDING, f"{tower}/sig_lip_vision_embedding/patch_embedding")
    layout[keys.POSEMB] = (WEIGHTS_FILE,
                           f"{tower}/sig_lip_vision_embedding/position_embedding/vars/0")
    parts = dict(norm_0="layer_norm1", attention="self_attn", norm_2="layer_norm2",
                 mlp_0="mlp/fc1", mlp_1="mlp/fc2")
    for index in range(fields["num_layers"]):
        layout.update(_block_paths(index, f"{tower}/{_indexed('sig_lip_encoder_layer', index)}",
                                   parts))
    layout.update(_norm_paths(keys.ENCODER_NORM_PREFIX.rstrip("/"),
                              f"{tower}/layer_normalization"))
    pool = f"{tower}/sig_lip_multi_head_attention_pooling"
    layout[keys.MAP_PREFIX + "probe"] = (WEIGHTS_FILE, f"{pool}/vars/0")
    layout.update(_attention_paths(keys.MAP_PREFIX + "MultiHeadDotProductAttention_0",
                                   f"{pool}/attention"))
    layout.update(_norm_paths(keys.MAP_PREFIX + "LayerNorm_0", f"{pool}/layer_norm"))
    layout.update(_dense_paths(keys.MAP_PREFIX + "MlpBlock_0/Dense_0", f"{pool}/mlp/fc1"))
    layout.update(_dense_paths(keys.MAP_PREFIX + "MlpBlock_0/Dense_1", f"{pool}/mlp/fc2"))
    return layout


def _clip_layout(arguments: dict, fields: dict) -> dict:
    """Canonical name -> (file, dataset path) for a keras-hub CLIPBackbone's image tower and
    its image projection."""
    tower = "layers/clip_vision_encoder/layers"
    embedding = f"{tower}/clip_vision_embedding"
    layout = {f"{names.EMBEDDING}/kernel": (WEIGHTS_FILE, f"{embedding}/patch_embedding/vars/0"),
              keys.POSEMB: (WEIGHTS_FILE, f"{embedding}/position_embedding/vars/0"),
              keys.CLS: (WEIGHTS_FILE, f"{embedding}/vars/0")}
    layout.update(_norm_paths(keys.PRE_NORM_PREFIX.rstrip("/"), f"{tower}/layer_normalization"))
    parts = dict(norm_0="layer_norm_1", attention="attention", norm_2="layer_norm_2",
                 mlp_0="dense_1", mlp_1="dense_2")
    for index in range(fields["num_layers"]):
        layout.update(_block_paths(index, f"{tower}/{_indexed('clip_encoder_layer', index)}",
                                   parts))
    layout.update(_norm_paths(keys.ENCODER_NORM_PREFIX.rstrip("/"),
                              f"{tower}/layer_normalization_1"))
    layout[keys.PROJECTION] = (WEIGHTS_FILE, "layers/dense/vars/0")  # the vision projection
    return layout


def _deit_layout(arguments: dict, fields: dict) -> dict:
    """Canonical name -> (file, dataset path) for a keras-hub DeiTBackbone."""
    embedding = "layers/dei_t_embeddings"
    layout = _dense_paths(names.EMBEDDING, f"{embedding}/patch_embedding")
    # The embedding's own variables in creation order (DeiTBackbone builds no mask token).
    for index, name in enumerate((keys.CLS, keys.DIST, keys.POSEMB)):
        layout[name] = (WEIGHTS_FILE, f"{embedding}/vars/{index}")
    parts = dict(norm_0="layer_norm_1", attention="mha", norm_2="layer_norm_2",
                 mlp_0="mlp/dense", mlp_1="output_layer/dense")
    encoder = "layers/dei_t_encoder"
    for index in range(fields["num_layers"]):
        layout.update(_block_paths(
            index, f"{encoder}/encoder_layers/{_indexed('dei_t_encoder_block', index)}", parts))
    layout.update(_norm_paths(keys.ENCODER_NORM_PREFIX.rstrip("/"), f"{encoder}/layer_norm"))
    return layout


# The two-tower image embeddings keep the position ids they look the table up with (SigLIP's
# first variable, CLIP's second; each after its class token, if any).
_POSITION_IDS = {
    "layers/sig_lip_vision_encoder/layers/sig_lip_vision_embedding/vars/0":
        "layers/sig_lip_vision_encoder/layers/sig_lip_vision_embedding/position_embedding/vars/0",
    "layers/clip_vision_encoder/layers/clip_vision_embedding/vars/1":
        "layers/clip_vision_encoder/layers/clip_vision_embedding/position_embedding/vars/0"}


def _gather_positions(stored: dict) -> None:
    """Replaces a two-tower position table by the rows its stored ids pick: keras-hub adds
    `table[ids]`, and the ids are not always 0..N-1 (a CLIPBackbone built from scratch keeps
    zeros, so every token gets row 0)."""
    for ids_path, table_path in _POSITION_IDS.items():
        ids, table = (WEIGHTS_FILE, ids_path), (WEIGHTS_FILE, table_path)
        if ids in stored and table in stored:
            stored[table] = stored[table][np.asarray(stored[ids]).reshape(-1).astype(np.int64)]


# Stored state of each backbone that is no image-model weight: the optimizer's; DINOv2's mask
# token and its position embedding resized to the input (recomputed from the stored one); the
# two-tower models' text tower, text projection, similarity scale and position ids.
_IGNORED = ("optimizer/", "layers/dinov2_embedding/vars/", "layers/sig_lip_text_encoder/",
            "layers/sig_lip_head/", "layers/sig_lip_vision_encoder/layers/"
            "sig_lip_vision_embedding/vars/", "layers/clip_text_encoder/", "layers/clip_head/",
            "layers/dense_1/", "layers/clip_vision_encoder/layers/clip_vision_embedding/vars/1")


def _canonical(stored: dict, layout: dict) -> dict:
    """The tensors under canonical names; a projection whose bias the preset leaves out
    (`use_mha_bias=False`, CLIP's patch embedding, ...) gets zeros, which compute the same."""
    tensors = {name: stored[place] for name, place in layout.items() if place in stored}
    for name in list(tensors):
        if name.endswith("/kernel") and name != keys.PROJECTION and \
                name[:-len("kernel")] + "bias" not in tensors:
            kernel = tensors[name]
            attention_input = name.split("/")[-2] in ("query", "key", "value")
            shape = kernel.shape[1:] if attention_input else kernel.shape[-1:]
            tensors[name[:-len("kernel")] + "bias"] = np.zeros(shape, kernel.dtype)
    if keys.POSEMB in tensors and tensors[keys.POSEMB].ndim == 2:
        tensors[keys.POSEMB] = tensors[keys.POSEMB][None]  # keras-hub's ViT: an Embedding table
    if keys.CLS in tensors:
        tensors[keys.CLS] = tensors[keys.CLS].reshape(1, 1, -1)  # CLIP's is a vector
    used = set(layout.values())
    for (file, path), value in stored.items():  # what no entry names: reported as unexpected
        if (file, path) not in used and not path.startswith(_IGNORED):
            tensors[f"{file}:{path}"] = value
    return tensors


_LAYOUTS = {hub_config.DINOV2_BACKBONE: _dinov2_layout, hub_config.SIGLIP_BACKBONE: _siglip_layout,
            hub_config.CLIP_BACKBONE: _clip_layout, hub_config.DEIT_BACKBONE: _deit_layout}


# --- writing -------------------------------------------------------------------------------------


def write_preset(directory: str, tensors: dict, fields: dict, preprocessing: Preprocessing, *,
                 has_head: bool, metadata: dict) -> None:
    """Writes a keras-hub ViT preset folder from canonical tensors: the whole folder is written
    beside `directory`, then renamed into place (a folder already there is replaced).

    Args:
        directory: the folder, local or `gs://`.
        tensors: canonical name -> float32 array (`official.model_tensors`).
        fields: the model's `ViTConfig` fields (`dataclasses.asdict`), already checked by the
            caller for what keras-hub can express.
        preprocessing: what the model expects of pixels.
        has_head: write `task.json` and `task.weights.h5` (a `ViTImageClassifier`).
        metadata: extra entries for `metadata.json`.
    """
    with atomic.staged_path(directory) as staged:
        atomic.makedirs(staged)
        _write_files(staged, tensors, fields, preprocessing, has_head, metadata)


def _write_files(directory, tensors, fields, preprocessing, has_head, metadata) -> None:
    layout = vit_layout(fields["num_layers"], class_token=fields["classifier"] == "token",
                        pre_logits=fields.get("representation_size") is not None)
    weight_files = [WEIGHTS_FILE] + [TASK_WEIGHTS_FILE] * has_head
    for file in weight_files:
        _write_h5(os.path.join(directory, file), tensors, layout, file)
    for name, data in hub_config.preset_json_files(fields, preprocessing, has_head=has_head,
                                                   metadata=metadata).items():
        atomic.write_bytes(os.path.join(directory, name),
                           (json.dumps(data, indent=4) + "\n").encode())


def _write_h5(path: str, tensors: dict, layout: dict, file: str) -> None:
    """The datasets of `layout` that live in `file`, under Keras' object paths."""
    import h5py

    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as h5:
        for name, (place_file, dataset) in layout.items():
            if place_file != file:
                continue
            value = np.asarray(tensors[name], np.float32)
            if name == keys.POSEMB:
                value = value[0]  # keras-hub's ViT keeps it as an Embedding table
            h5.create_dataset(dataset, data=value)
    atomic.write_bytes(path, buffer.getvalue())
