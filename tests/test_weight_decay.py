"""Weight decay touches only the matrices that mix features, for every model option.

One AdamW step with zero gradients changes a weight only through the decoupled decay, so the
weights that moved are exactly the decayed ones. The expectation is written here by hand
(timm / big_vision's rule): no 1-D weight, token, position embedding, MAP probe or attention
bias is decayed; every kernel is.
"""

import numpy as np
import pytest
from helpers import to_numpy

import keras
import vit_keras
from training import recipe
from training.presets import Preset
from vit_keras.core import masked_patch

EXEMPT_NAMES = ("cls", "dist", "registers", "pos_embedding", "row_embedding", "col_embedding",
                "probe", "mask_token", "query/bias", "key/bias", "value/bias")

OPTIONS = {
    "token": {},
    "gap+sincos": dict(classifier="gap", posemb="sincos2d"),
    "map+registers": dict(classifier="map", num_register_tokens=2),
    "learn2d+layer_scale": dict(posemb="learn2d", layer_scale_init=0.1),
    "distilled": dict(distilled=True, drop_path_rate=0.1),
    "pre_logits": dict(representation_size=16),
    "hybrid": dict(resnet_layers=(1,), patch_size=1, image_size=32),
}


def _expected_exempt(variable) -> bool:
    path = variable.path.split("/")
    return len(variable.shape) <= 1 or path[-1] in EXEMPT_NAMES or "/".join(path[-2:]) in EXEMPT_NAMES


def _decayed_by_one_step(model):
    """Paths of the trainable weights one zero-gradient AdamW step changes."""
    rng = np.random.default_rng(0)
    for variable in model.trainable_variables:  # non-zero everywhere: zeros never decay
        variable.assign(rng.uniform(0.5, 1.5, variable.shape).astype("float32"))
    preset = Preset().replace(optim={"optimizer": "adamw", "lr": 0.1, "weight_decay": 0.5,
                                     "clipnorm": 0},
                              schedule={"warmup_steps": 0})
    optimizer = recipe.make_optimizer(preset, steps_per_epoch=10, model=model)
    before = [to_numpy(v) for v in model.trainable_variables]
    optimizer.apply([keras.ops.zeros(v.shape) for v in model.trainable_variables],
                    model.trainable_variables)
    return {v.path for v, old in zip(model.trainable_variables, before)
            if not np.allclose(to_numpy(v), old)}


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_decay_skips_tokens_posembs_probe_biases_and_norms(tiny_config, option):
    config = tiny_config.replace(**OPTIONS[option])
    model = vit_keras.VisionTransformer(config)
    decayed = _decayed_by_one_step(model)
    expected = {v.path for v in model.trainable_variables if not _expected_exempt(v)}
    assert decayed == expected
    assert {v.path for v in vit_keras.no_weight_decay(model)} == \
        {v.path for v in model.trainable_variables} - expected
    assert any("query/kernel" in path for path in decayed) and "head/kernel" in decayed


def test_trainers_expose_the_wrapped_models_exemptions(tiny_config):
    """The masked-patch pretrainer's [mask] token and the DeiT trainer's tokens are exempt."""
    pretrainer = masked_patch.MaskedPatchPretrainer(tiny_config, seed=0)
    decayed = _decayed_by_one_step(pretrainer)
    assert not any(path.endswith(("mask_token", "cls", "pos_embedding")) for path in decayed)
    assert any(path.endswith("mpp_head/kernel") for path in decayed)

    from vit_keras.core.deit import DistillationTrainer

    student = vit_keras.VisionTransformer(tiny_config.replace(distilled=True))
    teacher = keras.Sequential([keras.Input((32, 32, 3)), keras.layers.Flatten(),
                                keras.layers.Dense(tiny_config.num_classes)])
    exempt = {v.path for v in vit_keras.no_weight_decay(DistillationTrainer(student, teacher))}
    assert {"dist/dist", "cls/cls", "posembed_input/pos_embedding"} <= exempt
