"""The layers a clip or volume needs beyond the image ViT's: tubelets in, space-time positions,
attention across frames, and the reshapes between one clip and its frames."""

from __future__ import annotations

import keras
from keras import ops

from vit_keras import names
from vit_keras.core.attention import MultiHeadSelfAttention
from vit_keras.core.initializers import PACKAGE
from vit_keras.core.normalization import LayerNorm

CLIP_AXES = "[batch, frames, height, width, channels]"


@keras.saving.register_keras_serializable(package=PACKAGE)
class TubeletEmbedding(keras.layers.Layer):
    """Cuts a clip into non-overlapping t x P x P tubelets and projects each linearly to D
    (ViViT's tubelet embedding; t = 1 is the image ViT's patch embedding on every frame).

    The projection is a Keras `EinsumDense` named `projection` whose kernel is (t, P, P, C, D):
    the image model's (P, P, C, D) kernel with a frame axis in front, so an image model's
    kernel inflates to it (`vit_keras.tasks.clip.inflate`), and `quantize` and
    `enable_lora` attach to it.

    Args:
        hidden_size: output width D.
        patch_size: patch side P.
        tubelet_frames: frames t per tubelet; the clip's frames must be a multiple of it.

    Input: [batch, frames, height, width, channels]. Output: [batch, frames / t, rows * cols,
    D], each frame's tokens in row-major order.
    """

    def __init__(self, hidden_size, patch_size, tubelet_frames, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.patch_size = patch_size
        self.tubelet_frames = tubelet_frames
        self.input_spec = keras.layers.InputSpec(ndim=5)

    def build(self, input_shape):
        _check_clip_shape(input_shape, self.tubelet_frames, self.patch_size)
        self.input_spec = keras.layers.InputSpec(ndim=5, axes={-1: input_shape[-1]})
        # [b, tubelets, t, P, P, C] x (t, P, P, C, D) -> [b, tubelets, D]
        self.projection = keras.layers.EinsumDense(
            "bntpqk,tpqkd->bnd", output_shape=(None, self.hidden_size), bias_axes="d",
            kernel_initializer="lecun_normal", name=names.PATCH_PROJECTION,
            dtype=self.dtype_policy)
        tubelet, patch = self.tubelet_frames, self.patch_size
        self.projection.build((input_shape[0], None, tubelet, patch, patch, input_shape[-1]))

    def call(self, clips):
        _, frames, height, width, channels = clips.shape
        tubelet, patch = self.tubelet_frames, self.patch_size
        steps, rows, cols = frames // tubelet, height // patch, width // patch
        # Each frame cut into its patches, then the patches of a tubelet's frames brought
        # together: no tensor above rank 6 (TFLite's transposes and int8 kernels stop there).
        pieces = ops.reshape(clips, (-1, rows, patch, cols, patch, channels))
        pieces = ops.transpose(pieces, (0, 1, 3, 2, 4, 5))
        pieces = ops.reshape(pieces, (-1, steps, tubelet, rows * cols, patch * patch * channels))
        pieces = ops.transpose(pieces, (0, 1, 3, 2, 4))
        tokens = self.projection(ops.reshape(pieces, (-1, steps * rows * cols, tubelet, patch,
                                                      patch, channels)))
        return ops.reshape(tokens, (-1, steps, rows * cols, self.hidden_size))

    def compute_output_shape(self, input_shape):
        batch, frames, height, width, _ = input_shape
        return (batch, frames // self.tubelet_frames,
                (height // self.patch_size) * (width // self.patch_size), self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(hidden_size=self.hidden_size, patch_size=self.patch_size,
                      tubelet_frames=self.tubelet_frames)
        return config


def _check_clip_shape(shape, tubelet_frames: int, patch_size: int) -> None:
    """A ValueError naming the axis whose size is unknown or not a multiple of its step."""
    if len(shape) != 5:
        raise ValueError(f"expected clips {CLIP_AXES}, got input shape {tuple(shape)}")
    for axis, value, step in (("frames", shape[1], tubelet_frames),
                              ("height", shape[2], patch_size), ("width", shape[3], patch_size)):
        if value is None or value % step:
            raise ValueError(f"clip {axis} must be a fixed multiple of {step} (tubelets of "
                             f"{tubelet_frames} frames x {patch_size} x {patch_size} px), got "
                             f"input shape {tuple(shape)} {CLIP_AXES}")


@keras.saving.register_keras_serializable(package=PACKAGE)
class SpaceTimeEmbedding(keras.layers.Layer):
    """Adds space-time positions to the tubelet tokens and makes the class token.

    Weights: `pos_embedding` (1, prefix + rows * cols, D), the image model's 1-D table (its
    class row first when there is a class token), added to every frame's patches; and
    `temporal_embedding` (1, frames, D), initialised to zeros, added to every patch of a
    frame; with a class token, `cls` (1, 1, D), to which the table's class row is added.

    Args:
        frames: token frames (the clip's frames / tubelet frames).
        num_prefix_tokens: 1 with a class token, else 0.

    Input: [batch, frames, patches, D]. Output: the same with positions; with a class token,
    also the positioned class token [batch, 1, D].
    """

    def __init__(self, frames, num_prefix_tokens=0, **kwargs):
        super().__init__(**kwargs)
        self.frames = frames
        self.num_prefix_tokens = num_prefix_tokens

    def build(self, input_shape):
        _, frames, patches, width = input_shape
        if frames != self.frames:
            raise ValueError(f"SpaceTimeEmbedding holds {self.frames} token frames, got input "
                             f"shape {tuple(input_shape)} [batch, frames, patches, D]")
        self.pos_embedding = self.add_weight(
            name="pos_embedding", shape=(1, self.num_prefix_tokens + patches, width),
            initializer=keras.initializers.RandomNormal(stddev=0.02))
        self.temporal_embedding = self.add_weight(
            name="temporal_embedding", shape=(1, self.frames, width), initializer="zeros")
        if self.num_prefix_tokens:
            self.cls = self.add_weight(name="cls", shape=(1, 1, width), initializer="zeros")

    def no_weight_decay(self):
        return [self.pos_embedding, self.temporal_embedding] + (
            [self.cls] if self.num_prefix_tokens else [])

    def call(self, patches):
        dtype = patches.dtype
        spatial = self.pos_embedding[:, self.num_prefix_tokens:][:, None]
        temporal = self.temporal_embedding[:, :, None]
        positioned = patches + ops.cast(spatial, dtype) + ops.cast(temporal, dtype)
        if not self.num_prefix_tokens:
            return positioned
        cls = ops.cast(self.cls + self.pos_embedding[:, :1], dtype)
        return positioned, ops.broadcast_to(cls, (ops.shape(patches)[0], 1, patches.shape[-1]))

    def compute_output_shape(self, input_shape):
        if not self.num_prefix_tokens:
            return input_shape
        return input_shape, (input_shape[0], 1, input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(frames=self.frames, num_prefix_tokens=self.num_prefix_tokens)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class TemporalAttention(keras.layers.Layer):
    """Each patch position attends across the frames: x + MHA(LN(x)) over the frame axis
    (TimeSformer's temporal attention of divided space-time attention).

    The attention's output projection starts at zero, so a new block passes its input
    through unchanged until it learns (and an inflated image model computes as before).

    Args:
        num_heads: attention heads.
        attention_dropout_rate: dropout on the attention probabilities.
        dropout_rate: dropout on the attention's output.
        layer_norm_epsilon: of the LayerNorm.

    Input and output: [batch, frames, patches, D].
    """

    def __init__(self, num_heads, attention_dropout_rate=0.0, dropout_rate=0.0,
                 layer_norm_epsilon=1e-6, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.attention_dropout_rate = attention_dropout_rate
        self.dropout_rate = dropout_rate
        self.layer_norm_epsilon = layer_norm_epsilon
        policy = self.dtype_policy
        self.layer_norm = LayerNorm(epsilon=layer_norm_epsilon, name=names.LAYER_NORM_0,
                                    dtype=policy)
        self.attention = MultiHeadSelfAttention(num_heads, attention_dropout_rate,
                                                name=names.ATTENTION, dtype=policy)
        self.dropout = keras.layers.Dropout(dropout_rate, dtype=policy)

    def build(self, input_shape):
        sequence = (None, input_shape[1], input_shape[-1])
        self.layer_norm.build(sequence)
        self.attention.build(sequence)
        for weight in self.attention.out.weights:
            weight.assign(ops.zeros(weight.shape, weight.dtype))

    def no_weight_decay(self):
        return self.attention.no_weight_decay()

    def call(self, tokens, training=None):
        _, frames, patches, width = tokens.shape
        by_position = ops.reshape(ops.transpose(tokens, (0, 2, 1, 3)), (-1, frames, width))
        attended = self.attention(self.layer_norm(by_position), training=training)
        attended = self.dropout(attended, training=training)
        attended = ops.transpose(ops.reshape(attended, (-1, patches, frames, width)), (0, 2, 1, 3))
        return tokens + attended

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads,
                      attention_dropout_rate=self.attention_dropout_rate,
                      dropout_rate=self.dropout_rate, layer_norm_epsilon=self.layer_norm_epsilon)
        return config


def _patches_and_class_token(inputs) -> tuple:
    """(patches, class token or None) of a layer's input: the patches alone, or [patches,
    class token] (their shapes alike)."""
    pair = isinstance(inputs, (list, tuple)) and len(inputs) == 2
    if pair and (isinstance(inputs[0], (list, tuple)) or hasattr(inputs[0], "shape")):
        return inputs[0], inputs[1]  # two tensors, or two shapes
    return inputs, None


@keras.saving.register_keras_serializable(package=PACKAGE)
class FoldFrames(keras.layers.Layer):
    """[batch, frames, patches, D] (or it and a class token [batch, 1, D]) -> [batch * frames,
    (1 +) patches, D]: each frame a sequence of its own, the class token repeated in each
    (TimeSformer's spatial attention; the factorised encoder's spatial encoder)."""

    def call(self, inputs):
        patches, cls = _patches_and_class_token(inputs)
        _, frames, count, width = patches.shape
        sequences = ops.reshape(patches, (-1, count, width))
        if cls is None:
            return sequences
        repeated = ops.reshape(ops.repeat(cls[:, None], frames, axis=1), (-1, 1, width))
        return ops.concatenate([repeated, sequences], axis=1)

    def compute_output_shape(self, input_shape):
        patches_shape, cls_shape = _patches_and_class_token(input_shape)
        batch, frames, count, width = patches_shape
        batch = None if batch is None else batch * frames
        return (batch, count + (0 if cls_shape is None else 1), width)


@keras.saving.register_keras_serializable(package=PACKAGE)
class UnfoldFrames(keras.layers.Layer):
    """The inverse of `FoldFrames`: [batch * frames, ...] -> [batch, frames, ...] (sequences
    [batch * frames, tokens, D], or one vector a frame [batch * frames, D]); with
    `num_prefix_tokens`, the sequences' class tokens come apart, averaged over the frames
    ([batch, frames, patches, D] and [batch, 1, D], TimeSformer's).

    Args:
        frames: token frames per clip.
        num_prefix_tokens: 1 when each frame's sequence starts with the class token, else 0.
    """

    def __init__(self, frames, num_prefix_tokens=0, **kwargs):
        super().__init__(**kwargs)
        self.frames = frames
        self.num_prefix_tokens = num_prefix_tokens

    def call(self, sequences):
        shape = sequences.shape[1:]
        clips = ops.reshape(sequences, (-1, self.frames, *shape))
        if not self.num_prefix_tokens:
            return clips
        cls = ops.mean(clips[:, :, :self.num_prefix_tokens], axis=1)
        return clips[:, :, self.num_prefix_tokens:], cls

    def compute_output_shape(self, input_shape):
        batch, *shape = input_shape
        batch = None if batch is None else batch // self.frames
        if not self.num_prefix_tokens:
            return (batch, self.frames, *shape)
        count, width = shape
        return (batch, self.frames, count - self.num_prefix_tokens, width), (batch, 1, width)

    def get_config(self):
        config = super().get_config()
        config.update(frames=self.frames, num_prefix_tokens=self.num_prefix_tokens)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class JoinFrames(keras.layers.Layer):
    """[batch, frames, patches, D] (or it and a class token [batch, 1, D]) -> one sequence [batch,
    frames * (1 +) patches, D], frame after frame, each frame's copy of the class token in
    front of its patches (joint space-time attention; `MergeFrameTokens` undoes the copies).

    One class token among the frames' patches would weigh 1/frames of what it weighs in an
    image model's attention; a copy a frame keeps an inflated model's attention as it was."""

    def call(self, inputs):
        patches, cls = _patches_and_class_token(inputs)
        _, frames, count, width = patches.shape
        if cls is not None:
            copies = ops.repeat(cls[:, None], frames, axis=1)
            patches = ops.concatenate([copies, patches], axis=2)
            count += 1
        return ops.reshape(patches, (-1, frames * count, width))

    def compute_output_shape(self, input_shape):
        patches_shape, cls_shape = _patches_and_class_token(input_shape)
        batch, frames, count, width = patches_shape
        return (batch, frames * (count + (0 if cls_shape is None else 1)), width)


@keras.saving.register_keras_serializable(package=PACKAGE)
class MergeFrameTokens(keras.layers.Layer):
    """[batch, frames * (1 + patches), D] from `JoinFrames` with a class token -> [batch, 1 +
    frames * patches, D]: the frames' class tokens averaged into one, first.

    Args:
        frames: token frames per clip.
    """

    def __init__(self, frames, **kwargs):
        super().__init__(**kwargs)
        self.frames = frames

    def call(self, tokens):
        _, length, width = tokens.shape
        per_frame = ops.reshape(tokens, (-1, self.frames, length // self.frames, width))
        cls = ops.mean(per_frame[:, :, :1], axis=1)
        patches = ops.reshape(per_frame[:, :, 1:], (-1, length - self.frames, width))
        return ops.concatenate([cls, patches], axis=1)

    def compute_output_shape(self, input_shape):
        batch, length, width = input_shape
        return (batch, length - self.frames + 1, width)

    def get_config(self):
        config = super().get_config()
        config.update(frames=self.frames)
        return config
