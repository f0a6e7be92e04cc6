"""Multi-head self-attention holding its weights in the official checkpoint layout."""

import math

import keras
from keras import ops

from vit_keras import fused
from vit_keras.activations import scaled_softmax
from vit_keras.initializers import PACKAGE, DenseGeneralGlorotUniform
from vit_keras.linear import dense_last_axis


@keras.saving.register_keras_serializable(package=PACKAGE)
class MultiHeadSelfAttention(keras.layers.Layer):
    """Self-attention as the official `MultiHeadDotProductAttention`.

    Weights use the released checkpoint shapes so they copy without reshaping:
    `{query,key,value}_kernel` (D, heads, head_dim), `{query,key,value}_bias` (heads, head_dim),
    `out_kernel` (heads, head_dim, D), `out_bias` (D,). Queries are scaled by 1/sqrt(head_dim).
    The softmax runs in float32 under mixed precision; when training in half precision on
    TensorFlow the scaling and softmax are one fused kernel (`activations.scaled_softmax`).

    Args:
        num_heads: number of attention heads; must divide the input width.
        dropout_rate: dropout on the attention probabilities.
    """

    def __init__(self, num_heads, dropout_rate=0.0, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.dropout_rate = dropout_rate
        self.attention_dropout = keras.layers.Dropout(dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape):
        width = input_shape[-1]
        if width % self.num_heads:
            raise ValueError(
                f"attention input width {width} is not divisible by num_heads {self.num_heads}"
            )
        head_dim = width // self.num_heads
        in_kernel = DenseGeneralGlorotUniform(num_input_axes=1)
        for name in ("query", "key", "value"):
            setattr(self, f"{name}_kernel", self.add_weight(
                name=f"{name}_kernel", shape=(width, self.num_heads, head_dim),
                initializer=in_kernel))
            setattr(self, f"{name}_bias", self.add_weight(
                name=f"{name}_bias", shape=(self.num_heads, head_dim), initializer="zeros"))
        self.out_kernel = self.add_weight(
            name="out_kernel", shape=(self.num_heads, head_dim, width),
            initializer=DenseGeneralGlorotUniform(num_input_axes=2))
        self.out_bias = self.add_weight(name="out_bias", shape=(width,), initializer="zeros")

    def call(self, inputs, training=None, return_attention_scores=False, num_queries=None):
        """Attends every token (or the first `num_queries`) to every token.

        Args:
            inputs: [batch, tokens, width].
            training: enables attention dropout.
            return_attention_scores: also return the [batch, heads, queries, tokens]
                probabilities.
            num_queries: only the first `num_queries` tokens attend (None = all); keys and
                values still come from every token.

        Returns:
            [batch, queries, width], and the probabilities if asked for.
        """
        queries = inputs if num_queries is None else inputs[:, :num_queries]
        tokens = queries.shape[1]
        head_dim = self.query_kernel.shape[-1]
        query = self._split_heads(queries, self.query_kernel, self.query_bias)
        key = self._split_heads(inputs, self.key_kernel, self.key_bias)
        value = self._split_heads(inputs, self.value_kernel, self.value_bias)
        scale = 1.0 / math.sqrt(head_dim)
        # Fused only in half precision: it saves two casts there, but in float32 one XLA
        # thread is slower than TensorFlow's multi-threaded softmax (benchmarks/fused_kernels.py).
        half_precision = self.compute_dtype != "float32"
        if training and half_precision and fused.available() and not return_attention_scores:
            weights = scaled_softmax(ops.einsum("bnth,bnsh->bnts", query, key), scale)
        else:
            logits = ops.einsum("bnth,bnsh->bnts", query * ops.cast(scale, query.dtype), key)
            probs = ops.softmax(ops.cast(logits, "float32"), axis=-1)
            weights = ops.cast(probs, self.compute_dtype)
        weights = self.attention_dropout(weights, training=training)
        context = ops.einsum("bnts,bnsh->bnth", weights, value)
        context = ops.reshape(ops.transpose(context, (0, 2, 1, 3)),
                              (-1, tokens, self.num_heads * head_dim))
        out_kernel = ops.reshape(self.out_kernel, (self.num_heads * head_dim, -1))
        outputs = dense_last_axis(context, out_kernel, self.out_bias)
        if return_attention_scores:
            return outputs, probs
        return outputs

    def _split_heads(self, inputs, kernel, bias):
        """[batch, tokens, D] -> [batch, heads, tokens, head_dim] through one 2-D MatMul."""
        width, heads, head_dim = kernel.shape
        projected = dense_last_axis(inputs, ops.reshape(kernel, (width, heads * head_dim)),
                                    ops.reshape(bias, (heads * head_dim,)))
        projected = ops.reshape(projected, (-1, inputs.shape[1], heads, head_dim))
        return ops.transpose(projected, (0, 2, 1, 3))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, dropout_rate=self.dropout_rate)
        return config
