"""`create_family_model`: a DeiT-III, DINOv2, SigLIP or CLIP model by timm's name, its config
from the table of `vit_keras.families` and the weights' file, its preprocessing from the
weights."""

from __future__ import annotations

import json
import logging
import os

from vit_keras import families
from vit_keras.checkpoints import processors
from vit_keras.core.model import VisionTransformer
from vit_keras.weights import assign_checkpoint, read_weights_file

logger = logging.getLogger(__name__)


FAMILY_POOLING = "family"  # the default of `pooling`: the family's own


def create_family_model(name: str, weights: str | None = None, include_top: bool | None = None,
                        input_shape=None, classes: int | None = None,
                        pooling: str | None = FAMILY_POOLING, classifier_activation=None,
                        **config_overrides):
    """Builds a family model, optionally with its weights.

    Args:
        name: timm's name, with or without the weight tag ('vit_small_patch14_dinov2',
            'vit_base_patch16_siglip_224.v2_webli'); see `vit_keras.families.FAMILY_MODELS`.
        weights: None (random init); 'pretrained' or a tag (the `hf://timm/NAME.TAG` file,
            downloaded once); an `hf://` reference or the path of a timm-layout file.
        include_top: with a classifier head; default: when the weights have one (DeiT-III) or
            `classes` is given. Without it the model returns what `pooling` says.
        input_shape: (height, width, channels); default: the weights' resolution. The
            position embedding is resized as timm does (antialiased bicubic).
        classes: a new head of this many classes (fine-tuning; CLIP's projection is then
            dropped, as timm's `reset_classifier` does).
        pooling: without a head: the family's own pooling (the default: DINOv2's class token,
            SigLIP's attention pooling, CLIP's class token through its projection), 'token',
            'gap', 'map', or None for the final-normed token sequence.
        classifier_activation: as for `VisionTransformer`.
        **config_overrides: other `ViTConfig` fields (dropout_rate, drop_path_rate, ...).

    Returns:
        A `VisionTransformer` whose `preprocessing` is what the weights expect (or
        `preprocessing=` among the overrides).
    """
    spec, tag = families.split_name(name)
    reference, tag = _weights_reference(spec, tag, weights)
    config, preprocessing = spec.config, spec.tags[tag or next(iter(spec.tags))]
    checkpoint = path = None
    if reference is not None:
        # timm's resize, as users of these files expect.
        checkpoint, path = read_weights_file(reference, config.num_heads, posemb_method="bicubic")
        preprocessing = _file_preprocessing(path) or preprocessing
    preprocessing = config_overrides.pop("preprocessing", None) or preprocessing
    new_head = classes is not None
    if include_top is None:
        include_top = spec.has_head or new_head
    changes = dict(config_overrides)
    if new_head:
        changes.update(num_classes=classes, projection_size=None)
    if input_shape is not None:
        changes.update(image_size=tuple(input_shape[:2]), channels=input_shape[2])
    config = config.replace(**changes)
    if pooling == FAMILY_POOLING:
        pooling = config.classifier
    model = VisionTransformer(config, include_top=include_top,
                              pooling=None if include_top else pooling,
                              classifier_activation=classifier_activation,
                              name=spec.name, preprocessing=preprocessing)
    if checkpoint is not None:
        assign_checkpoint(model, checkpoint, path, skip_head=True if new_head else None)
    return model


def _weights_reference(spec, tag, weights):
    """(what to read or None, the weight tag or None) for the `weights` argument: a timm
    reference's tag when it is one of this model's, so that its preprocessing is taken."""
    if weights is None:
        return None, tag
    if weights == "pretrained" or weights in spec.tags:
        tag = weights if weights in spec.tags else tag or next(iter(spec.tags))
        return spec.reference(tag), tag
    if weights.startswith(families.HUB_PREFIX):
        file_tag = weights[len(families.HUB_PREFIX):].split("/")[0].split("@")[0]
        file_tag = file_tag.partition(".")[2]
        return weights, file_tag if file_tag in spec.tags else tag
    return weights, tag


def _file_preprocessing(path: str):
    """The preprocessing the files beside a weights file (a Hub download) give: transformers'
    `preprocessor_config.json`, else the `pretrained_cfg` of timm's `config.json`; None when
    neither is there."""
    folder = os.path.dirname(path)
    for name, read in (("preprocessor_config.json", _hf_processor),
                       ("config.json", _timm_pretrained_cfg)):
        config_path = os.path.join(folder, name)
        if not os.path.isfile(config_path):
            continue
        try:
            with open(config_path, encoding="utf-8") as file:
                found = read(json.load(file))
        except (OSError, ValueError, AttributeError) as error:
            raise ValueError(f"{config_path}: cannot read the preprocessing of the weights "
                             f"({type(error).__name__}: {error})") from None
        if found is not None:
            logger.info("%s: preprocessing from %s: %s", path, config_path, found.describe())
            return found
    return None


def _hf_processor(data: dict):
    return processors.from_hf_processor(data) if "image_mean" in data else None


def _timm_pretrained_cfg(data: dict):
    pretrained_cfg = data.get("pretrained_cfg")
    if not isinstance(pretrained_cfg, dict) or "mean" not in pretrained_cfg:
        return None
    return processors.from_timm_config(pretrained_cfg)
