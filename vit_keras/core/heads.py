"""Multihead attention pooling (MAP), big_vision's `MAPHead`: a learned probe attends to all
tokens, then a residual MLP; the result is the image representation (`classifier='map'`)."""

import keras
from keras import ops

from vit_keras.core.attention import MultiHeadSelfAttention
from vit_keras.core.initializers import PACKAGE
from vit_keras.core.layers import LAYER_NORM_EPSILON, MLPBlock
from vit_keras.core.normalization import LayerNorm


@keras.saving.register_keras_serializable(package=PACKAGE)
class MAPHead(keras.layers.Layer):
    """Attention pooling: [batch, tokens, D] -> [batch, D].

    y = Attention(query=probe, keys=values=tokens); out = y + MLP(LayerNorm(y)).
    Weights as in big_vision's `MAPHead_0`: `probe` (1, 1, D) xavier-uniform, then the
    sub-layers `MultiHeadDotProductAttention_0` (a `MultiHeadSelfAttention`), `LayerNorm_0`
    and `MlpBlock_0`.

    Args:
        num_heads: attention heads (must divide D).
        mlp_dim: hidden width of the MLP.
        gelu_approximate: tanh-approximated GELU in the MLP.
        activation: the MLP's nonlinearity (see `MLPBlock`).
        layer_norm_epsilon: of its LayerNorm.
    """

    def __init__(self, num_heads, mlp_dim, gelu_approximate=True, activation="gelu",
                 layer_norm_epsilon=LAYER_NORM_EPSILON, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.mlp_dim = mlp_dim
        self.gelu_approximate = gelu_approximate
        self.activation = activation
        self.layer_norm_epsilon = layer_norm_epsilon
        policy = self.dtype_policy
        self.attention = MultiHeadSelfAttention(
            num_heads, name="MultiHeadDotProductAttention_0", dtype=policy)
        self.layer_norm = LayerNorm(epsilon=layer_norm_epsilon, name="LayerNorm_0", dtype=policy)
        self.mlp = MLPBlock(mlp_dim, 0.0, gelu_approximate, activation, name="MlpBlock_0",
                            dtype=policy)

    def build(self, input_shape):
        width = input_shape[-1]
        self.probe = self.add_weight(name="probe", shape=(1, 1, width),
                                     initializer="glorot_uniform")
        pooled_shape = (input_shape[0], 1, width)
        for layer in (self.attention, self.layer_norm, self.mlp):
            layer.build(pooled_shape)

    def no_weight_decay(self):
        return [self.probe, *self.attention.no_weight_decay()]

    def call(self, tokens, training=None):
        batch = ops.shape(tokens)[0]
        probe = ops.broadcast_to(ops.cast(self.probe, tokens.dtype), (batch, 1, tokens.shape[-1]))
        pooled = self.attention(probe, context=tokens, training=training)
        pooled = pooled + self.mlp(self.layer_norm(pooled), training=training)
        return pooled[:, 0]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, mlp_dim=self.mlp_dim,
                      gelu_approximate=self.gelu_approximate)
        if self.activation != "gelu":
            config.update(activation=self.activation)
        if self.layer_norm_epsilon != LAYER_NORM_EPSILON:
            config.update(layer_norm_epsilon=self.layer_norm_epsilon)
        return config
