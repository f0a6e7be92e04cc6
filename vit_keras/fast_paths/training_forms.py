"""Opt-in forms of the training step for JAX: the same numbers, spelled so that XLA may run
them faster.

Each form gives the plain path's outputs and gradients within float rounding
(tests/test_training_forms.py, on every backend) and changes neither the weights nor their
names:

- `fused_qkv`: the self-attention's query, key and value projections as one matrix product,
  their kernels and biases stacked behind the heads axis at call time. XLA's DotMerger
  merges such products by itself only below `--xla_gpu_dot_merger_threshold_mb` (32 MB by
  default), which ViT-B/16's at batch 128 exceed. Training and inference.
- `attention_kernel`: training attention as one fused kernel instead of the einsum form,
  whose float32 probabilities autodiff keeps for the backward pass. On a GPU, cuDNN's flash
  attention with the tokens padded to lengths it trains at (`jax_kernels.padded_attention`),
  and an error where it refuses, never a silent fallback; on other devices
  `keras.ops.dot_product_attention` (Splash attention on TPUs where shapes allow, XLA's own
  form otherwise). On JAX (`fast_paths.dot_product_attention_available`), and only where no
  dropout acts on the probabilities; inference takes `ops.dot_product_attention` there
  already.
- `lean_activations`: GELU and LayerNorm whose backward pass keeps only their inputs, in
  their own dtype (`jax_kernels`), instead of the float32 intermediates autodiff keeps.
- `ViTConfig.remat='dots'` (the checkpoint policy below): each block keeps its projections'
  and MLP's matrix products for the backward pass and recomputes the elementwise chains
  between them (LayerNorm, GELU, the attention logits and softmax).

They are off by default: none is measured to pay yet. `benchmarks/backends_gpu.py` times each
against the plain step on a GPU; `benchmarks/saved_residuals.py` shows what each keeps.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses

import keras
from keras import ops


@dataclasses.dataclass(frozen=True)
class TrainingForms:
    """Which opt-in forms the JAX step takes (module docstring).

    Attributes:
        fused_qkv: one matrix product for the self-attention's query, key and value.
        attention_kernel: training attention as one fused kernel.
        lean_activations: GELU and LayerNorm keeping only their inputs for the backward.
    """

    fused_qkv: bool = False
    attention_kernel: bool = False
    lean_activations: bool = False

    def __post_init__(self):
        for field in dataclasses.fields(self):
            if not isinstance(getattr(self, field.name), bool):
                raise ValueError(f"TrainingForms.{field.name} must be True or False, got "
                                 f"{getattr(self, field.name)!r}")


# A context variable, as `export_forms` keeps its form: a step traced in another thread or
# task sees the forms of the context that traces it.
_FORMS = contextvars.ContextVar("vit_keras_training_forms", default=TrainingForms())


def current() -> TrainingForms:
    """Returns:
        The forms in effect (all off unless set).
    """
    return _FORMS.get()


def set_forms(forms: TrainingForms) -> TrainingForms:
    """Sets the forms for the rest of the current context (the calling thread's, at its top
    level). Takes effect when a step is next traced (a compiled step keeps the forms it was
    traced with).

    Args:
        forms: the forms to take.

    Returns:
        The previous forms.
    """
    if not isinstance(forms, TrainingForms):
        raise TypeError(f"expected a TrainingForms, got {type(forms).__name__}")
    previous = _FORMS.get()
    _FORMS.set(forms)
    return previous


@contextlib.contextmanager
def using(**forms):
    """Within the block, the given forms, the others as they were.

    Args:
        **forms: `TrainingForms` fields, e.g. `using(fused_qkv=True)`.

    Yields:
        The forms in effect inside the block.
    """
    token = _FORMS.set(dataclasses.replace(current(), **forms))
    try:
        yield current()
    finally:
        _FORMS.reset(token)


def fused_self_attention_projections(query, key, value, inputs):
    """`(query(inputs), key(inputs), value(inputs))` as one matrix product, or None.

    Args:
        query, key, value: the attention's built `EinsumDense` projections ('btd,dnh->btnh';
            their `kernel` includes any LoRA update).
        inputs: [batch, tokens, D].

    Returns:
        Three [batch, tokens, heads, head_dim] tensors, or None where the form is off or a
        projection is quantized (those run Keras' own quantized call).
    """
    projections = (query, key, value)
    if not current().fused_qkv or any(p.quantization_mode is not None for p in projections):
        return None
    # (D, heads, 3, head_dim): stacked behind the heads axis, which model parallelism shards,
    # so each device keeps its heads of all three.
    dtype = query.compute_dtype  # as the layers' own calls compute, autocast scope or not
    kernel = ops.stack([ops.cast(p.kernel, dtype) for p in projections], axis=2)
    bias = ops.stack([ops.cast(p.bias, dtype) for p in projections], axis=1)
    inputs = ops.cast(inputs, dtype)
    outputs = ops.einsum("btd,dnkh->btnkh", inputs, kernel) + bias
    return tuple(outputs[:, :, :, index] for index in range(3))


def training_attention_kernel(dropout_rate: float) -> bool:
    """Whether training attention runs as one `keras.ops.dot_product_attention`.

    Args:
        dropout_rate: the attention's dropout on its probabilities (the kernel has none).

    Returns:
        True where the form is on and the rate is 0.
    """
    return current().attention_kernel and not dropout_rate


REMAT_POLICIES = ("dots",)


def checkpointed(function, policy: str):
    """`function` rematerialised under a JAX checkpoint policy.

    Args:
        function: the function of one tensor to rematerialise (an encoder block's call).
        policy: 'dots': the outputs of matrix products without batch dimensions (the
            projections and the MLP) are kept; everything else, the attention's batched
            products included, is recomputed in the backward pass.

    Returns:
        The wrapped function on JAX; None on other backends (the caller rematerialises the
        whole function there).

    Raises:
        ValueError: an unknown policy.
    """
    if policy not in REMAT_POLICIES:
        raise ValueError(f"remat policy must be one of {REMAT_POLICIES}, got {policy!r}")
    if keras.backend.backend() != "jax":
        return None
    import jax

    return jax.checkpoint(function,
                          policy=jax.checkpoint_policies.dots_with_no_batch_dims_saveable)
