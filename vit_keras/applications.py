"""keras.applications-style constructors of the official variants (`ViTB16(weights=...)`),
`create_model` by name, and `preprocess_input`."""

from __future__ import annotations

import keras

from vit_keras import families
from vit_keras import preprocessing as rules
from vit_keras.config import ViTConfig, get_variant, variant_name
from vit_keras.core.model import VisionTransformer, preprocessing_of
from vit_keras.family_models import create_family_model
from vit_keras.mobilevit.config import get_config as get_mobilevit_config
from vit_keras.mobilevit.config import timm_name as mobilevit_name
from vit_keras.mobilevit.model import MobileViT
from vit_keras.mobilevit.weights import load_mobilevit_weights
from vit_keras.weights import assign_checkpoint, load_weights, read_pretrained


def preprocess_input(images, model=None, preprocessing=None):
    """Maps RGB pixel values in 0..255 to a model's inputs: (pixels / 255 - mean) / std.

    The official models take [-1, 1] ((pixels - 127.5) / 127.5, the default); weights of other
    families (DeiT, DINOv2, CLIP) expect their own mean and std, which their model carries.

    Args:
        images: array or tensor [..., 3], values in [0, 255], already at the model's size.
        model: a `VisionTransformer`: its `model.preprocessing` is used.
        preprocessing: a `vit_keras.preprocessing.Preprocessing` (instead of `model`).

    Returns:
        float32 tensor of the same shape.
    """
    if model is not None and preprocessing is None:
        preprocessing = preprocessing_of(model)
    return rules.normalize(images, preprocessing or rules.OFFICIAL)


DEFAULT_CLASSES = 1000  # ImageNet-1k, as keras.applications


def _application(variant: str, default_name: str):
    """Makes a keras.applications-style constructor for one official variant."""

    def constructor(include_top=True, weights=None, input_shape=None, classes=None,
                    pooling=None, classifier_activation=None, **config_overrides):
        if input_shape is not None and len(input_shape) != 3:
            raise ValueError(f"input_shape must be (height, width, channels), got {input_shape}")
        preprocessing = config_overrides.pop("preprocessing", None)
        checkpoint, overrides = None, dict(config_overrides)
        if weights is not None:
            checkpoint, path, trained = read_pretrained(
                weights, variant, config_overrides, classes=classes, include_top=include_top)
            overrides = {**trained, **overrides}
        if classes is not None or "num_classes" not in overrides:
            overrides["num_classes"] = DEFAULT_CLASSES if classes is None else classes
        if input_shape is not None:
            overrides.update(image_size=(input_shape[0], input_shape[1]), channels=input_shape[2])
        config = get_variant(variant, **overrides)
        model = VisionTransformer(config, include_top=include_top, pooling=pooling,
                                  classifier_activation=classifier_activation, name=default_name,
                                  preprocessing=preprocessing)
        if checkpoint is not None:
            assign_checkpoint(model, checkpoint, path, skip_head=True if not include_top else None)
        return model

    constructor.__name__ = default_name
    constructor.__doc__ = f"""Builds ViT-{variant} (official configuration), optionally pretrained.

    With `weights`, the model takes the resolution, classes and pre_logits the weights were
    trained with, unless `input_shape`, `classes` or `representation_size` say otherwise: the
    position embedding is then resized, and other `classes` get a new zero-initialised head
    without pre_logits (the paper's fine-tuning), the released head being left out (logged).

    Args:
        include_top: whether to include the classification head.
        weights: None (random init); a released weight name for ViT-{variant} (e.g.
            'imagenet21k+imagenet2012'; `vit weights list` shows them), downloaded once into the
            Keras cache; an https:// URL; hf://ORG/REPO; or a checkpoint file path.
        input_shape: (height, width, channels); default: the weights' resolution, else 224 px.
        classes: number of classes of the head; default: the weights' head, else 1000.
        pooling: with include_top=False: None (token sequence), 'token', 'gap' or 'avg'.
        classifier_activation: activation of the head (None = logits).
        **config_overrides: any other `ViTConfig` field (dropout_rate, representation_size...),
            and `preprocessing` (the model's; default the official [-1, 1]).

    Returns:
        A `keras.Model` taking images in [-1, 1].
    """
    return constructor


ViTTi16 = _application("Ti/16", "vit_ti16")
ViTS16 = _application("S/16", "vit_s16")
ViTS32 = _application("S/32", "vit_s32")
ViTB8 = _application("B/8", "vit_b8")
ViTB16 = _application("B/16", "vit_b16")
ViTB32 = _application("B/32", "vit_b32")
ViTL16 = _application("L/16", "vit_l16")
ViTL32 = _application("L/32", "vit_l32")
ViTH14 = _application("H/14", "vit_h14")
ViTRTi16 = _application("R+Ti/16", "vit_r_ti16")
ViTR26S32 = _application("R26+S/32", "vit_r26_s32")
ViTR26B32 = _application("R26+B/32", "vit_r26_b32")
ViTR50B16 = _application("R50+B/16", "vit_r50_b16")
ViTR50L32 = _application("R50+L/32", "vit_r50_l32")

APPLICATIONS = {"Ti/16": ViTTi16, "S/16": ViTS16, "S/32": ViTS32, "B/8": ViTB8, "B/16": ViTB16,
                "B/32": ViTB32, "L/16": ViTL16, "L/32": ViTL32, "H/14": ViTH14,
                "R+Ti/16": ViTRTi16, "R26+S/32": ViTR26S32, "R26+B/32": ViTR26B32,
                "R50+B/16": ViTR50B16, "R50+L/32": ViTR50L32}


def create_model(variant: str, **kwargs) -> keras.Model:
    """Builds an official variant by name, as its `ViT*` constructor does, or a model of the
    DeiT-III, DINOv2, SigLIP and CLIP families by timm's name (see `vit_keras.families` and
    `create_family_model`), or a MobileViT by timm's name (`create_mobilevit`: `weights`,
    `classes`, `input_shape` and `include_top` apply).

    Args:
        variant: 'B/16', 'R50+B/16', or an official spelling ('ViT-B_16'); or a family model
            ('vit_small_patch14_dinov2', 'vit_base_patch16_siglip_224.v2_webli'); or
            'mobilevit_xs', 'mobilevitv2_100.cvnets_in1k', ...
        **kwargs: the constructor's arguments (weights, input_shape, classes, ...).

    Returns:
        The model.
    """
    if families.is_family_name(variant):
        return create_family_model(variant, **kwargs)
    if mobilevit := mobilevit_name(variant):
        return _mobilevit(mobilevit, **kwargs)
    key = variant_name(variant)
    return (APPLICATIONS.get(key) or _application(key, "vit"))(**kwargs)


def _mobilevit(variant: str, weights=None, classes=None, input_shape=None, include_top=True,
               **unused) -> keras.Model:
    if unused:
        raise ValueError(f"{variant} is a MobileViT, whose shape its name fixes: it takes "
                         f"weights, classes, input_shape and include_top, not {sorted(unused)}")
    if input_shape is not None and (len(input_shape) != 3 or input_shape[0] != input_shape[1]):
        raise ValueError(f"a MobileViT takes square RGB images: expected input_shape (N, N, 3), "
                         f"got {input_shape}")
    config = get_mobilevit_config(variant, image_size=input_shape[0] if input_shape else 256,
                                  num_classes=1000 if classes is None else classes)
    model = MobileViT(config, include_top=include_top)
    if weights is not None:
        load_mobilevit_weights(model, weights, skip_head=None if include_top else True)
    return model


def build_classifier(config: ViTConfig, weights: str | None = None,
                     skip_head: bool | None = None, **kwargs) -> keras.Model:
    """The classifier `config` describes: a `VisionTransformer`, or the `MobileViT` its
    `architecture` names.

    Args:
        config: the `ViTConfig` (`architecture` 'vit' or a MobileViT variant).
        weights: None (default: initial values), or what to load: for a ViT any
            `vit_keras.load_weights` argument, for a MobileViT any of
            `vit_keras.mobilevit.weights.load_mobilevit_weights`.
        skip_head: None (default) loads the head when its classes match and otherwise leaves
            it at its initial values with a warning; True never loads it; False requires it.
        **kwargs: the model's other arguments (`name`, `preprocessing`, ...).

    Returns:
        The model.
    """
    if config.architecture == "vit":
        model = VisionTransformer(config, **kwargs)
        if weights:
            load_weights(model, weights, skip_head=skip_head)
        return model
    model = MobileViT(config, **kwargs)
    if weights:
        load_mobilevit_weights(model, weights, skip_head=skip_head)
    return model
