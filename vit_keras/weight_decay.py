"""Which weights weight decay must leave alone, as the model declares them.

timm and big_vision decay only the matrices that mix features: never a bias, a norm's scale or
offset, a layer-scale gamma (every 1-D weight), and never a token, a position embedding or an
attention probe, whatever their shape. The 1-D rule needs no declaration; the layers owning the
others (class, distillation, register and [mask] tokens, the position embeddings, the MAP probe,
the (heads, head_dim) attention biases) list them in a `no_weight_decay()` method.
"""

from __future__ import annotations

import keras


def no_weight_decay(model: keras.Model) -> list:
    """The trainable variables of `model` that weight decay must not touch.

    Args:
        model: a `VisionTransformer`, or any Keras model holding one (a trainer wrapping it,
            a functional model using its layers).

    Returns:
        The variables, in `model.trainable_variables` order: every 1-D weight, and every
        weight a layer lists in its `no_weight_decay()`.
    """
    declared = {id(variable) for layer in _layers(model)
                for variable in getattr(layer, "no_weight_decay", lambda: [])()}
    return [variable for variable in model.trainable_variables
            if len(variable.shape) <= 1 or id(variable) in declared]


def _layers(model: keras.Model):
    """The layers of `model`, and of every model nested in it."""
    for layer in model.layers:
        yield layer
        if isinstance(layer, keras.Model):
            yield from _layers(layer)
