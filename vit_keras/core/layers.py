"""The building blocks of the Vision Transformer, official-faithful.

Sub-layer names follow the released checkpoints (`LayerNorm_0`, `MultiHeadDotProductAttention_1`,
`LayerNorm_2`, `MlpBlock_3/Dense_0`, ...) so that a weight's Keras path reads like its `.npz` key.
"""

import keras
from keras import ops

from vit_keras import fast_paths, legacy, names
from vit_keras.config import ACTIVATIONS

from vit_keras.core import grid_resize
from vit_keras.core.attention import MultiHeadSelfAttention
from vit_keras.core.initializers import PACKAGE
from vit_keras.core.normalization import LayerNorm

LAYER_NORM_EPSILON = 1e-6  # the official value; Keras' default 1e-3 changes the outputs


def gelu(inputs, approximate=True, training=None):
    """GELU (tanh approximation or exact erf); the fused kernel where `fast_paths` has one."""
    fast = fast_paths.gelu(inputs, approximate, training)
    return ops.gelu(inputs, approximate=approximate) if fast is None else fast


def activate(hidden, activation="gelu", gelu_approximate=True, training=None):
    """The MLP's nonlinearity.

    Args:
        hidden: the first projection's output [..., M].
        activation: 'gelu' (tanh-approximated or exact, by `gelu_approximate`), 'quick_gelu'
            (OpenAI CLIP's x * sigmoid(1.702 x)), 'swiglu' (SiLU(a) * b of the two halves
            a, b of the last axis, as timm's packed SwiGLU: [..., M] -> [..., M / 2]) or
            'silu' (x * sigmoid(x), MobileViT's).
        gelu_approximate: for 'gelu' only.
        training: whether the fused training kernels may run.

    Returns:
        The activations ([..., M / 2] for 'swiglu').
    """
    if activation == "quick_gelu":
        return hidden * ops.sigmoid(1.702 * hidden)
    if activation == "swiglu":
        gate, values = ops.split(hidden, 2, axis=-1)
        return ops.silu(gate) * values
    if activation == "silu":
        return ops.silu(hidden)
    return gelu(hidden, gelu_approximate, training)


def _layer_norm(name, dtype_policy, epsilon=LAYER_NORM_EPSILON):
    return LayerNorm(epsilon=epsilon, name=name, dtype=dtype_policy)


@keras.saving.register_keras_serializable(package=PACKAGE)
class PatchEmbedding(keras.layers.Layer):
    """Cuts the image into non-overlapping PxP patches and projects each linearly to D.

    The projection is a Keras `EinsumDense` named `projection` whose kernel is (P, P, C, D),
    the checkpoints' layout: the same numbers as a convolution with kernel = stride = P and
    VALID padding, and what `quantize` and `enable_lora` attach to.

    Args:
        hidden_size: output width D.
        patch_size: patch side P.
        flatten: True: [batch, rows * cols, D] tokens; False: the [batch, rows, cols, D] grid
            (what a model taking any image size needs to know its grid).
        pad: pad the bottom and right of images whose sides are not multiples of P with zeros
            (timm's `dynamic_img_pad`); False rejects them.
    """

    def __init__(self, hidden_size, patch_size, flatten=True, pad=False, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.patch_size = patch_size
        self.flatten = flatten
        self.pad = pad
        self.input_spec = keras.layers.InputSpec(ndim=4)

    def build(self, input_shape):
        self._check_sides(input_shape)
        self.input_spec = keras.layers.InputSpec(ndim=4, axes={-1: input_shape[-1]})
        # [batch, rows, P, cols, P, C] x (P, P, C, D) -> [batch, rows, cols, D]
        self.projection = keras.layers.EinsumDense(
            "brpcqk,pqkd->brcd", output_shape=(None, None, self.hidden_size), bias_axes="d",
            kernel_initializer="lecun_normal", name=names.PATCH_PROJECTION, dtype=self.dtype_policy)
        patch = self.patch_size
        self.projection.build((input_shape[0], None, patch, None, patch, input_shape[-1]))

    def _check_sides(self, input_shape):
        """A ValueError for a side known now that is not a multiple of P (unless padding)."""
        if self.pad:
            return
        for side, value in (("height", input_shape[1]), ("width", input_shape[2])):
            if value is not None and value % self.patch_size:
                raise ValueError(
                    f"image {side} {value} is not divisible by patch_size {self.patch_size}: "
                    f"expected a multiple of {self.patch_size}, got input shape "
                    f"{tuple(input_shape)}"
                    + ("" if self.flatten else " (dynamic_image_pad=True pads such images)"))

    def _pad_or_check(self, images):
        """Pads to multiples of P, or checks the sides (at run time where unknown when traced)."""
        height, width = ops.shape(images)[1], ops.shape(images)[2]
        if self.pad:
            return ops.pad(images, ((0, 0), (0, -height % self.patch_size),
                                    (0, -width % self.patch_size), (0, 0)))
        self._check_sides(images.shape)
        if images.shape[1] is None or images.shape[2] is None:
            return _checked_at_run_time(images, self.patch_size)
        return images

    def _patches(self, images):
        """[batch, H, W, C] -> [batch, rows, P, cols, P, C]."""
        patch = self.patch_size
        _, height, width, channels = ops.shape(images)
        return ops.reshape(images, (-1, height // patch, patch, width // patch, patch, channels))

    def call(self, images, training=None):
        patches = self.embed(self._pad_or_check(images), training=training)
        if not self.flatten:
            return patches
        rows, cols = patches.shape[1], patches.shape[2]
        return ops.reshape(patches, (-1, rows * cols, self.hidden_size))

    def embed(self, images, training=None):
        """[batch, H, W, C] images with sides multiples of P -> the [batch, rows, cols, D]
        grid of patch embeddings (the part a locality stem replaces)."""
        patches = fast_paths.patch_projection(self.projection, images, self.patch_size)
        return self.projection(self._patches(images)) if patches is None else patches

    def compute_output_shape(self, input_shape):
        batch, height, width, _ = input_shape
        grid = [None if side is None else
                (-(-side // self.patch_size) if self.pad else side // self.patch_size)
                for side in (height, width)]
        if not self.flatten:
            return (batch, *grid, self.hidden_size)
        return (batch, grid[0] * grid[1], self.hidden_size)

    def load_own_variables(self, store):
        # Its weights live in its EinsumDense sublayers; the earlier release kept them here.
        legacy.refuse_legacy_variables(self, store)

    def get_config(self):
        config = super().get_config()
        config.update(hidden_size=self.hidden_size, patch_size=self.patch_size)
        if not self.flatten or self.pad:
            config.update(flatten=self.flatten, pad=self.pad)
        return config


def _checked_at_run_time(images, patch_size: int):
    """`images`, failing at run time when a side is not a multiple of `patch_size`.

    Only a TensorFlow graph traced for any size (`tf.function(reduce_retracing=True)`, as
    `model.predict` retraces) has sides unknown while tracing: JAX traces every shape and
    PyTorch runs eagerly, so there the Python check in `PatchEmbedding` already ran.
    """
    if keras.backend.backend() != "tensorflow":
        return images
    import tensorflow as tf

    sides = tf.shape(images)[1:3]
    check = tf.debugging.assert_equal(
        sides % patch_size, tf.zeros_like(sides),
        message=f"image height and width must be multiples of patch_size {patch_size} "
                "(dynamic_image_pad=True pads them); x below is [height, width] % patch_size")
    with tf.control_dependencies([check]):
        return tf.identity(images)


@keras.saving.register_keras_serializable(package=PACKAGE)
class ClassToken(keras.layers.Layer):
    """Prepends a learned class token (initialised to zeros) to the token sequence."""

    def build(self, input_shape):
        self.cls = self.add_weight(name="cls", shape=(1, 1, input_shape[-1]), initializer="zeros")

    def no_weight_decay(self):
        return [self.cls]

    def call(self, tokens):
        batch = ops.shape(tokens)[0]
        cls = ops.broadcast_to(ops.cast(self.cls, tokens.dtype), (batch, 1, tokens.shape[-1]))
        return ops.concatenate([cls, tokens], axis=1)

    def compute_output_shape(self, input_shape):
        batch, length, width = input_shape
        return (batch, None if length is None else length + 1, width)


@keras.saving.register_keras_serializable(package=PACKAGE)
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned 1-D position embedding (initialised normal(0.02)) to every token.

    Its weight `pos_embedding` is (1, tokens, D), the class token row first when there is one.
    A model taking any image size passes the patch grid of each input: the patch rows are then
    resampled from `grid_size` to it (bilinear, aligned corners, as at load time) and the
    prefix rows are kept.

    Args:
        grid_size: the (rows, cols) the weight is stored at; needed only for inputs of any size.
        num_prefix_tokens: the class/distillation token rows before the patch rows; likewise.
    """

    def __init__(self, grid_size=None, num_prefix_tokens=None, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = None if grid_size is None else tuple(int(side) for side in grid_size)
        self.num_prefix_tokens = num_prefix_tokens

    def build(self, tokens_shape, patch_grid_shape=None):
        _, length, width = tokens_shape
        if length is None and self.grid_size is not None:
            length = self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]
        if length is None:
            raise ValueError(
                "PositionEmbedding needs a static token count; got input shape "
                f"{tokens_shape}. Build the model with a fixed image size, or set "
                "dynamic_image_size=True.")
        self.pos_embedding = self.add_weight(
            name="pos_embedding", shape=(1, length, width),
            initializer=keras.initializers.RandomNormal(stddev=0.02))

    def no_weight_decay(self):
        return [self.pos_embedding]

    def call(self, tokens, patch_grid=None):
        """Adds the embedding to `tokens`; `patch_grid` ([batch, rows, cols, D]) gives the grid."""
        return tokens + ops.cast(self.table(patch_grid), tokens.dtype)

    def table(self, patch_grid=None):
        """The (1, tokens, D) embedding for the grid of `patch_grid` (None: as stored)."""
        if patch_grid is None:
            return self.pos_embedding
        grid = grid_resize.grid_of(patch_grid)
        if grid_resize.is_static_grid(grid, self.grid_size):
            return self.pos_embedding
        prefix = self.pos_embedding[0, :self.num_prefix_tokens]
        patches = ops.reshape(self.pos_embedding[0, self.num_prefix_tokens:],
                              (*self.grid_size, -1))
        patches = ops.reshape(grid_resize.resize_grid(patches, grid), (-1, patches.shape[-1]))
        return ops.concatenate([prefix, patches], axis=0)[None]

    def compute_output_shape(self, tokens_shape, patch_grid_shape=None):
        return tokens_shape

    def get_config(self):
        config = super().get_config()
        if self.grid_size is not None:
            config.update(grid_size=list(self.grid_size),
                          num_prefix_tokens=self.num_prefix_tokens)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class MLPBlock(keras.layers.Layer):
    """Dense(mlp_dim) -> GELU -> dropout -> Dense(D) -> dropout, as the official `MlpBlock`.

    Kernels are xavier-uniform and biases normal(1e-6), as in the official model.

    Args:
        mlp_dim: hidden width M (for 'swiglu': the packed width of both halves; the second
            Dense then reads M / 2).
        dropout_rate: dropout after each Dense.
        gelu_approximate: tanh approximation (official) or exact erf GELU.
        activation: 'gelu' (official), 'quick_gelu' or 'swiglu' (see `activate`).
    """

    def __init__(self, mlp_dim, dropout_rate=0.0, gelu_approximate=True, activation="gelu",
                 **kwargs):
        super().__init__(**kwargs)
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
        self.mlp_dim = mlp_dim
        self.dropout_rate = dropout_rate
        self.gelu_approximate = gelu_approximate
        self.activation = activation
        self.dropout = keras.layers.Dropout(dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape):
        width = input_shape[-1]
        dense = dict(kernel_initializer="glorot_uniform",
                     bias_initializer=keras.initializers.RandomNormal(stddev=1e-6),
                     dtype=self.dtype_policy)
        self.dense_0 = keras.layers.Dense(self.mlp_dim, name=names.MLP_DENSES[0], **dense)
        self.dense_1 = keras.layers.Dense(width, name=names.MLP_DENSES[1], **dense)
        self.dense_0.build((None, width))
        self.dense_1.build((None, self.mlp_dim // 2 if self.activation == "swiglu"
                            else self.mlp_dim))

    def call(self, inputs, training=None):
        # All tokens as one [N, D] matrix: a rank-3 input would be a broadcast BatchMatMul on
        # TensorFlow, whose kernel gradient is a batched product plus a reduction (1.1-1.5x
        # slower forward + backward on CPU than one MatMul).
        width = inputs.shape[-1]
        hidden = fast_paths.project(self.dense_0, ops.reshape(inputs, (-1, width)))
        hidden = activate(hidden, self.activation, self.gelu_approximate, training)
        hidden = self.dropout(hidden, training=training)
        outputs = self.dropout(fast_paths.project(self.dense_1, hidden), training=training)
        return ops.reshape(outputs, (-1, *ops.shape(inputs)[1:-1], width))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(mlp_dim=self.mlp_dim, dropout_rate=self.dropout_rate,
                      gelu_approximate=self.gelu_approximate)
        if self.activation != "gelu":
            config.update(activation=self.activation)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class EncoderBlock(keras.layers.Layer):
    """Pre-LN transformer block: x + MHA(LN(x)), then x + MLP(LN(x)).

    Args:
        num_heads: attention heads.
        mlp_dim: MLP hidden width.
        dropout_rate: dropout after attention and inside the MLP.
        attention_dropout_rate: dropout on the attention probabilities.
        gelu_approximate: tanh-approximated GELU in the MLP.
        drop_path_rate: stochastic depth: probability of dropping each residual branch per
            example during training (0 = off, no extra layer).
        layer_scale_init: initial value of a learned per-channel scale on each residual
            branch (None = off, no extra weights).
        locality: locality self-attention (see `MultiHeadSelfAttention`).
        activation: the MLP's nonlinearity (see `MLPBlock`).
        layer_norm_epsilon: of both LayerNorms (1e-6 official; OpenAI CLIP's 1e-5).
    """

    def __init__(self, num_heads, mlp_dim, dropout_rate=0.0, attention_dropout_rate=0.0,
                 gelu_approximate=True, drop_path_rate=0.0, layer_scale_init=None,
                 locality=False, activation="gelu", layer_norm_epsilon=LAYER_NORM_EPSILON,
                 **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.mlp_dim = mlp_dim
        self.dropout_rate = dropout_rate
        self.attention_dropout_rate = attention_dropout_rate
        self.gelu_approximate = gelu_approximate
        self.drop_path_rate = drop_path_rate
        self.layer_scale_init = layer_scale_init
        self.locality = locality
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        self.input_spec = keras.layers.InputSpec(ndim=3)
        policy = self.dtype_policy
        self.layer_norm_0 = _layer_norm(names.LAYER_NORM_0, policy, layer_norm_epsilon)
        self.attention = MultiHeadSelfAttention(
            num_heads, attention_dropout_rate, locality, name=names.ATTENTION, dtype=policy)
        self.dropout = keras.layers.Dropout(dropout_rate, dtype=policy)
        self.layer_norm_2 = _layer_norm(names.LAYER_NORM_2, policy, layer_norm_epsilon)
        self.mlp = MLPBlock(mlp_dim, dropout_rate, gelu_approximate, activation,
                            name=names.MLP, dtype=policy)
        # Optional extras exist only when enabled, so the default block is the official one.
        self.drop_path = DropPath(drop_path_rate, dtype=policy) if drop_path_rate else None
        self.layer_scales = None
        if layer_scale_init is not None:
            self.layer_scales = [LayerScale(layer_scale_init, name=f"LayerScale_{i}",
                                            dtype=policy) for i in range(2)]

    def build(self, input_shape):
        extras = self.layer_scales or []
        for layer in (self.layer_norm_0, self.attention, self.layer_norm_2, self.mlp, *extras):
            layer.build(input_shape)

    def no_weight_decay(self):
        return self.attention.no_weight_decay()

    def _branch(self, index, values, training):
        """Layer scale and stochastic depth of residual branch `index`, when enabled."""
        if self.layer_scales is not None:
            values = self.layer_scales[index](values)
        if self.drop_path is not None:
            values = self.drop_path(values, training=training)
        return values

    def call(self, inputs, training=None, return_attention_scores=False, output_tokens=None):
        """Applies the block.

        Args:
            inputs: [batch, tokens, width].
            training: enables dropout.
            return_attention_scores: also return the attention probabilities.
            output_tokens: compute only the first `output_tokens` outputs (None = all). They
                equal the same rows of the full output: every token still serves as key and
                value; only the queries, the attention output and the MLP shrink.

        Returns:
            [batch, output tokens, width], plus [batch, heads, output tokens, tokens] if asked
            for.
        """
        attended = self.attention(self.layer_norm_0(inputs), training=training,
                                  return_attention_scores=return_attention_scores,
                                  num_queries=output_tokens)
        if return_attention_scores:
            attended, scores = attended
        if output_tokens is not None:
            inputs = inputs[:, :output_tokens]
        hidden = inputs + self._branch(0, self.dropout(attended, training=training), training)
        outputs = hidden + self._branch(
            1, self.mlp(self.layer_norm_2(hidden), training=training), training)
        if return_attention_scores:
            return outputs, scores
        return outputs

    def compute_output_spec(self, inputs, training=None, return_attention_scores=False,
                            output_tokens=None):
        # Without it Keras traces `call` into a scratch graph for each block of each model
        # built: about 60% of building a small model.
        batch, tokens, width = inputs.shape
        queries = tokens if output_tokens is None else \
            output_tokens if tokens is None else min(output_tokens, tokens)
        outputs = keras.KerasTensor((batch, queries, width), dtype=self.compute_dtype)
        if not return_attention_scores:
            return outputs
        return outputs, keras.KerasTensor((batch, self.num_heads, queries, tokens), "float32")

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, mlp_dim=self.mlp_dim,
                      dropout_rate=self.dropout_rate,
                      attention_dropout_rate=self.attention_dropout_rate,
                      gelu_approximate=self.gelu_approximate)
        if self.drop_path_rate:
            config.update(drop_path_rate=self.drop_path_rate)
        if self.layer_scale_init is not None:
            config.update(layer_scale_init=self.layer_scale_init)
        if self.locality:
            config.update(locality=True)
        if self.activation != "gelu":
            config.update(activation=self.activation)
        if self.layer_norm_epsilon != LAYER_NORM_EPSILON:
            config.update(layer_norm_epsilon=self.layer_norm_epsilon)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class DropPath(keras.layers.Layer):
    """Stochastic depth: zeroes a residual branch for a random subset of the examples.

    During training each example's branch is kept with probability 1 - rate and scaled by
    1 / (1 - rate); at inference the layer is the identity.

    Args:
        rate: drop probability in [0, 1).
        seed: optional int seed.
    """

    def __init__(self, rate, seed=None, **kwargs):
        super().__init__(**kwargs)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"DropPath rate must be in [0, 1), got {rate!r}")
        self.rate = rate
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)

    def call(self, inputs, training=None):
        if not training or not self.rate:
            return inputs
        keep = 1.0 - self.rate
        shape = (ops.shape(inputs)[0],) + (1,) * (len(inputs.shape) - 1)
        mask = keras.random.uniform(shape, seed=self.seed_generator) < keep
        return inputs * ops.cast(mask, inputs.dtype) / ops.cast(keep, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(rate=self.rate, seed=self.seed)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class LayerScale(keras.layers.Layer):
    """Multiplies the last axis by a learned per-channel vector `scale` (CaiT's LayerScale).

    Args:
        init_value: the initial value of every entry of `scale`.
    """

    def __init__(self, init_value, **kwargs):
        super().__init__(**kwargs)
        self.init_value = float(init_value)

    def build(self, input_shape):
        self.scale = self.add_weight(name="scale", shape=(input_shape[-1],),
                                     initializer=keras.initializers.Constant(self.init_value))

    def call(self, inputs):
        return inputs * ops.cast(self.scale, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(init_value=self.init_value)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class TokenPooling(keras.layers.Layer):
    """Reduces the token sequence to one vector: the class token ('token') or the mean ('gap').

    Args:
        mode: 'token' or 'gap'.
        start: 'token': the index of the token taken; 'gap': the first token averaged.
        stop: 'gap' only: one past the last token averaged (None = to the end). Registers
            and other extra tokens are left out this way.
    """

    def __init__(self, mode="token", start=0, stop=None, **kwargs):
        super().__init__(**kwargs)
        if mode not in ("token", "gap"):
            raise ValueError(f"TokenPooling mode must be 'token' or 'gap', got {mode!r}")
        self.mode = mode
        self.start = start
        self.stop = stop

    def call(self, tokens):
        if self.mode == "token":
            return tokens[:, self.start]
        if self.start or self.stop is not None:
            tokens = tokens[:, self.start:self.stop]
        return ops.mean(tokens, axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(mode=self.mode)
        if self.start or self.stop is not None:
            config.update(start=self.start, stop=self.stop)
        return config


@keras.saving.register_keras_serializable(package=PACKAGE)
class RegisterTokens(keras.layers.Layer):
    """Appends `num_tokens` learned register tokens (no position embedding) to the sequence.

    Registers give attention a scratch space ("Vision Transformers Need Registers", Darcet et
    al. 2024); they are dropped again at the output. Weight `registers` (1, num_tokens, D),
    initialised normal(0.02).

    Args:
        num_tokens: how many registers.
    """

    def __init__(self, num_tokens, **kwargs):
        super().__init__(**kwargs)
        self.num_tokens = num_tokens

    def build(self, input_shape):
        self.registers = self.add_weight(
            name="registers", shape=(1, self.num_tokens, input_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=0.02))

    def no_weight_decay(self):
        return [self.registers]

    def call(self, tokens):
        batch = ops.shape(tokens)[0]
        registers = ops.broadcast_to(ops.cast(self.registers, tokens.dtype),
                                     (batch, self.num_tokens, tokens.shape[-1]))
        return ops.concatenate([tokens, registers], axis=1)

    def compute_output_shape(self, input_shape):
        batch, length, width = input_shape
        return (batch, None if length is None else length + self.num_tokens, width)

    def get_config(self):
        config = super().get_config()
        config.update(num_tokens=self.num_tokens)
        return config
