"""Multi-head dot-product attention from Keras `EinsumDense` projections in the official
checkpoint layout."""

import math

import keras
from keras import ops

from vit_keras import fast_paths, legacy, names
from vit_keras.fast_paths import project, training_forms
from vit_keras.core.initializers import PACKAGE, DenseGeneralGlorotUniform

# The projections' names inside the layer: LoRA and quantization filters select them by name.
PROJECTIONS = names.ATTENTION_PROJECTIONS


def head_projection(name, num_heads, head_dim, dtype):
    """[batch, tokens, D] -> [batch, tokens, heads, head_dim]; kernel (D, heads, head_dim)."""
    return keras.layers.EinsumDense(
        "btd,dnh->btnh", output_shape=(None, num_heads, head_dim), bias_axes="nh",
        kernel_initializer=DenseGeneralGlorotUniform(num_input_axes=1), name=name, dtype=dtype)


def output_projection(width, dtype):
    """[batch, tokens, heads, head_dim] -> [batch, tokens, D]; kernel (heads, head_dim, D)."""
    return keras.layers.EinsumDense(
        "btnh,nhd->btd", output_shape=(None, width), bias_axes="d",
        kernel_initializer=DenseGeneralGlorotUniform(num_input_axes=2), name=PROJECTIONS[3],
        dtype=dtype)


@keras.saving.register_keras_serializable(package=PACKAGE)
class MultiHeadSelfAttention(keras.layers.Layer):
    """The official `MultiHeadDotProductAttention`: self-attention, or cross-attention when
    `call` is given a `context` (the MAP head's probe attending to the tokens).

    Its four projections are Keras `EinsumDense` layers named `query`, `key`, `value` and
    `out`, so `quantize` and `enable_lora` work on them. Their weights have the released
    checkpoint shapes: `{query,key,value}/kernel` (D, heads, head_dim), `/bias` (heads,
    head_dim), `out/kernel` (heads, head_dim, D), `out/bias` (D,). Queries are scaled by
    1/sqrt(head_dim); the softmax runs in float32 under mixed precision. Backend kernels for
    the same math are chosen in `vit_keras.fast_paths`.

    Args:
        num_heads: number of attention heads; must divide the input width.
        dropout_rate: dropout on the attention probabilities.
        locality: locality self-attention (Lee et al. 2021): a learned temperature per head
            (weight `temperature` (heads,), initialised to 1/sqrt(head_dim)) replaces the
            fixed scale, and no token attends to itself (the diagonal of the logits is
            masked). Self-attention only.
    """

    def __init__(self, num_heads, dropout_rate=0.0, locality=False, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.dropout_rate = dropout_rate
        self.locality = locality
        self.attention_dropout = keras.layers.Dropout(dropout_rate, dtype=self.dtype_policy)

    def build(self, input_shape):
        width = input_shape[-1]
        if width % self.num_heads:
            raise ValueError(
                f"attention input width {width} is not divisible by num_heads {self.num_heads}"
            )
        head_dim = width // self.num_heads
        policy = self.dtype_policy
        self.query, self.key, self.value = (head_projection(name, self.num_heads, head_dim, policy)
                                            for name in PROJECTIONS[:3])
        self.out = output_projection(width, policy)
        for projection in (self.query, self.key, self.value):
            projection.build(input_shape)
        self.out.build((*input_shape[:-1], self.num_heads, head_dim))
        if self.locality:
            self.temperature = self.add_weight(
                name="temperature", shape=(self.num_heads,),
                initializer=keras.initializers.Constant(1.0 / math.sqrt(head_dim)))

    def no_weight_decay(self):
        """The (heads, head_dim) biases, which the 1-D rule of `vit_keras.no_weight_decay`
        does not catch."""
        return [self.query.bias, self.key.bias, self.value.bias]

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
        cross = context is not None and context is not inputs
        if cross and self.locality:
            raise ValueError("locality attention masks each token's attention to itself: it "
                             "needs self-attention, got a separate context")
        query, key, value = self._project(inputs, inputs if context is None else context,
                                          num_queries)
        attended, probs = self._attend(query, key, value, training, return_attention_scores)
        outputs = project(self.out, attended)
        return (outputs, probs) if return_attention_scores else outputs

    def _project(self, inputs, context, num_queries):
        """Queries from the first `num_queries` tokens of `inputs`, keys and values from
        `context`: three [batch, tokens, heads, head_dim] tensors (one matrix product under
        `training_forms`' fused_qkv, for plain self-attention)."""
        if context is inputs and num_queries is None:
            fused = training_forms.fused_self_attention_projections(
                self.query, self.key, self.value, inputs)
            if fused is not None:
                return fused
        queries = inputs if num_queries is None else inputs[:, :num_queries]
        return project(self.query, queries), project(self.key, context), project(
            self.value, context)

    def _attend(self, query, key, value, training, return_attention_scores):
        """softmax(q.k^T * scale).v: ([batch, t, heads, head_dim], the float32 probabilities
        [batch, heads, t, s] or None).

        The scale is 1/sqrt(head_dim), or with locality each head's learned temperature, and
        each query's own key is left out of its softmax: a large negative logit instead would
        set the range of the logits' int8 scale in a full-integer export and squash every real
        logit into one step of it. Without locality and unless the probabilities are asked
        for, a backend kernel may run it (`vit_keras.fast_paths.attention`).
        """
        if not (self.locality or return_attention_scores):
            attended = fast_paths.attention(
                query, key, value, 1.0 / math.sqrt(query.shape[-1]),
                lambda weights: self.attention_dropout(weights, training=training), training,
                self.dropout_rate)
            if attended is not None:
                return attended, None
        logits = ops.cast(ops.einsum("btnh,bsnh->bnts", self._scaled(query), key), "float32")
        if self.locality:  # query i is token i: the queries are the first tokens of the keys
            probs = with_own_keys_zeroed(ops.softmax(without_own_keys(logits), axis=-1))
        else:
            probs = ops.softmax(logits, axis=-1)
        weights = self.attention_dropout(ops.cast(probs, self.compute_dtype), training=training)
        return ops.einsum("bnts,bsnh->btnh", weights, value), probs

    def _scaled(self, query):
        """The queries times the logits' scale: each head's learned temperature with locality,
        else 1/sqrt(head_dim)."""
        if self.locality:
            return query * ops.cast(self.temperature, query.dtype)[:, None]
        return query * ops.cast(1.0 / math.sqrt(query.shape[-1]), query.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def load_own_variables(self, store):
        # Its projections live in its EinsumDense sublayers; the earlier release kept them
        # here. Its own weight now is the locality temperature.
        if self.locality:
            super().load_own_variables(store)
        else:
            legacy.refuse_legacy_variables(self, store)

    def get_config(self):
        config = super().get_config()
        config.update(num_heads=self.num_heads, dropout_rate=self.dropout_rate)
        if self.locality:
            config.update(locality=True)
        return config


def without_own_keys(logits):
    """Each query's logits without the one of its own token.

    Only reshapes, slices and concatenations, which keep every value (and an int8 tensor's
    scale) as it is. Query i is token i, so the left-out entries are the diagonal of the first
    `queries` keys.

    Args:
        logits: [batch, heads, queries, keys] with queries <= keys.

    Returns:
        [batch, heads, queries, keys - 1]; row i lists keys 0..i-1, i+1.. in order.
    """
    heads, queries = logits.shape[1], logits.shape[2]
    if queries == 1:
        return logits[..., 1:]
    square = queries is not None and queries == logits.shape[3]
    queries = queries or ops.shape(logits)[2]
    # Flattened, a square's diagonal entries are `queries + 1` apart, starting at 0: dropping
    # the first entry and cutting rows of `queries + 1` puts each in the last column.
    flat = ops.reshape(logits[..., :queries], (-1, heads, queries * queries))[..., 1:]
    rows = ops.reshape(flat, (-1, heads, queries - 1, queries + 1))[..., :queries]
    rows = ops.reshape(rows, (-1, heads, queries, queries - 1))
    # No empty slice of the other keys when there are none: small runtimes refuse empty tensors.
    return rows if square else ops.concatenate([rows, logits[..., queries:]], -1)


def with_own_keys_zeroed(probs):
    """The inverse of `without_own_keys`, with 0 where each query's own key was.

    Args:
        probs: [batch, heads, queries, keys - 1].

    Returns:
        [batch, heads, queries, keys], zero on the diagonal of the first `queries` keys.
    """
    heads, queries = probs.shape[1], probs.shape[2]
    if queries == 1:
        return ops.pad(probs, [[0, 0], [0, 0], [0, 0], [1, 0]])
    square = queries is not None and queries == probs.shape[3] + 1
    queries = queries or ops.shape(probs)[2]
    rows = ops.reshape(probs[..., :queries - 1], (-1, heads, queries - 1, queries))
    rows = ops.pad(rows, [[0, 0], [0, 0], [0, 0], [0, 1]])
    flat = ops.pad(ops.reshape(rows, (-1, heads, queries * queries - 1)),
                   [[0, 0], [0, 0], [1, 0]])
    restored = ops.reshape(flat, (-1, heads, queries, queries))
    return restored if square else ops.concatenate([restored, probs[..., queries - 1:]], -1)
