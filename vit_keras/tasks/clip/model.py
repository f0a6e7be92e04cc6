"""`SpaceTimeViT`: the ViT on clips and volumes, a class per clip ([batch, frames, height,
width, channels] -> [batch, classes]).

A clip (video frames, or a volume's slices along its depth) is cut into tubelets of t frames
x P x P pixels (ViViT, Arnab et al. 2021), each projected to a token; every token gets its
frame's spatial position (the image model's table) and its frame's temporal position (a
table of its own, zero at the start). The tokens then meet in one of three layouts:

- 'joint': one sequence of every token of every frame through the image model's blocks
  (ViViT's model 1; attention costs (frames x patches)^2), each frame with a copy of the
  class token, the copies averaged at the end;
- 'divided' (default): each block first lets every patch position attend across the frames
  (`TemporalAttention`, new weights starting at zero), then each frame attend within itself
  with the image block (TimeSformer, Bertasius et al. 2021); the class token joins every
  frame's attention and is averaged over the frames after each block;
- 'factorised': the image encoder on every frame alone, one vector per frame (its class
  token or mean), then `temporal_layers` blocks across the frames, averaged (ViViT's model
  2; the temporal blocks' tokens reach the head without a norm of their own, so an inflated
  image model computes as before).

The spatial layers are the image `VisionTransformer`'s, under the same names and with the
same weights' shapes (the patch kernel gains the frame axis in front), so an image model
inflates to a clip model (`vit_keras.tasks.clip.inflate`). `get_config()` is the
`ViTConfig` and the clip options: `.keras` files load under `safe_mode`; `quantize` and
`enable_lora` reach every projection, the temporal ones included.
"""

from __future__ import annotations

import keras

from vit_keras import names, quantization, tasks
from vit_keras.config import ViTConfig
from vit_keras.core.initializers import PACKAGE
from vit_keras.core.model import (ConfiguredModel, classification_head, config_and_preprocessing,
                                  encoder_block, final_norm, input_shape_of, pool_tokens,
                                  pooled_vector, representation)
from vit_keras.tasks.clip.layers import (CLIP_AXES, FoldFrames, JoinFrames,
                                              MergeFrameTokens, SpaceTimeEmbedding,
                                              TemporalAttention, TubeletEmbedding, UnfoldFrames)

TASK = tasks.TaskContract("clip", whole_image=True)  # frames resized whole, as in training
LAYOUTS = ("joint", "divided", "factorised")
TEMPORAL_PREFIX = "temporal_"  # the layers an image model does not have


def temporal_block_name(index: int) -> str:
    """The name of block `index` of the factorised encoder's temporal encoder."""
    return f"{TEMPORAL_PREFIX}block_{index}"


def temporal_attention_name(index: int) -> str:
    """The name of the temporal attention of divided block `index`."""
    return f"{TEMPORAL_PREFIX}attention_{index}"


# ViTConfig fields a clip model does not take yet: field -> its value the model needs
_IMAGE_ONLY = {"resnet_layers": None, "stem": "patchify", "num_register_tokens": 0,
               "distilled": False, "dynamic_image_size": False, "patch_drop_rate": 0.0,
               "posemb": "learn"}


def check_clip_options(config: ViTConfig, frames: int, tubelet_frames: int, layout: str,
                       temporal_layers: int) -> None:
    """Checks a `SpaceTimeViT`'s options (its arguments of the same names).

    Raises:
        ValueError: naming the option a clip model cannot take and what it expects.
    """
    for field, needed in _IMAGE_ONLY.items():
        if getattr(config, field) != needed:
            raise ValueError(f"a SpaceTimeViT needs {field}={needed!r}, got "
                             f"{getattr(config, field)!r}: set it in the ViTConfig")
    if config.classifier not in ("token", "gap"):
        raise ValueError(f"a SpaceTimeViT pools by classifier 'token' or 'gap', got "
                         f"{config.classifier!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if layout == "joint" and config.locality_attention:
        raise ValueError("locality_attention keeps a token from attending to itself; in the "
                         "joint layout it would still see itself in the other frames: use the "
                         "'divided' or 'factorised' layout")
    if tubelet_frames < 1 or frames < tubelet_frames or frames % tubelet_frames:
        raise ValueError(f"frames ({frames}) must be a positive multiple of tubelet_frames "
                         f"({tubelet_frames})")
    if layout == "factorised" and temporal_layers < 1:
        raise ValueError(f"the factorised layout needs temporal_layers >= 1, got "
                         f"{temporal_layers}")


def _with_class_token(patches, cls):
    """A reshaping layer's input: the patches, or [patches, class token]."""
    return patches if cls is None else [patches, cls]


def _joint(config: ViTConfig, patches, cls, dtype):
    frames = patches.shape[1]
    tokens = JoinFrames(name="join_frames", dtype=dtype)(_with_class_token(patches, cls))
    for index in range(config.num_layers):
        tokens = encoder_block(config, index, dtype)(tokens)
    return tokens if cls is None else \
        MergeFrameTokens(frames, name="merge_frames", dtype=dtype)(tokens)


def _divided(config: ViTConfig, patches, cls, dtype):
    frames, prefix = patches.shape[1], 0 if cls is None else 1
    for index in range(config.num_layers):
        patches = TemporalAttention(
            config.num_heads, config.attention_dropout_rate, config.dropout_rate,
            config.layer_norm_epsilon, name=temporal_attention_name(index), dtype=dtype)(patches)
        sequences = FoldFrames(name=f"fold_frames_{index}", dtype=dtype)(
            _with_class_token(patches, cls))
        sequences = encoder_block(config, index, dtype)(sequences)
        if index == config.num_layers - 1:
            break
        unfolded = UnfoldFrames(frames, prefix, name=f"unfold_frames_{index}",
                                dtype=dtype)(sequences)
        patches, cls = unfolded if prefix else (unfolded, None)
    # The last block's frames, class token copies and all, merged as the joint layout's.
    frame_tokens = UnfoldFrames(frames, name=f"unfold_frames_{index}", dtype=dtype)(sequences)
    tokens = JoinFrames(name="join_frames", dtype=dtype)(frame_tokens)
    return MergeFrameTokens(frames, name="merge_frames", dtype=dtype)(tokens) if prefix else \
        tokens


def _factorised(config: ViTConfig, patches, cls, temporal_layers: int, dtype):
    frames = patches.shape[1]
    sequences = FoldFrames(name="fold_frames", dtype=dtype)(_with_class_token(patches, cls))
    for index in range(config.num_layers):
        sequences = encoder_block(config, index, dtype)(sequences)
    if not config.pooled_norm:
        sequences = final_norm(config, names.ENCODER_NORM, dtype)(sequences)
    per_frame = pooled_vector(config, sequences, config.classifier, dtype)
    tokens = UnfoldFrames(frames, name="unfold_frames", dtype=dtype)(per_frame)
    # Locality attention is the spatial blocks' (a token never attends to itself); across a
    # few frames it would leave a frame little else to attend to.
    temporal = config.replace(locality_attention=False)
    for index in range(temporal_layers):
        tokens = encoder_block(temporal, index, dtype, name=temporal_block_name(index),
                               depth=temporal_layers)(tokens)
    return tokens


def _build_graph(config: ViTConfig, frames, tubelet_frames, layout, temporal_layers, dtype):
    """The functional graph: (clips input, logits)."""
    height, width = config.image_hw
    clips = keras.Input((frames, height, width, config.channels), name="clips")
    patches = TubeletEmbedding(config.hidden_size, config.patch_size, tubelet_frames,
                               name=names.EMBEDDING, dtype=dtype)(clips)
    embedded = SpaceTimeEmbedding(frames // tubelet_frames, config.num_prefix_tokens,
                                  name=names.POSEMB, dtype=dtype)(patches)
    patches, cls = embedded if config.num_prefix_tokens else (embedded, None)
    dropout = keras.layers.Dropout(config.dropout_rate, name="embedding_dropout", dtype=dtype)
    patches, cls = dropout(patches), None if cls is None else dropout(cls)
    if config.pre_norm:
        norm = final_norm(config, names.PRE_NORM, dtype)
        patches, cls = norm(patches), None if cls is None else norm(cls)
    if layout == "factorised":
        tokens = _factorised(config, patches, cls, temporal_layers, dtype)
        features = keras.layers.GlobalAveragePooling1D(name=f"{TEMPORAL_PREFIX}pool",
                                                       dtype=dtype)(tokens)
        features = representation(config, features, dtype)
    else:
        tokens = (_joint if layout == "joint" else _divided)(config, patches, cls, dtype)
        if not config.pooled_norm:
            tokens = final_norm(config, names.ENCODER_NORM, dtype)(tokens)
        features = pool_tokens(config, tokens, config.classifier, dtype)
    return clips, classification_head(config, names.HEAD, dtype)(features)


@keras.saving.register_keras_serializable(package=PACKAGE)
class SpaceTimeViT(ConfiguredModel, keras.Model):
    """A ViT on clips or volumes: [batch, frames, height, width, channels] -> [batch,
    classes] logits (see the module docstring for the layouts).

    Each frame is an image as the `VisionTransformer` takes it (prepared by
    `preprocess_input`, at `config.image_size`); a volume's slices are its frames.

    Args:
        config: a `ViTConfig` (or its `to_dict()`): the spatial encoder, the head's
            `num_classes` and its pooling (`classifier` 'token' or 'gap').
        frames: frames (or slices) per clip (default 8).
        tubelet_frames: frames per tubelet t (default 2): the model sees frames / t token
            frames.
        layout: 'joint', 'divided' (default) or 'factorised'.
        temporal_layers: blocks of the factorised layout's temporal encoder (default 2;
            the other layouts have none).
        name: model name; default 'spacetime_vit'.
        dtype: dtype policy of the layers (None: the global policy).
        preprocessing: as for `VisionTransformer` (default: the official [-1, 1]).
    """

    vit_task = TASK.name

    def __init__(self, config, frames: int = 8, tubelet_frames: int = 2,
                 layout: str = "divided", temporal_layers: int = 2, name: str | None = None,
                 dtype=None, preprocessing=None, **kwargs):
        config, preprocessing = config_and_preprocessing(config, preprocessing)
        check_clip_options(config, frames, tubelet_frames, layout, temporal_layers)
        clips, logits = _build_graph(config, frames, tubelet_frames, layout, temporal_layers,
                                     dtype)
        super().__init__(clips, logits, name=name or "spacetime_vit", dtype=dtype, **kwargs)
        self._vit_config = config
        self.vit_preprocessing = preprocessing
        self.frames = frames
        self.tubelet_frames = tubelet_frames
        self.layout = layout
        self.temporal_layers = temporal_layers

    def check_inputs(self, inputs) -> None:
        """Refuses clips of another shape than the model was built for.

        Args:
            inputs: what a caller passes (`input_shape_of`).

        Raises:
            ValueError: naming the shape expected and the shape given.
        """
        shape = input_shape_of(inputs)
        if shape is None:
            return
        expected = (self.frames, *self.config.image_hw, self.config.channels)
        got = tuple(shape)[1:]
        if len(got) != 4 or any(side is not None and side != want
                                for side, want in zip(got, expected)):
            raise ValueError(f"this SpaceTimeViT takes clips {CLIP_AXES} of shape (batch, "
                             f"{', '.join(map(str, expected))}), got {tuple(shape)}: sample "
                             f"{self.frames} frames and resize them to "
                             f"{expected[1]}x{expected[2]}")

    def get_config(self):
        # Not the functional graph: the ViTConfig and the clip options rebuild the model.
        return {"config": self._vit_config.to_dict(),
                "preprocessing": self.preprocessing.to_dict(), "frames": self.frames,
                "tubelet_frames": self.tubelet_frames, "layout": self.layout,
                "temporal_layers": self.temporal_layers, "name": self.name,
                "trainable": self.trainable,
                "dtype": keras.dtype_policies.serialize(quantization.dtype_policy_map(self))}
