"""`MobileViT`: the functional Keras model of a `MobileViTConfig`, computing as timm's.

Layers are named after timm's modules ('stages.2.1.conv_kxk.conv' -> 'stages_2_1_conv_kxk_conv'),
so a timm state dict maps onto them by name (`vit_keras.mobilevit.weights`). Every 3x3
convolution pads one pixel on each side, also at stride 2 (timm's symmetric padding, which
Keras' 'same' is not on even sides); norms use PyTorch's epsilon, 1e-5.
"""

from __future__ import annotations

import keras

from vit_keras.config import ViTConfig
from vit_keras.core.initializers import PACKAGE
from vit_keras.core.layers import EncoderBlock
from vit_keras.core.model import ConfiguredModel
from vit_keras.core.normalization import GroupNorm, LayerNorm
from vit_keras.mobilevit.config import HEADS, PATCH, MobileViTConfig, \
    get_config, make_divisible
from vit_keras.mobilevit.layers import BilinearResize, FoldPatches, LinearSelfAttention, \
    UnfoldPatches
from vit_keras.preprocessing import Preprocessing

EPSILON = 1e-5


def _name(module: str) -> str:
    return module.replace(".", "_")


def conv_norm_act(x, filters: int, kernel: int, stride: int, module: str, act: bool = True,
                  depthwise: bool = False):
    """timm's ConvNormAct: a bias-free convolution, batch norm, SiLU."""
    if kernel > 1 and stride > 1:
        x = keras.layers.ZeroPadding2D(kernel // 2, name=_name(module) + "_pad")(x)
    padding = "same" if stride == 1 else "valid"
    if depthwise:
        x = keras.layers.DepthwiseConv2D(kernel, stride, padding, use_bias=False,
                                         name=_name(module + ".conv"))(x)
    else:
        x = keras.layers.Conv2D(filters, kernel, stride, padding, use_bias=False,
                                name=_name(module + ".conv"))(x)
    x = keras.layers.BatchNormalization(epsilon=EPSILON, momentum=0.9,
                                        name=_name(module + ".bn"))(x)
    return keras.layers.Activation("silu", name=_name(module) + "_act")(x) if act else x


def inverted_residual(x, filters: int, stride: int, expansion: float, module: str):
    """MobileNetV2's block: 1x1 expand, 3x3 depthwise (the stride), linear 1x1 project; the
    input added where the shape is kept."""
    width = x.shape[-1]
    hidden = conv_norm_act(x, make_divisible(width * expansion), 1, 1, module + ".conv1_1x1")
    hidden = conv_norm_act(hidden, 0, 3, stride, module + ".conv2_kxk", depthwise=True)
    hidden = conv_norm_act(hidden, filters, 1, 1, module + ".conv3_1x1", act=False)
    if stride == 1 and width == filters:
        return keras.layers.Add(name=_name(module) + "_add")([x, hidden])
    return hidden


def _even(side: int) -> int:
    return -(-side // PATCH) * PATCH


def mobilevit_block(x, dim: int, depth: int, module: str):
    """v1's block: local 3x3 and 1x1, a transformer over the 2x2 patches' pixel sequences,
    fold, 1x1 back, fused with the block's input by a 3x3."""
    _, height, width, channels = x.shape
    shortcut = x
    x = conv_norm_act(x, channels, 3, 1, module + ".conv_kxk")
    x = keras.layers.Conv2D(dim, 1, use_bias=False, name=_name(module + ".conv_1x1"))(x)
    even = (_even(height), _even(width))
    if even != (height, width):
        x = BilinearResize(*even, name=_name(module) + "_resize_up")(x)
    tokens = UnfoldPatches(PATCH, separate_places=True, name=_name(module) + "_unfold")(x)
    for index in range(depth):
        tokens = EncoderBlock(HEADS, 2 * dim, activation="silu", layer_norm_epsilon=EPSILON,
                              name=_name(f"{module}.transformer.{index}"))(tokens)
    tokens = LayerNorm(epsilon=EPSILON, name=_name(module + ".norm"))(
        tokens)
    x = FoldPatches(*even, PATCH, name=_name(module) + "_fold")(tokens)
    if even != (height, width):
        x = BilinearResize(height, width, name=_name(module) + "_resize_back")(x)
    x = conv_norm_act(x, channels, 1, 1, module + ".conv_proj")
    x = keras.layers.Concatenate(name=_name(module) + "_concat")([shortcut, x])
    return conv_norm_act(x, channels, 3, 1, module + ".conv_fusion")


def linear_transformer_block(tokens, module: str):
    """v2's pre-norm block on [B, P, N, C]: one-group norms, separable attention, SiLU MLP."""
    dim = tokens.shape[-1]

    def norm(name):
        return GroupNorm(groups=1, epsilon=EPSILON,
                                               name=_name(f"{module}.{name}"))

    attended = LinearSelfAttention(name=_name(module + ".attn"))(norm("norm1")(tokens))
    tokens = keras.layers.Add(name=_name(module) + "_add_attn")([tokens, attended])
    hidden = keras.layers.Dense(2 * dim, activation="silu",
                                name=_name(module + ".mlp.fc1"))(norm("norm2")(tokens))
    hidden = keras.layers.Dense(dim, name=_name(module + ".mlp.fc2"))(hidden)
    return keras.layers.Add(name=_name(module) + "_add_mlp")([tokens, hidden])


def mobilevit_v2_block(x, dim: int, depth: int, module: str):
    """v2's block: depthwise 3x3 and 1x1, linear-attention blocks over the patches, fold,
    linear 1x1 back; a map of odd side is first resized up (corners aligned) and stays so."""
    _, height, width, channels = x.shape
    even = (_even(height), _even(width))
    if even != (height, width):
        x = BilinearResize(*even, align_corners=True, name=_name(module) + "_resize_up")(x)
    x = conv_norm_act(x, channels, 3, 1, module + ".conv_kxk", depthwise=True)
    x = keras.layers.Conv2D(dim, 1, use_bias=False, name=_name(module + ".conv_1x1"))(x)
    tokens = UnfoldPatches(PATCH, name=_name(module) + "_unfold")(x)
    for index in range(depth):
        tokens = linear_transformer_block(tokens, f"{module}.transformer.{index}")
    tokens = GroupNorm(groups=1, epsilon=EPSILON,
                                             name=_name(module + ".norm"))(tokens)
    x = FoldPatches(*even, PATCH, name=_name(module) + "_fold")(tokens)
    return conv_norm_act(x, channels, 1, 1, module + ".conv_proj", act=False)


def _features(config: MobileViTConfig, images):
    """The stem and the five stages; returns (the last map, every stage's map)."""
    x = conv_norm_act(images, config.stem, 3, 2, "stem")
    stages = []
    for stage, filters in enumerate(config.stage_channels):
        count = config.stage_blocks[stage] if stage < 2 else 1
        for index in range(count):
            stride = 2 if stage > 0 and index == 0 else 1
            x = inverted_residual(x, filters, stride, config.expansion,
                                  f"stages.{stage}.{index}")
        if stage >= 2:
            dim, depth = (config.transformer_dims[stage - 2],
                          config.transformer_depths[stage - 2])
            block = mobilevit_block if config.version == 1 else mobilevit_v2_block
            x = block(x, dim, depth, f"stages.{stage}.1")
        stages.append(x)
    if config.version == 1:
        x = conv_norm_act(x, config.num_features, 1, 1, "final_conv")
    return x, stages


@keras.saving.register_keras_serializable(package=PACKAGE)
class MobileViT(ConfiguredModel, keras.Model):
    """MobileViT v1 or v2: images [batch, H, W, 3] in [0, 1] (`preprocessing`) -> logits
    [batch, classes], or the pooled features without a head.

    Args:
        config: a `MobileViTConfig` (or its `to_dict()`), e.g. `get_config('mobilevit_xs')`;
            or a `ViTConfig` whose `architecture` names the variant (its image size and
            classes taken), as `vit train --model mobilevit_xs` makes.
        include_top: with the classifier head (default True, when `config.num_classes`).
        name: model name; default `config.name`.
        preprocessing: how images become inputs (default: timm's pretrained config of the
            version: [0, 1], bicubic, centre crop 0.9 / 0.888).

    Attributes:
        config: the `ViTConfig` of the application (`architecture`, `image_size`,
            `num_classes`), which `vit` commands read of every model they load.
        mobilevit_config: the `MobileViTConfig` built.
        stage_outputs: the names of the five stages' last layers, whose outputs are the
            feature maps at strides 2, 4, 8, 16 and 32 (`feature_model`).
    """

    def __init__(self, config, include_top: bool = True, name: str | None = None,
                 preprocessing=None, **kwargs):
        if isinstance(config, dict):
            config = MobileViTConfig.from_dict(config)
        if isinstance(config, ViTConfig):
            config = get_config(config.architecture, image_size=config.image_hw[0],
                                num_classes=config.num_classes)
        images = keras.Input((config.image_size, config.image_size, 3), name="images")
        features, stages = _features(config, images)
        outputs = keras.layers.GlobalAveragePooling2D(name="head_pool")(features)
        top = include_top and config.num_classes > 0
        if top:
            # float32 under a mixed-precision policy: the logits stay float32
            outputs = keras.layers.Dense(config.num_classes, name="head_fc",
                                         dtype="float32")(outputs)
        super().__init__(images, outputs, name=name or config.name, **kwargs)
        self.mobilevit_config, self.include_top = config, top
        self._vit_config = ViTConfig(architecture=config.name, image_size=config.image_size,
                                     num_classes=max(config.num_classes, 1))
        # Under the name every export and command reads (`preprocessing_of`).
        self.vit_preprocessing = Preprocessing.from_dict(preprocessing) if preprocessing \
            else config.preprocessing
        self.stage_outputs = [tensor._keras_history[0].name for tensor in stages]

    def head_layers(self) -> list:
        """The layers `vit train --set finetune.mode=head` trains: the classifier."""
        return [self.get_layer("head_fc")] if self.include_top else []

    def feature_model(self) -> keras.Model:
        """A model of the same layers giving the five stages' maps (strides 2 to 32), for a
        segmenter or detector built on it."""
        return keras.Model(self.inputs[0], [self.get_layer(name).output
                                          for name in self.stage_outputs])

    def get_config(self):
        return {"config": self.mobilevit_config.to_dict(), "include_top": self.include_top,
                "name": self.name, "preprocessing": self.preprocessing.to_dict(),
                "trainable": self.trainable}
