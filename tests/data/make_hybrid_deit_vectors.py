"""Makes the parity vectors of tests/test_hybrid.py and tests/test_deit.py with timm.

Not run by CI (it needs torch and timm). Run it in the venv of make_timm_vectors.py:

    /work/venv-timm/bin/python tests/data/make_hybrid_deit_vectors.py

Both models are tiny, built offline with random non-zero weights (nothing is downloaded):

- timm_hybrid.safetensors: a timm hybrid ViT (`HybridEmbed` around a `ResNetV2` backbone, as
  `vit_base_r50_s16_224` but with one bottleneck stage, D=32, 2 blocks), made with the
  official model's choices (tanh GELU, LayerNorm eps 1e-6, GroupNorm eps 1e-6, SAME padding).
  Its weights are rounded to float16 and stored as float16 to keep the file small; the
  reference logits are those of the rounded weights.
- timm_deit.safetensors: a timm `VisionTransformerDistilled` (DeiT, exact GELU) with class and
  distillation tokens and the two heads; the reference is timm's eval output (head average).
- hybrid_deit_vectors.npz: `<case>/images` (NHWC, in [-1, 1]) and `<case>/outputs` (logits).
- hybrid_deit_configs.json: the architecture of each case, for the tests to build our model.
"""

import json
import os
from functools import partial

import numpy as np
import torch
from safetensors.numpy import save_file
from timm.layers import GroupNormAct, StdConv2dSame
from timm.models.deit import VisionTransformerDistilled
from timm.models.resnetv2 import ResNetV2
from timm.models.vision_transformer import VisionTransformer
from timm.models.vision_transformer_hybrid import HybridEmbed

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 2

CASES = {
    "timm_hybrid": dict(image_size=32, patch_size=1, hidden_size=32, mlp_dim=64, num_heads=4,
                        num_layers=2, num_classes=5, resnet_layers=[1],
                        weights="timm_hybrid.safetensors"),
    "timm_deit": dict(image_size=32, patch_size=8, hidden_size=32, mlp_dim=64, num_heads=4,
                      num_layers=2, num_classes=6, distilled=True, gelu_approximate=False,
                      weights="timm_deit.safetensors"),
}


def randomize(module: torch.nn.Module, seed: int, half: bool = False) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            values = torch.randn(parameter.shape, generator=generator) * 0.2
            if "norm" in name and name.endswith("weight"):  # norm scales around 1
                values = 1.0 + 0.5 * values
            if half:
                values = values.half().float()
            parameter.copy_(values)


def hybrid_model(case: dict) -> VisionTransformer:
    backbone = ResNetV2(
        layers=case["resnet_layers"], num_classes=0, global_pool="", in_chans=3, preact=False,
        stem_type="same", conv_layer=partial(StdConv2dSame, eps=1e-8),
        norm_layer=partial(GroupNormAct, num_groups=32, eps=1e-6))
    return VisionTransformer(
        img_size=case["image_size"], patch_size=1, num_classes=case["num_classes"],
        embed_layer=partial(HybridEmbed, backbone=backbone), embed_dim=case["hidden_size"],
        depth=case["num_layers"], num_heads=case["num_heads"],
        mlp_ratio=case["mlp_dim"] / case["hidden_size"], qkv_bias=True,
        act_layer=partial(torch.nn.GELU, approximate="tanh"),
        norm_layer=partial(torch.nn.LayerNorm, eps=1e-6)).eval()


def deit_model(case: dict) -> VisionTransformerDistilled:
    return VisionTransformerDistilled(
        img_size=case["image_size"], patch_size=case["patch_size"],
        num_classes=case["num_classes"], embed_dim=case["hidden_size"],
        depth=case["num_layers"], num_heads=case["num_heads"],
        mlp_ratio=case["mlp_dim"] / case["hidden_size"], qkv_bias=True,
        norm_layer=partial(torch.nn.LayerNorm, eps=1e-6)).eval()


def main() -> None:
    vectors = {}
    for seed, (name, case) in enumerate(CASES.items()):
        half = name == "timm_hybrid"
        model = hybrid_model(case) if half else deit_model(case)
        randomize(model, seed, half=half)
        images = np.random.default_rng(2000 + seed).uniform(
            -1.0, 1.0, (BATCH, case["image_size"], case["image_size"], 3)).astype(np.float32)
        with torch.no_grad():
            logits = model(torch.from_numpy(images.transpose(0, 3, 1, 2))).numpy()
        vectors[f"{name}/images"] = images
        vectors[f"{name}/outputs"] = logits.astype(np.float32)
        weights = {key: value.detach().numpy().astype(np.float16 if half else np.float32)
                   for key, value in model.state_dict().items()}
        save_file(weights, os.path.join(HERE, case["weights"]))
        print(name, sum(v.size for v in weights.values()), "weights, logits", logits[0, :3])
    np.savez(os.path.join(HERE, "hybrid_deit_vectors.npz"), **vectors)
    with open(os.path.join(HERE, "hybrid_deit_configs.json"), "w") as file:
        json.dump(CASES, file, indent=2)


if __name__ == "__main__":
    main()
