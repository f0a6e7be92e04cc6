"""JAX training kernels, opt-in through `training_forms`: attention padded to lengths cuDNN's
flash attention trains at, and GELU and LayerNorm whose backward pass keeps only their inputs.

- `padded_attention`: cuDNN's fused attention refuses to train at ViT lengths such as 197
  ('Unsupported sequence length Q 197, KV 197'), and Keras' `ops.dot_product_attention` then
  falls back to XLA's einsum form without a word, keeping the float32 [batch, heads, 197, 197]
  probabilities for the backward pass. Here the tokens are padded to a multiple of
  `PAD_MULTIPLE`, the pad keys masked by `key_value_seq_lengths` (a padding mask the kernel
  applies itself, no bias tensor), and the outputs sliced back: the same numbers
  (tests/test_jax_kernels.py checks values and gradients through XLA's implementation on the
  CPU). A refusal is raised, never replaced by another kernel.
- `gelu`, `layer_norm`: autodiff of the plain forms keeps every float32 intermediate of the
  tanh chain and of the normalisation ([tokens, mlp_dim] several times per block); these keep
  the input in its own dtype (bfloat16 under mixed precision) and recompute the rest in the
  backward pass (`pointwise`), which XLA fuses into the gradient's elementwise loop.
"""

from __future__ import annotations

import functools

from keras import ops

from vit_keras.fast_paths import pointwise

# A multiple of 64, the tile of cuDNN's flash kernels, meets the length rules JAX checks before
# training with it (even lengths, multiples of 64 or 128 in some releases); 197 -> 256 adds
# attention work only, not projections.
PAD_MULTIPLE = 64


def padded_length(tokens: int) -> int:
    """The multiple of `PAD_MULTIPLE` at or above `tokens`."""
    return -(-tokens // PAD_MULTIPLE) * PAD_MULTIPLE


def _pad_tokens(tensor, length: int):
    import jax.numpy as jnp

    return jnp.pad(tensor, ((0, 0), (0, length - tensor.shape[1]), (0, 0), (0, 0)))


def padded_attention(query, key, value, scale: float, implementation: str = "cudnn"):
    """softmax(q.k^T * scale).v through `jax.nn.dot_product_attention` at padded lengths.

    Args:
        query: [batch, queries, heads, head_dim] (a block's tokens, or the class token alone).
        key, value: [batch, keys, heads, head_dim].
        scale: the Python float multiplying the logits.
        implementation: 'cudnn' (the fused kernel; bfloat16 or float16 on an NVIDIA GPU) or
            'xla' (the same padding through XLA's form: the parity check on any device).

    Returns:
        [batch, queries, heads, head_dim].

    Raises:
        RuntimeError: the kernel refused the shapes, dtype or device, with what to change.
    """
    import jax
    import jax.numpy as jnp

    queries, keys = query.shape[1], key.shape[1]
    lengths = jnp.full((key.shape[0],), keys, jnp.int32)
    padded = [_pad_tokens(query, padded_length(queries)),
              _pad_tokens(key, padded_length(keys)), _pad_tokens(value, padded_length(keys))]
    try:
        attended = jax.nn.dot_product_attention(*padded, scale=scale,
                                                key_value_seq_lengths=lengths,
                                                implementation=implementation)
    except (NotImplementedError, RuntimeError, ValueError) as error:
        raise RuntimeError(
            f"loop.attention_kernel: {implementation} attention refused queries "
            f"{tuple(query.shape)} and keys {tuple(key.shape)} of {query.dtype} padded to "
            f"{padded_length(queries)} and {padded_length(keys)} tokens: {error}. It needs an "
            "NVIDIA GPU (Ampere or later) with cuDNN 9, bfloat16 or float16 (--set "
            "loop.mixed_precision=mixed_bfloat16) and a head size that is a multiple of 8 up to "
            "128 (256 on Hopper); or set loop.attention_kernel=false") from error
    return attended[:, :queries]


def _keeping_inputs(forward, backward):
    """`forward(*inputs, **static)` as a `jax.custom_vjp` whose backward pass keeps only the
    inputs and calls `backward(*inputs, upstream, **static)` (one gradient or a tuple)."""
    import jax

    @functools.lru_cache(maxsize=None)
    def for_static(static_items):
        static = dict(static_items)

        @jax.custom_vjp
        def op(*inputs):
            return forward(*inputs, **static)

        def keep(*inputs):
            return forward(*inputs, **static), inputs

        def gradients(inputs, upstream):
            found = backward(*inputs, upstream, **static)
            return found if isinstance(found, tuple) else (found,)

        op.defvjp(keep, gradients)
        return op

    def call(*inputs, **static):
        tensors = [ops.convert_to_tensor(value) for value in inputs]  # variables read here
        return for_static(tuple(sorted(static.items())))(*tensors)

    return call


gelu = _keeping_inputs(pointwise.gelu_forward, pointwise.gelu_backward)
"""gelu(x, approximate=...) in the dtype of x, keeping x alone for the backward pass."""

layer_norm = _keeping_inputs(pointwise.layer_norm_forward, pointwise.layer_norm_backward)
"""layer_norm(x, gamma, beta, epsilon=...) over the last axis, in the dtype of x, keeping x
(and the weights) alone for the backward pass."""
