"""ViT hyper-parameters (`ViTConfig`) and the official variant table (`VARIANTS`).

The field names follow the official `vit_jax/configs/models.py` vocabulary so that a config from
the paper, the AugReg release or big_vision reads the same here.
"""

from __future__ import annotations

import dataclasses
from typing import Any

CLASSIFIERS = ("token", "gap")


def _as_hw(image_size: Any) -> tuple[int, int]:
    """Normalises an int or (h, w) pair to an (h, w) tuple of ints."""
    if isinstance(image_size, bool):
        raise ValueError(f"image_size must be an int or (height, width), got {image_size!r}")
    if isinstance(image_size, int):
        return (image_size, image_size)
    try:
        height, width = image_size
        if isinstance(height, bool) or isinstance(width, bool):
            raise TypeError
        return (int(height), int(width))
    except (TypeError, ValueError):
        raise ValueError(
            f"image_size must be an int or (height, width), got {image_size!r}"
        ) from None


@dataclasses.dataclass(frozen=True)
class ViTConfig:
    """Hyper-parameters of a Vision Transformer.

    Attributes:
        image_size: input resolution, an int (square) or (height, width).
        patch_size: side P of the square, non-overlapping patches.
        hidden_size: token width D.
        mlp_dim: hidden width M of each encoder block's MLP.
        num_heads: attention heads; must divide `hidden_size`.
        num_layers: number of encoder blocks.
        num_classes: outputs of the classification head.
        classifier: 'token' (class token, the official default) or 'gap' (mean of the tokens).
        representation_size: width of the optional `pre_logits` Dense+tanh layer, or None.
        dropout_rate: dropout after the position embeddings, in the MLPs and after attention.
        attention_dropout_rate: dropout on the attention probabilities.
        channels: image channels C.
        gelu_approximate: tanh-approximated GELU, as the official Flax model; False = exact erf.
        head_bias_init: constant initial value of the head bias (-10 was used for pre-training).
    """

    image_size: int | tuple[int, int] = 224
    patch_size: int = 16
    hidden_size: int = 768
    mlp_dim: int = 3072
    num_heads: int = 12
    num_layers: int = 12
    num_classes: int = 1000
    classifier: str = "token"
    representation_size: int | None = None
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    channels: int = 3
    gelu_approximate: bool = True
    head_bias_init: float = 0.0

    def __post_init__(self):
        hw = _as_hw(self.image_size)
        object.__setattr__(self, "image_size", hw[0] if hw[0] == hw[1] else hw)
        self._check_positive_ints()
        self._check_divisibility(hw)
        if self.classifier not in CLASSIFIERS:
            raise ValueError(
                f"classifier must be one of {CLASSIFIERS}, got {self.classifier!r}"
            )
        for name in ("dropout_rate", "attention_dropout_rate"):
            rate = getattr(self, name)
            if not 0.0 <= rate < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {rate!r}")

    def _check_positive_ints(self):
        names = ["patch_size", "hidden_size", "mlp_dim", "num_heads", "num_layers",
                 "num_classes", "channels"]
        if self.representation_size is not None:
            names.append("representation_size")
        for name in names:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        for side in self.image_hw:
            if side < 1:
                raise ValueError(f"image_size must be positive, got {self.image_size!r}")

    def _check_divisibility(self, hw):
        if hw[0] % self.patch_size or hw[1] % self.patch_size:
            raise ValueError(
                f"image_size {hw[0]}x{hw[1]} is not divisible by patch_size {self.patch_size}: "
                f"expected both sides to be multiples of {self.patch_size}"
            )
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_heads "
                f"{self.num_heads}: expected hidden_size = num_heads * head_dim"
            )

    @property
    def image_hw(self) -> tuple[int, int]:
        """Input resolution as (height, width)."""
        return _as_hw(self.image_size)

    @property
    def grid_size(self) -> tuple[int, int]:
        """Patch grid (rows, columns)."""
        height, width = self.image_hw
        return (height // self.patch_size, width // self.patch_size)

    @property
    def num_patches(self) -> int:
        """Number of patch tokens."""
        rows, cols = self.grid_size
        return rows * cols

    @property
    def seq_len(self) -> int:
        """Tokens seen by the encoder: patches plus the class token when present."""
        return self.num_patches + (1 if self.classifier == "token" else 0)

    @property
    def head_dim(self) -> int:
        """Width of each attention head."""
        return self.hidden_size // self.num_heads

    def replace(self, **changes) -> "ViTConfig":
        """Returns a copy with `changes` applied (and validated)."""
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ValueError(
                f"unknown ViTConfig field(s) {unknown}; expected some of "
                f"{[f.name for f in dataclasses.fields(self)]}"
            )
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """A JSON-friendly dict; `ViTConfig.from_dict` inverts it."""
        data = dataclasses.asdict(self)
        if isinstance(data["image_size"], tuple):
            data["image_size"] = list(data["image_size"])
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "ViTConfig":
        """Builds a config from `to_dict` output, rejecting unknown keys."""
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - fields)
        if unknown:
            raise ValueError(f"unknown ViTConfig field(s) {unknown}; expected some of {sorted(fields)}")
        return cls(**data)


def _variant(hidden, mlp, heads, layers, patch, **extra) -> ViTConfig:
    return ViTConfig(hidden_size=hidden, mlp_dim=mlp, num_heads=heads, num_layers=layers,
                     patch_size=patch, **extra)


# The official model configs (vit_jax/configs/models.py), 224 px, 1000 classes.
# Dropout rates are the official ones (0.1 for L/16 and H/14).
VARIANTS: dict[str, ViTConfig] = {
    "Ti/16": _variant(192, 768, 3, 12, 16),
    "S/16": _variant(384, 1536, 6, 12, 16),
    "S/32": _variant(384, 1536, 6, 12, 32),
    "B/8": _variant(768, 3072, 12, 12, 8),
    "B/16": _variant(768, 3072, 12, 12, 16),
    "B/32": _variant(768, 3072, 12, 12, 32),
    "L/16": _variant(1024, 4096, 16, 24, 16, dropout_rate=0.1),
    "L/32": _variant(1024, 4096, 16, 24, 32),
    "H/14": _variant(1280, 5120, 16, 32, 14, dropout_rate=0.1),
    "S/16-gap": _variant(384, 1536, 6, 12, 16, classifier="gap"),
    "S/32-gap": _variant(384, 1536, 6, 12, 32, classifier="gap"),
    "B/16-gap": _variant(768, 3072, 12, 12, 16, classifier="gap"),
    "B/32-gap": _variant(768, 3072, 12, 12, 32, classifier="gap"),
    "testing": _variant(10, 10, 2, 1, 16, dropout_rate=0.1),
}


def _canonical_name(name: str) -> str:
    """Maps 'ViT-B_16', 'B_16', 'vit-b/16', 'B16' to the VARIANTS key 'B/16'."""
    key = name.strip()
    for prefix in ("ViT-", "vit-", "VIT-", "vit_", "ViT_"):
        if key.startswith(prefix):
            key = key[len(prefix):]
    key = key.replace("_", "/")
    for candidate in VARIANTS:
        if key.lower() == candidate.lower() or key.lower() == candidate.replace("/", "").lower():
            return candidate
    return name


def get_variant(name: str, **overrides) -> ViTConfig:
    """Returns the config of a named variant, with optional field overrides.

    Args:
        name: a `VARIANTS` key ('B/16'); official spellings ('ViT-B_16', 'B_16') also work.
        **overrides: `ViTConfig` fields to change (e.g. image_size=384, num_classes=10).

    Returns:
        The validated `ViTConfig`.
    """
    key = _canonical_name(name)
    if key not in VARIANTS:
        raise ValueError(f"unknown ViT variant {name!r}; expected one of {sorted(VARIANTS)}")
    return VARIANTS[key].replace(**overrides) if overrides else VARIANTS[key]
