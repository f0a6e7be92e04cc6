"""Patch-size resampling of the patch-embedding kernel, as FlexiViT (Beyer et al., CVPR 2023).

A patch x of P x P pixels resized to P' x P' is R x R^T per channel, with R the P' x P
matrix of a bilinear resize. We want a kernel w' with <resize(x), w'> = <x, w> for every x,
that is R^T w' R = w per (input, output) channel pair. The minimum-norm least-squares solution is
w' = pinv(R^T) w pinv(R) (the pseudo-inverse of the Kronecker product is the product of the
pseudo-inverses). When upsampling (P' >= P), R^T has full row rank and the equality is exact;
when downsampling it holds in the least-squares sense.

The resize is TensorFlow's bilinear (half-pixel centres, no antialiasing; `jax.image.resize`
is the same when upsampling, but antialiases when downsampling, as big_vision's FlexiViT does,
so a shrunk kernel differs from theirs) of each patch on its own. Resizing a whole image also blends pixels across patch borders, so a model at
the new patch size on a resized image is close to, not equal to, the original model.
"""

from __future__ import annotations

import numpy as np

from vit_keras.checkpoints import resize


def bilinear_resize_matrix(old: int, new: int) -> np.ndarray:
    """The [new, old] matrix of a 1-D bilinear resize with half-pixel centres (tf.image.resize).

    Args:
        old: input length.
        new: output length.

    Returns:
        float64 matrix R with resized = R @ signal.
    """
    matrix = np.zeros((new, old))
    for index in range(new):
        source = min(max((index + 0.5) * old / new - 0.5, 0.0), old - 1.0)
        low = int(np.floor(source))
        high = min(low + 1, old - 1)
        fraction = source - low
        matrix[index, low] += 1.0 - fraction
        matrix[index, high] += fraction
    return matrix


def resample_patch_embedding(kernel, new_patch_size) -> np.ndarray:
    """The patch-embedding kernel for another patch size (FlexiViT's pseudo-inverse resize).

    Args:
        kernel: [P_h, P_w, channels, hidden] (the official `embedding/kernel` layout).
        new_patch_size: P' (square) or (P'_h, P'_w).

    Returns:
        [P'_h, P'_w, channels, hidden] kernel, in the input's dtype: the token of a patch
        resized to P' (bilinear, `tf.image.resize`) under it equals the token of the original
        patch under `kernel` (exactly when P' >= P; least squares otherwise).
    """
    kernel = np.asarray(kernel)
    if kernel.ndim != 4:
        raise ValueError(f"kernel must be [patch_h, patch_w, channels, hidden], got shape "
                         f"{kernel.shape}")
    new_h, new_w = resize.as_pair(new_patch_size, "new_patch_size")
    old_h, old_w = kernel.shape[:2]
    if (new_h, new_w) == (old_h, old_w):
        return kernel
    rows = np.linalg.pinv(bilinear_resize_matrix(old_h, new_h).T)  # [new_h, old_h]
    cols = np.linalg.pinv(bilinear_resize_matrix(old_w, new_w).T)  # [new_w, old_w]
    resampled = np.einsum("ah,bw,hwcd->abcd", rows, cols, kernel.astype(np.float64))
    return resampled.astype(kernel.dtype)
