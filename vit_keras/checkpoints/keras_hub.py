"""keras-hub preset folders, both ways: read one into canonical names with the architecture and
preprocessing it states, and write canonical tensors back as a folder keras-hub loads.

A preset folder holds `config.json` (the backbone's class and arguments), `model.weights.h5`,
optionally `task.json` + `task.weights.h5` (a classifier head), `image_converter.json`
(pixel scale/offset, interpolation, crop) and `metadata.json`. keras-hub stores weights under
Keras' object paths (`layers/<snake_case class>[_N]/<attribute>/vars/<index>`); one table per
family below maps those paths to the canonical names, and serves both directions.

What maps: `ViTBackbone` (with `ViTImageClassifier` task weights) and `DINOV2Backbone` (with
or without registers, SwiGLU). Anything else is refused with the reason; keras-hub itself is
never imported.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os

import numpy as np

from vit_keras import atomic, names
from vit_keras.checkpoints import keys
from vit_keras.preprocessing import Preprocessing

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.weights.h5"
TASK_FILE = "task.json"
TASK_WEIGHTS_FILE = "task.weights.h5"
CONVERTER_FILE = "image_converter.json"
PREPROCESSOR_FILE = "preprocessor.json"
METADATA_FILE = "metadata.json"
PRESET_FILES = (CONFIG_FILE, WEIGHTS_FILE, TASK_FILE, TASK_WEIGHTS_FILE, CONVERTER_FILE,
                PREPROCESSOR_FILE, METADATA_FILE)
REGISTERED_PREFIX = "keras_hub>"
VIT_BACKBONE = "ViTBackbone"
VIT_CLASSIFIER = "ViTImageClassifier"
DINOV2_BACKBONE = "DINOV2Backbone"
# What keras-hub ships in the ViT family that a ViTConfig cannot hold, and why.
REFUSED = {
    "DINOV3Backbone": "DINOv3 uses rotary position embeddings (RoPE), which ViTConfig has not",
    "DeiTBackbone": "keras-hub's DeiT backbone is not mapped yet: load DeiT weights by timm's "
                    "name (vit_keras.create_model('deit3_small_patch16_224'))",
    "SigLIPBackbone": "SigLIP presets are not mapped yet: load SigLIP image towers by timm's "
                      "name (vit_keras.create_model('vit_base_patch16_siglip_224'))",
    "CLIPBackbone": "CLIP presets are not mapped yet: load CLIP image towers by timm's name "
                    "(vit_keras.create_model('vit_base_patch16_clip_224'))",
    "MetaCLIP2Backbone": "MetaCLIP 2 presets are not mapped yet",
}
_FLOAT32 = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"},
            "registered_name": None}
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


def is_preset(path: str) -> bool:
    """Whether `path` is a folder with a keras-hub `config.json` (a `keras_hub>` class)."""
    config_path = os.path.join(path, CONFIG_FILE)
    if not os.path.isdir(path) or not os.path.isfile(config_path):
        return False
    try:
        return _json(config_path).get("registered_name", "").startswith(REGISTERED_PREFIX)
    except ValueError:
        return False


def read_preset(directory: str) -> Preset:
    """Reads a keras-hub preset folder.

    Args:
        directory: the folder (`config.json`, `model.weights.h5`, ...).

    Returns:
        The `Preset`.

    Raises:
        ValueError: not a preset folder, a backbone class that does not map (with the reason),
            options ViTConfig cannot express, or unreadable files.
    """
    config = _json(os.path.join(directory, CONFIG_FILE))
    class_name = config.get("class_name", "")
    arguments = config.get("config", {})
    task = _optional_json(directory, TASK_FILE)
    if class_name == VIT_BACKBONE:
        fields, layout = _vit_fields(arguments, task)
    elif class_name == DINOV2_BACKBONE:
        fields, layout = _dinov2_fields(arguments), _dinov2_layout(arguments)
        task = None  # keras-hub ships no DINOv2 classifier task
    else:
        reason = REFUSED.get(class_name, "only ViTBackbone and DINOV2Backbone presets map to a "
                                         "ViTConfig")
        raise ValueError(f"keras-hub preset {directory!r} holds a {class_name or 'nameless'} "
                         f"backbone, which cannot be loaded here: {reason}")
    stored = _h5_datasets(os.path.join(directory, WEIGHTS_FILE))
    has_head = task is not None and os.path.isfile(os.path.join(directory, TASK_WEIGHTS_FILE))
    if has_head:
        stored.update({(TASK_WEIGHTS_FILE, path): value for (_, path), value in
                       _h5_datasets(os.path.join(directory, TASK_WEIGHTS_FILE)).items()})
    else:
        fields.pop("num_classes", None)
        fields.pop("representation_size", None)
        layout = {name: place for name, place in layout.items() if place[0] == WEIGHTS_FILE}
    tensors = _canonical(stored, layout)
    checkpoint = keys.Checkpoint(tensors, f"keras-hub {class_name} preset",
                                 posemb_has_cls_row=fields.get("classifier") != "gap",
                                 posemb_method="bicubic" if class_name == DINOV2_BACKBONE
                                 else "official")
    return Preset(checkpoint, fields, _converter_preprocessing(directory), has_head, class_name)


def _json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as file:
            data = json.load(file)
    except (OSError, ValueError) as error:
        raise ValueError(f"{path}: cannot read this keras-hub preset file "
                         f"({type(error).__name__}: {error})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, found {type(data).__name__}")
    return data


def _optional_json(directory: str, name: str) -> dict | None:
    path = os.path.join(directory, name)
    return _json(path) if os.path.isfile(path) else None


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


# --- the architecture a preset states ---------------------------------------------------------


def _image_fields(arguments: dict, class_name: str) -> dict:
    shape = arguments.get("image_shape")
    if arguments.get("data_format", "channels_last") == "channels_first":
        raise ValueError(f"keras-hub {class_name} with data_format='channels_first' cannot be "
                         "loaded: vit_keras models take channels-last images")
    if not shape or len(shape) != 3 or None in shape[:2]:
        raise ValueError(f"keras-hub {class_name} config: expected image_shape [height, width, "
                         f"channels] with both sides set, found {shape!r}")
    height, width, channels = (int(value) for value in shape)
    return dict(image_size=height if height == width else (height, width), channels=channels)


def _square_patch(patch, class_name: str) -> int:
    sides = [patch, patch] if isinstance(patch, int) else list(patch)
    if len(set(sides)) != 1:
        raise ValueError(f"keras-hub {class_name}: patch size {patch!r} is not square, which "
                         "ViTConfig's patch_size cannot hold")
    return int(sides[0])


def _vit_fields(arguments: dict, task: dict | None) -> tuple[dict, dict]:
    """ViTBackbone (+ ViTImageClassifier) arguments -> (ViTConfig fields, weight layout)."""
    class_token = arguments.get("use_class_token", True)
    fields = dict(_image_fields(arguments, VIT_BACKBONE),
                  patch_size=_square_patch(arguments["patch_size"], VIT_BACKBONE),
                  hidden_size=arguments["hidden_dim"], mlp_dim=arguments["mlp_dim"],
                  num_heads=arguments["num_heads"], num_layers=arguments["num_layers"],
                  dropout_rate=arguments.get("dropout_rate", 0.0),
                  attention_dropout_rate=arguments.get("attention_dropout", 0.0),
                  layer_norm_epsilon=arguments.get("layer_norm_epsilon", 1e-6),
                  gelu_approximate=False,  # keras-hub's MLP: Dense(activation="gelu"), exact
                  classifier="token" if class_token else "gap")
    if task is not None:
        task_arguments = task.get("config", {})
        pooling = task_arguments.get("pooling", "token")
        if pooling != fields["classifier"]:
            raise ValueError(
                f"keras-hub ViTImageClassifier pools by {pooling!r} over a backbone "
                f"{'with' if class_token else 'without'} a class token: vit_keras pools the "
                "class token when there is one and averages the patch tokens when there is "
                "none, so this head cannot be reproduced")
        fields.update(num_classes=task_arguments["num_classes"],
                      representation_size=task_arguments.get("intermediate_dim"))
    layout = vit_layout(fields["num_layers"], class_token=class_token,
                        pre_logits=fields.get("representation_size") is not None)
    biases = {"use_mha_bias": names.ATTENTION, "use_mlp_bias": names.MLP,
              "use_patch_bias": names.EMBEDDING}
    absent = tuple(scope for flag, scope in biases.items() if not arguments.get(flag, True))
    return fields, {name: place for name, place in layout.items()
                    if not (name.endswith("/bias") and _in_scopes(name, absent))}


def _in_scopes(name: str, scopes: tuple) -> bool:
    return any(f"/{scope}/" in f"/{name}" for scope in scopes)


def _dinov2_fields(arguments: dict) -> dict:
    patch = _square_patch(arguments["patch_size"], DINOV2_BACKBONE)
    swiglu = arguments.get("use_swiglu_ffn", False)
    mlp_dim = arguments["intermediate_dim"]
    if swiglu:  # keras-hub's SwiGLU packs two halves of 2/3 the width, rounded up to 8
        mlp_dim = 2 * ((int(mlp_dim * 2 / 3) + 7) // 8 * 8)
    return dict(_image_fields(arguments, DINOV2_BACKBONE), patch_size=patch,
                hidden_size=arguments["hidden_dim"], mlp_dim=mlp_dim,
                num_heads=arguments["num_heads"], num_layers=arguments["num_layers"],
                dropout_rate=arguments.get("dropout_rate", 0.0),
                drop_path_rate=arguments.get("drop_path_rate", 0.0),
                layer_scale_init=arguments.get("layer_scale_init_value", 1.0),
                num_register_tokens=arguments.get("num_register_tokens", 0),
                gelu_approximate=False, activation="swiglu" if swiglu else "gelu",
                classifier="token")


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
    for index in range(depth):
        block = f"{encoder}/encoder_layers/{_indexed('vi_t_encoder_block', index)}"
        ours = keys.block_prefix(index)
        layout.update(_norm_paths(ours + names.LAYER_NORM_0, f"{block}/layer_norm_1"))
        layout.update(_attention_paths(ours + keys.ATTENTION, f"{block}/mha"))
        layout.update(_norm_paths(ours + names.LAYER_NORM_2, f"{block}/layer_norm_2"))
        layout.update(_dense_paths(f"{ours}{keys.MLP}/Dense_0", f"{block}/mlp/dense_1"))
        layout.update(_dense_paths(f"{ours}{keys.MLP}/Dense_1", f"{block}/mlp/dense_2"))
    layout.update(_norm_paths(keys.ENCODER_NORM_PREFIX.rstrip("/"), f"{encoder}/layer_norm"))
    heads = [names.PRE_LOGITS, names.HEAD] if pre_logits else [names.HEAD]
    for index, head in enumerate(heads):
        layout.update(_dense_paths(head, f"layers/{_indexed('dense', index)}", TASK_WEIGHTS_FILE))
    return layout


def _dinov2_layout(arguments: dict) -> dict:
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
    for index in range(arguments["num_layers"]):
        block = f"layers/dinov2_encoder/layers/{_indexed('dinov2_layer', index)}"
        ours = keys.block_prefix(index)
        layout.update(_norm_paths(ours + names.LAYER_NORM_0, f"{block}/norm1"))
        layout.update(_attention_paths(ours + keys.ATTENTION, f"{block}/attention/attention"))
        layout.update(_norm_paths(ours + names.LAYER_NORM_2, f"{block}/norm2"))
        layout.update(_dense_paths(f"{ours}{keys.MLP}/Dense_0", f"{block}/mlp/{mlp_in}"))
        layout.update(_dense_paths(f"{ours}{keys.MLP}/Dense_1", f"{block}/mlp/{mlp_out}"))
        for scale in (0, 1):
            layout[f"{ours}LayerScale_{scale}/scale"] = (
                WEIGHTS_FILE, f"{block}/layer_scale{scale + 1}/vars/0")
    layout.update(_norm_paths(keys.ENCODER_NORM_PREFIX.rstrip("/"),
                              "layers/layer_normalization"))
    return layout


def _canonical(stored: dict, layout: dict) -> dict:
    """The tensors under canonical names; a projection whose bias the preset leaves out
    (`use_mha_bias=False`, ...) gets zeros, which compute the same."""
    tensors = {}
    for name, place in layout.items():
        if place in stored:
            tensors[name] = stored[place]
    for name in list(tensors):
        if name.endswith("/kernel") and name[:-len("kernel")] + "bias" not in tensors:
            kernel = tensors[name]
            attention_input = name.split("/")[-2] in ("query", "key", "value")
            shape = kernel.shape[1:] if attention_input else kernel.shape[-1:]
            tensors[name[:-len("kernel")] + "bias"] = np.zeros(shape, kernel.dtype)
    if keys.POSEMB in tensors and tensors[keys.POSEMB].ndim == 2:
        tensors[keys.POSEMB] = tensors[keys.POSEMB][None]  # keras-hub's ViT: an Embedding table
    used = set(layout.values())
    for (file, path), value in stored.items():  # what no entry names: reported as unexpected
        if (file, path) not in used and not _ignorable(path):
            tensors[f"{file}:{path}"] = value
    return tensors


def _ignorable(path: str) -> bool:
    """Stored state that is no model weight: the optimizer's, DINOv2's mask token and its
    position embedding resized to the input (recomputed from the stored one)."""
    return path.startswith("optimizer/") or path.startswith("layers/dinov2_embedding/vars/")


# --- preprocessing -------------------------------------------------------------------------------


def _converter_preprocessing(directory: str) -> Preprocessing | None:
    """`image_converter.json` as a `Preprocessing`: keras-hub computes `pixels * scale + offset`
    on [0, 255] pixels, which is `(pixels / 255 - mean) / std` with std = 1 / (255 scale) and
    mean = -offset * std."""
    data = _optional_json(directory, CONVERTER_FILE)
    if data is None:
        return None
    arguments = data.get("config", {})
    scale = np.broadcast_to(np.asarray(arguments.get("scale") or 1.0, np.float64), (3,))
    offset = np.broadcast_to(np.asarray(arguments.get("offset") or 0.0, np.float64), (3,))
    std = 1.0 / (255.0 * scale)
    interpolation = arguments.get("interpolation", "bilinear")
    if interpolation not in ("bilinear", "bicubic", "nearest"):
        interpolation = "bicubic"  # lanczos and the like: the closest of ours
    return Preprocessing(mean=tuple(float(value) for value in -offset * std),
                         std=tuple(float(value) for value in std), interpolation=interpolation,
                         crop_mode="center" if arguments.get("crop_to_aspect_ratio", True)
                         else "squash")


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
    pre_logits = fields.get("representation_size") is not None
    layout = vit_layout(fields["num_layers"], class_token=fields["classifier"] == "token",
                        pre_logits=pre_logits)
    backbone = _backbone_config(fields)
    converter = _converter_config(fields, preprocessing)
    _write_h5(os.path.join(directory, WEIGHTS_FILE), tensors, layout, WEIGHTS_FILE)
    _write_json(os.path.join(directory, CONFIG_FILE), backbone)
    _write_json(os.path.join(directory, CONVERTER_FILE), converter)
    tasks = []
    if has_head:
        preprocessor = _registered("vit.vit_image_classifier_preprocessor",
                                   "ViTImageClassifierPreprocessor",
                                   {"image_converter": converter,
                                    "config_file": PREPROCESSOR_FILE})
        task = _registered("vit.vit_image_classifier", VIT_CLASSIFIER, {
            "backbone": backbone, "preprocessor": preprocessor,
            "num_classes": fields["num_classes"], "pooling": fields["classifier"],
            "activation": None, "dropout": 0.0,
            "intermediate_dim": fields.get("representation_size")})
        _write_h5(os.path.join(directory, TASK_WEIGHTS_FILE), tensors, layout, TASK_WEIGHTS_FILE)
        _write_json(os.path.join(directory, TASK_FILE), task)
        _write_json(os.path.join(directory, PREPROCESSOR_FILE), preprocessor)
        tasks = ["ImageClassifier"]
    _write_json(os.path.join(directory, METADATA_FILE), dict(metadata, tasks=tasks))


def _registered(module: str, class_name: str, config: dict) -> dict:
    return {"module": f"keras_hub.src.models.{module}", "class_name": class_name,
            "config": config, "registered_name": f"{REGISTERED_PREFIX}{class_name}"}


def _backbone_config(fields: dict) -> dict:
    size = fields["image_size"]
    height, width = (size, size) if isinstance(size, int) else size
    return _registered("vit.vit_backbone", VIT_BACKBONE, {
        "name": "vit_backbone", "trainable": True, "dtype": _FLOAT32,
        "image_shape": [height, width, fields["channels"]],
        "patch_size": [fields["patch_size"]] * 2, "num_layers": fields["num_layers"],
        "num_heads": fields["num_heads"], "hidden_dim": fields["hidden_size"],
        "mlp_dim": fields["mlp_dim"], "dropout_rate": fields["dropout_rate"],
        "attention_dropout": fields["attention_dropout_rate"],
        "layer_norm_epsilon": fields["layer_norm_epsilon"], "use_mha_bias": True,
        "use_mlp_bias": True, "use_class_token": fields["classifier"] == "token",
        "use_patch_bias": True})


def _converter_config(fields: dict, preprocessing: Preprocessing) -> dict:
    std = np.asarray(preprocessing.std, np.float64)
    mean = np.asarray(preprocessing.mean, np.float64)
    size = fields["image_size"]
    return _registered("vit.vit_image_converter", "ViTImageConverter", {
        "name": "vit_image_converter", "trainable": True, "dtype": _FLOAT32,
        "image_size": [size, size] if isinstance(size, int) else list(size),
        "scale": [float(value) for value in 1.0 / (255.0 * std)],
        "offset": [float(value) for value in -mean / std],
        "interpolation": preprocessing.interpolation, "antialias": True,
        "crop_to_aspect_ratio": preprocessing.crop_mode == "center",
        "pad_to_aspect_ratio": False, "bounding_box_format": "yxyx"})


def _write_json(path: str, data: dict) -> None:
    atomic.write_bytes(path, (json.dumps(data, indent=4) + "\n").encode())


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
