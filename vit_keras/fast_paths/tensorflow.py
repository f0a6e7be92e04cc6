"""TensorFlow training kernels: GELU, LayerNorm (their math in `pointwise`) and the scaled
softmax, each one XLA-compiled loop forward and one backward in float32 (see `fused.FusedOp`).
The same math as the plain `keras.ops` forms in the model core, to float rounding
(tests/test_fast_paths.py)."""

from keras import ops

from vit_keras.fast_paths import pointwise
from vit_keras.fast_paths.fused import FusedOp

gelu = FusedOp(pointwise.gelu_forward, pointwise.gelu_backward)
"""gelu(x, approximate=...) in the dtype of x."""


def _probabilities(logits, scale):
    import tensorflow as tf

    return tf.nn.softmax(tf.cast(logits, tf.float32) * scale, axis=-1)


def _softmax_forward(logits, scale):
    import tensorflow as tf

    return tf.cast(_probabilities(logits, scale), logits.dtype)


def _softmax_backward(logits, upstream, scale):
    import tensorflow as tf

    probs = _probabilities(logits, scale)  # recomputed rather than kept as a float32 copy
    upstream = tf.cast(upstream, tf.float32)
    inner = tf.reduce_sum(upstream * probs, axis=-1, keepdims=True)
    return tf.cast(scale * probs * (upstream - inner), logits.dtype)


scaled_softmax = FusedOp(_softmax_forward, _softmax_backward)
"""softmax(scale * logits) over the last axis, in the dtype of the logits."""


layer_norm = FusedOp(pointwise.layer_norm_forward, pointwise.layer_norm_backward)
"""layer_norm(x, gamma, beta, epsilon=...) over the last axis, in the dtype of x."""


def attention_with_fused_softmax(query, key, value, scale, dropout):
    """softmax(q.k^T * scale).v with the fused softmax, on [batch, tokens, heads, head_dim]."""
    weights = dropout(scaled_softmax(ops.einsum("btnh,bsnh->bnts", query, key), scale=scale))
    return ops.einsum("bnts,bsnh->btnh", weights, value)
