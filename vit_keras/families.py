"""The 2021-2025 ViT families people fine-tune, by timm's names: DeiT (plain and distilled),
DeiT-III, DINOv2 (with and without registers), SigLIP/SigLIP2 and CLIP/OpenCLIP image towers.

Each `FamilyModel` is an architecture (a `ViTConfig` at the resolution its weights were made at)
and its released weights, each with the preprocessing it expects (timm's pretrained configs).
Weights are timm's files on the Hugging Face Hub (`hf://timm/<name>.<tag>`), or any local file
of the same layout; `create_model(name, weights=...)` builds the config and loads them, and the
model carries the preprocessing.

Known differences from timm, by construction: timm's plain `.openai` CLIP models run exact
GELU although the weights were trained with QuickGELU; the `_quickgelu` names here (as in timm)
give the original model. timm's SigLIP models run exact GELU (big_vision and Hugging Face use
the tanh approximation); we follow timm, whose files these are.
"""

from __future__ import annotations

import dataclasses

from vit_keras.config import ViTConfig, variant_name
from vit_keras.mobilevit.config import timm_name as mobilevit_name
from vit_keras.preprocessing import (CLIP_MEAN, CLIP_STD, IMAGENET_MEAN, IMAGENET_STD,
                                     Preprocessing)

HUB_PREFIX = "hf://timm/"


def _timm_preprocessing(mean, std, crop_fraction) -> Preprocessing:
    """timm's evaluation transform: bicubic, shorter side to size / crop, centre crop."""
    return Preprocessing(mean=mean, std=std, interpolation="bicubic",
                         crop_fraction=crop_fraction, crop_mode="center")


IMAGENET_FULL = _timm_preprocessing(IMAGENET_MEAN, IMAGENET_STD, 1.0)
IMAGENET_09 = _timm_preprocessing(IMAGENET_MEAN, IMAGENET_STD, 0.9)
SIGLIP = _timm_preprocessing(0.5, 0.5, 0.9)
CLIP_09 = _timm_preprocessing(CLIP_MEAN, CLIP_STD, 0.9)
CLIP_FULL = _timm_preprocessing(CLIP_MEAN, CLIP_STD, 1.0)


@dataclasses.dataclass(frozen=True)
class FamilyModel:
    """One architecture of a family and its released weights.

    Attributes:
        name: timm's architecture name ('vit_small_patch14_dinov2').
        family: 'deit', 'deit3', 'dinov2', 'siglip' or 'clip'.
        config: the architecture at its weights' resolution (head: `num_classes`, or none).
        tags: weight tag ('lvd142m') -> the preprocessing those weights expect.
        has_head: whether the weights hold a classifier head (`config.num_classes` outputs).
        summary: what it is, in a few words.
    """

    name: str
    family: str
    config: ViTConfig
    tags: dict
    has_head: bool
    summary: str

    def reference(self, tag: str) -> str:
        """The `hf://` reference of the weights `tag`."""
        return f"{HUB_PREFIX}{self.name}.{tag}"

    @property
    def preprocessing(self) -> Preprocessing:
        """The preprocessing of its first weights (what the architecture's name alone gives)."""
        return next(iter(self.tags.values()))


def _vit(width, depth, heads, patch, image, mlp=None, **options) -> ViTConfig:
    return ViTConfig(hidden_size=width, num_layers=depth, num_heads=heads, patch_size=patch,
                     image_size=image, mlp_dim=mlp or 4 * width, gelu_approximate=False,
                     **options)


def _deit(width, depth, heads, image=224, distilled=False) -> dict:
    # DeiT (Touvron et al. 2021): the ViT of the paper trained on ImageNet-1k alone; the
    # distilled models add a distillation token with its own head, averaged at inference.
    return dict(config=_vit(width, depth, heads, 16, image, num_classes=1000,
                            distilled=distilled),
                tags={"fb_in1k": IMAGENET_09 if image == 224 else IMAGENET_FULL},
                has_head=True, family="deit")


def _deit3(width, depth, heads) -> dict:
    return dict(config=_vit(width, depth, heads, 16, 224, layer_scale_init=1e-6,
                            num_classes=1000),
                tags={"fb_in1k": IMAGENET_09, "fb_in22k_ft_in1k": IMAGENET_FULL},
                has_head=True, family="deit3")


def _dinov2(width, depth, heads, registers=0, mlp=None, **options) -> dict:
    return dict(config=_vit(width, depth, heads, 14, 518, mlp, layer_scale_init=1e-5,
                            num_register_tokens=registers, num_classes=1, **options),
                tags={"lvd142m": IMAGENET_FULL}, has_head=False, family="dinov2")


def _siglip(width, depth, heads, patch, mlp, tags) -> dict:
    return dict(config=_vit(width, depth, heads, patch, 224, mlp, classifier="map",
                            num_classes=1),
                tags=tags, has_head=False, family="siglip")


def _clip(width, depth, heads, patch, projection, tags, activation="gelu") -> dict:
    return dict(config=_vit(width, depth, heads, patch, 224, pre_norm=True,
                            layer_norm_epsilon=1e-5, projection_size=projection,
                            activation=activation, num_classes=1),
                tags=tags, has_head=False, family="clip")


_TABLE = {
    "deit_tiny_patch16_224": (_deit(192, 12, 3), "DeiT Ti/16, ImageNet"),
    "deit_small_patch16_224": (_deit(384, 12, 6), "DeiT S/16, ImageNet"),
    "deit_base_patch16_224": (_deit(768, 12, 12), "DeiT B/16, ImageNet"),
    "deit_base_patch16_384": (_deit(768, 12, 12, 384), "DeiT B/16 at 384 px, ImageNet"),
    "deit_tiny_distilled_patch16_224": (_deit(192, 12, 3, distilled=True),
                                        "DeiT Ti/16 distilled, ImageNet"),
    "deit_small_distilled_patch16_224": (_deit(384, 12, 6, distilled=True),
                                         "DeiT S/16 distilled, ImageNet"),
    "deit_base_distilled_patch16_224": (_deit(768, 12, 12, distilled=True),
                                        "DeiT B/16 distilled, ImageNet"),
    "deit_base_distilled_patch16_384": (_deit(768, 12, 12, 384, distilled=True),
                                        "DeiT B/16 distilled at 384 px, ImageNet"),
    "deit3_small_patch16_224": (_deit3(384, 12, 6), "DeiT-III S/16, ImageNet"),
    "deit3_base_patch16_224": (_deit3(768, 12, 12), "DeiT-III B/16, ImageNet"),
    "deit3_large_patch16_224": (_deit3(1024, 24, 16), "DeiT-III L/16, ImageNet"),
    "vit_small_patch14_dinov2": (_dinov2(384, 12, 6), "DINOv2 S/14, self-supervised"),
    "vit_base_patch14_dinov2": (_dinov2(768, 12, 12), "DINOv2 B/14, self-supervised"),
    "vit_large_patch14_dinov2": (_dinov2(1024, 24, 16), "DINOv2 L/14, self-supervised"),
    "vit_giant_patch14_dinov2": (_dinov2(1536, 40, 24, mlp=8192, activation="swiglu"),
                                 "DINOv2 g/14 (SwiGLU), self-supervised"),
    "vit_small_patch14_reg4_dinov2": (_dinov2(384, 12, 6, 4), "DINOv2 S/14 with 4 registers"),
    "vit_base_patch14_reg4_dinov2": (_dinov2(768, 12, 12, 4), "DINOv2 B/14 with 4 registers"),
    "vit_large_patch14_reg4_dinov2": (_dinov2(1024, 24, 16, 4),
                                      "DINOv2 L/14 with 4 registers"),
    "vit_giant_patch14_reg4_dinov2": (_dinov2(1536, 40, 24, 4, mlp=8192,
                                              activation="swiglu"),
                                      "DINOv2 g/14 (SwiGLU) with 4 registers"),
    "vit_base_patch16_siglip_224": (_siglip(768, 12, 12, 16, 3072,
                                            {"webli": SIGLIP, "v2_webli": SIGLIP}),
                                    "SigLIP / SigLIP2 B/16 image tower"),
    "vit_so400m_patch14_siglip_224": (_siglip(1152, 27, 16, 14, 4304,
                                              {"webli": SIGLIP, "v2_webli": SIGLIP}),
                                      "SigLIP / SigLIP2 So400m/14 image tower"),
    "vit_base_patch16_clip_224": (_clip(768, 12, 12, 16, 512,
                                        {"openai": CLIP_09, "laion2b": CLIP_FULL}),
                                  "CLIP / OpenCLIP B/16 image tower (timm: exact GELU)"),
    "vit_large_patch14_clip_224": (_clip(1024, 24, 16, 14, 768, {"openai": CLIP_FULL}),
                                   "CLIP L/14 image tower (timm: exact GELU)"),
    "vit_base_patch16_clip_quickgelu_224": (_clip(768, 12, 12, 16, 512, {"openai": CLIP_09},
                                                  "quick_gelu"),
                                            "OpenAI CLIP B/16 image tower, as trained"),
    "vit_large_patch14_clip_quickgelu_224": (_clip(1024, 24, 16, 14, 768,
                                                   {"openai": CLIP_FULL}, "quick_gelu"),
                                             "OpenAI CLIP L/14 image tower, as trained"),
}

FAMILY_MODELS: dict[str, FamilyModel] = {
    name: FamilyModel(name=name, summary=summary, **spec)
    for name, (spec, summary) in _TABLE.items()}


def split_name(name: str) -> tuple[FamilyModel, str | None]:
    """A family model and its weight tag.

    Args:
        name: 'NAME', 'NAME.TAG' or 'hf://timm/NAME.TAG'.

    Returns:
        (the `FamilyModel`, the tag or None).

    Raises:
        ValueError: no such architecture or tag (the message lists what there is).
    """
    bare = name[len(HUB_PREFIX):] if name.startswith(HUB_PREFIX) else name
    architecture, _, tag = bare.partition(".")
    model = FAMILY_MODELS.get(architecture)
    if model is None:
        raise ValueError(f"unknown model {name!r}; expected an official variant ('B/16') or "
                         f"one of {sorted(FAMILY_MODELS)}")
    if tag and tag not in model.tags:
        raise ValueError(f"{architecture} has no weights {tag!r}; expected one of "
                         f"{sorted(model.tags)}")
    return model, tag or None


def is_family_name(name: str) -> bool:
    """Whether `name` names a family model ('vit_small_patch14_dinov2[.TAG]'; the tag is
    checked by `split_name`)."""
    bare = name[len(HUB_PREFIX):] if name.startswith(HUB_PREFIX) else name
    return bare.partition(".")[0] in FAMILY_MODELS


# What a model built from a family takes from it besides the ARCHITECTURE_FIELDS (`vit train
# --model NAME`): how it pools, its layer scale, registers and GELU (and, beside the
# architecture, its `preprocessing`).
FAMILY_FIELDS = ("classifier", "layer_scale_init", "num_register_tokens", "gelu_approximate")


def weights_file_reference(weights: str) -> str | None:
    """Where family weights named by timm's name are.

    Args:
        weights: any `weights` argument.

    Returns:
        The `hf://timm/NAME.TAG` reference of weights named 'NAME.TAG' (or given as that
        reference), else None (a path, URL or official release name).

    Raises:
        ValueError: an architecture name without its tag, or an unknown tag.
    """
    if not is_family_name(weights):
        return None
    model, tag = split_name(weights)
    if tag is None:
        known = [f"{model.name}.{known_tag}" for known_tag in model.tags]
        raise ValueError(f"weights {weights!r} name an architecture, not its weights: expected "
                         f"NAME.TAG, one of {known}")
    return model.reference(tag)


def weight_references() -> list[tuple[FamilyModel, str]]:
    """Every (model, tag) with released weights, in the table's order."""
    return [(model, tag) for model in FAMILY_MODELS.values() for tag in model.tags]


def check_model_name(name: str) -> None:
    """Checks that `name` is an architecture `vit_keras.create_model` builds: an official
    variant in any spelling ('B/16', 'ViT-B_16'), a family model ('NAME[.TAG]') or a
    MobileViT ('mobilevit_xs', 'mobilevit_xs.cvnets_in1k').

    Raises:
        ValueError: naming the variants and family models there are.
    """
    if mobilevit_name(name):
        return
    if is_family_name(name):
        split_name(name)
    else:
        variant_name(name)
