"""Writes tests/data/transform_references.npz and .json: what timm's own eval transform
(`resolve_data_config` + `create_transform`) makes of a real JPEG photo for one model of each
family vit_keras loads by timm's names (MobileViT v1 and v2 among them), so that `tests/test_transforms.py` holds our transform
to it without timm.

Per family: the uint8 pixels after timm's resize and centre crop (before `ToTensor` and
`Normalize`) of the photo and of its upright (portrait) copy, and the data config (input
size, interpolation, crop_pct, mean, std).

With `--models DIR`, it also writes DIR/<name>.safetensors, a timm model with seeded random
weights (`randomize`), and DIR/<name>.json, that model's top-5 probabilities (or, without a head, its
embedding) on the photo through timm's transform: `benchmarks/transform_parity.py` runs
`vit predict` / `vit embed` on the same files and compares.

Runs where timm and torch are installed (not a dependency of the project):

    python -m venv /tmp/timm && /tmp/timm/bin/pip install torch torchvision timm pillow
    /tmp/timm/bin/python tools/make_transform_references.py [--models /tmp/transform_models]
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import timm
import torch
from PIL import Image
from timm.data import create_transform, resolve_data_config

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "tests", "data")
PHOTO = os.path.join(DATA, "photo_coffee.jpg")
# The same photo upright: a portrait image, whose shorter side is its width
PORTRAIT = os.path.join(DATA, "photo_coffee_portrait.jpg")
# One model per family: its timm name, and whether it has a classifier head.
FAMILIES = {
    "deit": ("deit_small_patch16_224.fb_in1k", True),
    "deit3": ("deit3_small_patch16_224.fb_in1k", True),
    "dinov2": ("vit_small_patch14_dinov2.lvd142m", False),
    "siglip": ("vit_base_patch16_siglip_224.webli", False),
    "clip": ("vit_base_patch16_clip_224.openai", False),
    "mobilevit": ("mobilevit_xs.cvnets_in1k", True),
    "mobilevitv2": ("mobilevitv2_100.cvnets_in1k", True),
}
# Networks of many convolutions, whose signal fades through their depth at the weights'
# fixed scale of 0.05: their kernels are drawn at 1/sqrt(fan-in) instead.
FAN_IN_SCALED = {"mobilevit", "mobilevitv2"}


def eval_transform(model):
    """timm's eval transform of `model`, and its data config."""
    config = resolve_data_config({}, model=model)
    return create_transform(**config), config


def pixels_before_tensor(transform, image) -> np.ndarray:
    """The transform's steps up to `ToTensor`: uint8 [H, W, 3] as timm resizes and crops."""
    for step in transform.transforms:
        if "ToTensor" in type(step).__name__:
            break
        image = step(image)
    return np.asarray(image, np.uint8)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", help="also write random-weight models and their outputs")
    args = parser.parse_args(argv)
    photo = Image.open(PHOTO).convert("RGB")
    arrays, configs = {}, {}
    for family, (name, has_head) in FAMILIES.items():
        torch.manual_seed(0)
        model = timm.create_model(name, pretrained=False).eval()
        transform, config = eval_transform(model)
        arrays[family] = pixels_before_tensor(transform, photo)
        if config["input_size"][1] <= 256:  # the 518 px DINOv2 pixels would double the file
            arrays[f"{family}_portrait"] = pixels_before_tensor(
                transform, Image.open(PORTRAIT).convert("RGB"))
        configs[family] = {"model": name, **{key: (list(value) if isinstance(value, tuple)
                                                   else value) for key, value in config.items()}}
        if args.models:
            randomize(model, fan_in_scaled=family in FAN_IN_SCALED)
            write_model(model, name, has_head, transform(photo)[None], args.models)
        print(family, name, configs[family])
    np.savez_compressed(os.path.join(DATA, "transform_references.npz"), **arrays)
    with open(os.path.join(DATA, "transform_references.json"), "w") as handle:
        json.dump({"photo": os.path.basename(PHOTO), "portrait": os.path.basename(PORTRAIT),
                   "timm": timm.__version__,
                   "families": configs}, handle, indent=2)
    return 0


def randomize(model, fan_in_scaled: bool = False) -> None:
    """Seeded random weights that make the outputs decisive, as a trained model's are: timm
    initialises the head to zero (every class 1/1000), which no input difference would
    move. Biases and norm layers keep their initial values (CLIP's projection, timm's `head`,
    has a zero bias)."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "norm" in name or parameter.dim() < 2:
                continue
            scale = 0.5 if name.startswith("head") else 0.05
            if fan_in_scaled and not name.startswith("head"):
                scale = parameter[0].numel() ** -0.5
            parameter.copy_(torch.randn(parameter.shape, generator=generator) * scale)


def write_model(model, name: str, has_head: bool, inputs, folder: str) -> None:
    """The model's weights and its outputs on `inputs` (timm's transform of the photo)."""
    from safetensors.torch import save_file

    os.makedirs(folder, exist_ok=True)
    with torch.no_grad():
        outputs = model(inputs)[0]
    record = {"model": name}
    if has_head:
        probabilities = torch.softmax(outputs, -1)
        top = torch.topk(probabilities, 5)
        record["top5"] = [[int(i), float(p)] for p, i in zip(top.values, top.indices)]
    else:
        record["embedding"] = outputs.tolist()
    state = {key: value.contiguous() for key, value in model.state_dict().items()}
    save_file(state, os.path.join(folder, f"{name}.safetensors"))
    with open(os.path.join(folder, f"{name}.json"), "w") as handle:
        json.dump(record, handle)


if __name__ == "__main__":
    raise SystemExit(main())
