"""What a network costs, measured on its traced TensorFlow graph instead of counted from a
config: for the networks whose cost `complexity` has no formula for (MobileViT's
convolutions, its maps resized to even sides). FLOPs are the profiler's: 2 per multiply-add
of every matrix product and convolution, plus the element-wise operations it counts.
"""

from __future__ import annotations

import dataclasses

from vit_keras import keras_compat


@dataclasses.dataclass(frozen=True)
class MeasuredCost:
    """One network's cost at one input size.

    Attributes:
        image_size: (height, width) in pixels.
        params: its weights' scalars, `model.count_params()`.
        flops: floating-point operations of one image's forward pass.
    """

    image_size: tuple[int, int]
    params: int
    flops: int

    def to_dict(self) -> dict:
        """A JSON-friendly dict with `gflops`."""
        return {"image_size": list(self.image_size), "params": self.params,
                "flops": self.flops, "gflops": self.flops / 1e9}


def measured_cost(model) -> MeasuredCost:
    """The parameters and forward FLOPs of one image through `model` (TensorFlow's profiler on
    the model traced at its input size).

    Args:
        model: a built Keras model of one image input [batch, H, W, C] with a fixed size.

    Returns:
        A `MeasuredCost`.
    """
    import tensorflow as tf  # the library runs on JAX and PyTorch without it

    shape = tuple(model.inputs[0].shape[1:])
    if None in shape:
        raise ValueError(f"measured_cost needs a model of one fixed input size, got {shape}")
    function = tf.function(lambda images: model(images, training=False))
    concrete = function.get_concrete_function(tf.TensorSpec((1, *shape), tf.float32))
    graph = keras_compat.freeze_concrete_function(concrete).graph
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    flops = int(tf.compat.v1.profiler.profile(graph, options=options).total_float_ops)
    return MeasuredCost(image_size=shape[:2], params=int(model.count_params()), flops=flops)


def format_costs(costs: list[MeasuredCost]) -> str:
    """An aligned table of `costs`, one row per input size."""
    rows = [("image", "params", "GFLOPs")] + [
        (f"{cost.image_size[0]}x{cost.image_size[1]}", f"{cost.params / 1e6:.2f}M",
         f"{cost.flops / 1e9:.3f}") for cost in costs]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
