import pytest

from vit_keras import VARIANTS, ViTConfig, get_variant


def test_official_variants_present():
    for name in ["Ti/16", "S/16", "S/32", "B/8", "B/16", "B/32", "L/16", "L/32", "H/14"]:
        assert name in VARIANTS
    assert VARIANTS["B/16"].hidden_size == 768 and VARIANTS["B/16"].num_heads == 12
    assert VARIANTS["H/14"].patch_size == 14 and VARIANTS["H/14"].num_layers == 32
    assert VARIANTS["B/16-gap"].classifier == "gap"


def test_official_spellings_resolve():
    assert get_variant("ViT-B_16") == VARIANTS["B/16"]
    assert get_variant("B_32") == VARIANTS["B/32"]
    assert get_variant("ti16") == VARIANTS["Ti/16"]
    assert get_variant("B/16", image_size=384).image_size == 384


def test_derived_sizes_non_square():
    config = ViTConfig(image_size=(64, 96), patch_size=16)
    assert config.image_hw == (64, 96)
    assert config.grid_size == (4, 6)
    assert config.num_patches == 24 and config.seq_len == 25
    assert config.replace(classifier="gap").seq_len == 24


def test_dict_round_trip():
    config = ViTConfig(image_size=(64, 96), representation_size=12, gelu_approximate=False)
    assert ViTConfig.from_dict(config.to_dict()) == config
    assert ViTConfig(image_size=[32, 32]).image_size == 32


@pytest.mark.parametrize("changes, message", [
    (dict(image_size=225), "not divisible by patch_size 16"),
    (dict(image_size=(224, 100)), "224x100 is not divisible"),
    (dict(hidden_size=100, num_heads=12), "not divisible by num_heads 12"),
    (dict(classifier="cls"), "classifier must be one of ('token', 'gap', 'map'), got 'cls'"),
    (dict(patch_size=0), "patch_size must be a positive int, got 0"),
    (dict(num_layers=-1), "num_layers must be a positive int"),
    (dict(dropout_rate=1.5), "dropout_rate must be in [0, 1)"),
    (dict(image_size="big"), "image_size must be an int or (height, width)"),
    (dict(representation_size=0), "representation_size must be a positive int"),
])
def test_bad_configs_raise_clear_errors(changes, message):
    with pytest.raises(ValueError) as error:
        ViTConfig(**changes)
    assert message in str(error.value)


def test_unknown_variant_and_field():
    with pytest.raises(ValueError, match="unknown ViT variant 'X/99': expected one of"):
        get_variant("X/99")
    with pytest.raises(ValueError, match="unknown ViTConfig field"):
        get_variant("B/16", hidden=3)
    with pytest.raises(ValueError, match="unknown ViTConfig field"):
        ViTConfig.from_dict({"width": 3})
