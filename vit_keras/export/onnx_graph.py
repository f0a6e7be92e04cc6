"""Rewrites of a converted ONNX graph into the operators ONNX Runtime runs (and quantizes) well.

tf2onnx spells each LayerNorm out as a dozen element-wise nodes: mean (as a GlobalAveragePool
over the last axis of a [batch, tokens, D] tensor), subtract, square, mean, add epsilon, Sqrt,
Reciprocal, multiply. `fuse_layer_norms` puts one opset-17 `LayerNormalization` node in their
place: one kernel in float32, and in a QDQ-quantized graph one DequantizeLinear/QuantizeLinear
pair around it instead of one around every element-wise step.

tf2onnx has no ONNX form of TensorFlow's `Erfc` (Keras' exact GELU on TensorFlow is
`0.5 * x * erfc(-x / sqrt(2))`, as a layer of the user's own, a task's head, may use it):
`replace_erfc` writes each as `1 - Erf(x)`.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

LAYER_NORM_OPSET = 17


class _Graph:
    """Producer / consumer lookups and constant values of an ONNX graph.

    Nodes are identified by their first output: protobuf hands out a new Python object for a
    node at every access, so `id()` and `is` do not identify them.
    """

    def __init__(self, graph: onnx.GraphProto):
        self.graph = graph
        self.producer = {output: node for node in graph.node for output in node.output}
        self.consumers: dict[str, list] = {}
        for node in graph.node:
            for name in dict.fromkeys(node.input):  # a node reading a tensor twice counts once
                self.consumers.setdefault(name, []).append(node)
        self.constants = {init.name: init for init in graph.initializer}
        for node in graph.node:
            if node.op_type == "Constant":
                self.constants[node.output[0]] = node.attribute[0].t

    def only_consumer(self, tensor: str, op_type: str):
        """The single node reading `tensor` if it is an `op_type`, else None."""
        readers = self.consumers.get(tensor, [])
        return readers[0] if len(readers) == 1 and readers[0].op_type == op_type else None

    def constant(self, name: str):
        """The value of a constant tensor (initializer or Constant node), else None."""
        value = self.constants.get(name)
        return None if value is None else numpy_helper.to_array(value)

    def other_input(self, node, known: str) -> str:
        """The input of a two-input node that is not `known`."""
        first, second = node.input
        return second if first == known else first


def _match_layer_norm(graph: _Graph, mean_node):
    """The nodes of one spelled-out LayerNorm starting at its first mean, or None.

    Matches x -> mean; c = x - mean; v = mean(c * c); r = 1/sqrt(v + eps); n = c * r, where
    r may first be multiplied by a constant gamma, and n may then be multiplied by gamma and
    have a constant beta added.

    Returns:
        (nodes, x, output name, epsilon, gamma or None, beta or None).
    """
    x = mean_node.input[0]
    sub = graph.only_consumer(mean_node.output[0], "Sub")
    if sub is None or list(sub.input) != [x, mean_node.output[0]]:
        return None
    centred = sub.output[0]
    square = next((node for node in graph.consumers.get(centred, [])
                   if node.op_type == "Mul" and list(node.input) == [centred, centred]), None)
    variance = square and graph.only_consumer(square.output[0], mean_node.op_type)
    if not variance or not _is_last_axis_mean(graph, variance):
        return None
    add_eps = variance and graph.only_consumer(variance.output[0], "Add")
    sqrt = add_eps and graph.only_consumer(add_eps.output[0], "Sqrt")
    reciprocal = sqrt and graph.only_consumer(sqrt.output[0], "Reciprocal")
    if not reciprocal:
        return None
    nodes = [mean_node, sub, square, variance, add_eps, sqrt, reciprocal]
    inverse_std, gamma = _constant_factor(graph, reciprocal.output[0], "Mul", nodes)
    scale = graph.only_consumer(inverse_std, "Mul")
    if not scale or graph.other_input(scale, inverse_std) != centred:
        return None
    nodes.append(scale)
    readers = {node.output[0] for node in graph.consumers.get(centred, [])}
    epsilon = graph.constant(graph.other_input(add_eps, variance.output[0]))
    if readers != {square.output[0], scale.output[0]} or epsilon is None or epsilon.size != 1:
        return None
    output = scale.output[0]
    if gamma is None:
        output, gamma = _constant_factor(graph, output, "Mul", nodes)
    output, beta = _constant_factor(graph, output, "Add", nodes)
    return nodes, x, output, float(epsilon.reshape(())), gamma, beta


def _constant_factor(graph: _Graph, tensor: str, op_type: str, nodes: list):
    """Follows `tensor` through a sole `op_type` with a constant vector operand, if there is
    one (appending it to `nodes`); returns (the tensor after it, the constant or None)."""
    node = graph.only_consumer(tensor, op_type)
    value = None if node is None else graph.constant(graph.other_input(node, tensor))
    if value is None or value.ndim != 1:
        return tensor, None
    nodes.append(node)
    return node.output[0], value


def _is_last_axis_mean(graph: _Graph, node) -> bool:
    if node.op_type == "GlobalAveragePool":  # over every axis after the second: D of [B, T, D]
        return True
    if node.op_type != "ReduceMean":
        return False
    axes = graph.constant(node.input[1]) if len(node.input) > 1 else None
    if axes is None:
        axes = next((np.array(attr.ints) for attr in node.attribute if attr.name == "axes"), None)
    keepdims = next((attr.i for attr in node.attribute if attr.name == "keepdims"), 1)
    return axes is not None and axes.tolist() == [-1] and keepdims == 1


def fuse_layer_norms(model: onnx.ModelProto) -> int:
    """Replaces every spelled-out last-axis LayerNorm by one `LayerNormalization` node.

    A constant `* gamma + beta` right after it becomes the node's scale and bias; one the
    converter folded into the next MatMul stays there (the node then gets scale 1, bias 0).

    Args:
        model: the converted model (opset >= 17), changed in place.

    Returns:
        How many LayerNorms were fused.
    """
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset < LAYER_NORM_OPSET:
        raise ValueError(f"LayerNormalization needs opset >= {LAYER_NORM_OPSET}, the model has "
                         f"opset {opset}")
    graph, shapes = _Graph(model.graph), _ranks_and_widths(model)
    fused, removed = 0, set()
    for node in list(model.graph.node):
        if node.output[0] in removed or not _is_last_axis_mean(graph, node):
            continue
        match = _match_layer_norm(graph, node)
        # GlobalAveragePool averages every axis after the second: the last one only at rank 3.
        if match is None or shapes.get(match[1], (0, None))[0] != 3 or not shapes[match[1]][1]:
            continue
        nodes, x, output, epsilon, gamma, beta = match
        width = shapes[x][1]
        gamma = np.broadcast_to(np.float32(1) if gamma is None else gamma, (width,))
        beta = np.broadcast_to(np.float32(0) if beta is None else beta, (width,))
        _insert_layer_norm(model.graph, nodes, x, output, epsilon, gamma, beta)
        removed.update(matched.output[0] for matched in nodes)
        fused += 1
    _drop_unused_initializers(model.graph)
    return fused


def replace_erfc(model: onnx.ModelProto) -> int:
    """Replaces every `Erfc(x)` node (left unconverted by tf2onnx, which ONNX has no operator
    for) by `1 - Erf(x)`, in place; returns how many."""
    graph = model.graph
    nodes = [node for node in graph.node
             if node.op_type == "Erfc" and node.domain in ("", "ai.onnx")]
    for node in nodes:
        output, one = node.output[0], f"{node.output[0]}__one"
        graph.initializer.append(numpy_helper.from_array(np.array(1.0, np.float32), one))
        erf = helper.make_node("Erf", [node.input[0]], [f"{output}__erf"], name=f"{output}__erf")
        minus = helper.make_node("Sub", [one, f"{output}__erf"], [output], name=f"{output}__sub")
        where = list(graph.node).index(node)
        graph.node.remove(node)
        graph.node.insert(where, minus)
        graph.node.insert(where, erf)
    return len(nodes)


def _drop_unused_initializers(graph: onnx.GraphProto) -> None:
    """Removes constants nothing reads any more (the fused LayerNorms' epsilons)."""
    used = _names_read(graph) | {output.name for output in graph.output}
    unused = [init for init in graph.initializer if init.name not in used]
    for init in unused:
        graph.initializer.remove(init)


def _insert_layer_norm(graph: onnx.GraphProto, nodes, x: str, output: str, epsilon: float,
                       gamma: np.ndarray, beta: np.ndarray) -> None:
    """Puts one LayerNormalization where `nodes` were."""
    scale, bias = f"{output}__ln_scale", f"{output}__ln_bias"
    graph.initializer.extend([
        numpy_helper.from_array(np.ascontiguousarray(gamma, np.float32), scale),
        numpy_helper.from_array(np.ascontiguousarray(beta, np.float32), bias)])
    layer_norm = helper.make_node("LayerNormalization", [x, scale, bias], [output],
                                  name=f"{output}__layer_norm", axis=-1, epsilon=epsilon)
    graph.node.insert(list(graph.node).index(nodes[-1]), layer_norm)
    for matched in nodes:
        graph.node.remove(matched)


def _ranks_and_widths(model: onnx.ModelProto) -> dict[str, tuple]:
    """Tensor name -> (rank, static size of the last axis or None), from shape inference."""
    inferred = onnx.shape_inference.infer_shapes(model)
    infos = [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]
    shapes = {}
    for info in infos:
        dims = info.type.tensor_type.shape.dim
        if dims:
            last = dims[-1].dim_value if dims[-1].HasField("dim_value") else None
            shapes[info.name] = (len(dims), last)
    return shapes


def _names_read(graph: onnx.GraphProto) -> set:
    """Every tensor name a node reads, in subgraphs (If / Loop bodies) too."""
    names = set()
    for node in graph.node:
        names.update(node.input)
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                names |= _names_read(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for subgraph in attribute.graphs:
                    names |= _names_read(subgraph)
    return names
