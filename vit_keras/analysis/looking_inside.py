"""Looking inside a ViT (paper section 4.5): attention maps and rollout, mean attention distance,
position-embedding similarity, patch-embedding filters, and few-shot linear evaluation.

Every function reads the weights of the model it is given; nothing is copied or retrained.
Images passed to the model-level functions are model inputs: NHWC, scaled to [-1, 1] (see
`vit_keras.preprocess_input`), at the model's resolution. Results are NumPy arrays.
"""

from __future__ import annotations

import keras
import numpy as np
from PIL import Image

from vit_keras import names
from vit_keras.core.model import config_from_model, input_image_size
from vit_keras.intermediates import block_embedding_model

HEAD_FUSIONS = ("mean", "max", "min")


# --------------------------------------------------------------------------------------------
# Attention maps


class AttentionProbe(keras.Model):
    """Runs a ViT's embedding and encoder blocks and returns every block's attention.

    The probe holds the very layer objects of the model it was made from, so it always sees the
    model's current weights: no copy, no retraining.

    Args:
        model: a model built by `vit_keras.VisionTransformer`.
    """

    def __init__(self, model: keras.Model, **kwargs):
        super().__init__(name=kwargs.pop("name", f"{model.name}_attention_probe"), **kwargs)
        config = config_from_model(model)
        # The model's own layers from the image to the first block's input: patch embedding
        # (through the ResNet of hybrids), class/distillation tokens, position embedding of
        # any kind and registers, exactly as the model composes them.
        self.tokens = keras.Model(model.inputs[0], model.get_layer(names.block(0)).input,
                                  name="tokens")
        self.blocks = [model.get_layer(names.block(i)) for i in range(config.num_layers)]

    def call(self, images):
        """Images [batch, h, w, c] -> attention [layers, batch, heads, tokens, tokens], float32."""
        tokens = self.tokens(images, training=False)
        scores = []
        for block in self.blocks:
            tokens, block_scores = block(tokens, training=False, return_attention_scores=True)
            scores.append(block_scores)
        return keras.ops.stack(scores)


def attention_maps(model: keras.Model, images, batch_size: int = 32) -> list[np.ndarray]:
    """The attention probabilities of every encoder block, from the model's own weights.

    Args:
        model: a model built by `vit_keras.VisionTransformer`.
        images: [batch, h, w, c] model inputs (in [-1, 1]).
        batch_size: images per forward pass.

    Returns:
        One float32 array [batch, heads, tokens, tokens] per block, first block first; each row
        (a query token) sums to 1. With a class token it is token 0.
    """
    images = _check_images(model, images)
    probe = AttentionProbe(model)
    chunks = [keras.ops.convert_to_numpy(probe(images[start:start + batch_size]))
              for start in range(0, len(images), batch_size)]
    stacked = np.concatenate(chunks, axis=1)
    return list(stacked)


def _check_images(model, images) -> np.ndarray:
    images = np.asarray(images, dtype=np.float32)
    # A model taking any size is analysed at its stored size, the grid its maps are drawn on.
    expected = (*input_image_size(model), model.inputs[0].shape[-1])
    fits = images.ndim == 4 and images.shape[1:] == expected
    if not fits or len(images) == 0:
        raise ValueError(f"images must be a non-empty batch of shape (batch, {expected[0]}, "
                         f"{expected[1]}, {expected[2]}) (the model's input), got {images.shape}")
    return images


# --------------------------------------------------------------------------------------------
# Attention rollout


def rollout_from_attention(attentions, has_class_token: bool = True,
                           discard_ratio: float = 0.0, head_fusion: str = "mean",
                           patch_tokens: slice | None = None) -> np.ndarray:
    """Attention rollout (Abnar & Zuidema, 2020) from per-block attention probabilities.

    For each block: fuse the heads, zero the weakest `discard_ratio` fraction of the fused
    weights of each image, add the identity (the residual path), renormalise the rows; then
    multiply the blocks together, first block on the right.

    Args:
        attentions: sequence of [batch, heads, tokens, tokens] arrays, first block first.
        has_class_token: token 0 is a class token. The map is then the class token's row over
            the patches; without one it is the mean row (what the pooled average looks at).
        discard_ratio: fraction in [0, 1) of the smallest fused weights set to zero.
        head_fusion: 'mean', 'max' or 'min' over heads.
        patch_tokens: where the patch tokens are in the sequence (default: every token after
            the class token); see `patch_token_slice`.

    Returns:
        [batch, patches] float32 rollout weights of the patch tokens.
    """
    patch_tokens = patch_tokens or slice(1 if has_class_token else 0, None)
    result = rollout_matrix(attentions, discard_ratio, head_fusion)
    if has_class_token:
        return result[:, 0, patch_tokens].astype(np.float32)
    return result.mean(axis=1)[:, patch_tokens].astype(np.float32)


def rollout_matrix(attentions, discard_ratio: float = 0.0,
                   head_fusion: str = "mean") -> np.ndarray:
    """The rollout of every token: [batch, tokens, tokens] float64, row i how much token i's
    output draws on each input token through every block (each row sums to 1); arguments as
    `rollout_from_attention`'s."""
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(f"head_fusion must be one of {HEAD_FUSIONS}, got {head_fusion!r}")
    if not 0.0 <= discard_ratio < 1.0:
        raise ValueError(f"discard_ratio must be in [0, 1), got {discard_ratio!r}")
    result = None
    for attention in attentions:
        attention = np.asarray(attention, dtype=np.float64)
        fused = getattr(np, head_fusion)(attention, axis=1)               # [batch, T, T]
        if discard_ratio > 0:
            fused = _discard_weakest(fused, discard_ratio)
        tokens = fused.shape[-1]
        mixed = fused + np.eye(tokens)
        mixed /= mixed.sum(axis=-1, keepdims=True)
        result = mixed if result is None else mixed @ result
    if result is None:
        raise ValueError("attentions must hold at least one block's attention")
    return result


def patch_token_slice(config) -> slice:
    """Where a model's patch tokens sit in its sequence: after the class and distillation
    tokens, before any registers."""
    start = config.num_prefix_tokens
    return slice(start, start + config.num_patches)


def _discard_weakest(fused: np.ndarray, ratio: float) -> np.ndarray:
    batch, tokens, _ = fused.shape
    flat = fused.reshape(batch, -1).copy()
    count = int(flat.shape[1] * ratio)
    weakest = np.argsort(flat, axis=1)[:, :count]
    np.put_along_axis(flat, weakest, 0.0, axis=1)
    return flat.reshape(batch, tokens, tokens)


def attention_rollout(model: keras.Model, images, discard_ratio: float = 0.0,
                      head_fusion: str = "mean") -> np.ndarray:
    """Where the model looks: attention rollout through all blocks, on the patch grid.

    Args:
        model: a model built by `vit_keras.VisionTransformer`.
        images: [batch, h, w, c] model inputs (in [-1, 1]).
        discard_ratio: fraction of the weakest fused attention weights dropped per block.
        head_fusion: 'mean', 'max' or 'min' over heads.

    Returns:
        [batch, grid_rows, grid_cols] float32 maps (raw rollout weights; `overlay` rescales).
    """
    config = config_from_model(model)
    weights = rollout_from_attention(attention_maps(model, images),
                                     has_class_token=config.classifier == "token",
                                     discard_ratio=discard_ratio, head_fusion=head_fusion,
                                     patch_tokens=patch_token_slice(config))
    return weights.reshape(-1, *config.grid_size)


def upsample_map(attention_map, size: tuple[int, int]) -> np.ndarray:
    """Bilinearly resizes a [rows, cols] map to `size` = (height, width), rescaled to [0, 1]."""
    attention_map = np.asarray(attention_map, dtype=np.float32)
    if attention_map.ndim != 2:
        raise ValueError(f"attention_map must be 2-D (rows, cols), got shape {attention_map.shape}")
    span = attention_map.max() - attention_map.min()
    scaled = (attention_map - attention_map.min()) / span if span > 0 else attention_map * 0
    resized = Image.fromarray(scaled).resize((size[1], size[0]), Image.BILINEAR)
    return np.clip(np.asarray(resized), 0.0, 1.0)


def overlay(image, attention_map, alpha: float = 0.5) -> np.ndarray:
    """Blends a heat map of `attention_map` over `image`.

    Args:
        image: [h, w, c] pixels in 0..255 (c = 1 or 3).
        attention_map: [rows, cols] map, e.g. one `attention_rollout` map; upsampled to the
            image and rescaled to [0, 1] (blue = least, red = most attention).
        alpha: weight of the heat map.

    Returns:
        [h, w, 3] uint8 RGB image.
    """
    image = np.asarray(image, dtype=np.float32)
    if image.ndim != 3 or image.shape[-1] not in (1, 3):
        raise ValueError(f"image must be (height, width, 1 or 3), got shape {image.shape}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    if image.shape[-1] == 1:
        image = np.repeat(image, 3, axis=-1)
    heat = upsample_map(attention_map, image.shape[:2])[..., None]
    # A jet-like colour ramp computed directly, so no plotting library is needed here.
    colour = np.clip(1.5 - np.abs(4.0 * heat - np.array([3.0, 2.0, 1.0])), 0.0, 1.0) * 255.0
    blended = (1.0 - alpha) * image + alpha * colour
    return np.clip(np.rint(blended), 0, 255).astype(np.uint8)


# --------------------------------------------------------------------------------------------
# Mean attention distance


def patch_centre_distances(grid_size: tuple[int, int], patch_size: int) -> np.ndarray:
    """Pixel distances between patch centres, [patches, patches], patches in row-major order."""
    rows, cols = grid_size
    centre_y, centre_x = np.meshgrid((np.arange(rows) + 0.5) * patch_size,
                                     (np.arange(cols) + 0.5) * patch_size, indexing="ij")
    centres = np.stack([centre_y.ravel(), centre_x.ravel()], axis=-1)
    return np.linalg.norm(centres[:, None, :] - centres[None, :, :], axis=-1)


def mean_attention_distance_from_attention(attentions, grid_size: tuple[int, int],
                                           patch_size: int,
                                           has_class_token: bool = True,
                                           patch_tokens: slice | None = None) -> np.ndarray:
    """Mean attention distance per head from per-block attention probabilities.

    For each patch query: the attention-weighted mean of the pixel distances to the patch keys;
    then the mean over queries and images. The class token is left out on both sides: its row
    and column are dropped and each patch's weights over the patches renormalised to sum to 1,
    so the figure reads "how far a patch looks among patches" (uniform attention gives the mean
    pairwise patch-centre distance).

    Args:
        attentions: sequence of [batch, heads, tokens, tokens] arrays, first block first.
        grid_size: (rows, cols) of the patch grid.
        patch_size: patch side in pixels.
        has_class_token: token 0 is a class token.
        patch_tokens: where the patch tokens are in the sequence (default: every token after
            the class token); see `patch_token_slice`.

    Returns:
        [layers, heads] float32 distances in pixels.
    """
    distances = patch_centre_distances(grid_size, patch_size)
    patches = patch_tokens or slice(1 if has_class_token else 0, None)
    result = []
    for attention in attentions:
        attention = np.asarray(attention, dtype=np.float64)[..., patches, patches]
        if attention.shape[-1] != distances.shape[0]:
            raise ValueError(f"attention over {attention.shape[-1]} patch tokens does not match "
                             f"the {grid_size[0]}x{grid_size[1]} patch grid")
        attention = attention / attention.sum(axis=-1, keepdims=True)
        per_query = np.einsum("bhqk,qk->bhq", attention, distances)
        result.append(per_query.mean(axis=(0, 2)))
    return np.asarray(result, dtype=np.float32)


def mean_attention_distance(model: keras.Model, images) -> np.ndarray:
    """How far each head looks, in pixels (the paper's "attention distance", Figure 7).

    Args:
        model: a model built by `vit_keras.VisionTransformer`.
        images: [batch, h, w, c] model inputs (in [-1, 1]).

    Returns:
        [layers, heads] float32 mean attention distances in pixels, averaged over patch queries
        and images (see `mean_attention_distance_from_attention` for the class token).
    """
    config = config_from_model(model)
    return mean_attention_distance_from_attention(
        attention_maps(model, images), config.grid_size, config.patch_size,
        has_class_token=config.classifier == "token", patch_tokens=patch_token_slice(config))


# --------------------------------------------------------------------------------------------
# Position embeddings and patch-embedding filters


def position_embedding_similarity(model: keras.Model) -> np.ndarray:
    """Cosine similarity between the position embeddings of every pair of patches.

    Args:
        model: a model built by `vit_keras.VisionTransformer`.

    Returns:
        [rows, cols, rows, cols] float32: entry [i, j, k, l] compares the patch at grid
        position (i, j) with the one at (k, l). The class token's row is left out.
    """
    config = config_from_model(model)
    embedding = keras.ops.convert_to_numpy(
        model.get_layer(names.POSEMB).pos_embedding).astype(np.float64)[0]
    embedding = embedding[config.seq_len - config.num_patches:]
    unit = embedding / np.maximum(np.linalg.norm(embedding, axis=-1, keepdims=True), 1e-12)
    rows, cols = config.grid_size
    return (unit @ unit.T).reshape(rows, cols, rows, cols).astype(np.float32)


def principal_filters(kernel, k: int = 28) -> tuple[np.ndarray, np.ndarray]:
    """Top-k principal components of a patch-embedding kernel.

    Each of the D output columns of the (P, P, C, D) kernel is one P x P x C filter; the filters
    are centred (their mean removed) and the principal directions taken from an SVD.

    Args:
        kernel: (P, P, C, D) array.
        k: number of components, at most min(D, P*P*C).

    Returns:
        components [k, P, P, C] (orthonormal when flattened, strongest first) and the fraction of
        the filters' variance each explains, [k].
    """
    kernel = np.asarray(kernel, dtype=np.float64)
    if kernel.ndim != 4:
        raise ValueError(f"kernel must be (P, P, C, D), got shape {kernel.shape}")
    size, _, channels, width = kernel.shape
    limit = min(width, size * size * channels)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= limit:
        raise ValueError(f"k must be an int in [1, {limit}] (min of D and P*P*C), got {k!r}")
    filters = kernel.reshape(-1, width).T                                 # [D, P*P*C]
    filters = filters - filters.mean(axis=0, keepdims=True)
    _, singular, directions = np.linalg.svd(filters, full_matrices=False)
    variance = singular ** 2
    explained = variance / variance.sum() if variance.sum() > 0 else variance
    components = directions[:k].reshape(k, size, size, channels)
    return components.astype(np.float32), explained[:k].astype(np.float32)


def embedding_filters(model: keras.Model, k: int = 28) -> np.ndarray:
    """The top-k principal components of the learned patch-embedding filters (paper Figure 7).

    Args:
        model: a model built by `vit_keras.VisionTransformer`.
        k: number of components, at most min(D, P*P*C).

    Returns:
        [k, P, P, C] float32 components, strongest first (sign is arbitrary).
    """
    return principal_filters(patch_filter_kernel(model), k)[0]


def patch_filter_kernel(model: keras.Model) -> np.ndarray:
    """The (P, P, C, D) linear filters that map each patch's pixels to its embedding.

    For `stem='shifted_patches'` these are the weights on the unshifted image's pixels (the
    other four fifths of the projection see the shifted copies).

    Raises:
        ValueError: a `stem='conv'` model, whose convolutions have no per-patch linear filters.
    """
    config = config_from_model(model)
    if config.stem == "conv":
        raise ValueError("a convolutional stem has no linear patch filters (its 3x3 "
                         "convolutions see across patches); patch filters need stem "
                         "'patchify' or 'shifted_patches'")
    kernel = keras.ops.convert_to_numpy(model.get_layer(names.EMBEDDING).projection.kernel)
    if config.stem == "shifted_patches":
        patch = config.patch_size
        kernel = kernel.reshape(patch, patch, 5, config.channels, -1)[:, :, 0]
    return kernel


# --------------------------------------------------------------------------------------------
# Few-shot linear evaluation


def feature_extractor(model: keras.Model) -> keras.Model:
    """A model sharing `model`'s layers that returns the pre-logit features (the head's input)."""
    if names.HEAD in {layer.name for layer in model.layers}:
        return keras.Model(model.inputs[0], model.get_layer(names.HEAD).input,
                           name=f"{model.name}_features")
    if len(model.outputs[0].shape) == 2:
        return model
    raise ValueError(f"model {model.name!r} has no 'head' layer and does not output [batch, D] "
                     "features; build it with include_top=True or a pooling mode")


def few_shot_from_features(train_features, train_labels, test_features, test_labels,
                           shots=(1, 5, 10, 25), l2_reg: float = 1.0, trials: int = 5,
                           seed: int = 0) -> dict[int, float]:
    """Few-shot accuracy of a regularised least-squares classifier (paper section 4.1).

    For each shot count n: draw n training examples per class, centre the features on them, and
    solve ridge regression to targets in {-1, 1}^K in closed form; classify the test set by the
    largest output. Accuracies are averaged over `trials` draws.

    Args:
        train_features: [n_train, F] features to draw the shots from.
        train_labels: [n_train] integer labels.
        test_features: [n_test, F] features.
        test_labels: [n_test] integer labels.
        shots: examples per class to try.
        l2_reg: ridge penalty.
        trials: random draws per shot count.
        seed: seed of the draws.

    Returns:
        {shots: mean test accuracy in [0, 1]}.
    """
    train_x = np.asarray(train_features, dtype=np.float64)
    test_x = np.asarray(test_features, dtype=np.float64)
    train_y = np.asarray(train_labels).reshape(-1)
    test_y = np.asarray(test_labels).reshape(-1)
    if train_x.ndim != 2 or test_x.ndim != 2 or train_x.shape[1] != test_x.shape[1]:
        raise ValueError(f"features must be [examples, F] with the same F, got {train_x.shape} "
                         f"and {test_x.shape}")
    if len(train_x) != len(train_y) or len(test_x) != len(test_y):
        raise ValueError("each feature row needs one label: got "
                         f"{len(train_x)}/{len(train_y)} train and {len(test_x)}/{len(test_y)} test")
    classes = np.unique(train_y)
    rng = np.random.default_rng(seed)
    results = {}
    for shot in shots:
        counts = {c: int((train_y == c).sum()) for c in classes}
        if shot < 1 or min(counts.values()) < shot:
            raise ValueError(f"{shot}-shot needs at least {shot} training examples of every "
                             f"class, got per-class counts {counts}")
        accuracies = []
        for _ in range(trials):
            chosen = np.concatenate([rng.choice(np.flatnonzero(train_y == c), shot, replace=False)
                                     for c in classes])
            weights, bias, mean = _ridge(train_x[chosen], train_y[chosen], classes, l2_reg)
            predicted = classes[np.argmax((test_x - mean) @ weights + bias, axis=1)]
            accuracies.append(float(np.mean(predicted == test_y)))
        results[int(shot)] = float(np.mean(accuracies))
    return results


def _ridge(features, labels, classes, l2_reg):
    """Closed-form ridge regression to {-1, 1} one-vs-rest targets, on centred features."""
    targets = np.where(labels[:, None] == classes[None, :], 1.0, -1.0)
    mean = features.mean(axis=0)
    centred = features - mean
    examples, dims = centred.shape
    if examples < dims:   # the dual form solves an examples x examples system instead
        gram = centred @ centred.T + l2_reg * np.eye(examples)
        weights = centred.T @ np.linalg.solve(gram, targets - targets.mean(axis=0))
    else:
        gram = centred.T @ centred + l2_reg * np.eye(dims)
        weights = np.linalg.solve(gram, centred.T @ (targets - targets.mean(axis=0)))
    return weights, targets.mean(axis=0), mean


def few_shot(model: keras.Model, train, test, shots=(1, 5, 10, 25), l2_reg: float = 1.0,
             trials: int = 5, seed: int = 0, batch_size: int = 64,
             block: int | None = None) -> dict[int, float]:
    """Few-shot linear evaluation of a model's frozen pre-logit features (or of any block's).

    Args:
        model: a model built by `vit_keras.VisionTransformer`.
        train: (images, labels) to draw the shots from; images are model inputs (in [-1, 1]).
        test: (images, labels) to measure accuracy on.
        shots: examples per class to try.
        l2_reg: ridge penalty.
        trials: random draws per shot count.
        seed: seed of the draws.
        batch_size: images per forward pass when extracting features.
        block: probe this encoder block instead (negative counts from the end): its
            final-normed class token, or its patch mean (see
            `vit_keras.intermediates.block_embedding_model`).

    Returns:
        {shots: mean test accuracy in [0, 1]}.
    """
    if block is None:
        extractor = feature_extractor(model)
    else:
        extractor = block_embedding_model(model, block)

    def features(images):
        images = _check_images(model, images)
        return np.concatenate([keras.ops.convert_to_numpy(extractor(images[i:i + batch_size]))
                               for i in range(0, len(images), batch_size)])

    return few_shot_from_features(features(train[0]), train[1], features(test[0]), test[1],
                                  shots=shots, l2_reg=l2_reg, trials=trials, seed=seed)
