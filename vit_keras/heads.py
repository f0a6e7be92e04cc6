"""Multihead attention pooling (MAP), big_vision's `MAPHead`: a learned probe attends to all
tokens, then a residual MLP; the result is the image representation (`classifier='map'`)."""

import keras
from keras import ops

from vit_keras.initializers import PACKAGE, DenseGeneralGlorotUniform
from vit_keras.layers import LAYER_NORM_EPSILON, MLPBlock
from vit_keras.normalization import LayerNorm


@keras.saving.register_keras_serializable(package=PACKAGE)
class MAPHead(keras.layers.Layer):
    """Attention pooling: [batch, tokens, D] -> [batch, D].

    y = Attention(query=probe, keys=values=tokens); out = y + MLP(LayerNorm(y)).
    Weights: `probe` (1, 1, D) xavier-uniform; `query_kernel`, `key_kernel`, `value_kernel`
    (D, heads, head_dim) and biases (heads, head_dim); `out_kernel` (heads, head_dim, D),
    `out_bias` (D,); the LayerNorm and the `MlpBlock`.

    Args:
        num_heads: attention heads (must divide D).
        mlp_dim: hidden width of the MLP.
        gelu_approximate: tanh-approximated GELU in the MLP.
    """

    def __init__(self, num_heads, mlp_dim, gelu_approximate=True, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.mlp_dim = mlp_dim
        self.gelu_approximate = gelu_approximate
        self.layer_norm = LayerNorm(epsilon=LAYER_NORM_EPSILON, name="LayerNorm",
                                    dtype=self.dtype_policy)
        self.mlp = MLPBlock(mlp_dim, 0.0, gelu_approximate, name="MlpBlock",
                            dtype=self.dtype_policy)

    def build(self, input_shape):
        width = input_shape[-1]
        if width % self.num_heads:
            raise ValueError(f"MAPHead: width {width} is not divisible by num_heads "
                             f"{self.num_heads}")
        head_dim = width // self.num_heads
        self.probe = self.add_weight(name="probe", shape=(1, 1, width),
                                     initializer="glorot_uniform")
        kernel = DenseGeneralGlorotUniform(num_input_axes=1)
        for part in ("query", "key", "value"):
            setattr(self, f"{part}_kernel", self.add_weight(
                name=f"{part}_kernel", shape=(width, self.num_heads, head_dim),
                initializer=kernel))
            setattr(self, f"{part}_bias", self.add_weight(
                name=f"{part}_bias", shape=(self.num_heads, head_dim), initializer="zeros"))
        self.out_kernel = self.add_weight(name="out_kernel",
                                          shape=(self.num_heads, head_dim, width),
                                          initializer=DenseGeneralGlorotUniform(2))
        self.out_bias = self.add_weight(name="out_bias", shape=(width,), initializer="zeros")
        self.layer_norm.build((input_shape[0], 1, width))
        self.mlp.build((input_shape[0], 1, width))

    def call(self, tokens):
        dtype = tokens.dtype
        batch = ops.shape(tokens)[0]
        probe = ops.broadcast_to(ops.cast(self.probe, dtype), (batch, 1, tokens.shape[-1]))

        def project(x, part):
            kernel = ops.cast(getattr(self, f"{part}_kernel"), dtype)
            return ops.einsum("btd,dnh->btnh", x, kernel) + ops.cast(
                getattr(self, f"{part}_bias"), dtype)

        query = project(probe, "query")
        key, value = project(tokens, "key"), project(tokens, "value")
        head_dim = query.shape[-1]
        logits = ops.einsum("bqnh,bknh->bnqk", query, key) / ops.cast(head_dim ** 0.5, dtype)
        weights = ops.softmax(ops.cast(logits, "float32"), axis=-1)
        attended = ops.einsum("bnqk,bknh->bqnh", ops.cast(weights, dtype), value)
        pooled = ops.einsum("bqnh,nhd->bqd", attended, ops.cast(self.out_kernel, dtype))
        pooled = pooled + ops.cast(self.out_bias, dtype)
        pooled = pooled + self.mlp(self.layer_norm(pooled))
        return pooled[:, 0]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, mlp_dim=self.mlp_dim,
                      gelu_approximate=self.gelu_approximate)
        return config
