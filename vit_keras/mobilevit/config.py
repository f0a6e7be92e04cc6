"""MobileViT's variants (Mehta & Rastegari: v1, 2021; v2, 2022) as timm builds them: a
MobileNetV2 stem and inverted residuals, then three stages whose MobileViT block sees the whole
feature map through a transformer over 2x2 patches. No Keras here: the table is read anywhere.

v1 (`mobilevit_xxs`, `_xs`, `_s`): multi-head attention over the patches, a 1x1 convolution to
`num_features` before the pool. v2 (`mobilevitv2_050` ... `_200`, a width multiplier):
separable linear attention (one context vector, cost linear in the patches) under one-group
norms, no fusion convolution, no final convolution.
"""

from __future__ import annotations

import dataclasses

from vit_keras.preprocessing import Preprocessing

PATCH = 2  # the patch side of every MobileViT block of every released variant
HEADS = 4  # v1's attention heads
MIN_IMAGE_SIZE = 32  # five stride-2 stages down to one pixel


@dataclasses.dataclass(frozen=True)
class MobileViTConfig:
    """One MobileViT architecture.

    Attributes:
        name: timm's name ('mobilevit_xs', 'mobilevitv2_100').
        version: 1 or 2.
        stem: channels of the stride-2 3x3 stem.
        stage_channels: the output channels of the five stages.
        stage_blocks: inverted residuals in stages 0 and 1 (stages 2-4 have one, then their
            MobileViT block).
        expansion: each inverted residual's hidden width over its input's.
        transformer_dims: the width of the transformer of stages 2-4.
        transformer_depths: its blocks in stages 2-4.
        num_features: the width the head pools (v1: a 1x1 convolution's; v2: stage 4's).
        num_classes: the head's classes (0: no head, the pooled features).
        image_size: the input's side.
        summary: what it is, in a few words (timm's reported ImageNet top-1).
    """

    name: str
    version: int
    stem: int
    stage_channels: tuple[int, ...]
    stage_blocks: tuple[int, int]
    expansion: float
    transformer_dims: tuple[int, int, int]
    transformer_depths: tuple[int, int, int] = (2, 4, 3)
    num_features: int = 0
    num_classes: int = 1000
    image_size: int = 256
    summary: str = ""

    def __post_init__(self):
        if self.version not in (1, 2):
            raise ValueError(f"version must be 1 or 2, got {self.version!r}")
        if self.image_size < MIN_IMAGE_SIZE or self.num_classes < 0:
            raise ValueError(f"expected image_size >= 32 and num_classes >= 0, got "
                             f"{self.image_size} and {self.num_classes}")

    @property
    def preprocessing(self) -> Preprocessing:
        """timm's pretrained config of the version (`PREPROCESSING`)."""
        return PREPROCESSING[self.version]

    def replace(self, **changes) -> "MobileViTConfig":
        """A copy with `changes` (e.g. `num_classes=10`, `image_size=224`)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """The fields, JSON-ready (`from_dict` reads them back)."""
        return {key: list(value) if isinstance(value, tuple) else value
                for key, value in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, fields: dict) -> "MobileViTConfig":
        """The config of `to_dict`'s fields."""
        return cls(**{key: tuple(value) if isinstance(value, list) else value
                      for key, value in fields.items()})


def make_divisible(value: float, divisor: int = 8) -> int:
    """The nearest multiple of `divisor` at least 90% of `value` (the MobileNet rule)."""
    rounded = max(divisor, int(value + divisor / 2) // divisor * divisor)
    return rounded + divisor if rounded < 0.9 * value else rounded


def _v1(name, channels, expansion, dims, features, summary):
    return MobileViTConfig(name=name, version=1, stem=16, stage_channels=channels,
                           stage_blocks=(1, 3), expansion=expansion, transformer_dims=dims,
                           num_features=features, summary=summary)


def _v2(multiplier: float, summary: str) -> MobileViTConfig:
    channels = tuple(int(width * multiplier) for width in (64, 128, 256, 384, 512))
    return MobileViTConfig(name=f"mobilevitv2_{round(multiplier * 100):03d}", version=2,
                           stem=int(32 * multiplier), stage_channels=channels,
                           stage_blocks=(1, 2), expansion=2.0,
                           transformer_dims=tuple(width // 2 for width in channels[2:]),
                           num_features=channels[-1], summary=summary)


# timm's ImageNet-1k top-1 of the `cvnets_in1k` weights, as its results tables report them.
VARIANTS = {config.name: config for config in (
    _v1("mobilevit_xxs", (16, 24, 48, 64, 80), 2.0, (64, 80, 96), 320, "v1 XXS, 1.3 M, 68.9%"),
    _v1("mobilevit_xs", (32, 48, 64, 80, 96), 4.0, (96, 120, 144), 384, "v1 XS, 2.3 M, 74.6%"),
    _v1("mobilevit_s", (32, 64, 96, 128, 160), 4.0, (144, 192, 240), 640, "v1 S, 5.6 M, 78.3%"),
    _v2(0.5, "v2 0.5, 1.4 M, 70.2%"), _v2(0.75, "v2 0.75, 2.9 M, 75.6%"),
    _v2(1.0, "v2 1.0, 4.9 M, 78.1%"), _v2(1.25, "v2 1.25, 7.5 M, 79.7%"),
    _v2(1.5, "v2 1.5, 10.6 M, 80.4%"), _v2(1.75, "v2 1.75, 14.3 M, 80.9%"),
    _v2(2.0, "v2 2.0, 18.4 M, 81.2%"),
)}
# The tag of timm's released weights of every variant ('mobilevit_xs.cvnets_in1k'), and the
# weights argument that fetches them.
WEIGHTS_TAG = "cvnets_in1k"
PRETRAINED = "pretrained"
SHORT_NAMES = {"xxs": "mobilevit_xxs", "xs": "mobilevit_xs", "s": "mobilevit_s",
               **{f"v2-{name[-3:]}": name for name in VARIANTS if name.startswith("mobilevitv2")}}

# timm's pretrained configs: RGB scaled to [0, 1] (mean 0, std 1), bicubic, centre crop.
PREPROCESSING = {
    1: Preprocessing(mean=0.0, std=1.0, interpolation="bicubic", crop_fraction=0.9,
                     crop_mode="center"),
    2: Preprocessing(mean=0.0, std=1.0, interpolation="bicubic", crop_fraction=0.888,
                     crop_mode="center"),
}


def timm_name(name: str) -> str | None:
    """The variant a timm name spells.

    Args:
        name: with or without its weights' tag: 'mobilevit_xs', 'mobilevit_xs.cvnets_in1k'.

    Returns:
        The variant ('mobilevit_xs'), or None for any other name.
    """
    variant, dot, tag = name.partition(".")
    return variant if variant in VARIANTS and (not dot or tag == WEIGHTS_TAG) else None


def get_config(name: str, **changes) -> MobileViTConfig:
    """The variant `name` (timm's, tagged or not, or a short one: 'xs', 'v2-100'), with
    `changes`.

    Raises:
        ValueError: an unknown name, listing the known ones.
    """
    config = VARIANTS.get(SHORT_NAMES.get(name) or timm_name(name) or name)
    if config is None:
        raise ValueError(f"unknown MobileViT {name!r}; expected one of {sorted(VARIANTS)} or "
                         f"{sorted(SHORT_NAMES)}")
    return config.replace(**changes)
