"""`SpaceTimeViT`: the ViT on clips and volumes (tubelets, space-time positions, the joint,
divided and factorised layouts), and an image model inflated to it."""

import keras
import numpy as np
import pytest
from helpers import randomize_weights

from vit_keras.config import ViTConfig
from vit_keras.core.model import VisionTransformer
from vit_keras.tasks.clip.inflate import inflate
from vit_keras.tasks.clip.model import LAYOUTS, SpaceTimeViT

FRAMES, SIZE = 4, 16


def _config(**changes) -> ViTConfig:
    fields = dict(image_size=SIZE, patch_size=4, hidden_size=32, mlp_dim=64, num_heads=4,
                  num_layers=2, num_classes=5)
    return ViTConfig(**{**fields, **changes})


def _random_image_model(config, seed=0) -> VisionTransformer:
    """An image ViT whose every weight is random (head included), as trained weights are."""
    model = VisionTransformer(config)
    randomize_weights(model, seed=seed, stddev=0.2)
    return model


def _clips(batch=2, frames=FRAMES, seed=1):
    return np.random.default_rng(seed).normal(size=(batch, frames, SIZE, SIZE, 3)).astype(
        "float32")


def _assert_logits_close(got, expected):
    got, expected = keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(expected)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


@pytest.mark.parametrize("classifier", ["token", "gap"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_identical_frames_give_the_inflated_image_models_logits(layout, classifier):
    """Under the even spread, a clip of one image repeated is that image to the clip model."""
    image_model = _random_image_model(_config(classifier=classifier))
    images = _clips(frames=1)[:, 0]
    clip_model = inflate(image_model, frames=FRAMES, tubelet_frames=2, layout=layout)
    clips = np.repeat(images[:, None], FRAMES, axis=1)
    _assert_logits_close(clip_model(clips), image_model(images))


@pytest.mark.parametrize("layout", ["divided", "factorised"])
def test_locality_attention_inflates_exactly_where_each_frame_attends_alone(layout):
    image_model = _random_image_model(_config(locality_attention=True))
    images = _clips(frames=1)[:, 0]
    clip_model = inflate(image_model, frames=FRAMES, layout=layout, spread="central")
    _assert_logits_close(clip_model(np.repeat(images[:, None], FRAMES, axis=1)),
                         image_model(images))
    with pytest.raises(ValueError, match="in the joint layout it would still see itself"):
        inflate(image_model, layout="joint")


def test_the_central_spread_puts_the_image_kernel_on_the_middle_frame():
    image_model = _random_image_model(_config())
    clip_model = inflate(image_model, frames=6, tubelet_frames=3, spread="central")
    kernel = image_model.get_layer("embedding").projection.kernel.numpy()
    inflated = clip_model.get_layer("embedding").projection.kernel.numpy()
    assert inflated.shape == (3, *kernel.shape)
    np.testing.assert_array_equal(inflated[1], kernel)
    assert not inflated[0].any() and not inflated[2].any()
    images = _clips(frames=1)[:, 0]
    _assert_logits_close(clip_model(np.repeat(images[:, None], 6, axis=1)), image_model(images))
    with pytest.raises(ValueError, match="spread must be one of"):
        inflate(image_model, spread="middle")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_every_layout_makes_frames_interact(layout):
    """A model of single frames (their logits averaged or summed) gives f(A) + f(B) = f(A')
    + f(B'), where A' and B' swap one frame: none of the layouts does, once its temporal
    weights are not zero (as after training)."""
    model = inflate(_random_image_model(_config()), frames=FRAMES, tubelet_frames=1,
                    layout=layout)
    for layer in model.layers:
        if layer.name.startswith("temporal") or layer.name == "posembed_input":
            randomize_weights(layer, seed=3, stddev=0.3)
    first, second = _clips(seed=1), _clips(seed=2)
    swapped_first, swapped_second = first.copy(), second.copy()
    swapped_first[:, 1], swapped_second[:, 1] = second[:, 1], first[:, 1]
    first_logits, second_logits = np.asarray(model(first)), np.asarray(model(second))
    interaction = (first_logits + second_logits - np.asarray(model(swapped_first))
                   - np.asarray(model(swapped_second)))
    # float32 rounding alone leaves about 1e-7 of the clips' difference
    spread = np.abs(first_logits - second_logits).max()
    assert np.abs(interaction).max() > 1e-3 * spread


def test_tubelets_are_a_strided_3d_convolution():
    """Each token is the tubelet of its frames, rows and columns: the same numbers as a
    Conv3D with kernel = stride = (t, P, P), on a clip of unlike frames and sides."""
    from vit_keras.tasks.clip.layers import TubeletEmbedding

    clips = np.random.default_rng(6).normal(size=(2, 6, 8, 12, 3)).astype("float32")
    layer = TubeletEmbedding(hidden_size=5, patch_size=4, tubelet_frames=3)
    tokens = keras.ops.convert_to_numpy(layer(clips))
    kernel, bias = layer.projection.kernel, layer.projection.bias
    grid = keras.ops.convert_to_numpy(keras.ops.conv(clips, kernel, strides=(3, 4, 4))) + \
        keras.ops.convert_to_numpy(bias)
    assert tokens.shape == (2, 2, 6, 5)
    np.testing.assert_allclose(tokens, grid.reshape(2, 2, 6, 5), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_a_keras_file_rebuilds_the_model_under_safe_mode(layout, tmp_path):
    model = inflate(_random_image_model(_config()), frames=FRAMES, layout=layout,
                    temporal_layers=1)
    path = tmp_path / "clip.keras"
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded, SpaceTimeViT) and loaded.vit_task == "clip"
    assert (loaded.frames, loaded.tubelet_frames, loaded.layout, loaded.temporal_layers) == \
        (FRAMES, 2, layout, 1)
    assert loaded.config == model.config
    np.testing.assert_array_equal(loaded(_clips()), model(_clips()))


def test_shapes_and_options_it_cannot_take_are_named():
    model = SpaceTimeViT(_config(), frames=FRAMES)
    with pytest.raises(ValueError, match=r"takes clips .* of shape \(batch, 4, 16, 16, 3\), "
                                         r"got \(2, 6, 16, 16, 3\)"):
        model(_clips(frames=6))
    with pytest.raises(ValueError, match=r"frames \(5\) must be a positive multiple of "
                                         r"tubelet_frames \(2\)"):
        SpaceTimeViT(_config(), frames=5, tubelet_frames=2)
    with pytest.raises(ValueError, match="needs stem='patchify', got 'conv'"):
        SpaceTimeViT(_config(stem="conv"))
    with pytest.raises(ValueError, match="classifier 'token' or 'gap', got 'map'"):
        SpaceTimeViT(_config(classifier="map"))
    with pytest.raises(ValueError, match="layout must be one of"):
        SpaceTimeViT(_config(), layout="axial")
    with pytest.raises(ValueError, match="inflate takes a vit_keras VisionTransformer"):
        inflate(keras.Sequential([keras.layers.Dense(2)]))


def test_quantize_and_lora_reach_the_temporal_projections():
    model = SpaceTimeViT(_config(), frames=FRAMES, layout="divided")
    model.enable_lora(4)
    temporal = model.get_layer("temporal_attention_0").attention
    assert temporal.query.lora_enabled and temporal.value.lora_enabled
    assert model.get_layer("embedding").projection.trainable is False
    model = inflate(_random_image_model(_config()), frames=FRAMES, layout="factorised")
    randomize_weights(model.get_layer("temporal_block_0"), seed=4)
    clips = _clips()
    before = np.asarray(model(clips))
    model.quantize("int8")
    block = model.get_layer("temporal_block_0")
    assert block.attention.query.kernel.dtype == "int8"
    assert model.get_layer("embedding").projection.kernel.dtype == "int8"
    after = np.asarray(model(clips))
    assert not np.array_equal(after, before)  # the int8 kernels run
    np.testing.assert_allclose(after, before, atol=0.05 * np.abs(before).max())


def test_fit_trains_every_part():
    """Three steps of `fit` move the spatial, the temporal and the position weights (the
    first step moves only the head, which starts at zero; the second the temporal attention's
    output, which starts at zero too)."""
    model = SpaceTimeViT(_config(), frames=FRAMES, layout="divided")
    # eagerly: the three steps cost less than tracing one (the layers' contracts trace them)
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  run_eagerly=True)
    watched = {name: model.get_layer(name).weights[0].numpy().copy()
               for name in ("embedding", "posembed_input", "temporal_attention_1",
                            "encoderblock_0")}
    history = model.fit(_clips(batch=6), np.arange(6) % 5, batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    for name, before in watched.items():
        assert np.abs(model.get_layer(name).weights[0].numpy() - before).max() > 0, name


def _assert_inflates_exactly(image_model, layout="divided"):
    """With a random head, identical frames give the image model's logits."""
    head = image_model.get_layer("head")
    rng = np.random.default_rng(7)
    head.set_weights([rng.normal(0, 1, weight.shape) for weight in head.get_weights()])
    height, width = image_model.config.image_hw
    images = np.random.default_rng(8).uniform(-1, 1, (2, height, width, 3)).astype("float32")
    clip_model = inflate(image_model, frames=FRAMES, tubelet_frames=2, layout=layout)
    assert clip_model.preprocessing == image_model.preprocessing
    np.testing.assert_allclose(clip_model(np.repeat(images[:, None], FRAMES, axis=1)),
                               image_model(images), atol=1e-5)


def test_an_official_release_file_inflates_exactly(tiny_config, tmp_path):
    """Weights read from the official .npz layout (with its pre_logits) start the clip model."""
    from vit_keras import load_weights
    from vit_keras.checkpoints import save_npz

    config = tiny_config.replace(representation_size=16)
    source = VisionTransformer(config)
    randomize_weights(source, seed=0)
    path = str(tmp_path / "release.npz")
    save_npz(source, path)
    image_model = VisionTransformer(config)
    load_weights(image_model, path, skip_head=False)
    _assert_inflates_exactly(image_model, layout="joint")


def test_a_timm_family_by_name_inflates_exactly(tmp_path, monkeypatch):
    """CLIP's timm weights under a family name (its pre-norm and quick GELU included)."""
    import dataclasses
    import os

    import vit_keras
    from vit_keras import families

    data = os.path.join(os.path.dirname(__file__), "data", "families")
    table = families.FAMILY_MODELS["vit_base_patch16_clip_quickgelu_224"]
    small = table.config.replace(hidden_size=32, num_layers=2, num_heads=2, mlp_dim=128,
                                 patch_size=8, image_size=32, projection_size=16)
    monkeypatch.setitem(families.FAMILY_MODELS, "tiny_clip_for_test",
                        dataclasses.replace(table, config=small, name="tiny_clip_for_test"))
    image_model = vit_keras.create_model("tiny_clip_for_test", classes=3,
                                         weights=os.path.join(data, "clip_quickgelu.safetensors"))
    assert image_model.config.pre_norm and image_model.preprocessing == families.CLIP_09
    _assert_inflates_exactly(image_model, layout="factorised")


def test_a_clip_model_carried_to_another_length_and_size_keeps_its_function():
    """At its own size it is the same model; at another clip length and frame size the
    position tables are resampled with aligned corners (the corners keep their values)."""
    from vit_keras.tasks.clip.inflate import at_clip_size

    model = inflate(_random_image_model(_config()), frames=FRAMES, layout="divided")
    embedding = model.get_layer("posembed_input")
    embedding.temporal_embedding.assign(np.random.default_rng(5).normal(0, 0.5, (1, 2, 32)))
    same = at_clip_size(model)
    np.testing.assert_array_equal(same(_clips()), model(_clips()))
    longer = at_clip_size(model, frames=8, image_size=32)
    assert longer.input_shape == (None, 8, 32, 32, 3)
    table = longer.get_layer("posembed_input")
    temporal = keras.ops.convert_to_numpy(table.temporal_embedding)
    np.testing.assert_allclose(temporal[0, [0, -1]],
                               embedding.temporal_embedding.numpy()[0, [0, -1]], atol=1e-6)
    grid = keras.ops.convert_to_numpy(table.pos_embedding)[0, 1:].reshape(8, 8, 32)
    old_grid = embedding.pos_embedding.numpy()[0, 1:].reshape(4, 4, 32)
    np.testing.assert_allclose(grid[[0, 0, -1, -1], [0, -1, 0, -1]],
                               old_grid[[0, 0, -1, -1], [0, -1, 0, -1]], atol=1e-6)
    with pytest.raises(ValueError, match=r"frames \(7\) must be a positive multiple"):
        at_clip_size(model, frames=7)
