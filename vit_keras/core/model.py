"""`VisionTransformer`: the ViT of a `ViTConfig` as a functional Keras model carrying its config."""

from __future__ import annotations

import functools

import keras

from vit_keras.core import layers as vit_layers
from vit_keras import keras_compat, lora, names, quantization, tasks
from vit_keras.config import ViTConfig, split_preprocessing
from vit_keras.preprocessing import OFFICIAL, Preprocessing
from vit_keras.core.initializers import PACKAGE
from vit_keras.core.layer_config import config_from_layers
from vit_keras.core.normalization import LayerNorm
from vit_keras.core.patch_dropout import PatchDropout
from vit_keras.core.remat import RematEncoderBlock
from vit_keras.core import posemb, stems
from vit_keras.core.deit import DistillationToken
from vit_keras.core.heads import MAPHead
from vit_keras.core.resnet import ResNetStem

POOLING_MODES = (None, "token", "gap", "avg", "map")
HEAD_LAYERS = ("pre_logits", "head", "head_dist")  # what `finetune head` trains
TASK = tasks.TaskContract(tasks.CLASSIFY)  # a class per image: the library's default task


def patch_tokens(config: ViTConfig, images, dtype=None):
    """Images -> patch embeddings (through the ResNet for hybrids).

    Args:
        config: the model configuration.
        images: the [batch, H, W, C] input.
        dtype: the layers' dtype policy (None: the global policy), or a `DTypePolicyMap`.

    Returns:
        [batch, patches, D]; for `config.dynamic_image_size`, the [batch, rows, cols, D] grid,
        whose shape gives each input's grid to the position embedding.
    """
    features = images
    if config.resnet_layers is not None:
        features = ResNetStem(config.resnet_layers, config.resnet_width, name=names.RESNET,
                              dtype=dtype)(images)
    return _stem_class(config.stem)(
        config.hidden_size, config.patch_size, flatten=not config.dynamic_image_size,
        pad=config.dynamic_image_pad, name=names.EMBEDDING, dtype=dtype)(features)


def _stem_class(stem: str):
    if stem == "patchify":
        return vit_layers.PatchEmbedding

    return stems.ConvStem if stem == "conv" else stems.ShiftedPatchEmbedding


def _add_positions(config: ViTConfig, patches, dtype=None):
    """Class/distillation tokens and the position embedding of `config.posemb`.

    The official 1-D embedding covers the class (and distillation) token rows; the 2-D kinds
    are added to the patches before those tokens are prepended (as big_vision does). A model
    taking any size passes the patch grid to the position embedding, which resamples to it.
    """
    grid, tokens = None, patches
    if config.dynamic_image_size:
        grid = patches
        tokens = keras.layers.Reshape((-1, config.hidden_size), name="patch_tokens",
                                      dtype=dtype)(patches)
    if config.posemb != "learn":
        kind = (posemb.SinCosPositionEmbedding if config.posemb == "sincos2d"
                else posemb.Learned2DPositionEmbedding)
        tokens = _call_with_grid(kind(config.grid_size, name=names.POSEMB, dtype=dtype),
                                 tokens, grid)
    if config.classifier == "token":
        tokens = vit_layers.ClassToken(name=names.CLS, dtype=dtype)(tokens)
    if config.distilled:
        tokens = DistillationToken(name=names.DIST, dtype=dtype)(tokens)
    if config.posemb == "learn":
        stored = (dict(grid_size=config.grid_size, num_prefix_tokens=config.num_prefix_tokens)
                  if grid is not None else {})
        tokens = _call_with_grid(
            vit_layers.PositionEmbedding(name=names.POSEMB, dtype=dtype, **stored), tokens,
            grid)
    return tokens


def _call_with_grid(layer, tokens, grid):
    return layer(tokens) if grid is None else layer(tokens, grid)


def encode_tokens(config: ViTConfig, tokens, output_tokens: int | None = None, dtype=None):
    """Patch embeddings -> final-normed token sequence: positions, registers, the blocks.

    Args:
        config: the model configuration.
        tokens: [batch, patches, D] patch embeddings.
        output_tokens: keep only the first `output_tokens` tokens of the last block's output
            (None = all). A head that reads only the class (and distillation) token then skips
            the last block's queries, attention output and MLP for every other token: about 7%
            of a ViT-B/16's FLOPs, with the same outputs.
        dtype: as in `patch_tokens`.

    Returns:
        [batch, tokens or output_tokens, D]; not normed for `config.pooled_norm` (the final
        norm then follows the pooling).
    """
    tokens = _add_positions(config, tokens, dtype)
    tokens = keras.layers.Dropout(config.dropout_rate, name="embedding_dropout",
                                  dtype=dtype)(tokens)
    if config.patch_drop_rate:
        tokens = PatchDropout(config.patch_drop_rate, config.num_prefix_tokens,
                              name="patch_dropout", dtype=dtype)(tokens)
    if config.num_register_tokens:
        tokens = vit_layers.RegisterTokens(config.num_register_tokens, name=names.REGISTERS,
                                           dtype=dtype)(tokens)
    if config.pre_norm:
        tokens = final_norm(config, names.PRE_NORM, dtype)(tokens)
    for index in range(config.num_layers):
        last = index == config.num_layers - 1
        block = encoder_block(config, index, dtype)
        tokens = block(tokens, output_tokens=output_tokens) if last and output_tokens else \
            block(tokens)
    return tokens if config.pooled_norm else final_norm(config, names.ENCODER_NORM, dtype)(tokens)


def final_norm(config: ViTConfig, name: str, dtype=None):
    """The encoder's final LayerNorm layer (the config's epsilon), named `name` (its dtype
    policy `dtype`)."""
    return LayerNorm(epsilon=config.layer_norm_epsilon, name=name, dtype=dtype)


def encoder_block(config: ViTConfig, index: int, dtype=None, name: str | None = None,
                  depth: int | None = None):
    """Block `index` of `depth` (default `config.num_layers`), named `name` (default the
    encoder's `names.block(index)`); rematerialised in training when `config.remat` (same
    weights, names)."""
    # Stochastic depth grows linearly from 0 (first block) to drop_path_rate (last).
    drop_path = config.drop_path_rate * index / max((depth or config.num_layers) - 1, 1)
    block = vit_layers.EncoderBlock
    if config.remat:
        policy = config.remat if isinstance(config.remat, str) else None
        block = functools.partial(RematEncoderBlock, policy=policy)
    return block(
        num_heads=config.num_heads, mlp_dim=config.mlp_dim, dropout_rate=config.dropout_rate,
        attention_dropout_rate=config.attention_dropout_rate,
        gelu_approximate=config.gelu_approximate, drop_path_rate=drop_path,
        layer_scale_init=config.layer_scale_init, locality=config.locality_attention,
        activation=config.activation, layer_norm_epsilon=config.layer_norm_epsilon,
        name=name or names.block(index), dtype=dtype)


def _pooling_layer(config: ViTConfig, mode: str, name: str, index: int = 0, dtype=None):
    if mode == "map":
        return MAPHead(config.num_heads, config.mlp_dim, config.gelu_approximate,
                       activation=config.activation,
                       layer_norm_epsilon=config.layer_norm_epsilon, name=name, dtype=dtype)
    if mode == "token":
        return vit_layers.TokenPooling("token", start=index, name=name, dtype=dtype)
    # Registers (appended last) are left out of the mean; the rest is averaged as officially.
    stop = -config.num_register_tokens if config.num_register_tokens else None
    return vit_layers.TokenPooling("gap", stop=stop, name=name, dtype=dtype)


def pool_tokens(config: ViTConfig, tokens, mode: str, dtype=None):
    """Token sequence -> one vector per image, through the pooled norm, pre_logits and the
    projection when configured."""
    return representation(config, pooled_vector(config, tokens, mode, dtype), dtype)


def pooled_vector(config: ViTConfig, tokens, mode: str, dtype=None):
    """Token sequence [batch, tokens, D] -> [batch, D] by `mode` ('token', 'gap' or 'avg',
    'map'), through the pooled norm when configured."""
    pooled = _pooling_layer(config, "gap" if mode == "avg" else mode, names.POOL,
                            dtype=dtype)(tokens)
    if config.pooled_norm:
        pooled = final_norm(config, names.ENCODER_NORM, dtype)(pooled)
    return pooled


def representation(config: ViTConfig, pooled, dtype=None):
    """A pooled vector through pre_logits and the projection, those the config has.

    Args:
        config: the model configuration.
        pooled: [batch, D].
        dtype: as in `patch_tokens`.

    Returns:
        [batch, projection_size, representation_size or D].
    """
    if config.representation_size is not None:
        pooled = keras.layers.Dense(config.representation_size, activation="tanh",
                                    name=names.PRE_LOGITS, dtype=dtype)(pooled)
    if config.projection_size is not None:
        pooled = keras.layers.Dense(config.projection_size, use_bias=False,
                                    name=names.PROJECTION, dtype=dtype)(pooled)
    return pooled


def last_block_outputs(config: ViTConfig, include_top: bool = True,
                       pooling: str | None = None) -> int | None:
    """How many leading tokens the last block must output for this head (None = all).

    A class-token head reads only the class (and distillation) token, so the other tokens'
    last-block queries, attention output and MLP are skipped; pooled by mean, MAP or returned
    whole, every token is computed.
    """
    reads_prefix = (include_top and config.classifier == "token") or pooling == "token"
    return config.num_prefix_tokens if reads_prefix else None


def config_and_preprocessing(config, preprocessing=None) -> tuple[ViTConfig, Preprocessing]:
    """The (`ViTConfig`, `Preprocessing`) a model is built with, checked.

    Args:
        config: a `ViTConfig` or its `to_dict()`; a dict written by release 0.2 may still hold
            the preprocessing, which is used when `preprocessing` is None.
        preprocessing: a `Preprocessing` or its `to_dict()`; None: the config dict's, else the
            official [-1, 1].

    Raises:
        ValueError: not a config, or a preprocessing the model's channels cannot take.
    """
    if isinstance(config, dict):
        config, recorded = split_preprocessing(config)
        config = ViTConfig.from_dict(config)
        preprocessing = recorded if preprocessing is None else preprocessing
    if not isinstance(config, ViTConfig):
        raise ValueError(f"config must be a ViTConfig or its to_dict(), got {config!r}")
    rule = OFFICIAL if preprocessing is None else Preprocessing.from_dict(preprocessing)
    return config, rule.check_for(config)


class ConfiguredModel:
    """What every model built from a `ViTConfig` shares (mixed into a functional
    `keras.Model`): `config`, `preprocessing`, the image-size check before Keras traces,
    and Keras' `quantize` on every projection. The class sets `self._vit_config` and
    `self.vit_preprocessing`."""

    @property
    def config(self) -> ViTConfig:
        """The `ViTConfig` this model was built from: the network's architecture."""
        return self._vit_config

    @property
    def preprocessing(self) -> Preprocessing:
        """How images become this model's inputs (its weights' data contract), saved beside
        the config in `.keras` files and exports."""
        return self.vit_preprocessing

    def set_preprocessing(self, preprocessing: Preprocessing) -> None:
        """Records how the model's weights expect images prepared, when the weights file did
        not say (a bare checkpoint): `preprocess_input`, `vit` and the exports read it from
        `model.preprocessing`, and `.keras` files keep it. The computation is unchanged."""
        self.vit_preprocessing = Preprocessing.from_dict(preprocessing).check_for(self.config)

    def check_inputs(self, inputs) -> None:
        """Refuses inputs of another size than the model was built for (`check_image_size`);
        a model of other inputs (clips) checks its own."""
        check_image_size(self.config, inputs)

    # Keras traces `predict` and the other loops again with relaxed shapes when the input size
    # changes, and a relaxed (None, None) image reaches the patch embedding unchecked: so the
    # size is checked here, on the arrays or tensors the caller hands over, before any tracing.
    def __call__(self, *args, **kwargs):
        self.check_inputs(args[0] if args else kwargs.get("inputs"))
        return super().__call__(*args, **kwargs)

    def predict(self, x, *args, **kwargs):
        self.check_inputs(x)
        return super().predict(x, *args, **kwargs)

    def predict_on_batch(self, x):
        self.check_inputs(x)
        return super().predict_on_batch(x)

    def evaluate(self, x=None, *args, **kwargs):
        self.check_inputs(x)
        return super().evaluate(x, *args, **kwargs)

    def test_on_batch(self, x, *args, **kwargs):
        self.check_inputs(x)
        return super().test_on_batch(x, *args, **kwargs)

    def fit(self, x=None, *args, **kwargs):
        self.check_inputs(x)
        keras_compat.build_optimizer_before_tracing(self)
        return super().fit(x, *args, **kwargs)

    def train_on_batch(self, x, *args, **kwargs):
        self.check_inputs(x)
        keras_compat.build_optimizer_before_tracing(self)
        return super().train_on_batch(x, *args, **kwargs)

    def enable_lora(self, rank: int, targets=lora.DEFAULT_TARGETS, alpha=None) -> None:
        """Freezes the model and adds LoRA adapters (see `vit_keras.lora.enable_lora`)."""
        lora.enable_lora(self, rank, targets, alpha)

    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        """Keras' `Model.quantize` on every projection (see `vit_keras.quantization`)."""
        quantization.quantize(self, super().quantize, mode, config, filters, **kwargs)

    @classmethod
    def from_config(cls, config, custom_objects=None):
        # A quantized model's per-layer policies come back as a serialized DTypePolicyMap.
        config = dict(config)
        if isinstance(config.get("dtype"), dict):
            config["dtype"] = keras.dtype_policies.deserialize(config["dtype"])
        return cls(**config)


@keras.saving.register_keras_serializable(package=PACKAGE)
class VisionTransformer(ConfiguredModel, keras.Model):
    """The ViT of a `ViTConfig` as a functional Keras model that carries its config.

    The model takes NHWC images in [-1, 1] (see `preprocess_input`) at `config.image_size`.
    `get_config()` is the `ViTConfig` and the head options, so `.keras` files rebuild it from
    them (under `safe_mode`); `model.config` returns the `ViTConfig`. Every projection is a
    Keras `EinsumDense` or `Dense` layer: `model.quantize("int8" | "int4" | "float8")` and
    `model.enable_lora(rank)` work on every backend.

    Args:
        config: the hyper-parameters (a `ViTConfig`, or its `to_dict()`).
        include_top: True: classification head with `config.num_classes` outputs (logits, or
            `classifier_activation` applied to them). False: features, see `pooling`.
        pooling: only with `include_top=False`. None returns the whole final-normed token
            sequence [batch, tokens, D]; 'token' the class token, 'gap'/'avg' the token mean,
            'map' attention pooling ([batch, D], or [batch, representation_size] through
            pre_logits when configured).
        classifier_activation: e.g. 'softmax'; None returns logits. Always float32.
        name: model name; defaults to 'vit'.
        dtype: dtype policy of the layers (None: the global policy); a `DTypePolicyMap`
            restores a quantized model's per-layer policies.
        preprocessing: how images become the inputs its weights expect (a
            `vit_keras.preprocessing.Preprocessing` or its `to_dict()`); None: the official
            [-1, 1]. Weight loaders set it; `model.preprocessing` reads it.
    """

    vit_task = tasks.CLASSIFY

    def __init__(self, config, include_top: bool = True, pooling: str | None = None,
                 classifier_activation=None, name: str | None = None, dtype=None,
                 preprocessing=None, **kwargs):
        config, preprocessing = config_and_preprocessing(config, preprocessing)
        _check_pooling(config, pooling)
        images, outputs = _build_graph(config, include_top, pooling, classifier_activation,
                                       dtype)
        super().__init__(images, outputs, name=name or "vit", dtype=dtype, **kwargs)
        self._vit_config = config
        self.vit_preprocessing = preprocessing
        self.include_top = include_top
        self.pooling = pooling
        self.classifier_activation = classifier_activation

    def get_config(self):
        # Not the functional graph: the ViTConfig and the head options rebuild the model.
        return {"config": self._vit_config.to_dict(),
                "preprocessing": self.preprocessing.to_dict(), "include_top": self.include_top,
                "pooling": self.pooling,
                "classifier_activation": keras.activations.serialize(
                    keras.activations.get(self.classifier_activation))
                if self.classifier_activation is not None else None,
                "name": self.name, "trainable": self.trainable,
                "dtype": keras.dtype_policies.serialize(quantization.dtype_policy_map(self))}

    def head_layers(self) -> list:
        """The head's layers: pre_logits, head and head_dist, those the model has."""
        present = {layer.name for layer in self.layers}
        return [self.get_layer(name) for name in HEAD_LAYERS if name in present]


def check_image_size(config: ViTConfig, images) -> None:
    """Refuses images of another size than a fixed-size model was built for.

    Args:
        config: the model's config.
        images: what a caller passes: an array or tensor [batch, height, width, channels], or
            a `tf.data.Dataset` of them (or of (images, labels)); anything else is left to
            Keras.

    Raises:
        ValueError: naming the size the model was built for, the size given, and the ways
            out (resize, `image_size=`, `dynamic_image_size=True`).
    """
    shape = input_shape_of(images)
    if config.dynamic_image_size or shape is None or len(shape) != 4:
        return
    got = tuple(shape[1:3])
    if None in got or got == config.image_hw:
        return
    (height, width), step = config.image_hw, config.patch_step
    raise ValueError(
        f"this ViT was built for {height}x{width} images, got {got[0]}x{got[1]} (input shape "
        f"{tuple(shape)}): resize the images to {height}x{width} (`vit_keras.preprocessing."
        f"resize_image` does, by the weights' rule), or build the model for this size with "
        f"image_size=({got[0]}, {got[1]}) (pretrained weights are fitted when they load), or with "
        f"dynamic_image_size=True to take any size whose sides are multiples of {step}")


def input_shape_of(inputs):
    """The shape of what a caller passes to a model.

    Args:
        inputs: an array or tensor, or a `tf.data.Dataset` of them or of (inputs, labels).

    Returns:
        Its shape as a tuple (the dataset's element's, batch dimension included), or None
        for anything else.
    """
    element_spec = getattr(inputs, "element_spec", None)  # a tf.data.Dataset
    if element_spec is not None:
        inputs = element_spec[0] if isinstance(element_spec, tuple) else element_spec
    shape = getattr(inputs, "shape", None)
    return None if shape is None else tuple(shape)


def _check_pooling(config: ViTConfig, pooling):
    if pooling not in POOLING_MODES:
        raise ValueError(f"pooling must be one of {POOLING_MODES}, got {pooling!r}")
    if pooling == "token" and config.classifier != "token":
        raise ValueError("pooling='token' needs classifier='token' (a model with a class token), "
                         f"got classifier={config.classifier!r}")


def _build_graph(config: ViTConfig, include_top, pooling, classifier_activation, dtype):
    """The functional graph: (images input, outputs)."""
    height, width = (None, None) if config.dynamic_image_size else config.image_hw
    images = keras.Input((height, width, config.channels), name="images")
    tokens = encode_tokens(config, patch_tokens(config, images, dtype),
                           last_block_outputs(config, include_top, pooling), dtype)
    if not include_top:
        return images, tokens if pooling is None else pool_tokens(config, tokens, pooling, dtype)
    features = pool_tokens(config, tokens, config.classifier, dtype)
    # The head runs in float32 so mixed-precision models still return float32 logits.
    outputs = classification_head(config, names.HEAD, dtype)(features)
    if config.distilled:
        # DeiT: the distillation token has its own head; inference averages the two.
        distilled = _pooling_layer(config, "token", names.POOL_DIST, index=1,
                                   dtype=dtype)(tokens)
        outputs = keras.layers.Average(name="head_average", dtype="float32")(
            [outputs, classification_head(config, names.HEAD_DIST, dtype)(distilled)])
    if classifier_activation is not None:
        outputs = keras.layers.Activation(classifier_activation, dtype="float32",
                                          name="predictions")(outputs)
    return images, outputs


def classification_head(config: ViTConfig, name: str, dtype=None):
    """The head layer: a zero-initialised Dense of `config.num_classes` logits named `name`,
    in float32 under any policy `dtype` (a quantized map keeps its entry)."""
    return keras.layers.Dense(
        config.num_classes, kernel_initializer="zeros",
        bias_initializer=keras.initializers.Constant(config.head_bias_init),
        name=name, dtype=quantization.float32_policy(dtype, name))


def config_from_model(model: keras.Model) -> ViTConfig:
    """The `ViTConfig` of a model: `model.config` for a `VisionTransformer`; the one place
    every reader of a model's config goes through.

    A model that does not carry its config (a functional model using the ViT layers, such as a
    `.keras` file of an earlier release or a re-wired view) has it read off its layers' names
    and shapes (`config_from_layers`).

    Args:
        model: a `VisionTransformer`, or a functional model with its layers.

    Returns:
        Its config; read off the layers, `num_classes` comes from the head (1 when the model
        has none) and `head_bias_init` is left at its default.

    Raises:
        ValueError: a model without `config` and without the ViT's layers.
    """
    config = getattr(model, "config", None)
    return config if isinstance(config, ViTConfig) else config_from_layers(model)


def input_image_size(model: keras.Model) -> tuple[int, int]:
    """(height, width) of the images `model` is meant for.

    Args:
        model: a fixed-size model (any Keras image model), or a ViT taking any size.

    Returns:
        The fixed input size; for a ViT built with `dynamic_image_size`, the size its position
        embeddings are stored at (the size it was trained at).

    Raises:
        ValueError: a model taking any size that was not built by `VisionTransformer`.
    """
    height, width = model.inputs[0].shape[-3:-1]  # a clip model's frames lie before them
    if height is not None and width is not None:
        return int(height), int(width)
    try:
        return config_from_model(model).image_hw
    except ValueError as error:
        raise ValueError(f"model {model.name!r} takes images of any size and is not a ViT of "
                         f"vit_keras: give the image size explicitly ({error})") from None


def preprocessing_of(model) -> Preprocessing:
    """The preprocessing a model's weights expect.

    Args:
        model: any Keras model.

    Returns:
        Its `preprocessing` (or that of the model an export view was made from), else the
        official one (any other Keras model is assumed to take [-1, 1] inputs, as every model
        here did).
    """
    marked = getattr(model, "vit_preprocessing", None)
    return marked if isinstance(marked, Preprocessing) else OFFICIAL


def keep_records(model: keras.Model, derived: keras.Model) -> keras.Model:
    """Marks `derived` (a view or copy of `model`) with what `model` records and a plain
    functional model does not carry: its preprocessing (`preprocessing_of` reads the mark) and
    its task (`vit_keras.tasks.task_of`)."""
    derived.vit_preprocessing = preprocessing_of(model)
    derived.vit_task = tasks.task_of(model)
    return derived
