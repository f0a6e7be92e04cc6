"""Locality stems: patch embeddings that see across patch borders, for ViTs trained on small
data.

Both are `PatchEmbedding`s (same arguments, padding/size checks, grid or token outputs and
layer name `embedding`); only the pixels -> [batch, rows, cols, D] step differs. Their last
projection is a Keras `Dense` named `projection`, so `quantize` and `enable_lora` reach it.
"""

import keras
from keras import ops

from vit_keras.core.initializers import PACKAGE
from vit_keras.fast_paths import project
from vit_keras.core.layers import PatchEmbedding
from vit_keras.core.normalization import LayerNorm

# Xiao et al. train with pycls' BatchNorm (PyTorch momentum 0.1, epsilon 1e-5).
BATCH_NORM_MOMENTUM = 0.9
BATCH_NORM_EPSILON = 1e-5
# Lee et al.'s shifted patch tokenization normalises with PyTorch's LayerNorm default.
SHIFTED_PATCH_NORM_EPSILON = 1e-5


def conv_stem_widths(hidden_size: int, patch_size: int) -> list[int]:
    """Output widths of the conv stem's 3x3 stride-2 convolutions: one per halving of
    `patch_size`, doubling up to `hidden_size` (192, 16 -> [24, 48, 96, 192])."""
    convs = patch_size.bit_length() - 1
    return [hidden_size // 2 ** (convs - 1 - index) for index in range(convs)]


@keras.saving.register_keras_serializable(package=PACKAGE)
class ConvStem(PatchEmbedding):
    """The convolutional stem of Xiao et al. 2021 ("Early Convolutions Help Transformers See
    Better"): 3x3 convolutions of stride 2 (SAME padding, no bias), each followed by BatchNorm
    and ReLU, until the image is down-sampled by P, then a 1x1 projection to D (`Dense`). The
    BatchNorms use the whole global batch's statistics on several replicas (`synchronized`), so
    a distributed run equals a one-device run with the same global batch.

    Takes `PatchEmbedding`'s arguments; P must be a power of two >= 2.
    """

    def build(self, input_shape):
        self._check_sides(input_shape)
        self.input_spec = keras.layers.InputSpec(ndim=4, axes={-1: input_shape[-1]})
        policy = self.dtype_policy
        self.convs, self.norms = [], []
        shape = tuple(input_shape)
        for index, width in enumerate(conv_stem_widths(self.hidden_size, self.patch_size)):
            conv = keras.layers.Conv2D(width, 3, strides=2, padding="same", use_bias=False,
                                       kernel_initializer="he_normal", name=f"conv_{index}",
                                       dtype=policy)
            # Synchronised under a tf.distribute strategy: the statistics are the global
            # batch's, as on one device, so every replica keeps the same moving averages (JAX
            # computes them over the whole sharded batch by itself; Keras accepts the flag on
            # TensorFlow only).
            norm = keras.layers.BatchNormalization(
                momentum=BATCH_NORM_MOMENTUM, epsilon=BATCH_NORM_EPSILON,
                synchronized=keras.backend.backend() == "tensorflow", name=f"bn_{index}",
                dtype=policy)
            conv.build(shape)
            shape = conv.compute_output_shape(shape)
            norm.build(shape)
            self.convs.append(conv)
            self.norms.append(norm)
        self.projection = keras.layers.Dense(self.hidden_size, kernel_initializer="lecun_normal",
                                             name="projection", dtype=policy)
        self.projection.build(shape)

    def embed(self, images, training=None):
        features = images
        for conv, norm in zip(self.convs, self.norms):
            features = ops.relu(norm(conv(features), training=training))
        return project_grid(self.projection, features)


def project_grid(projection, grid):
    """The `Dense` `projection` of each position of [batch, rows, cols, C] -> [batch, rows,
    cols, D], through [batch, rows * cols, C] tokens: Keras' own 4-D `Dense` is a tensordot
    whose shapes TensorFlow computes at run time, a graph that small ONNX runtimes (OpenCV's
    DNN) cannot load."""
    _, rows, cols, channels = ops.shape(grid)
    tokens = project(projection, ops.reshape(grid, (-1, rows * cols, channels)))
    return ops.reshape(tokens, (-1, rows, cols, tokens.shape[-1]))


def shift_diagonally(images, shift: int):
    """The image and its four diagonal shifts by `shift` pixels (zero-filled), concatenated
    along channels: [batch, H, W, C] -> [batch, H, W, 5C], in Lee et al.'s order (the image,
    then the shifts towards the bottom-right, bottom-left, top-right and top-left)."""
    padded = ops.pad(images, ((0, 0), (shift, shift), (shift, shift), (0, 0)))
    end = -2 * shift
    return ops.concatenate([images, padded[:, :end, :end], padded[:, :end, 2 * shift:],
                            padded[:, 2 * shift:, :end], padded[:, 2 * shift:, 2 * shift:]],
                           axis=-1)


def flattened_patches(images, patch_size: int):
    """[batch, H, W, C] -> [batch, H/P, W/P, P*P*C]: each patch's pixels row by row."""
    _, height, width, channels = ops.shape(images)
    rows, cols = height // patch_size, width // patch_size
    patches = ops.reshape(images, (-1, rows, patch_size, cols, patch_size, channels))
    patches = ops.transpose(patches, (0, 1, 3, 2, 4, 5))
    return ops.reshape(patches, (-1, rows, cols, patch_size * patch_size * channels))


@keras.saving.register_keras_serializable(package=PACKAGE)
class ShiftedPatchEmbedding(PatchEmbedding):
    """Shifted patch tokenization (Lee et al. 2021, "Vision Transformer for Small-Size
    Datasets"): the image and its four diagonal shifts by P/2 are stacked along channels, each
    PxP patch of the stack is flattened (P*P*5C values), layer-normed (`LayerNorm_0`) and
    projected to D (`Dense` `projection`), so every token also sees its neighbours' pixels.

    Takes `PatchEmbedding`'s arguments; P must be even.
    """

    def build(self, input_shape):
        self._check_sides(input_shape)
        self.input_spec = keras.layers.InputSpec(ndim=4, axes={-1: input_shape[-1]})
        patch_values = self.patch_size * self.patch_size * 5 * input_shape[-1]
        self.norm = LayerNorm(epsilon=SHIFTED_PATCH_NORM_EPSILON, name="LayerNorm_0",
                              dtype=self.dtype_policy)
        self.projection = keras.layers.Dense(self.hidden_size, kernel_initializer="lecun_normal",
                                             name="projection", dtype=self.dtype_policy)
        self.norm.build((None, None, None, patch_values))
        self.projection.build((None, None, None, patch_values))

    def embed(self, images, training=None):
        stacked = shift_diagonally(images, self.patch_size // 2)
        return project_grid(self.projection,
                            self.norm(flattened_patches(stacked, self.patch_size)))
