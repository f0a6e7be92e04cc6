"""Makes the MobileViT parity vectors of tests/test_mobilevit.py with timm.

Not run by CI (it needs torch and timm). Run it in a separate venv:

    python3.11 -m venv /work/venv-timm
    /work/venv-timm/bin/pip install torch==2.13.0 timm numpy
    /work/venv-timm/bin/python tests/data/make_mobilevit_vectors.py

(timm imports torchvision; where the only torchvision wheel at hand is a CUDA build that
fails to import beside the CPU torch, guard its `_meta_registrations` import in
torchvision/__init__.py: MobileViT uses no torchvision operator. Made with timm 1.0.31.)

For every MobileViT v1 and v2 variant of timm, its state dict's keys and shapes
(mobilevit_keys.json), and the logits and the maps of stages 2 and 4 of timm's model under the
seeded weights of `tests/mobilevit_reference.seeded_state` (mobilevit_vectors.npz,
`<name>/logits`, `<name>/stage2`, `<name>/stage4`, NHWC), on two 64x64 images in [0, 1] and,
for one variant of each version, on two 80x80 images (odd maps in
the last stages: the resize path, `<name>/odd_logits`), and for the same two variants the
logits of a real JPEG photo (tests/data/photo_coffee.jpg) through timm's own eval transform at
the pretrained config's 256 px (`<name>/photo_logits`: what `vit predict PHOTO --model NAME
--weights FILE` must rank alike). The tests rebuild the same weights without torch, load them
with `vit_keras.mobilevit.weights` and compare.
"""

import json
import os
import sys

import numpy as np
import timm
import torch
from PIL import Image
from timm.data import create_transform, resolve_data_config

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from mobilevit_reference import KEYS, VECTORS, inputs, seeded_state  # noqa: E402

VARIANTS = ("mobilevit_xxs", "mobilevit_xs", "mobilevit_s", "mobilevitv2_050",
            "mobilevitv2_075", "mobilevitv2_100", "mobilevitv2_125", "mobilevitv2_150",
            "mobilevitv2_175", "mobilevitv2_200")
ODD = ("mobilevit_xxs", "mobilevitv2_050")
PHOTO = os.path.join(HERE, "photo_coffee.jpg")


def photo_logits(model, name: str) -> np.ndarray:
    """The logits [1, 1000] of the photo through timm's eval transform of `name`'s pretrained
    config."""
    pretrained = timm.create_model(f"{name}.cvnets_in1k", pretrained=False)
    transform = create_transform(**resolve_data_config({}, model=pretrained))
    with torch.no_grad():
        return model(transform(Image.open(PHOTO).convert("RGB"))[None]).numpy()


def outputs(model, images: np.ndarray) -> dict:
    """The logits and the maps of stages 2 and 4 (NHWC), where the images' own signal is
    strongest and after the last MobileViT block."""
    maps = {}
    hooks = [model.stages[stage].register_forward_hook(
        lambda module, args, output, stage=stage: maps.update({stage: output}))
        for stage in (2, 4)]
    with torch.no_grad():
        logits = model(torch.from_numpy(images.transpose(0, 3, 1, 2).copy())).numpy()
    for hook in hooks:
        hook.remove()
    return {"logits": logits, **{f"stage{stage}": value.numpy().transpose(0, 2, 3, 1)
                                 for stage, value in maps.items()}}


def main():
    keys, vectors = {}, {}
    for name in VARIANTS:
        model = timm.create_model(name, pretrained=False).eval()
        keys[name] = [(key, list(value.shape)) for key, value in model.state_dict().items()]
        state = {key: torch.from_numpy(value) for key, value in seeded_state(keys[name]).items()}
        model.load_state_dict(state)
        for key, value in outputs(model, inputs(64, 1)).items():
            vectors[f"{name}/{key}"] = value
        if name in ODD:
            vectors[f"{name}/odd_logits"] = outputs(model, inputs(80, 2))["logits"]
            vectors[f"{name}/photo_logits"] = photo_logits(model, name)
        print(name, np.abs(vectors[f"{name}/logits"]).max())
    with open(KEYS, "w") as file:
        json.dump(keys, file)
    np.savez_compressed(VECTORS, **vectors)


if __name__ == "__main__":
    main()
