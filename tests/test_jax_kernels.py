"""The padded attention of `vit_keras.fast_paths.jax_kernels` equals the plain attention,
forward and gradients, inside remat too, and hands the kernel only padded lengths; where the
kernel refuses, it says so instead of running another one. JAX itself, on the CPU, through
XLA's implementation of the same padding and masking (the cuDNN kernel needs an NVIDIA GPU)."""

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from vit_keras.fast_paths import jax_kernels  # noqa: E402

SCALE = 0.125  # 1 / sqrt(head_dim 64)


def _plain(query, key, value, scale=SCALE):
    logits = jnp.einsum("btnh,bsnh->bnts", query, key).astype(jnp.float32) * scale
    return jnp.einsum("bnts,bsnh->btnh", jax.nn.softmax(logits, axis=-1).astype(value.dtype),
                      value)


def _inputs(queries=197, keys=197, dtype=jnp.float32, seed=0):
    rng = np.random.default_rng(seed)
    shapes = [(2, queries, 3, 64), (2, keys, 3, 64), (2, keys, 3, 64)]
    return [jnp.asarray(rng.normal(size=shape), dtype) for shape in shapes]


def _padded_xla(query, key, value):
    return jax_kernels.padded_attention(query, key, value, SCALE, implementation="xla")


def _value_and_gradients(attend, inputs):
    def loss(*tensors):
        return jnp.sum(jnp.square(attend(*tensors).astype(jnp.float32)))

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))(*inputs)


def test_padded_lengths():
    assert [jax_kernels.padded_length(n) for n in (1, 64, 65, 197, 256, 577)] == \
        [64, 64, 128, 256, 256, 640]


@pytest.mark.parametrize("queries", [197, 1])  # every token, and the last block's class token
def test_padded_attention_equals_the_plain_form(queries):
    inputs = _inputs(queries=queries)
    got = jax.jit(_padded_xla)(*inputs)
    assert got.shape == (2, queries, 3, 64)
    np.testing.assert_allclose(got, _plain(*inputs), atol=1e-5)
    (plain_loss, plain_grads) = _value_and_gradients(_plain, inputs)
    (padded_loss, padded_grads) = _value_and_gradients(_padded_xla, inputs)
    np.testing.assert_allclose(padded_loss, plain_loss, rtol=1e-5)
    for want, grad in zip(plain_grads, padded_grads):
        assert grad.shape == want.shape
        np.testing.assert_allclose(grad, want, atol=1e-4 * float(jnp.abs(want).max()))


def test_padded_attention_in_bfloat16_and_inside_remat():
    inputs = _inputs(dtype=jnp.bfloat16)
    np.testing.assert_allclose(np.asarray(jax.jit(_padded_xla)(*inputs), np.float32),
                               np.asarray(_plain(*inputs), np.float32), atol=2e-2)
    policy = jax.checkpoint_policies.dots_with_no_batch_dims_saveable
    inputs = _inputs()
    _, want = _value_and_gradients(_plain, inputs)
    _, got = _value_and_gradients(jax.checkpoint(_padded_xla, policy=policy), inputs)
    for expected, grad in zip(want, got):
        np.testing.assert_allclose(grad, expected, atol=1e-4 * float(jnp.abs(expected).max()))


def test_the_kernel_sees_only_padded_lengths():
    """The compiled training step's attention runs at 256 tokens: no 197x197 matrix remains."""
    inputs = _inputs()
    step = jax.jit(jax.grad(lambda *t: jnp.sum(_padded_xla(*t)), argnums=(0, 1, 2)))
    program = step.lower(*inputs).as_text()
    assert "256x256" in program and "197x197" not in program
    plain = jax.jit(jax.grad(lambda *t: jnp.sum(_plain(*t)), argnums=(0, 1, 2)))
    assert "197x197" in plain.lower(*inputs).as_text()  # what the check above would catch


@pytest.mark.skipif(jax.default_backend() == "gpu", reason="the refusal needs a device "
                    "without cuDNN; on a GPU the kernel runs")
def test_a_refused_kernel_is_an_error_not_a_fallback():
    with pytest.raises(RuntimeError, match=r"loop.attention_kernel: cudnn attention refused "
                                           r"queries \(2, 197, 3, 64\).*padded to 256"):
        jax_kernels.padded_attention(*_inputs(dtype=jnp.bfloat16), SCALE)
