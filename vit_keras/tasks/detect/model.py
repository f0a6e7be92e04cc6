"""Object detection on the ViT's patch tokens: `ViTDetector`, DETR's set prediction (Carion et
al. 2020) as a functional Keras model images -> [batch, queries, classes + 4].

The encoder is the `VisionTransformer`'s, layer for layer and under the same names, so every
weight source the classifier loads fills it (`load_backbone`). Its last block's patch tokens,
final-normed, become the decoder's memory (projected to the decoder's width, with fixed 2-D sine
positions). Every patch proposes an object (a class and a box round it), and the
`num_queries` best proposals become the object queries (RT-DETR's query selection; learned
queries with learned anchor boxes instead, DETR's and DAB-DETR's, with
`query_selection=False`). The queries then go through `decoder_layers` blocks, each:

- self-attention among the queries (they agree who takes which object), cross-attention to the
  memory, an MLP (pre-LN, as the encoder's blocks);
- a class head and a box head of its own. The box head refines the query's box: every query
  carries an anchor box (its proposal's; DAB-DETR, Liu et al. 2022), each block predicts a
  correction to it in logit space, and the corrected box, gradient stopped, is the next
  block's anchor (Deformable DETR's iterative refinement). The anchor, through a small MLP,
  is the query's position in both attentions (DAB-DETR embeds its sines; a plain MLP keeps
  SIN and COS out of full-integer exports).

Each block's outputs are [class logits (sigmoid, focal loss: no 'no object' class), box logits
(cx, cy, w, h before a sigmoid, in fractions of the input's size)]. Training reads the chosen
proposals' and every block's (`all_layers=True`: [batch, 1 + blocks, queries, classes + 4],
the auxiliary losses of `vit_keras.tasks.detect.loss`); the model that is saved and exported gives
the last block's.
Every output is a logit, so a full-integer export quantizes them on one scale of like range
(`vit_keras.tasks.detect.boxes.decode` turns them into boxes and scores).
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from vit_keras import fast_paths, lora, quantization, tasks
from vit_keras.config import ViTConfig
from vit_keras.core.attention import MultiHeadSelfAttention
from vit_keras.core.initializers import PACKAGE
from vit_keras.core.layers import MLPBlock
from vit_keras.core.normalization import LayerNorm
from vit_keras.core.model import ConfiguredModel
from vit_keras.tasks.detect import loss as set_loss  # noqa: F401  registers its loss, metric
from vit_keras.task_encoder import block_grids, load_encoder, task_config

HEAD_PREFIX = "det_"  # every layer of the detection head; the rest is the ViT's encoder
BOX_CHANNELS = 4
# The class heads' bias starts every score at 1%: a few queries find objects, most find none
# (RetinaNet's prior, which keeps the focal loss from drowning in easy negatives at first).
PRIOR_PROBABILITY = 0.01
SINE_TEMPERATURE = 10_000.0
PATCH_ANCHOR_SPAN = 2.0   # a patch's proposal starts as a box two patches wide (RT-DETR's 0.05)


def _split_outputs(outputs) -> dict:
    """[..., classes + 4] -> {'scores': sigmoid of the class logits, 'boxes': cx, cy, w, h}."""
    return {"scores": ops.sigmoid(outputs[..., :-BOX_CHANNELS]),
            "boxes": ops.sigmoid(outputs[..., -BOX_CHANNELS:])}


# The detect task's library contract: each image resized whole (its boxes are fractions of all
# of it); a SavedModel also gives every query's class scores and box, alone through
# `serve_boxes`.
TASK = tasks.TaskContract("detect", class_per_image=False, whole_image=True,
                          derived_outputs=_split_outputs, derived_endpoint="serve_boxes")


def grid_positions(rows: int, cols: int, width: int) -> np.ndarray:
    """float32 [1, rows * cols, width]: DETR's sine features of the patch centres' y then x
    (in 0..1), `width` / 4 frequencies each, sines then cosines. Fixed for a grid, so a
    fixed-size model holds them as a constant (no SIN or COS op in its exported graph)."""
    quarter = width // 4
    frequencies = np.exp(np.arange(quarter) * (-math.log(SINE_TEMPERATURE) / quarter))
    ys, xs = np.meshgrid((np.arange(rows) + 0.5) / rows, (np.arange(cols) + 0.5) / cols,
                         indexing="ij")
    features = [function(2 * math.pi * coordinate.reshape(-1, 1) * frequencies)
                for coordinate in (ys, xs) for function in (np.sin, np.cos)]
    return np.concatenate(features, axis=-1)[None].astype(np.float32)


def patch_anchors(rows, cols, anchor_size=None):
    """[1, rows * cols, 4] box logits of each patch's anchor: its centre, and a size of
    `anchor_size` (width, height in fractions of the image), or of `PATCH_ANCHOR_SPAN` patches
    a side when None (what the proposal head corrects)."""
    ys = (ops.cast(ops.arange(rows), "float32") + 0.5) / ops.cast(rows, "float32")
    xs = (ops.cast(ops.arange(cols), "float32") + 0.5) / ops.cast(cols, "float32")
    count = ops.shape(ys)[0] * ops.shape(xs)[0]
    if anchor_size is None:
        side_x = PATCH_ANCHOR_SPAN / ops.cast(cols, "float32")
        side_y = PATCH_ANCHOR_SPAN / ops.cast(rows, "float32")
    else:
        side_x, side_y = (ops.cast(side, "float32") for side in anchor_size)
    sides = ops.stack([ops.full((count,), side_x), ops.full((count,), side_y)], -1)
    boxes = ops.concatenate([ops.stack([ops.tile(xs, [rows]), ops.repeat(ys, cols)], -1),
                             ops.minimum(sides, 0.99)], axis=-1)
    return ops.log(boxes / (1 - boxes))[None]


def _traced_grid_positions(rows, cols, width: int):
    """`grid_positions` in `keras.ops`, for a grid known only at run time."""
    quarter = width // 4
    frequencies = ops.exp(ops.arange(quarter, dtype="float32") *
                          (-math.log(SINE_TEMPERATURE) / quarter))
    ys = (ops.cast(ops.arange(rows), "float32") + 0.5) / ops.cast(rows, "float32")
    xs = (ops.cast(ops.arange(cols), "float32") + 0.5) / ops.cast(cols, "float32")
    angles = [2 * math.pi * coordinate[:, None] * frequencies
              for coordinate in (ops.repeat(ys, cols), ops.tile(xs, [rows]))]
    features = [function(angle) for angle in angles for function in (ops.sin, ops.cos)]
    return ops.concatenate(features, axis=-1)[None]


@keras.saving.register_keras_serializable(package=PACKAGE)
class DecoderMemory(keras.layers.Layer):
    """The encoder's patch grid [batch, rows, cols, D] -> the decoder's memory [batch, rows *
    cols, width] (a Dense projection, LayerNorm), its sine positions [batch, rows * cols,
    width] and each patch's anchor box [batch, rows * cols, 4] (`patch_anchors`), the same for
    every image.

    Args:
        width: the decoder's width.
        anchor_size: the anchors' (width, height) in fractions of the image; None: two
            patches a side.
    """

    def __init__(self, width: int, anchor_size=None, **kwargs):
        super().__init__(**kwargs)
        self.width = width
        self.anchor_size = None if anchor_size is None else tuple(anchor_size)
        self.projection = keras.layers.Dense(width, name="projection", dtype=self.dtype_policy)
        self.norm = LayerNorm(epsilon=1e-6, name="norm",
                                                    dtype=self.dtype_policy)

    def build(self, input_shape):
        self.projection.build(input_shape)
        self.norm.build((*input_shape[:-1], self.width))

    def call(self, grid):
        rows, cols = grid.shape[1], grid.shape[2]
        memory = self.norm(self.projection(grid))
        memory = ops.reshape(memory, (ops.shape(grid)[0], -1, self.width))
        if rows is None or cols is None:  # a graph traced for any size: computed per call
            rows, cols = ops.shape(grid)[1], ops.shape(grid)[2]
            positions = _traced_grid_positions(rows, cols, self.width)
        else:
            positions = grid_positions(rows, cols, self.width)
        batch, tokens = ops.shape(memory)[0], ops.shape(memory)[1]
        return (memory, ops.broadcast_to(ops.cast(positions, memory.dtype),
                                         (batch, tokens, self.width)),
                ops.broadcast_to(patch_anchors(rows, cols, self.anchor_size),
                                 (batch, tokens, BOX_CHANNELS)))

    def compute_output_shape(self, input_shape):
        batch, rows, cols, _ = input_shape
        tokens = None if rows is None or cols is None else rows * cols
        return ((batch, tokens, self.width), (batch, tokens, self.width),
                (batch, tokens, BOX_CHANNELS))

    def get_config(self):
        return {**super().get_config(), "width": self.width, "anchor_size": self.anchor_size}


def _box_head(width: int, policy) -> list:
    """A 3-layer MLP giving a box correction; its last layer starts at zero (no correction)."""
    return [keras.layers.Dense(width, name="box_0", dtype=policy),
            keras.layers.Dense(width, name="box_1", dtype=policy),
            keras.layers.Dense(BOX_CHANNELS, kernel_initializer="zeros", name="box_2",
                               dtype=policy)]


def _class_head(num_classes: int, policy) -> keras.layers.Dense:
    """Class logits (cast to float32 by the caller), each class's score starting at
    `PRIOR_PROBABILITY`."""
    prior = -math.log((1 - PRIOR_PROBABILITY) / PRIOR_PROBABILITY)
    return keras.layers.Dense(num_classes, bias_initializer=keras.initializers.Constant(prior),
                              name="class_logits", dtype=policy)


def _apply_box_head(layers, features):
    return layers[2](ops.relu(layers[1](ops.relu(layers[0](features)))))


@keras.saving.register_keras_serializable(package=PACKAGE)
class ProposalQueries(keras.layers.Layer):
    """The decoder's first queries chosen among the patches (RT-DETR's query selection, Deformable
    DETR's two-stage): [memory, patch anchors] -> [content [batch, queries, width], anchors
    [batch, queries, 4], the chosen proposals' outputs [batch, queries, classes + 4]].

    Every patch proposes an object: class logits (`class_logits`) and a box, its patch anchor
    corrected by a 3-layer MLP (`box_0..2`). The `num_queries` patches whose best class scores
    highest become the queries: their memory as content, their proposed box as anchor (both
    gradient-stopped); their proposals are trained as one more set of outputs. The decoder
    starts from boxes already near the objects, which is what makes DETR learn from a few
    thousand images in minutes.

    Args:
        num_queries: queries chosen.
        num_classes: object classes.
        width: the decoder's width.
    """

    def __init__(self, num_queries: int, num_classes: int, width: int, **kwargs):
        kwargs["autocast"] = False  # the anchors stay float32 (see `DecoderLayer`)
        super().__init__(**kwargs)
        self.num_queries = num_queries
        self.num_classes = num_classes
        self.width = width
        self.box = _box_head(width, self.dtype_policy)
        self.class_logits = _class_head(num_classes, self.dtype_policy)

    def build(self, input_shape):
        for layer in (*self.box, self.class_logits):
            layer.build((None, self.width))

    def call(self, inputs):
        memory = ops.cast(inputs[0], self.compute_dtype)
        logits = ops.cast(self.class_logits(memory), "float32")
        boxes = ops.cast(inputs[1], "float32") + ops.cast(_apply_box_head(self.box, memory),
                                                          "float32")
        chosen = fast_paths.top_k_indices(ops.sigmoid(ops.max(logits, axis=-1)),
                                          self.num_queries)
        pick = lambda values: ops.take_along_axis(values, chosen[..., None], axis=1)
        chosen_logits, chosen_boxes = pick(logits), pick(boxes)
        return (ops.stop_gradient(pick(memory)), ops.stop_gradient(chosen_boxes),
                ops.concatenate([chosen_logits, chosen_boxes], axis=-1))

    def compute_output_shape(self, input_shape):
        batch = input_shape[0][0]
        return ((batch, self.num_queries, self.width), (batch, self.num_queries, BOX_CHANNELS),
                (batch, self.num_queries, self.num_classes + BOX_CHANNELS))

    def get_config(self):
        return {**super().get_config(), "num_queries": self.num_queries,
                "num_classes": self.num_classes, "width": self.width}


@keras.saving.register_keras_serializable(package=PACKAGE)
class ObjectQueries(keras.layers.Layer):
    """The learned object queries: their content [batch, queries, width] and anchor boxes
    [batch, queries, 4] (cx, cy, w, h logits), the same for every image.

    Anchors start spread over the image: centres uniform in 0..1, sides 10-30% of the image.

    Args:
        num_queries: how many objects an image may hold at most.
        width: the decoder's width.
        seed: of the anchors' initial spread.
    """

    def __init__(self, num_queries: int, width: int, seed: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.num_queries = num_queries
        self.width = width
        self.seed = seed

    def build(self, input_shape):
        self.content = self.add_weight(name="content", shape=(self.num_queries, self.width),
                                       initializer=keras.initializers.RandomNormal(stddev=1.0))
        self.anchors = self.add_weight(name="anchors", shape=(self.num_queries, BOX_CHANNELS),
                                       initializer=_AnchorSpread(self.seed))

    def call(self, memory):
        batch = ops.shape(memory)[0]
        content = ops.broadcast_to(ops.cast(self.content, memory.dtype)[None],
                                   (batch, self.num_queries, self.width))
        anchors = ops.broadcast_to(ops.cast(self.anchors, "float32")[None],
                                   (batch, self.num_queries, BOX_CHANNELS))
        return content, anchors

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_queries, self.width), (input_shape[0], self.num_queries,
                                                                BOX_CHANNELS)

    def get_config(self):
        return {**super().get_config(), "num_queries": self.num_queries, "width": self.width,
                "seed": self.seed}


@keras.saving.register_keras_serializable(package=PACKAGE)
class _AnchorSpread(keras.initializers.Initializer):
    """Anchor logits: centres uniform in 0..1, sides uniform in 0.1..0.3 (before the
    sigmoid)."""

    def __init__(self, seed: int = 0):
        self.seed = seed

    def __call__(self, shape, dtype=None):
        generator = keras.random.SeedGenerator(self.seed)
        centres = keras.random.uniform((shape[0], 2), 0.02, 0.98, seed=generator)
        sides = keras.random.uniform((shape[0], 2), 0.1, 0.3, seed=generator)
        boxes = ops.concatenate([centres, sides], axis=-1)
        return ops.cast(ops.log(boxes / (1 - boxes)), dtype or "float32")

    def get_config(self):
        return {"seed": self.seed}


@keras.saving.register_keras_serializable(package=PACKAGE)
class DecoderLayer(keras.layers.Layer):
    """One decoder block with its heads: [queries, anchors, memory, memory positions] ->
    [queries, next anchors, outputs [batch, queries, classes + 4]].

    The anchor box (cx, cy, w, h in 0..1) through a 2-layer MLP (`position_0`, `position_1`)
    is added to the queries of both attentions, the memory's positions to its keys and
    values. The class
    head (`class_logits`) and the box head (`box_0`, `box_1`, `box_2`: a 3-layer MLP whose last
    layer starts at zero, so each block starts from its anchors) read the block's normed
    output.

    Args:
        num_classes: object classes (no 'no object' class: scores are sigmoids).
        width: the decoder's width (the queries' and the memory's).
        num_heads: attention heads.
        mlp_dim: the MLP's hidden width.
        dropout_rate: dropout after each attention and inside the MLP.
    """

    def __init__(self, num_classes: int, width: int, num_heads: int, mlp_dim: int,
                 dropout_rate=0.0, **kwargs):
        # The anchors stay float32 under mixed precision (bfloat16 would round a box's
        # logits to 3 digits); the other inputs are cast in `call`.
        kwargs["autocast"] = False
        super().__init__(**kwargs)
        self.num_classes = num_classes
        self.width = width
        self.num_heads = num_heads
        self.mlp_dim = mlp_dim
        self.dropout_rate = dropout_rate
        policy = self.dtype_policy
        norm = dict(epsilon=1e-6, dtype=policy)
        self.self_norm = LayerNorm(name="self_norm", **norm)
        self.self_attention = MultiHeadSelfAttention(num_heads, name="self_attention",
                                                     dtype=policy)
        self.cross_norm = LayerNorm(name="cross_norm", **norm)
        self.cross_attention = MultiHeadSelfAttention(num_heads, name="cross_attention",
                                                      dtype=policy)
        self.mlp_norm = LayerNorm(name="mlp_norm", **norm)
        self.mlp = MLPBlock(mlp_dim, dropout_rate, name="mlp", dtype=policy)
        self.dropout = keras.layers.Dropout(dropout_rate, dtype=policy)
        self.out_norm = LayerNorm(name="out_norm", **norm)
        self.position = [keras.layers.Dense(width, name=f"position_{i}", dtype=policy)
                         for i in range(2)]
        self.box = _box_head(width, policy)
        self.class_logits = _class_head(num_classes, policy)

    def build(self, input_shape):
        width = self.width
        self.position[0].build((None, BOX_CHANNELS))
        for layer in (self.position[1], *self.box, self.class_logits):
            layer.build((None, width))
        for layer in (self.self_norm, self.cross_norm, self.mlp_norm, self.out_norm):
            layer.build(input_shape[0])
        self.self_attention.build(input_shape[0])
        self.cross_attention.build(input_shape[0])
        self.mlp.build(input_shape[0])

    def _position(self, anchors):
        hidden = ops.relu(self.position[0](ops.cast(ops.sigmoid(anchors), self.compute_dtype)))
        return self.position[1](hidden)

    def call(self, inputs, training=None):
        queries, memory, memory_positions = (ops.cast(tensor, self.compute_dtype)
                                             for tensor in (inputs[0], *inputs[2:]))
        anchors = ops.cast(inputs[1], "float32")
        position = self._position(anchors)
        attended = self.self_attention(self.self_norm(queries) + position, training=training)
        queries = queries + self.dropout(attended, training=training)
        attended = self.cross_attention(self.cross_norm(queries) + position,
                                        context=memory + memory_positions, training=training)
        queries = queries + self.dropout(attended, training=training)
        queries = queries + self.mlp(self.mlp_norm(queries), training=training)
        features = self.out_norm(queries)
        boxes = anchors + ops.cast(_apply_box_head(self.box, features), "float32")
        logits = ops.cast(self.class_logits(features), "float32")
        return queries, ops.stop_gradient(boxes), ops.concatenate([logits, boxes], axis=-1)

    def compute_output_shape(self, input_shape):
        queries = input_shape[0]
        return queries, (*queries[:-1], BOX_CHANNELS), (*queries[:-1],
                                                        self.num_classes + BOX_CHANNELS)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes,
                "width": self.width, "num_heads": self.num_heads, "mlp_dim": self.mlp_dim,
                "dropout_rate": self.dropout_rate}


@keras.saving.register_keras_serializable(package=PACKAGE)
class StackLayers(keras.layers.Layer):
    """Every decoder block's outputs [batch, queries, C] -> [batch, blocks, queries, C]."""

    def call(self, outputs):
        return ops.stack(outputs, axis=1)

    def compute_output_shape(self, input_shape):
        first = input_shape[0]
        return (first[0], len(input_shape), *first[1:])


def _check_head(config: ViTConfig, num_queries, decoder_layers, decoder_width,
                decoder_heads, query_selection) -> None:
    for name, value in (("num_queries", num_queries), ("decoder_layers", decoder_layers),
                        ("decoder_width", decoder_width), ("decoder_heads", decoder_heads)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    if decoder_width % 8 or decoder_width % decoder_heads:
        raise ValueError(f"decoder_width must be a multiple of 8 (the memory's sine features) "
                         f"and of decoder_heads={decoder_heads}, got {decoder_width}")
    if config.num_classes < 1:
        raise ValueError(f"a detector needs at least 1 object class, got "
                         f"num_classes={config.num_classes}")
    if query_selection and not config.dynamic_image_size and \
            num_queries > config.grid_size[0] * config.grid_size[1]:
        raise ValueError(f"num_queries={num_queries} are chosen among the "
                         f"{config.grid_size[0] * config.grid_size[1]} patches "
                         f"({config.grid_size[0]}x{config.grid_size[1]}): give at most that many, "
                         "smaller patches, or query_selection=False")


def _check_anchor_size(anchor_size, query_selection) -> tuple | None:
    """`anchor_size` as a (width, height) tuple of fractions in (0, 1), or None."""
    if anchor_size is None:
        return None
    if not query_selection:
        raise ValueError("anchor_size sets the patches' proposals' first boxes; learned "
                         "queries (query_selection=False) learn their own anchors: drop "
                         "anchor_size or keep query_selection=True")
    sides = tuple(float(side) for side in anchor_size)
    if len(sides) != 2 or not all(0.0 < side < 1.0 for side in sides):
        raise ValueError(f"anchor_size is (width, height) in fractions of the image, each in "
                         f"(0, 1), got {anchor_size!r}")
    return sides


@keras.saving.register_keras_serializable(package=PACKAGE)
class ViTDetector(ConfiguredModel, keras.Model):
    """DETR on a ViT encoder: images -> [batch, queries, num_classes + 4] (see the module
    docstring), or every decoder block's [batch, blocks, queries, num_classes + 4].

    The input is the `VisionTransformer`'s (NHWC images prepared by `preprocess_input`, at
    `config.image_size`, or any size with `dynamic_image_size`). `get_config()` is the
    `ViTConfig` and the head options, so `.keras` files load under `safe_mode`. `quantize` and
    `enable_lora` work as on the classifier; `vit_keras.tasks.detect.boxes.decode` gives boxes.

    Args:
        config: a `ViTConfig` (or its `to_dict()`); `num_classes` counts the object classes
            (no background class).
        num_queries: the most objects one image may hold (default 20).
        decoder_layers: decoder blocks (default 3).
        decoder_width: the decoder's width (default 128; a multiple of 8 and of the heads).
        decoder_heads: its attention heads (default 4).
        decoder_mlp_dim: its MLPs' hidden width (default: 4 x `decoder_width`).
        query_selection: the queries start as the best-scoring patches' proposals
            (`ProposalQueries`; default True), or as learned queries with learned anchors
            (`ObjectQueries`, DETR's and DAB-DETR's).
        anchor_size: the patches' anchor boxes, (width, height) in fractions of the image,
            which their proposals correct (default None: two patches a side); training sets
            it to its boxes' median size (`detect.anchor_width`, `detect.anchor_height`).
        all_layers: give every block's outputs (training's auxiliary losses), the proposals'
            first with `query_selection`, instead of the last block's (default False).
        name: model name; default 'vit_detector'.
        dtype: dtype policy of the layers (None: the global policy).
        preprocessing: as for `VisionTransformer` (default: the official [-1, 1]).
    """

    vit_task = TASK.name

    def __init__(self, config, num_queries: int = 20, decoder_layers: int = 3,
                 decoder_width: int = 128, decoder_heads: int = 4,
                 decoder_mlp_dim: int | None = None, query_selection: bool = True,
                 anchor_size=None, all_layers: bool = False, name: str | None = None,
                 dtype=None, preprocessing=None, **kwargs):
        config, preprocessing = task_config(config, preprocessing)
        _check_head(config, num_queries, decoder_layers, decoder_width, decoder_heads,
                    query_selection)
        anchor_size = _check_anchor_size(anchor_size, query_selection)
        mlp_dim = decoder_mlp_dim or 4 * decoder_width
        height, width = (None, None) if config.dynamic_image_size else config.image_hw
        images = keras.Input((height, width, config.channels), name="images")
        grid = block_grids(config, images, [config.num_layers - 1], HEAD_PREFIX, dtype)[0]
        memory, positions, anchors = DecoderMemory(decoder_width, anchor_size,
                                                   name=f"{HEAD_PREFIX}memory", dtype=dtype)(grid)
        per_layer = []
        if query_selection:
            queries, anchors, proposals = ProposalQueries(
                num_queries, config.num_classes, decoder_width, name=f"{HEAD_PREFIX}proposals",
                dtype=dtype)([memory, anchors])
            per_layer.append(proposals)
        else:
            queries, anchors = ObjectQueries(num_queries, decoder_width,
                                             name=f"{HEAD_PREFIX}queries", dtype=dtype)(memory)
        for index in range(decoder_layers):
            queries, anchors, outputs = DecoderLayer(
                config.num_classes, decoder_width, decoder_heads, mlp_dim,
                name=f"{HEAD_PREFIX}decoder_{index}",
                dtype=dtype)([queries, anchors, memory, positions])
            per_layer.append(outputs)
        result = StackLayers(name=f"{HEAD_PREFIX}all_layers", dtype="float32")(per_layer) \
            if all_layers else per_layer[-1]
        super().__init__(images, result, name=name or "vit_detector", dtype=dtype, **kwargs)
        self._vit_config = config
        self.vit_preprocessing = preprocessing
        self.num_queries = num_queries
        self.decoder_layers = decoder_layers
        self.decoder_width = decoder_width
        self.decoder_heads = decoder_heads
        self.decoder_mlp_dim = decoder_mlp_dim
        self.query_selection = query_selection
        self.anchor_size = anchor_size
        self.all_layers = all_layers

    def get_config(self):
        return {"config": self._vit_config.to_dict(),
                "preprocessing": self.preprocessing.to_dict(),
                "num_queries": self.num_queries, "decoder_layers": self.decoder_layers,
                "decoder_width": self.decoder_width, "decoder_heads": self.decoder_heads,
                "decoder_mlp_dim": self.decoder_mlp_dim,
                "query_selection": self.query_selection, "anchor_size": self.anchor_size,
                "all_layers": self.all_layers,
                "name": self.name, "trainable": self.trainable,
                "dtype": keras.dtype_policies.serialize(quantization.dtype_policy_map(self))}

    @property
    def num_classes(self) -> int:
        """The object classes it scores."""
        return self.config.num_classes

    def head_layers(self) -> list:
        """The detection head's layers with weights (trained anew in every fine-tuning)."""
        return [layer for layer in self.layers
                if layer.name.startswith(HEAD_PREFIX) and layer.weights]

    def enable_lora(self, rank: int, targets=lora.DEFAULT_TARGETS, alpha=None) -> None:
        """Freezes the encoder, adds LoRA adapters to the projections named by `targets` (see
        `vit_keras.lora.enable_lora`) and keeps the detection head trainable."""
        lora.enable_lora(self, rank, targets, alpha)
        for layer in self.head_layers():
            layer.trainable = True


def load_backbone(detector: ViTDetector, weights) -> None:
    """Fills the detector's encoder from a classifier or any weight source (as
    `vit_keras.tasks.segment.model.load_backbone`); the head is left as it is."""
    load_encoder(detector, weights, HEAD_PREFIX)
