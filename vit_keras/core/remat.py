"""Rematerialised encoder blocks (gradient checkpointing) for `ViTConfig.remat`."""

import functools

import keras
from keras import ops, tree

from vit_keras.core.initializers import PACKAGE
from vit_keras.core.layers import EncoderBlock
from vit_keras.fast_paths import training_forms


@keras.saving.register_keras_serializable(package=PACKAGE)
class RematEncoderBlock(EncoderBlock):
    """An `EncoderBlock` that recomputes its activations in the backward pass of training.

    Only the block's input is kept for the backward pass; everything inside it is computed
    again there (`keras.remat`: `tf.recompute_grad`, `jax.checkpoint`,
    `torch.utils.checkpoint`). Outputs and gradients are those of `EncoderBlock`, dropout and
    stochastic depth included, and so are the weights and their names; at inference it is a
    plain `EncoderBlock`.

    Args:
        policy: None (keep only the block's input), or 'dots' (on JAX, also keep the outputs of
            the projections' and MLP's matrix products: `fast_paths.training_forms`; other
            backends rematerialise the whole block).
        **kwargs: `EncoderBlock`'s arguments.
    """

    def __init__(self, *args, policy=None, **kwargs):
        super().__init__(*args, **kwargs)
        if policy is not None and policy not in training_forms.REMAT_POLICIES:
            raise ValueError(f"remat policy must be None or one of "
                             f"{training_forms.REMAT_POLICIES}, got {policy!r}")
        self.policy = policy

    def call(self, inputs, training=None, return_attention_scores=False, output_tokens=None):
        # The Python arguments are bound outside the rematerialised function: jax.checkpoint
        # would trace them into arrays, and `if training` cannot branch on an array.
        forward = functools.partial(super().call, training=training,
                                    return_attention_scores=return_attention_scores,
                                    output_tokens=output_tokens)
        if not training:
            return forward(inputs)
        seeds = [variable for variable in self.variables
                 if not any(variable is weight for weight in self.weights)]
        if not seeds:
            return _rematerialized(forward, inputs, self.policy)
        return _replayed(forward, inputs, seeds, self.policy)

    def get_config(self):
        config = super().get_config()
        if self.policy is not None:
            config.update(policy=self.policy)
        return config


def _replayed(forward, inputs, seeds, policy):
    """`forward` rematerialised with the random draws of its recomputation replayed.

    The dropout masks come from seed-generator states (`seeds`) that the forward pass
    advances; recomputed from the advanced states, the backward pass would see other masks
    (wrong gradients on TensorFlow and PyTorch). Each run of the function therefore first
    restores the states it started from, and returns the advanced ones as outputs so that no
    value traced inside `jax.checkpoint` is left in them.
    """
    start = [ops.copy(variable.value) for variable in seeds]

    def replay(inputs):
        for variable, state in zip(seeds, start):
            variable.assign(state)
        outputs = forward(inputs)
        return tree.flatten(outputs) + [ops.copy(variable.value) for variable in seeds]

    results = _rematerialized(replay, inputs, policy)
    outputs, states = results[:-len(seeds)], results[-len(seeds):]
    for variable, state in zip(seeds, states):
        variable.assign(state)
    return tuple(outputs) if len(outputs) > 1 else outputs[0]


def _rematerialized(function, inputs, policy=None):
    """`keras.remat(function)(inputs)`, on PyTorch without the early stop of recomputation;
    on JAX with a `policy`, its checkpoint policy.

    PyTorch stops a recomputation early by raising an exception through the layers' calls,
    and Keras' traceback filtering turns each such exception into a reference cycle holding
    the recomputed activations until Python's cyclic garbage collector runs: the process
    grew by hundreds of MB per ViT-B/16 step. Recomputing the whole block costs little more.
    """
    with_policy = training_forms.checkpointed(function, policy) if policy else None
    if with_policy is not None:
        return with_policy(inputs)
    if keras.backend.backend() != "torch":
        return keras.remat(function)(inputs)
    from torch.utils import checkpoint

    with checkpoint.set_checkpoint_early_stop(False):
        return keras.remat(function)(inputs)
