"""Cost of a ViT without building it: parameters, forward FLOPs, training activation memory.

Counting convention (the one behind the GMACs column of the ViT tables): one multiply-accumulate
(MAC) per multiply-add of every matrix product and convolution, attention's two quadratic
products (q.k^T and probs.v) included; FLOPs = 2 x MACs. Bias adds, LayerNorm, softmax, GELU and
residual adds are not counted (they are under 1% of the total). ViT-B/16 at 224 px: 17.56 GMACs.
"""

from __future__ import annotations

import dataclasses

from vit_keras.config import ViTConfig


@dataclasses.dataclass(frozen=True)
class Complexity:
    """The cost of one configuration at one resolution and batch size.

    Attributes:
        image_size: (height, width) in pixels.
        batch_size: images per step the batch-dependent figures are for.
        tokens: sequence length seen by the encoder (patches + class token).
        params: trainable parameters, exactly `model.count_params()`.
        macs: forward multiply-accumulates for the batch.
        attention_macs: the part of `macs` that grows with tokens^2 (q.k^T and probs.v).
        flops: 2 x macs.
        activation_bytes: activations a training step keeps for the backward pass (see
            `estimate`), for the batch.
        attention_matrix_elements: one layer's attention probabilities for the batch
            (batch x heads x tokens x tokens).
        attention_matrix_bytes: the same in bytes (float32, the softmax's dtype).
    """

    image_size: tuple[int, int]
    batch_size: int
    tokens: int
    params: int
    macs: int
    attention_macs: int
    flops: int
    activation_bytes: int
    attention_matrix_elements: int
    attention_matrix_bytes: int

    @property
    def gmacs(self) -> float:
        """Forward GMACs for the batch."""
        return self.macs / 1e9

    def to_dict(self) -> dict:
        """A JSON-friendly dict of every field plus `gmacs`."""
        data = dataclasses.asdict(self)
        data["image_size"] = list(self.image_size)
        data["gmacs"] = self.gmacs
        return data


def count_params(config: ViTConfig) -> int:
    """Parameters of `VisionTransformer(config)` (with its head), counted from the config.

    Args:
        config: the model configuration.

    Returns:
        The number of weights, equal to the built model's `count_params()`.
    """
    width, mlp, patch = config.hidden_size, config.mlp_dim, config.patch_size
    embedding = patch * patch * config.channels * width + width
    tokens = width * (config.num_prefix_tokens + config.num_register_tokens)  # cls, dist, regs
    position = _position_params(config)
    attention = 4 * (width * width + width)               # q, k, v, out kernels and biases
    mlp_out = mlp // 2 if config.activation == "swiglu" else mlp
    mlp_params = width * mlp + mlp + mlp_out * width + width
    block = 2 * 2 * width + attention + mlp_params        # 2 LayerNorms, attention, MLP
    block += 2 * width if config.layer_scale_init is not None else 0
    norms = 2 * width * (2 if config.pre_norm else 1)
    pool = width + attention + 2 * width + mlp_params if config.classifier == "map" else 0
    features = width
    pre_logits = 0
    if config.representation_size is not None:
        pre_logits = width * config.representation_size + config.representation_size
        features = config.representation_size
    if config.projection_size is not None:
        pre_logits += features * config.projection_size
        features = config.projection_size
    heads = 2 if config.distilled else 1
    head = heads * (features * config.num_classes + config.num_classes)
    return (embedding + tokens + position + config.num_layers * block + norms + pool
            + pre_logits + head)


def _position_params(config: ViTConfig) -> int:
    """Weights of the position embedding: a learned row per patch and per class/distillation
    token (registers have none), the 2-D kind's rows and columns, none for sincos2d."""
    rows, cols = config.grid_size
    if config.posemb == "learn":
        return (config.num_patches + config.num_prefix_tokens) * config.hidden_size
    if config.posemb == "learn2d":
        return (rows + cols) * config.hidden_size // 2
    return 0


def _block_macs(config: ViTConfig, queries: int) -> tuple[int, int]:
    """(total, quadratic-attention) MACs of one block whose first `queries` tokens attend."""
    width, mlp, tokens = config.hidden_size, config.mlp_dim, config.seq_len
    projections = 2 * tokens * width * width + 2 * queries * width * width  # k, v; q, output
    attention = 2 * queries * tokens * width               # q.k^T and probs.v over all heads
    mlp_out = mlp // 2 if config.activation == "swiglu" else mlp  # SwiGLU halves the 2nd
    return projections + attention + queries * width * (mlp + mlp_out), attention


def _forward_macs(config: ViTConfig, output_tokens: int | None = None) -> tuple[int, int]:
    """(total, quadratic-attention) MACs of one image's forward pass."""
    width = config.hidden_size
    patch_pixels = config.patch_size * config.patch_size * config.channels
    embedding = config.num_patches * patch_pixels * width
    block, attention = _block_macs(config, config.seq_len)
    last_block, last_attention = _block_macs(config, output_tokens or config.seq_len)
    features = width
    pre_logits = 0
    if config.representation_size is not None:
        pre_logits = width * config.representation_size
        features = config.representation_size
    head = features * config.num_classes
    blocks = (config.num_layers - 1) * block + last_block
    return (embedding + blocks + pre_logits + head,
            (config.num_layers - 1) * attention + last_attention)


def _activation_elements(config: ViTConfig) -> int:
    """Elements one image's training step keeps for the backward pass.

    Per block: the block input and LayerNorm_0 output, q, k, v, the attention probabilities
    (heads x tokens^2), the attention context, the residual and LayerNorm_2 output (7 x tokens x D
    plus the block input), the MLP's pre- and post-GELU activations (2 x tokens x M). Plus the
    input image, the final LayerNorm input and the pooled/pre_logits/logit vectors. Dropout masks
    are not counted.
    """
    width, mlp, tokens, heads = (config.hidden_size, config.mlp_dim, config.seq_len,
                                 config.num_heads)
    height, image_width = config.image_hw
    block = 8 * tokens * width + 2 * tokens * mlp + heads * tokens * tokens
    image = height * image_width * config.channels
    top = tokens * width + width + (config.representation_size or 0) + config.num_classes
    return image + config.num_layers * block + top


def estimate(config: ViTConfig, image_size=None, batch_size: int = 1,
             bytes_per_element: int = 4, output_tokens: int | None = None) -> Complexity:
    """Estimates the cost of a ViT at a resolution, without building it.

    Args:
        config: the model configuration.
        image_size: int or (height, width) to evaluate at instead of `config.image_size` (the
            position embedding, and so the parameter count, follows the resolution).
        batch_size: images per step for the batch-dependent figures.
        bytes_per_element: size of a stored activation (4 for float32, 2 under mixed precision).
        output_tokens: count the last block for only its first `output_tokens` outputs, as
            `VisionTransformer` runs it under a class-token head (see
            `vit_keras.core.model.last_block_outputs`); None counts every token, the convention of
            the papers' GMACs tables.

    Returns:
        A `Complexity`.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if bytes_per_element not in (1, 2, 4, 8):
        raise ValueError(f"bytes_per_element must be 1, 2, 4 or 8, got {bytes_per_element!r}")
    if image_size is not None:
        config = config.replace(image_size=image_size)
    macs, attention_macs = _forward_macs(config, output_tokens)
    matrix = batch_size * config.num_heads * config.seq_len ** 2
    return Complexity(
        image_size=config.image_hw,
        batch_size=batch_size,
        tokens=config.seq_len,
        params=count_params(config),
        macs=batch_size * macs,
        attention_macs=batch_size * attention_macs,
        flops=2 * batch_size * macs,
        activation_bytes=batch_size * _activation_elements(config) * bytes_per_element,
        attention_matrix_elements=matrix,
        attention_matrix_bytes=4 * matrix,
    )


def format_table(estimates: list[Complexity]) -> str:
    """Renders estimates as an aligned text table, one row per resolution.

    Args:
        estimates: the rows, e.g. one `estimate` per image size.

    Returns:
        The table as a multi-line string.
    """
    header = ("image", "tokens", "params", "GMACs", "attn share", "train act. MiB",
              "attn/layer MiB")
    rows = [header]
    for item in estimates:
        rows.append((
            f"{item.image_size[0]}x{item.image_size[1]}",
            str(item.tokens),
            f"{item.params / 1e6:.2f}M",
            f"{item.gmacs:.2f}",
            f"{100 * item.attention_macs / item.macs:.1f}%",
            f"{item.activation_bytes / 2**20:.1f}",
            f"{item.attention_matrix_bytes / 2**20:.2f}",
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.rjust(width) for cell, width in zip(row, widths)) for row in rows]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)
