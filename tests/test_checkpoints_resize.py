"""resize_position_embedding equals the official rule: scipy.ndimage.zoom(order=1)."""

import numpy as np
import pytest
import scipy.ndimage

from vit_keras.checkpoints import resize_position_embedding


def zoom_reference(grid_tokens, old, new):
    width = grid_tokens.shape[-1]
    grid = grid_tokens.reshape(old[0], old[1], width)
    zoomed = scipy.ndimage.zoom(grid, (new[0] / old[0], new[1] / old[1], 1), order=1)
    assert zoomed.shape[:2] == tuple(new)
    return zoomed.reshape(new[0] * new[1], width)


@pytest.mark.parametrize("old, new", [
    ((4, 4), (6, 6)), ((14, 14), (24, 24)), ((7, 7), (5, 5)), ((4, 4), (1, 1)), ((1, 1), (3, 3)),
    ((4, 4), (6, 9)), ((4, 4), (7, 3)), ((3, 5), (8, 2)),
])
@pytest.mark.parametrize("has_class_token", [True, False])
def test_matches_scipy_zoom_order_1(old, new, has_class_token):
    rng = np.random.default_rng(0)
    tokens = old[0] * old[1] + has_class_token
    posemb = rng.normal(size=(1, tokens, 16)).astype(np.float32)
    old_grid = None if old[0] == old[1] else old
    resized = resize_position_embedding(posemb, new, has_class_token, old_grid=old_grid)
    expected = zoom_reference(posemb[0, int(has_class_token):], old, new)
    assert resized.shape == (1, new[0] * new[1] + has_class_token, 16)
    assert resized.dtype == np.float32
    np.testing.assert_allclose(resized[0, int(has_class_token):], expected, rtol=0, atol=1e-6)
    if has_class_token:
        assert np.array_equal(resized[0, 0], posemb[0, 0])


def test_aligned_corners_keep_the_corner_values():
    grid = np.arange(2 * 2, dtype=np.float32).reshape(1, 4, 1)  # [[0, 1], [2, 3]]
    resized = resize_position_embedding(grid, 3, has_class_token=False)[0, :, 0]
    np.testing.assert_allclose(resized, [0, 0.5, 1, 1, 1.5, 2, 2, 2.5, 3])


def test_int_grid_and_2d_input():
    posemb = np.random.default_rng(1).normal(size=(1 + 9, 4)).astype(np.float32)
    resized = resize_position_embedding(posemb, 5, has_class_token=True)
    assert resized.shape == (26, 4)


def test_non_square_grid_needs_old_grid():
    posemb = np.zeros((1, 1 + 12, 4), np.float32)
    with pytest.raises(ValueError, match="square"):
        resize_position_embedding(posemb, (4, 4), has_class_token=True)
    with pytest.raises(ValueError, match="old_grid"):
        resize_position_embedding(posemb, (4, 4), has_class_token=True, old_grid=(2, 5))
    assert resize_position_embedding(posemb, (4, 4), True, old_grid=(3, 4)).shape == (1, 17, 4)


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match=r"\(1, tokens, D\)"):
        resize_position_embedding(np.zeros((2, 5, 4)), 2, has_class_token=True)
    with pytest.raises(ValueError, match="new_grid"):
        resize_position_embedding(np.zeros((1, 5, 4)), (0, 2), has_class_token=True)
