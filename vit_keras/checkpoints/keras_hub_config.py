"""What a keras-hub preset folder states, read without a framework: its backbone class and
arguments as `ViTConfig` fields, its image converter as a `Preprocessing`, and the JSON files
(`config.json`, `task.json`, `image_converter.json`, ...) written for a model of ours.

`vit train --weights PRESET_DIR` reads the architecture here before TensorFlow is imported; the
weights themselves are `vit_keras.checkpoints.keras_hub`'s.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

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
SIGLIP_BACKBONE = "SigLIPBackbone"
CLIP_BACKBONE = "CLIPBackbone"
DEIT_BACKBONE = "DeiTBackbone"
# What keras-hub ships in the ViT family that a ViTConfig cannot hold, and why.
# The ViTConfig fields whose value keras-hub's ViTBackbone fixes (the rest of the architecture
# is in its arguments); a DINOv2 preset changes some of them.
PLAIN_VIT = {"stem": "patchify", "locality_attention": False, "resnet_layers": None,
             "posemb": "learn", "layer_scale_init": None, "num_register_tokens": 0,
             "distilled": False, "activation": "gelu", "pre_norm": False,
             "pooled_norm": False, "projection_size": None}
REFUSED = {
    "DINOV3Backbone": "DINOv3 uses rotary position embeddings (RoPE), which ViTConfig has not",
    "MetaCLIP2Backbone": "MetaCLIP 2 presets are not mapped yet: load OpenCLIP / CLIP image "
                         "towers by timm's name (vit_keras.create_model("
                         "'vit_base_patch16_clip_224'))",
}
_FLOAT32 = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"},
            "registered_name": None}

def is_preset(path: str) -> bool:
    """Whether `path` is a folder with a keras-hub `config.json` (a `keras_hub>` class)."""
    config_path = os.path.join(path, CONFIG_FILE)
    if not os.path.isdir(path) or not os.path.isfile(config_path):
        return False
    try:
        return _json(config_path).get("registered_name", "").startswith(REGISTERED_PREFIX)
    except ValueError:
        return False


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




@dataclasses.dataclass(frozen=True)
class Architecture:
    """What a preset folder says of its model.

    Attributes:
        class_name: keras-hub's backbone class ('ViTBackbone').
        arguments: the backbone's arguments as `config.json` holds them.
        fields: the `ViTConfig` fields they make (`num_classes` and `representation_size`
            only when task weights come with them).
        has_head: whether the folder has a classifier task with its weights.
        preprocessing: from `image_converter.json`, or None when the folder has none.
    """

    class_name: str
    arguments: dict
    fields: dict
    has_head: bool
    preprocessing: Preprocessing | None


def preset_architecture(directory: str) -> Architecture:
    """Reads what a keras-hub preset folder says of its model.

    Args:
        directory: the folder (`config.json`, ...).

    Returns:
        The `Architecture`.

    Raises:
        ValueError: unreadable JSON, a backbone class that does not map (with the reason), or
            options ViTConfig cannot express.
    """
    config = _json(os.path.join(directory, CONFIG_FILE))
    class_name = config.get("class_name", "")
    arguments = config.get("config", {})
    task = _optional_json(directory, TASK_FILE)
    if class_name == VIT_BACKBONE:
        has_head = task is not None and os.path.isfile(os.path.join(directory, TASK_WEIGHTS_FILE))
        fields = _vit_fields(arguments, task if has_head else None)
    elif class_name in _TOWERS:
        has_head, fields = False, _TOWERS[class_name](arguments)
    else:
        reason = REFUSED.get(class_name, "only ViTBackbone, DeiTBackbone, DINOV2Backbone, "
                                         "SigLIPBackbone and CLIPBackbone presets map to a "
                                         "ViTConfig")
        raise ValueError(f"keras-hub preset {directory!r} holds a {class_name or 'nameless'} "
                         f"backbone, which cannot be loaded here: {reason}")
    return Architecture(class_name, arguments, fields, has_head,
                        _converter_preprocessing(directory))


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


def _encoder_fields(arguments: dict, class_name: str, mlp_key: str) -> dict:
    """What keras-hub's ViTBackbone and DeiTBackbone arguments share."""
    return dict(PLAIN_VIT, **_image_fields(arguments, class_name),
                patch_size=_square_patch(arguments["patch_size"], class_name),
                hidden_size=arguments["hidden_dim"], mlp_dim=arguments[mlp_key],
                num_heads=arguments["num_heads"], num_layers=arguments["num_layers"],
                dropout_rate=arguments.get("dropout_rate", 0.0),
                attention_dropout_rate=arguments.get("attention_dropout", 0.0),
                layer_norm_epsilon=arguments.get("layer_norm_epsilon", 1e-6),
                gelu_approximate=False)  # keras-hub's MLP: Dense(activation="gelu"), exact


def _vit_fields(arguments: dict, task: dict | None) -> dict:
    """ViTBackbone (+ ViTImageClassifier) arguments -> ViTConfig fields."""
    class_token = arguments.get("use_class_token", True)
    fields = dict(_encoder_fields(arguments, VIT_BACKBONE, "mlp_dim"),
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
    return fields


def _dinov2_fields(arguments: dict) -> dict:
    patch = _square_patch(arguments["patch_size"], DINOV2_BACKBONE)
    swiglu = arguments.get("use_swiglu_ffn", False)
    mlp_dim = arguments["intermediate_dim"]
    if swiglu:  # keras-hub's SwiGLU packs two halves of 2/3 the width, rounded up to 8
        mlp_dim = 2 * ((int(mlp_dim * 2 / 3) + 7) // 8 * 8)
    return dict(PLAIN_VIT, **_image_fields(arguments, DINOV2_BACKBONE), patch_size=patch,
                hidden_size=arguments["hidden_dim"], mlp_dim=mlp_dim,
                num_heads=arguments["num_heads"], num_layers=arguments["num_layers"],
                dropout_rate=arguments.get("dropout_rate", 0.0),
                drop_path_rate=arguments.get("drop_path_rate", 0.0),
                layer_scale_init=arguments.get("layer_scale_init_value", 1.0),
                num_register_tokens=arguments.get("num_register_tokens", 0),
                gelu_approximate=False, activation="swiglu" if swiglu else "gelu",
                classifier="token")


def _vision_encoder(arguments: dict, class_name: str) -> dict:
    """A two-tower backbone's image-tower arguments (`vision_encoder`'s config)."""
    encoder = arguments.get("vision_encoder")
    if not isinstance(encoder, dict) or not isinstance(encoder.get("config"), dict):
        raise ValueError(f"keras-hub {class_name} config: expected a 'vision_encoder' with its "
                         f"config, found {encoder!r}")
    return encoder["config"]


def _tower_fields(encoder: dict, class_name: str) -> dict:
    """What the SigLIP and CLIP image towers share."""
    activation = encoder.get("intermediate_activation", "gelu")
    known = {"gelu_approximate": ("gelu", True), "gelu": ("gelu", False),
             "quick_gelu": ("quick_gelu", False)}
    if activation not in known:
        raise ValueError(f"keras-hub {class_name}: MLP activation {activation!r} is not one "
                         f"ViTConfig has (expected one of {sorted(known)})")
    return dict(PLAIN_VIT, **_image_fields(encoder, class_name),
                patch_size=_square_patch(encoder["patch_size"], class_name),
                hidden_size=encoder["hidden_dim"], mlp_dim=encoder["intermediate_dim"],
                num_heads=encoder["num_heads"], num_layers=encoder["num_layers"],
                activation=known[activation][0], gelu_approximate=known[activation][1])


def _siglip_fields(arguments: dict) -> dict:
    encoder = _vision_encoder(arguments, SIGLIP_BACKBONE)
    return dict(_tower_fields(encoder, SIGLIP_BACKBONE), classifier="map",
                layer_norm_epsilon=encoder.get("layer_norm_epsilon", 1e-6))


def _clip_fields(arguments: dict) -> dict:
    # keras-hub's CLIP image tower: LayerNorms of epsilon 1e-5 before and after the blocks.
    return dict(_tower_fields(_vision_encoder(arguments, CLIP_BACKBONE), CLIP_BACKBONE),
                classifier="token", pre_norm=True, layer_norm_epsilon=1e-5,
                projection_size=arguments["projection_dim"])


def _deit_fields(arguments: dict) -> dict:
    """DeiTBackbone: class and distillation tokens. Its classifier task is not read: it
    classifies from the class token alone, where a distilled ViTConfig averages two heads."""
    return dict(_encoder_fields(arguments, DEIT_BACKBONE, "intermediate_dim"),
                classifier="token", distilled=True)


# Backbones read without their task (keras-hub has none for them, or one ViTConfig cannot hold).
_TOWERS = {DINOV2_BACKBONE: _dinov2_fields, SIGLIP_BACKBONE: _siglip_fields,
           CLIP_BACKBONE: _clip_fields, DEIT_BACKBONE: _deit_fields}


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




def preset_json_files(fields: dict, preprocessing: Preprocessing, *, has_head: bool,
                      metadata: dict) -> dict[str, dict]:
    """The JSON files of a keras-hub ViT preset for a model of ours.

    Args:
        fields: the model's `ViTConfig` fields (`dataclasses.asdict`).
        preprocessing: what the model expects of pixels.
        has_head: include `task.json` and `preprocessor.json` (a `ViTImageClassifier`).
        metadata: entries for `metadata.json`.

    Returns:
        file name -> its JSON object.
    """
    backbone = _backbone_config(fields)
    converter = _converter_config(fields, preprocessing)
    files = {CONFIG_FILE: backbone, CONVERTER_FILE: converter,
             METADATA_FILE: dict(metadata, tasks=["ImageClassifier"] if has_head else [])}
    if has_head:
        preprocessor = _registered("vit.vit_image_classifier_preprocessor",
                                   "ViTImageClassifierPreprocessor",
                                   {"image_converter": converter,
                                    "config_file": PREPROCESSOR_FILE})
        files[PREPROCESSOR_FILE] = preprocessor
        files[TASK_FILE] = _registered("vit.vit_image_classifier", VIT_CLASSIFIER, {
            "backbone": backbone, "preprocessor": preprocessor,
            "num_classes": fields["num_classes"], "pooling": fields["classifier"],
            "activation": None, "dropout": 0.0,
            "intermediate_dim": fields.get("representation_size")})
    return files


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
