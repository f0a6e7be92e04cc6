"""The hybrid's token source: a BiT-style ResNet (group norm + weight standardisation).

As the official `vit_jax/models_resnet.py`: a root (7x7/2 weight-standardised conv, GroupNorm,
ReLU, 3x3/2 max pool) and bottleneck stages of units conv1 1x1 -> conv2 3x3 (carries the
stride) -> conv3 1x1 (4x width), each followed by a 32-group GroupNorm, with a projection
shortcut `conv_proj`/`gn_proj` where the shape changes. Stage i has 64 * width * 2**i
bottleneck channels; the first stage has stride 1, the others 2.

Sub-layer names follow the official checkpoint keys (`conv_root`, `gn_root`,
`block1_unit1/conv1` for `block1/unit1/conv1`, ...).
"""

import keras
from keras import ops

from vit_keras.core.initializers import PACKAGE
from vit_keras.core.normalization import GroupNorm

GROUPS = 32
GROUP_NORM_EPSILON = 1e-6   # flax.linen.GroupNorm's default, used by the official model
STANDARDIZE_EPSILON = 1e-5  # official weight_standardize: (w - mean) / (std + eps)


def _group_norm(name, policy, zero_scale=False):
    return GroupNorm(
        groups=GROUPS, epsilon=GROUP_NORM_EPSILON, name=name, dtype=policy,
        gamma_initializer="zeros" if zero_scale else "ones")


@keras.saving.register_keras_serializable(package=PACKAGE)
class StdConv(keras.layers.Layer):
    """A bias-free convolution whose kernel is standardised over (H, W, in) at every call.

    Args:
        filters: output channels.
        kernel_size: square kernel side.
        strides: square stride.
    """

    def __init__(self, filters, kernel_size, strides=1, **kwargs):
        super().__init__(**kwargs)
        self.filters = filters
        self.kernel_size = kernel_size
        self.strides = strides

    def build(self, input_shape):
        self.kernel = self.add_weight(
            name="kernel", shape=(self.kernel_size, self.kernel_size, input_shape[-1],
                                  self.filters), initializer="he_normal")

    def standardized_kernel(self):
        """The kernel as the convolution uses it: zero mean, unit std per output channel."""
        kernel = ops.cast(self.kernel, "float32")
        mean = ops.mean(kernel, axis=(0, 1, 2), keepdims=True)
        std = ops.std(kernel, axis=(0, 1, 2), keepdims=True)
        return (kernel - mean) / (std + STANDARDIZE_EPSILON)

    def call(self, inputs):
        kernel = ops.cast(self.standardized_kernel(), inputs.dtype)
        return ops.conv(inputs, kernel, strides=self.strides, padding="same")

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = input_shape

        def side(size):
            return None if size is None else -(-size // self.strides)

        return (batch, side(height), side(width), self.filters)

    def get_config(self):
        config = super().get_config()
        config.update(filters=self.filters, kernel_size=self.kernel_size, strides=self.strides)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class ResidualUnit(keras.layers.Layer):
    """Bottleneck unit (post-activation, stride in the 3x3 conv), as the official model.

    Args:
        features: bottleneck width; the unit outputs 4 * features channels.
        strides: stride of conv2 and of the projection shortcut.
    """

    def __init__(self, features, strides=1, **kwargs):
        super().__init__(**kwargs)
        self.features = features
        self.strides = strides
        policy = self.dtype_policy
        self.conv1 = StdConv(features, 1, name="conv1", dtype=policy)
        self.gn1 = _group_norm("gn1", policy)
        self.conv2 = StdConv(features, 3, strides, name="conv2", dtype=policy)
        self.gn2 = _group_norm("gn2", policy)
        self.conv3 = StdConv(4 * features, 1, name="conv3", dtype=policy)
        self.gn3 = _group_norm("gn3", policy, zero_scale=True)
        self.conv_proj = self.gn_proj = None

    def build(self, input_shape):
        if input_shape[-1] != 4 * self.features or self.strides != 1:
            self.conv_proj = StdConv(4 * self.features, 1, self.strides, name="conv_proj",
                                     dtype=self.dtype_policy)
            self.gn_proj = _group_norm("gn_proj", self.dtype_policy)
            self.conv_proj.build(input_shape)
            self.gn_proj.build(self.conv_proj.compute_output_shape(input_shape))
        shape = input_shape
        for conv, norm in ((self.conv1, self.gn1), (self.conv2, self.gn2),
                           (self.conv3, self.gn3)):
            conv.build(shape)
            shape = conv.compute_output_shape(shape)
            norm.build(shape)

    def call(self, inputs):
        residual = inputs
        if self.conv_proj is not None:
            residual = self.gn_proj(self.conv_proj(inputs))
        hidden = ops.relu(self.gn1(self.conv1(inputs)))
        hidden = ops.relu(self.gn2(self.conv2(hidden)))
        hidden = self.gn3(self.conv3(hidden))
        return ops.relu(residual + hidden)

    def compute_output_shape(self, input_shape):
        return self.conv2.compute_output_shape(input_shape)[:-1] + (4 * self.features,)

    def get_config(self):
        config = super().get_config()
        config.update(features=self.features, strides=self.strides)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class ResNetStem(keras.layers.Layer):
    """Images -> the hybrid's feature map: root, then `len(block_counts)` bottleneck stages.

    Args:
        block_counts: units per stage, e.g. (3, 4, 9) for R50+ViT-B/16; () for the root alone.
        width_factor: multiplies every width (root: 64 * width_factor channels).
    """

    def __init__(self, block_counts=(), width_factor=1, **kwargs):
        super().__init__(**kwargs)
        self.block_counts = tuple(int(n) for n in block_counts)
        self.width_factor = width_factor
        policy = self.dtype_policy
        width = 64 * width_factor
        self.conv_root = StdConv(width, 7, 2, name="conv_root", dtype=policy)
        self.gn_root = _group_norm("gn_root", policy)
        self.pool = keras.layers.MaxPooling2D(3, 2, padding="same", dtype=policy)
        self.stages = []
        for stage, count in enumerate(self.block_counts):
            self.stages.append([
                ResidualUnit(width * 2 ** stage, strides=2 if stage and not unit else 1,
                             name=f"block{stage + 1}_unit{unit + 1}", dtype=policy)
                for unit in range(count)])

    @property
    def stride(self) -> int:
        return 4 * 2 ** max(len(self.block_counts) - 1, 0)

    @property
    def output_channels(self) -> int:
        width = 64 * self.width_factor
        return width if not self.block_counts else 4 * width * 2 ** (len(self.block_counts) - 1)

    def units(self):
        """All residual units in order."""
        return [unit for stage in self.stages for unit in stage]

    def build(self, input_shape):
        self.conv_root.build(input_shape)
        shape = self.conv_root.compute_output_shape(input_shape)
        self.gn_root.build(shape)
        shape = self.pool.compute_output_shape(shape)
        for unit in self.units():
            unit.build(shape)
            shape = unit.compute_output_shape(shape)

    def call(self, images):
        features = ops.relu(self.gn_root(self.conv_root(images)))
        features = self.pool(features)
        for unit in self.units():
            features = unit(features)
        return features

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = input_shape

        def side(size):
            return None if size is None else -(-size // self.stride)

        return (batch, side(height), side(width), self.output_channels)

    def get_config(self):
        config = super().get_config()
        config.update(block_counts=list(self.block_counts), width_factor=self.width_factor)
        return config
