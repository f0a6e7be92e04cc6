"""Dense projections computed as one 2-D matrix product."""

from keras import ops


def dense_last_axis(inputs, kernel, bias):
    """`inputs[..., K] @ kernel[K, N] + bias` with the leading axes folded into one.

    TensorFlow runs a rank-3 input against a 2-D kernel as a broadcast BatchMatMul, whose kernel
    gradient is a batched product plus a reduction; folding [batch, tokens] into one axis makes it
    a single MatMul (about 1.1-1.5x faster forward + backward on CPU, same numbers to float
    rounding).

    Args:
        inputs: [..., K] with static inner axes (all but the first).
        kernel: [K, N].
        bias: [N].

    Returns:
        [..., N].
    """
    outputs = ops.matmul(ops.reshape(inputs, (-1, kernel.shape[0])), kernel) + bias
    return ops.reshape(outputs, (-1, *inputs.shape[1:-1], kernel.shape[-1]))
