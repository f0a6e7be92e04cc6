"""Each family's transform is its anchor's, to the level: a real JPEG photo (landscape, and
upright) decoded, resized and cropped for a model loaded by its timm name gives exactly the
pixels timm's own eval transform gives (`resolve_data_config` + `create_transform`, recorded
by `tools/make_transform_references.py`), on the host (PIL, as timm) and in the graphs of
tf.data and the SavedModel (PIL's decode and fixed-point resize in TensorFlow ops); and its
normalisation is timm's.
"""

import json
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from vit_app import images
from vit_keras import families
from vit_keras import preprocessing as rules
from vit_keras.mobilevit.config import PREPROCESSING as MOBILEVIT_RULES
from vit_keras.mobilevit.config import VARIANTS as MOBILEVIT_VARIANTS
from vit_keras.mobilevit.config import timm_name

DATA = os.path.join(os.path.dirname(__file__), "data")
with open(os.path.join(DATA, "transform_references.json")) as handle:
    REFERENCES = json.load(handle)
FAMILIES = sorted(REFERENCES["families"])
with np.load(os.path.join(DATA, "transform_references.npz"), allow_pickle=False) as _arrays:
    EXPECTED = dict(_arrays)
CASES = [(family, orientation) for family in FAMILIES for orientation in ("photo", "portrait")
         if orientation == "photo" or f"{family}_portrait" in EXPECTED]


def _photo(orientation: str = "photo") -> bytes:
    with open(os.path.join(DATA, REFERENCES[orientation]), "rb") as handle:
        return handle.read()


def _expected(family: str, orientation: str) -> np.ndarray:
    key = family if orientation == "photo" else f"{family}_portrait"
    return EXPECTED[key].astype(np.float32)


def _rule_and_size(family: str):
    recorded = REFERENCES["families"][family]
    name = timm_name(recorded["model"])
    if name:
        rule = MOBILEVIT_RULES[MOBILEVIT_VARIANTS[name].version]
    else:
        spec, tag = families.split_name(recorded["model"])
        rule = spec.tags[tag]
    return rule, tuple(recorded["input_size"][1:]), recorded


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_normalises_as_timm_does(family):
    rule, _, recorded = _rule_and_size(family)
    assert (rule.interpolation, rule.crop_fraction, rule.crop_mode) == \
        (recorded["interpolation"], recorded["crop_pct"], recorded["crop_mode"])
    np.testing.assert_allclose(rule.mean, recorded["mean"], rtol=1e-6)
    np.testing.assert_allclose(rule.std, recorded["std"], rtol=1e-6)


@pytest.mark.parametrize("family, orientation", CASES)
def test_a_family_prepares_a_photo_as_timm_does_on_the_host(family, orientation):
    """`vit predict`, `vit serve` and `vit embed` decode on the host."""
    rule, size, _ = _rule_and_size(family)
    ours = images.decode_checked([_photo(orientation)], size, preprocessing=rule)[0]
    np.testing.assert_array_equal(ours, _expected(family, orientation))


@pytest.mark.parametrize("family, orientation", CASES)
def test_a_family_prepares_a_photo_as_timm_does_in_a_graph(family, orientation):
    """tf.data and the SavedModel's `serve_bytes` decode and resize with these ops, traced."""
    rule, size, _ = _rule_and_size(family)

    @tf.function
    def prepare(encoded):
        return rules.resize_image(rules.decode_image(encoded), size, rule)

    np.testing.assert_array_equal(prepare(tf.constant(_photo(orientation))).numpy(),
                                  _expected(family, orientation))


# Sizes where every Pillow resizes the width first, as the graph does (Pillow 13 may take the
# height first where it shrinks a noise image more than the width; timm's aspect-keeping
# resize of the photos above it does not).
@pytest.mark.parametrize("source, target", [((37, 53), (224, 224)), ((400, 600), (248, 372)),
                                            ((5, 300), (17, 16)), ((64, 64), (64, 64)),
                                            ((3, 1000), (9, 7))])
def test_the_bicubic_resize_is_pils(source, target):
    pixels = np.random.default_rng(sum(source)).integers(0, 256, (*source, 3), dtype=np.uint8)
    expected = np.asarray(Image.fromarray(pixels).resize(target[::-1], Image.BICUBIC))
    ours = rules.resize_image(tf.constant(pixels), target,
                              rules.Preprocessing(interpolation="bicubic", crop_mode="squash"))
    np.testing.assert_array_equal(ours.numpy(), expected.astype(np.float32))


@pytest.mark.parametrize("orientation", ["photo", "portrait"])
def test_a_jpeg_is_decoded_as_pil_decodes_it(orientation):
    expected = np.asarray(Image.open(os.path.join(DATA, REFERENCES[orientation])).convert("RGB"))
    np.testing.assert_array_equal(rules.decode_image(tf.constant(_photo(orientation))).numpy(),
                                  expected)
