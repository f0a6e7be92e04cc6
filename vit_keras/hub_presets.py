"""keras-hub presets both ways: `from_preset` builds a `VisionTransformer` from a keras-hub
preset folder (local, `hf://` or `kaggle://`), `save_preset` writes a model as a folder that
keras-hub's `from_preset` loads into its `ViTBackbone` / `ViTImageClassifier`."""

from __future__ import annotations

import dataclasses
import logging
import time

import keras

from vit_keras import __version__, lora
from vit_keras.checkpoints import keras_hub as layout
from vit_keras.checkpoints import keras_hub_config
from vit_keras.checkpoints.official import model_tensors
from vit_keras.config import ViTConfig
from vit_keras.core.model import VisionTransformer, config_from_model, preprocessing_of
from vit_keras.pretrained import sources
from vit_keras.weights import assign_checkpoint

logger = logging.getLogger(__name__)

PRESET_POOLING = "preset"  # the default of `from_preset`'s pooling: the preset's own


def read_preset(preset: str) -> tuple[layout.Preset, str]:
    """A keras-hub preset (folder, `hf://ORG/REPO` or `kaggle://HANDLE`) read.

    Returns:
        (the `Preset`, its local folder).
    """
    folder = sources.preset_directory(
        preset, keras_hub_config.PRESET_FILES,
        (keras_hub_config.CONFIG_FILE, keras_hub_config.WEIGHTS_FILE))
    return layout.read_preset(folder), folder


def from_preset(preset: str, *, include_top: bool | None = None, classes: int | None = None,
                input_shape=None, pooling: str | None = PRESET_POOLING, classifier_activation=None,
                **config_overrides) -> VisionTransformer:
    """Builds a `VisionTransformer` from a keras-hub preset, with its weights and preprocessing.

    keras-hub's `ViTBackbone` (with `ViTImageClassifier` task weights), `DeiTBackbone`,
    `DINOV2Backbone` and the image towers of `SigLIPBackbone` and `CLIPBackbone` map exactly;
    other backbones are refused with the reason.

    Args:
        preset: a preset folder (`config.json`, `model.weights.h5`, ...), `hf://ORG/REPO[@REV]`
            (e.g. 'hf://keras/vit_base_patch16_224_imagenet') or
            `kaggle://OWNER/MODEL/keras/VARIANT[/VERSION]`; downloads are cached.
        include_top: with the classifier head; default: when the preset has task weights or
            `classes` is given.
        classes: a new head of this many classes (fine-tuning; the preset's head is left out).
        input_shape: (height, width, channels); default: the preset's. The position embedding
            is resized to it.
        pooling: without a head: the preset's own pooling (the default: the class token, the
            token mean for a ViT without one, SigLIP's attention pooling, CLIP's class token
            through its image projection), 'token', 'gap', 'map', or None for the final-normed
            token sequence.
        classifier_activation: as for `VisionTransformer`.
        **config_overrides: other `ViTConfig` fields (dropout_rate, drop_path_rate, ...).

    Returns:
        The model; `model.preprocessing` is the preset's image converter.

    Raises:
        ValueError: an unreadable or unmappable preset, or weights that do not fit (every
            missing or mis-shaped tensor named).
    """
    read, folder = read_preset(preset)
    fields = dict(read.fields, **config_overrides)
    preprocessing = fields.pop("preprocessing", None) or read.preprocessing
    new_head = classes is not None
    if include_top is None:
        include_top = read.has_head or new_head
    if new_head:
        fields.update(num_classes=classes, representation_size=None)
    elif include_top and not read.has_head:
        raise ValueError(f"keras-hub preset {preset!r} has no task weights a vit_keras model can "
                         "hold (a backbone alone, or DeiT's class-token-only classifier): pass "
                         "classes=N for a new head, or include_top=False")
    if input_shape is not None:
        fields.update(image_size=tuple(input_shape[:2]), channels=input_shape[2])
    config = ViTConfig(**fields)
    if pooling == PRESET_POOLING:
        pooling = config.classifier
    model = VisionTransformer(config, include_top=include_top,
                              pooling=None if include_top else pooling,
                              classifier_activation=classifier_activation,
                              name=read.backbone_class.lower().replace("backbone", "") or "vit",
                              preprocessing=preprocessing)
    assign_checkpoint(model, read.checkpoint, folder,
                      skip_head=True if new_head or not include_top else False)
    return model


def preset_problem(config: ViTConfig) -> str | None:
    """Why keras-hub's `ViTBackbone` cannot hold a model of `config`, or None."""
    for field, plain in keras_hub_config.PLAIN_VIT.items():
        value = getattr(config, field)
        if value != plain:
            return (f"its {field} is {value!r}, and keras-hub's ViTBackbone knows only "
                    f"{plain!r}")
    if config.classifier not in ("token", "gap"):
        return (f"its classifier is {config.classifier!r}; keras-hub's ViTImageClassifier "
                "pools by 'token' or 'gap'")
    return None


def save_preset(model, directory: str, *, allow_gelu_mismatch: bool = False) -> None:
    """Writes `model` as a keras-hub preset folder (`keras_hub.models.Backbone.from_preset` and,
    for a model with a head, `keras_hub.models.ImageClassifier.from_preset` load it).

    Args:
        model: a `VisionTransformer` (a LoRA model is merged first; not quantized).
        directory: the folder, written beside its final name and renamed into place.
        allow_gelu_mismatch: write a model with the tanh-approximated GELU (the official
            default) anyway; keras-hub computes the exact GELU, so its outputs then differ
            slightly (about 1e-3 of the activations). By default such a model is refused.

    Raises:
        ValueError: options keras-hub's ViT cannot express (named), or a quantized model.
    """
    config = config_from_model(model)
    problem = preset_problem(config)
    if problem is None and config.gelu_approximate and not allow_gelu_mismatch:
        problem = ("it uses the tanh-approximated GELU and keras-hub's ViT the exact one: build "
                   "it with ViTConfig(gelu_approximate=False) (and fine-tune briefly), or pass "
                   "allow_gelu_mismatch=True (--set export.allow_gelu_mismatch=true) to accept "
                   "outputs that differ slightly")
    if problem:
        raise ValueError(f"model {model.name!r} cannot be written as a keras-hub preset: "
                         f"{problem}")
    if lora.lora_layers(model):
        model = lora.merge_lora(model)
    tensors = model_tensors(model)
    has_head = any(layer.name == "head" for layer in model.layers)
    metadata = {"keras_version": keras.__version__, "keras_hub_version": None,
                "parameter_count": model.count_params(),
                "date_saved": time.strftime("%Y-%m-%d@%H:%M:%S"),
                "exported_by": f"vit_keras {__version__}"}
    layout.write_preset(directory, tensors, dataclasses.asdict(config),
                        preprocessing_of(model), has_head=has_head, metadata=metadata)
    logger.info("save_preset: wrote %s (keras-hub ViTBackbone%s)", directory,
                " + ViTImageClassifier" if has_head else "")

