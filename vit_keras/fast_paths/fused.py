"""XLA-fused kernels with hand-written gradients, for the training path on TensorFlow.

TensorFlow runs elementwise chains (GELU, LayerNorm) as one kernel per op, each a full pass over
the activations, and their autodiff gradients as even more; in a ViT training step on CPU these
passes cost about as much time as the matrix products under mixed_bfloat16. A `FusedOp` runs its
forward and its backward each as one XLA-compiled loop over float32 values, leaving the matrix
products to oneDNN (XLA's own CPU matmuls are slower). Inference and export do not use it: they
keep the plain ops, which grappler fuses into oneDNN kernels and which convert to builtin TFLite
ops.
"""


class FusedOp:
    """A differentiable op from an XLA-compiled forward and backward.

    Args:
        forward: `forward(*inputs, **static)` -> output tensor.
        backward: `backward(*inputs, upstream, **static)` -> one gradient per input.
    """

    def __init__(self, forward, backward):
        self._python = (forward, backward)
        self._compiled = None

    def __call__(self, *inputs, **static):
        """Applies the op to tensors `inputs`; `static` are Python values (part of the trace)."""
        import tensorflow as tf

        if self._compiled is None:
            self._compiled = [tf.function(fn, jit_compile=True, autograph=False)
                              for fn in self._python]
        forward, backward = self._compiled

        @tf.custom_gradient
        def op(*tensors):
            def gradient(upstream):
                return backward(*tensors, upstream, **static)

            return forward(*tensors, **static), gradient

        # Variables are read here, outside the op, so their gradients flow through the tape.
        return op(*[tf.convert_to_tensor(value) for value in inputs])
