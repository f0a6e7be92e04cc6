"""ViT hyper-parameters (`ViTConfig`) and the official variant table (`VARIANTS`).

The field names follow the official `vit_jax/configs/models.py` vocabulary so that a config from
the paper, the AugReg release or big_vision reads the same here.
"""

from __future__ import annotations

import dataclasses
import numbers
from typing import Any

from vit_keras.mobilevit.config import MIN_IMAGE_SIZE as MOBILEVIT_MIN_SIZE
from vit_keras.mobilevit.config import VARIANTS as MOBILEVIT_VARIANTS
from vit_keras.preprocessing import Preprocessing

CLASSIFIERS = ("token", "gap", "map")
POSEMB_KINDS = ("learn", "sincos2d", "learn2d")
STEMS = ("patchify", "conv", "shifted_patches")
ACTIVATIONS = ("gelu", "quick_gelu", "swiglu", "silu")
# The fields a variant name ('B/16', 'R50+B/16') fixes: the shape of the network. The others
# (image size, classes, pooling, regularisation, extras) are choices made around a variant.
ARCHITECTURE_FIELDS = ("patch_size", "hidden_size", "mlp_dim", "num_heads", "num_layers",
                       "resnet_layers", "resnet_width", "stem", "locality_attention",
                       "activation", "pre_norm", "pooled_norm", "layer_norm_epsilon")
RESNET_STEM_STRIDE = 4  # the hybrid's root: a stride-2 conv, then a stride-2 max pool
# The classification head's own fields (`VisionTransformer`'s, on the pooled vector): a task's
# head on the encoder (`vit_keras.task_encoder`) is configured by its own arguments and keeps
# none of them (`ViTConfig.encoder`).
CLASSIFIER_HEAD_FIELDS = ("representation_size", "head_bias_init", "projection_size")


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
        resnet_layers: hybrid models only: bottleneck units per stage of the BiT-style ResNet
            whose feature map replaces the image as the patch source ((3, 4, 9) for R50+ViT-B/16,
            () for the stem alone); None (default) = a plain ViT. `patch_size` then counts
            feature-map pixels, as in the official configs.
        resnet_width: width factor of that ResNet (64 * width channels in the root).
        drop_path_rate: stochastic depth: block i drops its residual branches with probability
            rate * i / (num_layers - 1) during training (identity at inference); 0 = off.
        posemb: 'learn' (official 1-D learned), 'sincos2d' (fixed 2-D sine-cosine, big_vision)
            or 'learn2d' (learned row and column embeddings of D/2 each, concatenated: the
            paper's 2-D ablation). The 2-D kinds are added to the patch tokens only.
        layer_scale_init: initial value of a learned per-channel scale on each residual branch
            (CaiT "LayerScale"); None = off.
        num_register_tokens: extra learned tokens appended to the sequence and discarded at
            the output ("Vision Transformers Need Registers"); 0 = off.
        distilled: DeiT: a distillation token after the class token with its own head
            `head_dist`; the model returns the average of both heads. Needs classifier='token'.
        dynamic_image_size: the model takes images of any size, (None, None, channels): the
            patch grid is read from each input and the position embeddings are resampled to it
            at call time (skipped at `image_size`, which stays the size the position
            embeddings are stored at). Sides must be multiples of the patch size (for a
            hybrid: the ResNet feature map's sides).
        dynamic_image_pad: with `dynamic_image_size`: pad images (a hybrid: its feature map)
            on the bottom and right up to the next multiple of the patch size instead of
            rejecting them (timm's `dynamic_img_pad`).
        patch_drop_rate: patch dropout (timm's `PatchDropout`): during training each image
            keeps a random `max(1, int(num_patches * (1 - rate)))` of its patch tokens (the
            class and distillation tokens always), which shortens the sequence every block
            sees; identity at inference. In [0, 1); 0 = off, no extra layer.
        remat: rematerialise each encoder block in training (gradient checkpointing): its
            activations are recomputed in the backward pass instead of kept (the blocks'
            forward pass runs twice), trading compute for memory. Same outputs and gradients,
            dropout included. 'dots': on JAX, keep the outputs of the projections and the MLP
            and recompute only what lies between them (LayerNorm, GELU, attention logits and
            softmax); other backends then rematerialise the whole block.
        stem: how pixels become patch tokens. 'patchify' (official): one linear projection of
            each PxP patch. 'conv': Xiao et al. 2021 ("Early Convolutions Help Transformers See
            Better"): log2(P) 3x3 stride-2 convolutions with BatchNorm and ReLU, widths
            doubling up to D (D/8, D/4, D/2, D for P=16), then a 1x1 convolution to D; P must
            be a power of two >= 2. 'shifted_patches': shifted patch tokenization (Lee et al.
            2021, "Vision Transformer for Small-Size Datasets"): the image and its four
            diagonal shifts by P/2 are concatenated along channels, each patch of the five is
            flattened, layer-normed and projected to D; P must be even. The two locality stems
            need a plain ViT (no `resnet_layers`).
        locality_attention: locality self-attention (Lee et al. 2021): every block's
            attention has a learned temperature per head (initialised to 1/sqrt(head_dim),
            replacing the fixed scale) and masks each token's attention to itself.
        activation: the MLP's nonlinearity: 'gelu' (official; tanh-approximated unless
            `gelu_approximate` is False), 'quick_gelu' (OpenAI CLIP: x * sigmoid(1.702 x)) or
            'swiglu' (DINOv2-g: SiLU(a) * b over the two halves of the first projection, so
            `mlp_dim` is their packed width, timm's `SwiGLUPacked`) or 'silu' (x * sigmoid(x),
            MobileViT's transformers).
        pre_norm: a LayerNorm on the tokens before the first block (CLIP's `ln_pre`, timm's
            `norm_pre`).
        pooled_norm: the final LayerNorm normalises the pooled vector instead of every token
            (timm's `fc_norm`, e.g. for mean pooling); the token outputs are then un-normed.
        layer_norm_epsilon: of every LayerNorm (1e-6 official; 1e-5 in OpenAI CLIP).
        projection_size: a bias-free linear projection of the pooled vector to this width
            (CLIP's image projection, named `projection`); None = none.
        architecture: the network: 'vit' (default: the transformer these fields describe)
            or a MobileViT variant of timm ('mobilevit_xs', 'mobilevitv2_100', ...; the
            table is `vit_keras.mobilevit.config.VARIANTS`), a convolutional network for
            phones whose shape its name fixes: of this config it reads only `image_size`
            (square, at least 32) and `num_classes`.

    How images become the model's inputs is not part of the architecture: the model carries
    its `vit_keras.preprocessing.Preprocessing` beside its config (`model.preprocessing`).
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
    resnet_layers: tuple[int, ...] | None = None
    resnet_width: int = 1
    drop_path_rate: float = 0.0
    posemb: str = "learn"
    layer_scale_init: float | None = None
    num_register_tokens: int = 0
    distilled: bool = False
    dynamic_image_size: bool = False
    dynamic_image_pad: bool = False
    patch_drop_rate: float = 0.0
    remat: bool | str = False
    stem: str = "patchify"
    locality_attention: bool = False
    activation: str = "gelu"
    pre_norm: bool = False
    pooled_norm: bool = False
    layer_norm_epsilon: float = 1e-6
    projection_size: int | None = None
    architecture: str = "vit"

    def __post_init__(self):
        hw = _as_hw(self.image_size)
        object.__setattr__(self, "image_size", hw[0] if hw[0] == hw[1] else hw)
        if self.resnet_layers is not None:
            object.__setattr__(self, "resnet_layers", _as_block_counts(self.resnet_layers))
        self._check_positive_ints()
        self._check_architecture(hw)
        if self.architecture == "vit":
            self._check_divisibility(hw)
        if self.classifier not in CLASSIFIERS:
            raise ValueError(
                f"classifier must be one of {CLASSIFIERS}, got {self.classifier!r}"
            )
        for name in ("dropout_rate", "attention_dropout_rate", "drop_path_rate",
                     "patch_drop_rate"):
            rate = getattr(self, name)
            if isinstance(rate, bool) or not isinstance(rate, numbers.Real) or \
                    not 0.0 <= rate < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {rate!r}")
        self._check_options()

    def _check_options(self):
        if self.posemb not in POSEMB_KINDS:
            raise ValueError(f"posemb must be one of {POSEMB_KINDS}, got {self.posemb!r}")
        if self.posemb == "sincos2d" and self.hidden_size % 4:
            raise ValueError(f"posemb='sincos2d' needs hidden_size divisible by 4, got "
                             f"{self.hidden_size}")
        if self.posemb == "learn2d" and self.hidden_size % 2:
            raise ValueError(f"posemb='learn2d' needs an even hidden_size, got {self.hidden_size}")
        if isinstance(self.num_register_tokens, bool) or not isinstance(
                self.num_register_tokens, int) or self.num_register_tokens < 0:
            raise ValueError(f"num_register_tokens must be an int >= 0, got "
                             f"{self.num_register_tokens!r}")
        if self.layer_scale_init is not None and not isinstance(self.layer_scale_init,
                                                                (int, float)):
            raise ValueError(f"layer_scale_init must be None or a number, got "
                             f"{self.layer_scale_init!r}")
        if self.distilled and (self.classifier != "token" or self.representation_size):
            raise ValueError("distilled=True needs classifier='token' and no representation_size, "
                             f"got classifier={self.classifier!r}, representation_size="
                             f"{self.representation_size!r}")
        if not (isinstance(self.remat, bool) or self.remat == "dots"):
            raise ValueError(f"remat must be True, False or 'dots', got {self.remat!r}")
        for name in ("locality_attention", "pre_norm", "pooled_norm"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        self._check_stem()
        self._check_families()
        if self.dynamic_image_pad and not self.dynamic_image_size:
            raise ValueError("dynamic_image_pad=True needs dynamic_image_size=True (a fixed-size "
                             "model has nothing to pad)")

    def _check_architecture(self, hw):
        if self.architecture == "vit":
            return
        if self.architecture not in MOBILEVIT_VARIANTS:
            raise ValueError(f"architecture must be 'vit' or a MobileViT variant "
                             f"({', '.join(MOBILEVIT_VARIANTS)}), got {self.architecture!r}")
        if hw[0] != hw[1] or hw[0] < MOBILEVIT_MIN_SIZE:
            raise ValueError(f"a MobileViT takes square images of at least "
                             f"{MOBILEVIT_MIN_SIZE} px (five stride-2 stages), got image_size "
                             f"{self.image_size!r}")

    def _check_families(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.activation == "swiglu" and self.mlp_dim % 2:
            raise ValueError(f"activation='swiglu' splits the MLP's first projection in two "
                             f"halves: expected an even mlp_dim, got {self.mlp_dim}")
        epsilon = self.layer_norm_epsilon
        if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or \
                not 0.0 < epsilon < 1.0:
            raise ValueError(f"layer_norm_epsilon must be in (0, 1), got {epsilon!r}")

    def _check_stem(self):
        if self.stem not in STEMS:
            raise ValueError(f"stem must be one of {STEMS}, got {self.stem!r}")
        if self.stem == "patchify":
            return
        if self.resnet_layers is not None:
            raise ValueError(f"stem={self.stem!r} replaces the patch projection of a plain ViT; "
                             f"a hybrid (resnet_layers={self.resnet_layers!r}) has its ResNet")
        patch = self.patch_size
        if self.stem == "conv":
            convs = patch.bit_length() - 1
            if patch < 2 or patch & (patch - 1):
                raise ValueError(f"stem='conv' needs a patch_size that is a power of two >= 2 "
                                 f"(one stride-2 convolution per halving), got {patch}")
            if self.hidden_size % 2 ** (convs - 1):
                raise ValueError(f"stem='conv' with patch_size {patch} halves hidden_size "
                                 f"{convs - 1} times for its first convolutions: expected a "
                                 f"multiple of {2 ** (convs - 1)}, got {self.hidden_size}")
        elif patch % 2:
            raise ValueError(f"stem='shifted_patches' shifts by half a patch: expected an even "
                             f"patch_size, got {patch}")

    def _check_positive_ints(self):
        names = ["patch_size", "hidden_size", "mlp_dim", "num_heads", "num_layers",
                 "num_classes", "channels", "resnet_width"]
        for optional in ("representation_size", "projection_size"):
            if getattr(self, optional) is not None:
                names.append(optional)
        for name in names:
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        for side in self.image_hw:
            if side < 1:
                raise ValueError(f"image_size must be positive, got {self.image_size!r}")

    def _check_divisibility(self, hw):
        step = self.patch_step
        if hw[0] % step or hw[1] % step:
            what = (f"patch_size {self.patch_size}" if self.resnet_stride == 1 else
                    f"patch_size {self.patch_size} x ResNet stride {self.resnet_stride}")
            raise ValueError(
                f"image_size {hw[0]}x{hw[1]} is not divisible by {what}: "
                f"expected both sides to be multiples of {step}"
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
    def resnet_stride(self) -> int:
        """Down-scaling of the hybrid's ResNet (1 for a plain ViT)."""
        return resnet_stride(self.resnet_layers)

    @property
    def grid_size(self) -> tuple[int, int]:
        """Patch grid (rows, columns)."""
        height, width = self.image_hw
        return (height // self.patch_step, width // self.patch_step)

    @property
    def patch_step(self) -> int:
        """Image pixels per patch side (the patch size times a hybrid's ResNet stride)."""
        return self.patch_size * self.resnet_stride

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: the class token and the distillation token."""
        return (1 if self.classifier == "token" else 0) + (1 if self.distilled else 0)

    @property
    def num_patches(self) -> int:
        """Number of patch tokens."""
        rows, cols = self.grid_size
        return rows * cols

    @property
    def seq_len(self) -> int:
        """Tokens seen by the encoder: patches, class/distillation tokens and registers."""
        return self.num_patches + self.num_prefix_tokens + self.num_register_tokens

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

    def encoder(self) -> "ViTConfig":
        """This config without the classification head's own fields
        (`CLASSIFIER_HEAD_FIELDS`, at their defaults): the encoder a task's head sits on.
        `num_classes` stays: the classes the task's head predicts."""
        return self.replace(**{field.name: field.default for field in dataclasses.fields(self)
                               if field.name in CLASSIFIER_HEAD_FIELDS})

    def to_dict(self) -> dict:
        """A JSON-friendly dict; `ViTConfig.from_dict` inverts it."""
        data = dataclasses.asdict(self)
        if data["architecture"] == "vit":  # files of the transformer read as they always did
            del data["architecture"]
        for name in ("image_size", "resnet_layers"):
            if isinstance(data[name], tuple):
                data[name] = list(data[name])
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "ViTConfig":
        """Builds a config from `to_dict` output, rejecting unknown keys."""
        fields = {f.name for f in dataclasses.fields(cls)}
        if "preprocessing" in data:
            raise ValueError("'preprocessing' is not a ViTConfig field: the model carries it "
                             "(VisionTransformer(config, preprocessing=...)); split a dict "
                             "written by release 0.2 with vit_keras.config.split_preprocessing")
        unknown = sorted(set(data) - fields)
        if unknown:
            raise ValueError(f"unknown ViTConfig field(s) {unknown}; expected some of {sorted(fields)}")
        return cls(**data)


def split_preprocessing(data: dict) -> tuple[dict, Preprocessing | None]:
    """A config dict written by release 0.2, which kept the preprocessing inside the
    `ViTConfig`, split in two.

    Args:
        data: a `ViTConfig.to_dict()`, of this release or of 0.2.

    Returns:
        (the dict without 'preprocessing', its `Preprocessing`, or None when it had none).
    """
    data = dict(data)
    recorded = data.pop("preprocessing", None)
    return data, None if recorded is None else Preprocessing.from_dict(recorded)


def resnet_stride(resnet_layers) -> int:
    """Down-scaling of a hybrid's ResNet with these stage sizes (1 for None, a plain ViT)."""
    if resnet_layers is None:
        return 1
    return RESNET_STEM_STRIDE * 2 ** max(len(resnet_layers) - 1, 0)


def _as_block_counts(layers: Any) -> tuple[int, ...]:
    """Normalises the hybrid's ResNet stage sizes to a tuple of positive ints."""
    try:
        counts = tuple(layers)
    except TypeError:
        counts = None
    if counts is None or any(isinstance(n, bool) or not isinstance(n, int) or n < 1
                             for n in counts):
        raise ValueError(f"resnet_layers must be None or a sequence of positive ints "
                         f"(units per stage), got {layers!r}")
    return counts


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

# The official hybrids (vit_jax/configs/models.py): a BiT-style ResNet's feature map is the
# token source. Kept apart from VARIANTS, whose entries are all plain ViTs.
HYBRID_VARIANTS: dict[str, ViTConfig] = {
    "R+Ti/16": _variant(192, 768, 3, 12, 8, resnet_layers=()),
    "R26+S/32": _variant(384, 1536, 6, 12, 1, resnet_layers=(2, 2, 2, 2)),
    "R26+B/32": _variant(768, 3072, 12, 12, 1, resnet_layers=(2, 2, 2, 2)),
    "R50+B/16": _variant(768, 3072, 12, 12, 1, resnet_layers=(3, 4, 9), dropout_rate=0.1),
    "R50+L/32": _variant(1024, 4096, 16, 24, 1, resnet_layers=(3, 4, 6, 3), dropout_rate=0.1),
}


def _canonical_name(name: str) -> str:
    """Maps 'ViT-B_16', 'B_16', 'vit-b/16', 'B16' to the VARIANTS key 'B/16' (and
    'R50+ViT-B_16' to 'R50+B/16')."""
    key = name.strip()
    for prefix in ("ViT-", "vit-", "VIT-", "vit_", "ViT_"):
        key = key.replace("+" + prefix, "+")
        if key.startswith(prefix):
            key = key[len(prefix):]
    key = key.replace("_", "/")
    for candidate in (*VARIANTS, *HYBRID_VARIANTS):
        if key.lower() == candidate.lower() or key.lower() == candidate.replace("/", "").lower():
            return candidate
    return name


def get_variant(name: str, **overrides) -> ViTConfig:
    """Returns the config of a named variant, with optional field overrides.

    Args:
        name: a `VARIANTS` or `HYBRID_VARIANTS` key ('B/16', 'R50+B/16'); official spellings
            ('ViT-B_16', 'B_16', 'R50+ViT-B_16') also work.
        **overrides: `ViTConfig` fields to change (e.g. image_size=384, num_classes=10).

    Returns:
        The validated `ViTConfig`.
    """
    config = {**VARIANTS, **HYBRID_VARIANTS}[variant_name(name)]
    return config.replace(**overrides) if overrides else config


def variant_name(name: str) -> str:
    """The table key of a variant name in any official spelling ('ViT-B_16' -> 'B/16').

    Args:
        name: 'B/16', 'ViT-B_16', 'B_16', 'R50+ViT-B_16', ...

    Returns:
        The `VARIANTS` / `HYBRID_VARIANTS` key.

    Raises:
        ValueError: not a known variant.
    """
    key = _canonical_name(name)
    if key not in {**VARIANTS, **HYBRID_VARIANTS}:
        raise ValueError(f"unknown ViT variant {name!r}: expected one of "
                         f"{', '.join(user_variant_names())}, or a family model by timm's name "
                         "(`vit weights list`)")
    return key


def user_variant_names() -> list[str]:
    """The variant names a user picks from: the official ones without vit_jax's tiny
    'testing' config (which stays reachable by its name, for tests)."""
    return [name for name in (*VARIANTS, *HYBRID_VARIANTS) if name != "testing"]


def variant_of(config: ViTConfig) -> str | None:
    """The official variant whose architecture `config` has.

    Args:
        config: any config; only its `ARCHITECTURE_FIELDS` are compared (image size, classes
            and options may differ).

    Returns:
        'B/16', 'R50+B/16', ..., or None when no variant has this architecture.
    """
    def architecture(candidate: ViTConfig) -> tuple:
        return tuple(getattr(candidate, field) for field in ARCHITECTURE_FIELDS)

    for name, candidate in {**VARIANTS, **HYBRID_VARIANTS}.items():
        if architecture(candidate) == architecture(config):
            return name
    return None
