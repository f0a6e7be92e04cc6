"""Graph forms for TFLite and ONNX export: the same values, traced as operators the runtimes
run well.

`vit_keras.export.tflite` traces the model inside `tflite_form()`; layers that have a better
form for the converter ask `active()` / `integer()` while they are traced:

- `LayerNorm` and `GroupNorm` (every TFLite export) use (x - mean) / std * gamma + beta, whose
  operators all have int8 kernels (Keras' form leaves a float NEG in int8 files); in
  full-integer files LayerNorm's statistics are one L2_NORMALIZATION (rows of up to 512
  values), which normalises small-valued rows as exactly as large ones;
- `MultiHeadSelfAttention` (full-integer int8 with a static batch) computes each head's q.k^T
  and probs.v as FULLY_CONNECTED operators with activation weights: LiteRT's int8
  FULLY_CONNECTED is several times faster than its int8 BATCH_MATMUL, which XNNPACK does not
  take (benchmarks/litert_int8_kernels.py).
"""

import contextlib
import contextvars
import math

from keras import ops

_FORM = contextvars.ContextVar("vit_keras_export_form", default=None)


@contextlib.contextmanager
def onnx_form():
    """Layers traced inside this context take their ONNX forms: the TFLite float forms, whose
    LayerNorm `vit_keras.export.onnx_graph` recognises and fuses, and the exact GELU spelled
    with Erf (TensorFlow's own uses Erfc, which ONNX lacks)."""
    token = _FORM.set("onnx")
    try:
        yield
    finally:
        _FORM.reset(token)


@contextlib.contextmanager
def tflite_form(integer: bool = False):
    """Layers traced inside this context take their TFLite forms.

    Args:
        integer: the file is full-integer int8 (enables the forms that only pay off there).
    """
    token = _FORM.set("integer" if integer else "float")
    try:
        yield
    finally:
        _FORM.reset(token)


def active() -> bool:
    """True while a TFLite export traces the model."""
    return _FORM.get() is not None


def onnx() -> bool:
    """True while an ONNX export traces the model."""
    return _FORM.get() == "onnx"


def exact_gelu(x):
    """0.5 x (1 + erf(x / sqrt(2))): the exact GELU as ONNX's Erf operator runs it."""
    return 0.5 * x * (1.0 + ops.erf(x * 0.7071067811865476))


def integer() -> bool:
    """True while a full-integer int8 TFLite export traces the model."""
    return _FORM.get() == "integer"


# Multiply-adds of one head's q.k^T above which full-integer export unrolls the heads.
UNROLL_MIN_MACS_PER_HEAD = 2**15
# The TFLite converter fuses a row's norm into L2_NORMALIZATION only when the floor under its
# sum of squares is below 1e-3 (LiteRT's kernel then applies its own).
L2_NORMALIZATION_MAX_FLOOR = 1e-4
# L2_NORMALIZATION's int8 output is the unit row at a fixed scale of 1/128: up to ViT-S's 384
# values a row it is as exact as the spelled-out LayerNorm on rows of one size, and wider it
# loses to it (benchmarks/int8_layer_norm.py: 0.057 against 0.042 at 768).
L2_NORMALIZATION_MAX_WIDTH = 512


def centred_layer_norm(x, gamma, beta, epsilon):
    """(x - mean) / std * gamma + beta over the last axis, in float32.

    Keras' x * s + (beta - mean * s) leaves a float NEG in int8 TFLite files; this form's
    operators all have int8 kernels, and the converter folds its trailing `* gamma + beta` into
    the next FULLY_CONNECTED's weights. A full-integer file normalises rows of up to
    `L2_NORMALIZATION_MAX_WIDTH` values through LiteRT's L2_NORMALIZATION
    (`integer_normalised_rows`).
    """
    if integer() and x.shape[-1] <= L2_NORMALIZATION_MAX_WIDTH:
        return integer_normalised_rows(x, epsilon) * gamma + beta
    centred = x - ops.mean(x, axis=-1, keepdims=True)
    variance = ops.mean(centred * centred, axis=-1, keepdims=True)
    return centred * ops.rsqrt(variance + epsilon) * gamma + beta


def integer_normalised_rows(x, epsilon):
    """(x - mean) / sqrt(variance + epsilon) over the last axis, spelled as sqrt(width) times
    the centred row over its L2 norm, which the TFLite converter fuses into one
    L2_NORMALIZATION operator (width * epsilon, at most `L2_NORMALIZATION_MAX_FLOOR`, bounds
    the sum of squares from below instead of adding to it: the same values unless a row's
    variance is near epsilon).

    Spelled out in int8, the squares and the variances are tensors with one scale each, set by
    the largest: a row whose values are a tenth as large kept a few steps of its variance
    and was normalised by the wrong size (a detector's boxes moved by pixels).
    L2_NORMALIZATION sums each row's squares in int32 and normalises small and large rows
    alike. The mean is added negated: a subtraction fuses with the square into
    SQUARED_DIFFERENCE, which the converter then does not recognise as a norm.
    """
    width = x.shape[-1]
    centred = x + ops.mean(x, axis=-1, keepdims=True) * -1.0
    squares = ops.sum(ops.square(centred), axis=-1, keepdims=True)
    floor = min(width * epsilon, L2_NORMALIZATION_MAX_FLOOR)
    return centred * ops.rsqrt(ops.maximum(squares, floor)) * math.sqrt(width)


def centred_group_norm(x, groups, epsilon, gamma=None, beta=None):
    """GroupNormalization over channels-last [batch, H, W, C] `x` in the same centred form, in
    float32.

    Each statistic is a mean over the channels of a group, then over the positions: two means
    over one axis each, which every runtime computes alike (OpenCV's DNN module gets a single
    mean over the non-adjacent axes (1, 2, 4) of a 5-D tensor wrong).
    """
    _, height, width, channels = ops.shape(x)  # static where known: the graph keeps no Shape
    grouped = ops.reshape(x, (-1, height * width, groups, channels // groups))

    def group_mean(values):
        return ops.mean(ops.mean(values, axis=-1, keepdims=True), axis=1, keepdims=True)

    centred = grouped - group_mean(grouped)
    variance = group_mean(centred * centred)
    outputs = ops.reshape(centred * ops.rsqrt(variance + epsilon), ops.shape(x))
    if gamma is not None:
        outputs = outputs * gamma
    if beta is not None:
        outputs = outputs + beta
    return outputs


def unroll_heads(query, key) -> bool:
    """Whether a full-integer TFLite export should trace `per_head_attention`.

    Each unrolled head adds a few operators of fixed cost, while LiteRT's int8 BATCH_MATMUL
    costs per multiply-add, so unrolling pays off only for large heads: at ViT-S/16 (197
    tokens, head_dim 64) the file runs 2.8x faster, at the 16-token digits model (head_dim 16)
    10% slower (benchmarks/litert_int8_kernels.py).
    """
    if not integer() or key.shape[0] is None:
        return False
    return query.shape[1] * key.shape[1] * query.shape[-1] >= UNROLL_MIN_MACS_PER_HEAD


def per_head_attention(query, key, value, scale):
    """softmax(q.k^T * scale).v unrolled over the (static) batch and the heads into 2-D
    products with activation weights, which TFLite converts to FULLY_CONNECTED: LiteRT's int8
    FULLY_CONNECTED is several times faster than its int8 BATCH_MATMUL. TensorFlow-only.

    Args:
        query: [batch, queries, heads, head_dim]; key, value: [batch, keys, heads, head_dim].

    Returns:
        [batch, queries, heads, head_dim].
    """
    import tensorflow as tf

    # One transpose of all values, sliced per head: the product then takes activation weights
    # (a transpose right before each product would be folded into an int8 BATCH_MATMUL).
    value_t = tf.transpose(value, (0, 2, 3, 1))  # [batch, heads, head_dim, keys]
    query = query * scale
    per_example = []
    for b in range(key.shape[0]):
        per_head = []
        for h in range(key.shape[2]):
            logits = tf.matmul(query[b, :, h], key[b, :, h], transpose_b=True)
            probs = tf.nn.softmax(logits, axis=-1)
            per_head.append(tf.matmul(probs, value_t[b, h], transpose_b=True))
        per_example.append(tf.stack(per_head, axis=1))
    return tf.stack(per_example)


def argmax_top_k(scores, k: int):
    """[batch, n] scores in (0, 1] -> int32 [batch, k]: the indices of the k largest, best
    first, as k ARG_MAX steps, each chosen score then set to zero (SELECT_V2). Full-integer TFLite
    has no int8 TOPK_V2; these operators all have int8 kernels. Ties go to the lower index,
    as `top_k`'s."""
    import tensorflow as tf  # only TFLite exports trace this form

    count = scores.shape[-1]
    positions = ops.arange(count, dtype="int32")[None]
    chosen = []
    for _ in range(k):
        # TensorFlow's own ArgMax: Keras' adds a BitwiseAnd for -0.0, which TFLite lacks
        index = tf.math.argmax(scores, axis=-1, output_type=tf.int32)
        chosen.append(index)
        scores = ops.where(ops.equal(positions, index[:, None]), ops.zeros_like(scores), scores)
    return ops.stack(chosen, axis=-1)
