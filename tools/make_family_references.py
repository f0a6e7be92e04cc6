"""Makes the ViT-family reference files of tests/data/families/ with timm.

Not run by CI (it needs torch, torchvision, timm, safetensors and scikit-image). Run it in a
separate venv, from the repository root:

    python3.11 -m venv /work/venv-timm
    /work/venv-timm/bin/pip install torch torchvision timm safetensors numpy scikit-image pillow
    /work/venv-timm/bin/python tools/make_family_references.py

Nothing is downloaded: every model is built with pretrained=False, and only the pretrained
*configs* (preprocessing) are read from timm's registry. Every model is tiny (width 32, depth 2,
2 heads) and gets random non-zero weights everywhere: normal * 0.2, LayerNorm scales around 1,
layer-scale gammas uniform in [0.5, 1.5] so they matter, tokens and biases random. All arrays are
float32 (preprocessing photos: uint8 grey levels). Written to tests/data/families/:

- <case>.safetensors: the timm `VisionTransformer` state dict of each parity case, built with the
  flags of a real family (deit3, dinov2, dinov2_reg, dinov2_swiglu, siglip, clip,
  clip_quickgelu, gap_fc_norm; see CASES). CLIP: head.bias is stored as exact zeros (CLIP's
  projection has no bias); pre_norm=True makes timm build the patch embedding without a bias.
- parity.npz: for each case `<case>/images` (NHWC, uniform in [-2, 2], batch 2),
  `<case>/outputs` (timm's forward), `<case>/grid_<i>` (NHWC block outputs of blocks 0 and 1,
  from `forward_intermediates(norm=False)`, prefix tokens removed) and `<case>/prefix_<i>`
  ([batch, num_prefix_tokens, D]: class token first, then the register tokens; absent when the
  model has none). dinov2 and dinov2_reg also have `<case>/grid_normed_<i>` (norm=True: timm
  applies the final `norm`, never `fc_norm`). `dinov2_resized/{images,outputs}`: the dinov2
  weights loaded at 42 px (3x3 grid) through timm's own `checkpoint_filter_fn`, which resamples
  the 2x2 position grid (bicubic, antialiased), as when a 518 px DINOv2 file is loaded at 224.
- configs.json: the flags needed to rebuild each case, plus `_generated_with`.
- preprocessing.npz / preprocessing.json: timm's eval transform (`resolve_data_config` +
  `create_transform(is_training=False)`) of four pretrained configs applied to scikit-image's
  `chelsea` and `astronaut` photos, stored back as grey levels ((x * std + mean) * 255, uint8,
  [H, W, 3]). vit_small_patch14_dinov2.lvd142m is overridden to input_size (3, 224, 224):
  DINOv2's own 518 px would make the file too big (crop_pct 1.0 etc. are kept).
- deit_e2e.safetensors / deit_e2e.jpg / deit_e2e.json: a tiny DeiT (timm defaults) run end to
  end on a 60x40 JPEG (quality 90) of skimage's `coffee`, through timm's eval transform for
  input (3, 32, 32), crop_pct 0.875, bicubic, ImageNet mean/std; the json holds the logits,
  softmax probabilities and the config.
"""

import json
import os
import sys
from functools import partial

import numpy as np
import PIL
import skimage
import skimage.data
import timm
import timm.data
import torch
import torchvision
from PIL import Image
from safetensors.numpy import save_file
from timm.layers import LayerNorm, SwiGLUPacked
from timm.models import get_pretrained_cfg
from timm.models.vision_transformer import VisionTransformer, checkpoint_filter_fn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "data", "families")
BATCH = 2
BASE = dict(embed_dim=32, depth=2, num_heads=2, mlp_ratio=4.0)
INDICES = [0, 1]
CLIP_NORM = partial(LayerNorm, eps=1e-5)

# timm flags mirroring each real family (see each family's model_args in
# timm/models/vision_transformer.py); anything unnamed is timm's default (exact GELU, LayerNorm
# eps 1e-6, class token, 'token' pooling).
CASES = {
    # deit3_base_patch16_224
    "deit3": dict(patch_size=8, img_size=32, no_embed_class=True, init_values=1e-6,
                  num_classes=10),
    # vit_small_patch14_dinov2
    "dinov2": dict(patch_size=14, img_size=28, init_values=1e-5, num_classes=0),
    # vit_base_patch14_reg4_dinov2
    "dinov2_reg": dict(patch_size=14, img_size=28, init_values=1e-5, reg_tokens=4,
                       no_embed_class=True, num_classes=0),
    # vit_giant_patch14_dinov2: SwiGLUPacked == partial(GluMlp, act_layer=SiLU, gate_last=False)
    "dinov2_swiglu": dict(patch_size=14, img_size=28, init_values=1e-5, mlp_ratio=5.33334,
                          mlp_layer=SwiGLUPacked, act_layer=torch.nn.SiLU, num_classes=0),
    # vit_base_patch16_siglip_224 (default GELU, eps 1e-6, attention-pool 'map' head)
    "siglip": dict(patch_size=8, img_size=32, class_token=False, global_pool="map",
                   num_classes=0),
    # vit_base_patch16_clip_224 (+ a 16-wide projection as the head)
    "clip": dict(patch_size=8, img_size=32, pre_norm=True, norm_layer=CLIP_NORM,
                 num_classes=16),
    # vit_base_patch16_clip_quickgelu_224
    "clip_quickgelu": dict(patch_size=8, img_size=32, pre_norm=True, norm_layer=CLIP_NORM,
                           num_classes=16, act_layer="quick_gelu"),
    # global_pool='avg' with a class token: timm uses fc_norm after pooling, norm is Identity
    "gap_fc_norm": dict(patch_size=8, img_size=32, global_pool="avg", class_token=False,
                        num_classes=10),
}
ZERO_HEAD_BIAS = {"clip", "clip_quickgelu"}
NORMED = {"dinov2", "dinov2_reg"}
RESIZED_SIZE = 42  # dinov2_resized: 3x3 grid of 14 px patches

PREPROCESSING = {
    "deit3_base_patch16_224.fb_in1k": {},
    "vit_base_patch16_siglip_224.webli": {},
    "vit_base_patch16_clip_224.openai": {},
    "vit_small_patch14_dinov2.lvd142m": {"input_size": (3, 224, 224)},
}
PHOTOS = ("chelsea", "astronaut")

E2E = dict(patch_size=8, img_size=32, embed_dim=32, depth=2, num_heads=2, num_classes=5)
E2E_SOURCE = "deit3_base_patch16_224.fb_in1k"
E2E_OVERRIDES = {"input_size": (3, 32, 32), "crop_pct": 0.875, "interpolation": "bicubic",
                 "mean": timm.data.IMAGENET_DEFAULT_MEAN, "std": timm.data.IMAGENET_DEFAULT_STD}
E2E_JPEG = dict(size=(60, 40), quality=90)  # PIL size: (width, height)


def build(flags: dict, **overrides) -> VisionTransformer:
    return VisionTransformer(**{**BASE, **flags, **overrides}).eval()


def randomize(module: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            values = torch.randn(parameter.shape, generator=generator) * 0.2
            if name.endswith(".gamma"):  # layer scale (ls1/ls2): big enough to matter
                values = 0.5 + torch.rand(parameter.shape, generator=generator)
            elif "norm" in name and name.endswith("weight"):  # LayerNorm scales around 1
                values = 1.0 + 0.5 * values
            parameter.copy_(values)


def random_images(seed: int, size: int) -> np.ndarray:
    rng = np.random.default_rng(1000 + seed)
    return rng.uniform(-2.0, 2.0, (BATCH, size, size, 3)).astype(np.float32)


def nchw(images_nhwc: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(images_nhwc.transpose(0, 3, 1, 2)))


def state_dict_numpy(module) -> dict:
    return {name: tensor.detach().numpy().astype(np.float32).copy()
            for name, tensor in module.state_dict().items()}


def write_safetensors(weights: dict, filename: str) -> None:
    path = os.path.join(OUT, filename)
    save_file(weights, path)
    os.chmod(path, 0o644)  # safetensors writes 0600


def intermediates(model, x: torch.Tensor, norm: bool):
    """Block outputs as (NHWC grid, prefix tokens or None) pairs.

    timm 1.0.31's forward_intermediates only accepts output_fmt 'NCHW' or 'NLC' (no 'NHWC'),
    so the NCHW grid is transposed here.
    """
    with torch.no_grad():
        _, taken = model.forward_intermediates(
            x, indices=INDICES, norm=norm, output_fmt="NCHW", intermediates_only=False,
            return_prefix_tokens=True)
    pairs = []
    for item in taken:
        grid, prefix = item if isinstance(item, tuple) else (item, None)
        pairs.append((grid.permute(0, 2, 3, 1).numpy().copy(),
                      None if prefix is None else prefix.numpy().copy()))
    return pairs


def describe(name: str, flags: dict, model: VisionTransformer) -> dict:
    mlp = model.blocks[0].mlp
    act = {"dinov2_swiglu": "swiglu", "clip_quickgelu": "quick_gelu"}.get(name, "gelu")
    norm = model.norm if isinstance(model.norm, torch.nn.LayerNorm) else model.fc_norm
    return dict(
        patch_size=flags["patch_size"], img_size=flags["img_size"],
        embed_dim=BASE["embed_dim"], depth=BASE["depth"], num_heads=BASE["num_heads"],
        mlp_hidden=mlp.fc1.out_features,  # swiglu: packed (gate, value) width, fc2 takes half
        num_classes=flags["num_classes"], class_token=flags.get("class_token", True),
        no_embed_class=flags.get("no_embed_class", False), reg_tokens=flags.get("reg_tokens", 0),
        num_prefix_tokens=model.num_prefix_tokens, init_values=flags.get("init_values"),
        global_pool=flags.get("global_pool", "token"), pre_norm=flags.get("pre_norm", False),
        fc_norm=not isinstance(model.fc_norm, torch.nn.Identity),
        final_norm=not isinstance(model.norm, torch.nn.Identity),
        patch_bias=model.patch_embed.proj.bias is not None,
        eps=norm.eps, act=act, head_bias=name not in ZERO_HEAD_BIAS and flags["num_classes"] > 0,
        head_bias_stored_as_zeros=name in ZERO_HEAD_BIAS,
        weights=f"{name}.safetensors")


def parity_cases(vectors: dict, configs: dict) -> dict:
    notes = {}
    for seed, (name, flags) in enumerate(CASES.items()):
        model = build(flags)
        randomize(model, seed)
        if name in ZERO_HEAD_BIAS:
            with torch.no_grad():
                model.head.bias.zero_()
        assert model.patch_embed.proj.bias is None or not flags.get("pre_norm")
        write_safetensors(state_dict_numpy(model), f"{name}.safetensors")
        images = random_images(seed, flags["img_size"])
        x = nchw(images)
        with torch.no_grad():
            outputs = model(x).numpy()
        vectors[f"{name}/images"] = images
        vectors[f"{name}/outputs"] = outputs
        for index, (grid, prefix) in zip(INDICES, intermediates(model, x, norm=False)):
            vectors[f"{name}/grid_{index}"] = grid
            if prefix is not None:
                vectors[f"{name}/prefix_{index}"] = prefix
        if name in NORMED:
            for index, (grid, _) in zip(INDICES, intermediates(model, x, norm=True)):
                vectors[f"{name}/grid_normed_{index}"] = grid
        configs[name] = describe(name, flags, model)
        if name == "dinov2_reg":
            notes["dinov2_reg"] = check_reg_order(model, x)
    return notes


def check_reg_order(model, x) -> str:
    """Where timm puts the register tokens: [cls, reg_0..reg_3, patches]."""
    with torch.no_grad():
        tokens = model._pos_embed(model.patch_embed(x))
    cls_first = torch.equal(tokens[:, 0], model.cls_token[:, 0].expand(x.shape[0], -1))
    regs_next = torch.equal(tokens[:, 1:5], model.reg_token.expand(x.shape[0], -1, -1))
    return f"cls at 0 (no pos): {cls_first}; reg at 1..4 (no pos): {regs_next}"


def resized_case(vectors: dict, configs: dict) -> str:
    from safetensors.numpy import load_file

    source = {k: torch.from_numpy(v) for k, v in
              load_file(os.path.join(OUT, "dinov2.safetensors")).items()}
    model = build(CASES["dinov2"], img_size=RESIZED_SIZE)
    filtered = checkpoint_filter_fn(source, model)
    new_len = filtered["pos_embed"].shape[1]
    resampled = new_len == 1 + (RESIZED_SIZE // 14) ** 2
    if not resampled:  # fall back to timm's resampler, as the brief asks
        filtered["pos_embed"] = timm.layers.resample_abs_pos_embed(
            source["pos_embed"], new_size=(3, 3), num_prefix_tokens=1)
    reference = timm.layers.resample_abs_pos_embed(
        source["pos_embed"], new_size=(3, 3), num_prefix_tokens=1, interpolation="bicubic",
        antialias=True)
    same = torch.allclose(reference, filtered["pos_embed"])
    model.load_state_dict(filtered)
    images = random_images(50, RESIZED_SIZE)
    with torch.no_grad():
        outputs = model(nchw(images)).numpy()
    vectors["dinov2_resized/images"] = images
    vectors["dinov2_resized/outputs"] = outputs
    configs["dinov2_resized"] = dict(
        configs["dinov2"], img_size=RESIZED_SIZE, weights="dinov2.safetensors",
        pos_embed_resample=dict(tool="timm checkpoint_filter_fn" if resampled
                                else "timm resample_abs_pos_embed", old_grid=[2, 2],
                                new_grid=[3, 3], interpolation="bicubic", antialias=True,
                                num_prefix_tokens=1))
    return (f"checkpoint_filter_fn resampled pos_embed 5 -> {new_len} tokens: {resampled}; "
            f"equals resample_abs_pos_embed(bicubic, antialias): {same}")


def preprocessing() -> None:
    arrays, cfgs = {}, {}
    photos = {name: Image.fromarray(getattr(skimage.data, name)()).convert("RGB")
              for name in PHOTOS}
    for name, overrides in PREPROCESSING.items():
        pretrained = get_pretrained_cfg(name).to_dict()
        cfg = timm.data.resolve_data_config(dict(overrides), pretrained_cfg=pretrained)
        transform = timm.data.create_transform(**cfg, is_training=False)
        mean = np.asarray(cfg["mean"], np.float32)
        std = np.asarray(cfg["std"], np.float32)
        for photo, image in photos.items():
            tensor = transform(image).numpy().transpose(1, 2, 0)
            levels = (tensor * std + mean) * 255.0
            # PIL resizes in uint8, so the levels are whole numbers: stored exactly as uint8.
            assert np.abs(levels - np.round(levels)).max() < 1e-3
            arrays[f"{name}/{photo}"] = np.round(levels).astype(np.uint8)
        cfgs[name] = dict(
            input_size=list(cfg["input_size"]), interpolation=cfg["interpolation"],
            crop_pct=cfg["crop_pct"], crop_mode=cfg["crop_mode"], mean=list(cfg["mean"]),
            std=list(cfg["std"]), overrides={k: list(v) for k, v in overrides.items()},
            transform=str(transform))
    cfgs["_photos"] = {name: list(np.asarray(image).shape) for name, image in photos.items()}
    cfgs["_generated_with"] = versions()
    np.savez_compressed(os.path.join(OUT, "preprocessing.npz"), **arrays)
    dump_json(cfgs, "preprocessing.json")


def deit_e2e() -> None:
    model = VisionTransformer(**E2E).eval()
    randomize(model, 60)
    write_safetensors(state_dict_numpy(model), "deit_e2e.safetensors")
    jpeg_path = os.path.join(OUT, "deit_e2e.jpg")
    coffee = Image.fromarray(skimage.data.coffee()).resize(E2E_JPEG["size"], Image.BICUBIC)
    coffee.save(jpeg_path, quality=E2E_JPEG["quality"])
    os.chmod(jpeg_path, 0o644)
    cfg = timm.data.resolve_data_config(
        dict(E2E_OVERRIDES), pretrained_cfg=get_pretrained_cfg(E2E_SOURCE).to_dict())
    transform = timm.data.create_transform(**cfg, is_training=False)
    with Image.open(jpeg_path) as file:
        image = file.convert("RGB")
    x = transform(image).unsqueeze(0)
    with torch.no_grad():
        logits = model(x)[0]
    probs = torch.softmax(logits, dim=-1)
    dump_json(dict(
        model=dict(E2E, global_pool="token", class_token=True, act="gelu", eps=1e-6,
                   mlp_hidden=model.blocks[0].mlp.fc1.out_features),
        weights="deit_e2e.safetensors", image="deit_e2e.jpg",
        jpeg=dict(source="skimage.data.coffee", resize=list(E2E_JPEG["size"]),
                  resample="PIL.Image.BICUBIC", quality=E2E_JPEG["quality"]),
        cfg=dict(input_size=list(cfg["input_size"]), interpolation=cfg["interpolation"],
                 crop_pct=cfg["crop_pct"], crop_mode=cfg["crop_mode"], mean=list(cfg["mean"]),
                 std=list(cfg["std"]), source=E2E_SOURCE),
        transform=str(transform),
        logits=logits.numpy().astype(float).tolist(),
        probabilities=probs.numpy().astype(float).tolist(),
        _generated_with=versions()), "deit_e2e.json")


def versions() -> dict:
    return {"timm": timm.__version__, "torch": torch.__version__, "numpy": np.__version__,
            "torchvision": torchvision.__version__, "pillow": PIL.__version__,
            "scikit-image": skimage.__version__, "python": sys.version.split()[0]}


def dump_json(data: dict, filename: str) -> None:
    path = os.path.join(OUT, filename)
    with open(path, "w") as file:
        json.dump(data, file, indent=1, sort_keys=True)
        file.write("\n")
    os.chmod(path, 0o644)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    os.makedirs(OUT, exist_ok=True)
    vectors, configs = {}, {}
    notes = parity_cases(vectors, configs)
    notes["dinov2_resized"] = resized_case(vectors, configs)
    assert all(v.dtype == np.float32 for v in vectors.values())
    np.savez_compressed(os.path.join(OUT, "parity.npz"), **vectors)
    os.chmod(os.path.join(OUT, "parity.npz"), 0o644)
    configs["_generated_with"] = versions()
    dump_json(configs, "configs.json")
    preprocessing()
    os.chmod(os.path.join(OUT, "preprocessing.npz"), 0o644)
    deit_e2e()
    for key, note in notes.items():
        print(f"{key}: {note}")


if __name__ == "__main__":
    main()
