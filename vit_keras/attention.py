"""Multi-head dot-product attention holding its weights in the official checkpoint layout."""

import math

import keras
from keras import ops

from vit_keras import export_forms, fused
from vit_keras.activations import scaled_softmax
from vit_keras.initializers import PACKAGE, DenseGeneralGlorotUniform
from vit_keras.linear import dense_last_axis


# Multiply-adds of one head's q.k^T above which full-integer export unrolls the heads.
_UNROLL_MIN_MACS_PER_HEAD = 2**15


def dot_product_attention_available() -> bool:
    """Whether attention may run as one `keras.ops.dot_product_attention`: on JAX.

    There Keras picks cuDNN flash attention on recent NVIDIA GPUs and Splash attention on TPUs
    where the shapes and dtypes allow, and XLA's own attention otherwise; logits and softmax
    stay float32 under mixed precision. TensorFlow keeps the einsum form, which its fused
    softmax, grappler and TFLite export expect.
    """
    return keras.backend.backend() == "jax"


@keras.saving.register_keras_serializable(package=PACKAGE)
class MultiHeadSelfAttention(keras.layers.Layer):
    """The official `MultiHeadDotProductAttention`: self-attention, or cross-attention when
    `call` is given a `context` (the MAP head's probe attending to the tokens).

    Weights use the released checkpoint shapes so they copy without reshaping:
    `{query,key,value}_kernel` (D, heads, head_dim), `{query,key,value}_bias` (heads, head_dim),
    `out_kernel` (heads, head_dim, D), `out_bias` (D,). Queries are scaled by 1/sqrt(head_dim).
    The softmax runs in float32 under mixed precision; when training in half precision on
    TensorFlow the scaling and softmax are one fused kernel (`activations.scaled_softmax`). On
    JAX, when no dropout acts on the probabilities and none are returned, the whole attention
    is one `keras.ops.dot_product_attention` at inference (see `dot_product_attention_available`).

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

    def no_weight_decay(self):
        """The (heads, head_dim) biases, which the 1-D rule of `vit_keras.no_weight_decay`
        does not catch."""
        return [self.query_bias, self.key_bias, self.value_bias]

    def call(self, inputs, context=None, training=None, return_attention_scores=False,
             num_queries=None):
        """Attends the queries of `inputs` to the keys and values of `context`.

        Args:
            inputs: [batch, tokens, width], the queries.
            context: [batch, keys, width], the keys and values (None = `inputs`:
                self-attention).
            training: enables attention dropout.
            return_attention_scores: also return the [batch, heads, queries, keys]
                probabilities.
            num_queries: only the first `num_queries` tokens of `inputs` attend (None = all);
                keys and values still come from every token of `context`.

        Returns:
            [batch, queries, width], and the probabilities if asked for.
        """
        context = inputs if context is None else context
        queries = inputs if num_queries is None else inputs[:, :num_queries]
        if self._unroll_for_integer_export(queries, context) and not return_attention_scores:
            return self._per_head_fully_connected(queries, context)
        # Inference only: on an H100, ViT-B/16 bf16 infers 1.20x faster through it but trains
        # 0.93x as fast as with the einsum form below (benchmarks/backends_gpu.py).
        if dot_product_attention_available() and not training and not return_attention_scores:
            return self._dot_product_attention(queries, context)
        head_dim = self.query_kernel.shape[-1]
        query = self._split_heads(queries, "query")
        key = self._split_heads(context, "key")
        value = self._split_heads(context, "value")
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
        attended = ops.einsum("bnts,bnsh->bnth", weights, value)
        outputs = self._merge_heads(ops.transpose(attended, (0, 2, 1, 3)))
        if return_attention_scores:
            return outputs, probs
        return outputs

    def _dot_product_attention(self, queries, context):
        """The same attention as one `keras.ops.dot_product_attention` (no dropout, no
        probabilities), in its [batch, tokens, heads, head_dim] layout."""
        head_dim = self.query_kernel.shape[-1]
        attended = ops.dot_product_attention(
            self._heads(queries, "query"), self._heads(context, "key"),
            self._heads(context, "value"), scale=1.0 / math.sqrt(head_dim))
        return self._merge_heads(attended)

    def _merge_heads(self, attended):
        """[batch, tokens, heads, head_dim] -> the output projection [batch, tokens, D]."""
        _, tokens, heads, head_dim = ops.shape(attended)
        attended = ops.reshape(attended, (-1, tokens, heads * head_dim))
        out_kernel = ops.reshape(self.out_kernel, (heads * head_dim, -1))
        return dense_last_axis(attended, out_kernel, self.out_bias)

    def _unroll_for_integer_export(self, queries, context):
        """Whether a full-integer TFLite export should trace `_per_head_fully_connected`.

        Each unrolled head adds a few operators of fixed cost, while LiteRT's int8
        BATCH_MATMUL costs per multiply-add, so unrolling pays off only for large heads: at
        ViT-S/16 (197 tokens, head_dim 64) the file runs 2.8x faster, at the 16-token digits
        model (head_dim 16) 10% slower (benchmarks/litert_int8_kernels.py).
        """
        if not export_forms.integer() or context.shape[0] is None:
            return False
        head_dim = self.query_kernel.shape[-1]
        return queries.shape[1] * context.shape[1] * head_dim >= _UNROLL_MIN_MACS_PER_HEAD

    def _per_head_fully_connected(self, queries, context):
        """The same attention, unrolled over the (static) batch and the heads into 2-D
        products with activation weights, which TFLite converts to FULLY_CONNECTED: the form
        full-integer export traces (see `vit_keras.export_forms`). TensorFlow-only."""
        import tensorflow as tf

        width, heads, head_dim = self.query_kernel.shape
        query = self._project(queries, "query") * (1.0 / math.sqrt(head_dim))
        key = self._project(context, "key")
        value_t = tf.transpose(self._project(context, "value"), (0, 2, 1))  # [batch, D, keys]
        per_example = []
        for b in range(context.shape[0]):
            per_head = []
            for h in range(heads):
                part = slice(h * head_dim, (h + 1) * head_dim)
                logits = tf.matmul(query[b, :, part], key[b, :, part], transpose_b=True)
                probs = tf.nn.softmax(logits, axis=-1)
                per_head.append(tf.matmul(probs, value_t[b, part], transpose_b=True))
            per_example.append(tf.concat(per_head, axis=-1))
        out_kernel = ops.reshape(self.out_kernel, (heads * head_dim, width))
        return dense_last_axis(tf.stack(per_example), out_kernel, self.out_bias)

    def _project(self, inputs, name):
        """[batch, tokens, D] -> [batch, tokens, heads * head_dim] for query/key/value."""
        kernel, bias = getattr(self, f"{name}_kernel"), getattr(self, f"{name}_bias")
        width, heads, head_dim = kernel.shape
        return dense_last_axis(inputs, ops.reshape(kernel, (width, heads * head_dim)),
                               ops.reshape(bias, (heads * head_dim,)))

    def _heads(self, inputs, name):
        """[batch, tokens, D] -> [batch, tokens, heads, head_dim] through one 2-D MatMul."""
        _, heads, head_dim = self.query_kernel.shape
        return ops.reshape(self._project(inputs, name),
                           (-1, ops.shape(inputs)[1], heads, head_dim))

    def _split_heads(self, inputs, name):
        """[batch, tokens, D] -> [batch, heads, tokens, head_dim]."""
        return ops.transpose(self._heads(inputs, name), (0, 2, 1, 3))

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, dropout_rate=self.dropout_rate)
        return config
