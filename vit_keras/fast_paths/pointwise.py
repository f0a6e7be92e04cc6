"""GELU and LayerNorm, forward and backward by hand, in `keras.ops` on float32 values: the
math of the training kernels that keep only their inputs for the backward pass (TensorFlow's
`FusedOp`s, JAX's `custom_vjp`s in `jax_kernels`). Each backward recomputes what it needs from
the inputs instead of reading saved float32 intermediates. The same numbers as the plain
`keras.ops` forms in the model core, to float rounding (tests/test_fast_paths.py)."""

import math

from keras import ops

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_TANH_CUBIC = 0.044715  # the cubic coefficient of the tanh approximation
_INV_SQRT_2 = 1.0 / math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _cdf_and_density(x, approximate):
    """Phi(x) and dPhi/dx, where gelu(x) = x * Phi(x); float32 tensors in and out."""
    if approximate:
        # 0.5 * (1 + tanh(z)) = sigmoid(2z): one transcendental instead of tanh plus rescaling.
        squared = ops.square(x)
        cdf = ops.sigmoid(2.0 * _SQRT_2_OVER_PI * x * (1.0 + _TANH_CUBIC * squared))
        slope = 2.0 * _SQRT_2_OVER_PI * (1.0 + 3.0 * _TANH_CUBIC * squared)
        return cdf, cdf * (1.0 - cdf) * slope
    cdf = 0.5 * (1.0 + ops.erf(x * _INV_SQRT_2))
    return cdf, _INV_SQRT_2PI * ops.exp(-0.5 * ops.square(x))


def gelu_forward(x, approximate):
    """gelu(x) in the dtype of x."""
    x32 = ops.cast(x, "float32")
    cdf, _ = _cdf_and_density(x32, approximate)
    return ops.cast(x32 * cdf, x.dtype)


def gelu_backward(x, upstream, approximate):
    """d gelu(x) / dx times `upstream`, in the dtype of x."""
    x32 = ops.cast(x, "float32")
    cdf, density = _cdf_and_density(x32, approximate)
    return ops.cast(ops.cast(upstream, "float32") * (cdf + x32 * density), x.dtype)


def _normalize(x, epsilon):
    """(x - mean) / std over the last axis and 1/std, in float32."""
    x = ops.cast(x, "float32")
    centred = x - ops.mean(x, axis=-1, keepdims=True)
    inverse_std = ops.rsqrt(ops.mean(ops.square(centred), axis=-1, keepdims=True) + epsilon)
    return centred * inverse_std, inverse_std


def layer_norm_forward(x, gamma, beta, epsilon):
    """LayerNorm of x over the last axis, scaled by gamma and shifted by beta, in x's dtype."""
    normalized, _ = _normalize(x, epsilon)
    return ops.cast(normalized * gamma + beta, x.dtype)


def layer_norm_backward(x, gamma, beta, upstream, epsilon):
    """The gradients of x, gamma and beta, each in its own dtype, for `upstream`."""
    normalized, inverse_std = _normalize(x, epsilon)
    upstream = ops.cast(upstream, "float32")
    leading_axes = tuple(range(len(x.shape) - 1))
    d_gamma = ops.sum(upstream * normalized, axis=leading_axes)
    d_beta = ops.sum(upstream, axis=leading_axes)
    d_normalized = upstream * gamma
    d_x = inverse_std * (d_normalized - ops.mean(d_normalized, axis=-1, keepdims=True)
                         - normalized * ops.mean(d_normalized * normalized, axis=-1,
                                                 keepdims=True))
    return (ops.cast(d_x, x.dtype), ops.cast(d_gamma, gamma.dtype),
            ops.cast(d_beta, beta.dtype))
