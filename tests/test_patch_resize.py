"""FlexiViT patch-size resampling: the defining property, and loading at another patch size."""

import numpy as np
import pytest

import vit_keras
from helpers import random_images, randomize_weights, requires_tf, to_numpy
from vit_keras.checkpoints import patch_resize, save_npz


def _token(patch, kernel):
    """The patch embedding's linear part: <patch, kernel> per output unit."""
    return np.einsum("hwc,hwcd->d", patch.astype(np.float64), kernel.astype(np.float64))


@requires_tf
@pytest.mark.parametrize("old, new", [(8, 16), (8, 12), (16, 16), ((4, 6), (8, 9)), (7, 14)])
def test_a_resized_patch_under_the_resampled_kernel_gives_the_same_token(old, new):
    """Exact when upsampling; the patch is resized by TensorFlow, not by our own matrix."""
    import tensorflow as tf

    old_hw = (old, old) if isinstance(old, int) else old
    new_hw = (new, new) if isinstance(new, int) else new
    rng = np.random.default_rng(0)
    kernel = rng.normal(size=(*old_hw, 3, 5)).astype(np.float32)
    resampled = vit_keras.resample_patch_embedding(kernel, new)
    assert resampled.shape == (*new_hw, 3, 5) and resampled.dtype == np.float32
    for _ in range(4):
        patch = rng.uniform(-1, 1, (*old_hw, 3)).astype(np.float32)
        resized = tf.image.resize(patch[None], new_hw, method="bilinear").numpy()[0]
        np.testing.assert_allclose(_token(resized, resampled), _token(patch, kernel),
                                   rtol=1e-4, atol=1e-4)


def test_downsampling_is_the_least_squares_solution():
    rng = np.random.default_rng(1)
    kernel = rng.normal(size=(16, 16, 1, 2))
    resampled = patch_resize.resample_patch_embedding(kernel, 8)
    rows = patch_resize.bilinear_resize_matrix(16, 8)
    # The normal equations of min ||R^T w' R - w||: R (R^T w' R - w) R^T = 0.
    for unit in range(2):
        residual = rows.T @ resampled[:, :, 0, unit] @ rows - kernel[:, :, 0, unit]
        np.testing.assert_allclose(rows @ residual @ rows.T, 0.0, atol=1e-9)


def test_resize_matrix_matches_tensorflow_bilinear():
    tf = pytest.importorskip("tensorflow")
    signal = np.random.default_rng(2).normal(size=(1, 6, 1, 1)).astype(np.float32)
    for new in (3, 6, 9, 13):
        expected = tf.image.resize(signal, (new, 1), method="bilinear").numpy()[0, :, 0, 0]
        np.testing.assert_allclose(patch_resize.bilinear_resize_matrix(6, new) @ signal[0, :, 0, 0],
                                   expected, atol=1e-6)


def _resize_each_patch(images, patch, new_patch):
    """Every patch resized on its own (tf.image.resize), so no pixel mixes across patches."""
    import tensorflow as tf

    batch, height, width, channels = images.shape
    rows, cols = height // patch, width // patch
    patches = np.asarray(images).reshape(batch, rows, patch, cols, patch, channels)
    patches = patches.transpose(0, 1, 3, 2, 4, 5).reshape(-1, patch, patch, channels)
    resized = tf.image.resize(patches, (new_patch, new_patch), method="bilinear").numpy()
    resized = resized.reshape(batch, rows, cols, new_patch, new_patch, channels)
    return resized.transpose(0, 1, 3, 2, 4, 5).reshape(
        batch, rows * new_patch, cols * new_patch, channels)


@requires_tf
def test_a_checkpoint_loads_at_another_patch_size(tmp_path):
    """Patch 8 at 32 px -> patch 16 at 64 px (the same 4x4 grid): on images whose patches are
    each upsampled 2x, the model gives the original model's logits."""
    tiny = dict(hidden_size=16, mlp_dim=32, num_heads=2, num_layers=2, classes=7)
    source = vit_keras.ViTB16(input_shape=(32, 32, 3), patch_size=8, **tiny)
    randomize_weights(source, seed=4)
    save_npz(source, str(tmp_path / "p8.npz"))
    target = vit_keras.ViTB16(input_shape=(64, 64, 3), patch_size=16, **tiny)
    vit_keras.load_weights(target, str(tmp_path / "p8.npz"))
    images = to_numpy(random_images(source, batch=2))
    upsampled = _resize_each_patch(images, 8, 16)
    np.testing.assert_allclose(to_numpy(target(upsampled)), to_numpy(source(images)),
                               atol=1e-5)


def test_the_constructor_keeps_the_weights_resolution_at_another_patch_size(tmp_path):
    tiny = dict(hidden_size=16, mlp_dim=32, num_heads=2, num_layers=1, classes=7)
    source = vit_keras.ViTB16(input_shape=(64, 64, 3), **tiny)
    save_npz(source, str(tmp_path / "p16.npz"))
    finer = vit_keras.ViTB16(weights=str(tmp_path / "p16.npz"), patch_size=8,
                             **{k: v for k, v in tiny.items() if k != "classes"})
    assert finer.input_shape == (None, 64, 64, 3)  # 64 px, now an 8x8 grid
    assert tuple(finer.get_layer("embedding").weights[0].shape) == (8, 8, 3, 16)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match=r"kernel must be \[patch_h, patch_w, channels, "
                       r"hidden\], got shape \(3, 3\)"):
        vit_keras.resample_patch_embedding(np.zeros((3, 3)), 4)
    with pytest.raises(ValueError, match="new_patch_size must be positive"):
        vit_keras.resample_patch_embedding(np.zeros((2, 2, 1, 1)), 0)
