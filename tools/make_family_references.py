"""Makes the ViT-family reference files of tests/data/families/ with timm.

Not run by CI (it needs torch, torchvision, timm, transformers, safetensors and scikit-image).
Run it in a separate venv, from the repository root:

    python3.11 -m venv /work/venv-timm
    /work/venv-timm/bin/pip install torch torchvision timm transformers safetensors numpy \
        scikit-image pillow
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
- hf_<case>.safetensors: tiny Hugging Face transformers models (see HF_CASES; hidden 32, 2 layers,
  2 heads, intermediate 128), randomized like the timm cases (layer-scale `lambda1` uniform in
  [0.5, 1.5]) and written by `save_pretrained(safe_serialization=True)`, so the names are the
  ones transformers writes to disk (DINOv2: the legacy `attention.attention.query`,
  `attention.output.dense`, SwiGLU packed as `mlp.weights_in` = [gate; up], not the in-memory
  `q_proj`/`gate_proj` names). hf_siglip_full / hf_clip_full are whole two-tower `SiglipModel` /
  `CLIPModel` files with a tiny text tower, whose expected output is `get_image_features`.
  parity.npz: `hf_<case>/images` (NHWC, uniform in [-2, 2]) and `hf_<case>/outputs`; configs.json:
  `hf_<case>` (image_size, patch_size, hidden, layers, heads, intermediate as stored, act, eps,
  registers, pooling, projection_dim, layerscale, tensors). Each file is also rewritten into
  timm's layout and run by timm (`_timm_check` in the json).
- hf_processors.json: `to_dict()` of the PIL-backend ("slow") image processors of DINOv2
  (BitImageProcessorPil as facebook/dinov2-*: shortest edge 256, crop 224, ImageNet mean/std,
  bicubic), SigLIP and CLIP (defaults); preprocessing.npz: `hf_<family>/chelsea`, what each
  makes of `chelsea`, stored back as grey levels (uint8 when whole numbers, else float16).
- bigvision_siglip.npz: the `siglip` case's weights in big_vision's two-tower layout under
  `params/img/` (plus dummy `params/txt/...`, `params/t`, `params/b`), checked by loading it with
  timm's own `_load_weights(model, path, prefix='params/img/')`.
"""

import json
import os
import sys
import tempfile
from functools import partial

import numpy as np
import PIL
import skimage
import skimage.data
import timm
import timm.data
import torch
import torchvision
import transformers
from PIL import Image
from safetensors.numpy import load_file, save_file
from timm.layers import LayerNorm, SwiGLUPacked
from timm.models import get_pretrained_cfg
from timm.models.vision_transformer import VisionTransformer, _load_weights, checkpoint_filter_fn
from transformers import (BitImageProcessor, BitImageProcessorPil, CLIPConfig,
                          CLIPImageProcessor, CLIPImageProcessorPil, CLIPModel,
                          CLIPVisionConfig, CLIPVisionModelWithProjection, Dinov2Config,
                          Dinov2Model, Dinov2WithRegistersConfig, Dinov2WithRegistersModel,
                          SiglipConfig, SiglipImageProcessor, SiglipImageProcessorPil,
                          SiglipModel, SiglipVisionConfig, SiglipVisionModel)
from transformers.image_utils import PILImageResampling

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

# Hugging Face transformers: tiny configs of each family (the hub repos' flags, tiny sizes).
HF_BASE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128)
HF_TEXT = dict(HF_BASE, vocab_size=64, max_position_embeddings=16, pad_token_id=1,
               bos_token_id=62, eos_token_id=63)
HF_DINOV2 = dict(HF_BASE, image_size=28, patch_size=14, hidden_act="gelu", layer_norm_eps=1e-6,
                 layerscale_value=1.0, use_swiglu_ffn=False)
HF_SIGLIP = dict(HF_BASE, image_size=32, patch_size=8, hidden_act="gelu_pytorch_tanh",
                 layer_norm_eps=1e-6, vision_use_head=True)
HF_CLIP = dict(HF_BASE, image_size=32, patch_size=8, hidden_act="quick_gelu", layer_norm_eps=1e-5,
               projection_dim=16)
# name: (model, the output the test expects, facts of the family for configs.json)
HF_CASES = {
    "hf_dinov2": (lambda: Dinov2Model(Dinov2Config(**HF_DINOV2)), "pooler_output",
                  dict(act="gelu", pooling="token", registers=0, layerscale=True)),
    # HF's SwiGLU width: (int(int(hidden * mlp_ratio) * 2 / 3) + 7) // 8 * 8 (intermediate_size
    # is ignored), written packed as weights_in = [gate; up]
    "hf_dinov2_swiglu": (lambda: Dinov2Model(Dinov2Config(**dict(HF_DINOV2, use_swiglu_ffn=True))),
                         "pooler_output",
                         dict(act="swiglu", pooling="token", registers=0, layerscale=True)),
    "hf_dinov2_reg": (lambda: Dinov2WithRegistersModel(Dinov2WithRegistersConfig(
        **HF_DINOV2, num_register_tokens=4)), "pooler_output",
        dict(act="gelu", pooling="token", registers=4, layerscale=True)),
    "hf_siglip": (lambda: SiglipVisionModel(SiglipVisionConfig(**HF_SIGLIP)), "pooler_output",
                  dict(act="gelu_tanh", pooling="map", registers=0, layerscale=False)),
    "hf_siglip_full": (lambda: SiglipModel(SiglipConfig(
        text_config=dict(HF_TEXT, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6),
        vision_config=HF_SIGLIP)), "get_image_features",
        dict(act="gelu_tanh", pooling="map", registers=0, layerscale=False)),
    "hf_clip": (lambda: CLIPVisionModelWithProjection(CLIPVisionConfig(**HF_CLIP)), "image_embeds",
                dict(act="quick_gelu", pooling="token", registers=0, layerscale=False)),
    "hf_clip_full": (lambda: CLIPModel(CLIPConfig(
        text_config=dict(HF_TEXT, hidden_act="quick_gelu", layer_norm_eps=1e-5),
        vision_config=HF_CLIP, projection_dim=HF_CLIP["projection_dim"])), "get_image_features",
        dict(act="quick_gelu", pooling="token", registers=0, layerscale=False)),
}
HF_SEED = 70  # hf case i: weights seed HF_SEED + i, images random_images(HF_SEED + i, size)

# The image processors of the hub repos, PIL backend ("slow": PIL resampling, NumPy crop).
HF_PROCESSORS = {
    # facebook/dinov2-*/preprocessor_config.json
    "dinov2": (BitImageProcessorPil, BitImageProcessor, dict(
        size={"shortest_edge": 256}, crop_size={"height": 224, "width": 224},
        image_mean=timm.data.IMAGENET_DEFAULT_MEAN, image_std=timm.data.IMAGENET_DEFAULT_STD,
        resample=PILImageResampling.BICUBIC)),
    "siglip": (SiglipImageProcessorPil, SiglipImageProcessor, {}),
    "clip": (CLIPImageProcessorPil, CLIPImageProcessor, {}),
}
HF_PHOTO = "chelsea"

BIGVISION_PREFIX = "params/img/"
BIGVISION_SEED = 80


def build(flags: dict, **overrides) -> VisionTransformer:
    return VisionTransformer(**{**BASE, **flags, **overrides}).eval()


def randomize(module: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            values = torch.randn(parameter.shape, generator=generator) * 0.2
            if name.endswith((".gamma", ".lambda1")):  # layer scale: big enough to matter
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


def hf_output(model, name: str, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        if name == "get_image_features":  # transformers 5: a BaseModelOutputWithPooling
            features = model.get_image_features(pixel_values=x)
            return getattr(features, "pooler_output", features)
        return getattr(model(pixel_values=x), name)


def hf_cases(vectors: dict, configs: dict) -> dict:
    """Each HF model, saved by save_pretrained; expected outputs; the file rerun through timm."""
    notes = {}
    for index, (name, (make, output, facts)) in enumerate(HF_CASES.items()):
        seed = HF_SEED + index
        model = make().eval()
        randomize(model, seed)
        with tempfile.TemporaryDirectory() as folder:
            model.save_pretrained(folder, safe_serialization=True)
            weights = load_file(os.path.join(folder, "model.safetensors"))
        assert all(v.dtype == np.float32 for v in weights.values())
        write_safetensors(weights, f"{name}.safetensors")
        vision = getattr(model.config, "vision_config", model.config)
        images = random_images(seed, vision.image_size)
        x = nchw(images)
        outputs = hf_output(model, output, x)
        vectors[f"{name}/images"] = images
        vectors[f"{name}/outputs"] = outputs.numpy().copy()
        timm_diff = hf_timm_check(name, weights, x, outputs)
        case = describe_hf(name, vision, facts, weights)
        case.update(output=output, hf_class=type(model).__name__, _timm_check=timm_diff)
        if name.endswith("_full"):
            with torch.no_grad():
                pooled = model.vision_model(pixel_values=x).pooler_output
                if hasattr(model, "visual_projection"):
                    pooled = model.visual_projection(pooled)
            same = bool(torch.equal(pooled, outputs))
            case["equals_vision_tower"] = same
            notes[name] = f"get_image_features == vision tower pooler (+projection): {same}"
        configs[name] = case
        notes[f"{name} timm"] = timm_diff
    return notes


def describe_hf(name: str, vision, facts: dict, weights: dict) -> dict:
    keys = {k.removeprefix("vision_model."): v for k, v in weights.items()}
    fc1 = next(v for k, v in keys.items()
               if k.startswith("encoder.layer") and k.endswith(("fc1.weight", "weights_in.weight")))
    return dict(
        image_size=vision.image_size, patch_size=vision.patch_size, hidden=vision.hidden_size,
        layers=vision.num_hidden_layers, heads=vision.num_attention_heads,
        intermediate=int(fc1.shape[0]),  # swiglu: packed [gate; up], 2 x HF's hidden width
        eps=vision.layer_norm_eps, projection_dim=getattr(vision, "projection_dim", None)
        if name.startswith("hf_clip") else None,
        weights=f"{name}.safetensors", tensors=sorted(weights), **facts)


def hf_timm_check(name: str, weights: dict, x: torch.Tensor, expected: torch.Tensor) -> str:
    """The HF file (on-disk names) rewritten for timm's VisionTransformer: max |timm - HF|."""
    w = {k.removeprefix("vision_model."): torch.from_numpy(v) for k, v in weights.items()}
    dinov2 = name.startswith("hf_dinov2")
    swiglu = "mlp.weights_in" in "".join(w)
    layer = "encoder.layer." if dinov2 else "encoder.layers."
    names = (dict(q="attention.attention.query", k="attention.attention.key",
                  v="attention.attention.value", o="attention.output.dense", n1="norm1",
                  n2="norm2", fc1="mlp.weights_in" if swiglu else "mlp.fc1",
                  fc2="mlp.weights_out" if swiglu else "mlp.fc2") if dinov2 else
             dict(q="self_attn.q_proj", k="self_attn.k_proj", v="self_attn.v_proj",
                  o="self_attn.out_proj", n1="layer_norm1", n2="layer_norm2", fc1="mlp.fc1",
                  fc2="mlp.fc2"))
    state = {}
    for i in range(HF_BASE["num_hidden_layers"]):
        p, b = f"{layer}{i}.", f"blocks.{i}."
        for t in ("weight", "bias"):
            state[f"{b}attn.qkv.{t}"] = torch.cat([w[f"{p}{names[q]}.{t}"] for q in "qkv"])
            for ours, theirs in (("attn.proj", "o"), ("norm1", "n1"), ("norm2", "n2"),
                                 ("mlp.fc1", "fc1"), ("mlp.fc2", "fc2")):
                state[f"{b}{ours}.{t}"] = w[f"{p}{names[theirs]}.{t}"]
        if dinov2:
            state[f"{b}ls1.gamma"] = w[f"{p}layer_scale1.lambda1"]
            state[f"{b}ls2.gamma"] = w[f"{p}layer_scale2.lambda1"]
    if dinov2:
        flags = dict(patch_size=14, img_size=28, init_values=1.0, num_classes=0)
        pos = w["embeddings.position_embeddings"]
        state.update({"cls_token": w["embeddings.cls_token"], "pos_embed": pos,
                      "patch_embed.proj.weight": w["embeddings.patch_embeddings.projection.weight"],
                      "patch_embed.proj.bias": w["embeddings.patch_embeddings.projection.bias"],
                      "norm.weight": w["layernorm.weight"], "norm.bias": w["layernorm.bias"]})
        if swiglu:
            packed = state["blocks.0.mlp.fc1.weight"].shape[0]
            flags.update(mlp_ratio=packed / HF_BASE["hidden_size"], mlp_layer=SwiGLUPacked,
                         act_layer=torch.nn.SiLU)
        if "embeddings.register_tokens" in w:  # timm: the class position folded into cls_token
            flags.update(reg_tokens=4, no_embed_class=True)
            state.update(cls_token=w["embeddings.cls_token"] + pos[:, :1], pos_embed=pos[:, 1:],
                         reg_token=w["embeddings.register_tokens"])
    else:
        state.update({"pos_embed": w["embeddings.position_embedding.weight"][None],
                      "patch_embed.proj.weight": w["embeddings.patch_embedding.weight"],
                      "norm.weight": w["post_layernorm.weight"],
                      "norm.bias": w["post_layernorm.bias"]})
    if name.startswith("hf_siglip"):
        flags = dict(CASES["siglip"], act_layer="gelu_tanh")
        d = HF_BASE["hidden_size"]
        qkv_w, qkv_b = w["head.attention.in_proj_weight"], w["head.attention.in_proj_bias"]
        state.update({"patch_embed.proj.bias": w["embeddings.patch_embedding.bias"],
                      "attn_pool.latent": w["head.probe"],
                      "attn_pool.q.weight": qkv_w[:d], "attn_pool.q.bias": qkv_b[:d],
                      "attn_pool.kv.weight": qkv_w[d:], "attn_pool.kv.bias": qkv_b[d:],
                      "attn_pool.proj.weight": w["head.attention.out_proj.weight"],
                      "attn_pool.proj.bias": w["head.attention.out_proj.bias"],
                      "attn_pool.norm.weight": w["head.layernorm.weight"],
                      "attn_pool.norm.bias": w["head.layernorm.bias"],
                      **{f"attn_pool.mlp.{f}.{t}": w[f"head.mlp.{f}.{t}"]
                         for f in ("fc1", "fc2") for t in ("weight", "bias")}})
    elif name.startswith("hf_clip"):
        flags = CASES["clip_quickgelu"]
        state.update({"cls_token": w["embeddings.class_embedding"][None, None],
                      "norm_pre.weight": w["pre_layrnorm.weight"],
                      "norm_pre.bias": w["pre_layrnorm.bias"],
                      "head.weight": w["visual_projection.weight"],
                      "head.bias": torch.zeros(HF_CLIP["projection_dim"])})
    model = build(flags)
    model.load_state_dict(state, strict=True)
    with torch.no_grad():
        diff = (model(x) - expected).abs().max().item()
    return f"timm {model.__class__.__name__} on the rewritten file: max |timm - HF| = {diff:.2e}"


def hf_processors(arrays: dict) -> None:
    """The hub repos' image processors (PIL backend) and what they make of `chelsea`."""
    image = Image.fromarray(getattr(skimage.data, HF_PHOTO)()).convert("RGB")
    processors, references = {}, {}
    for family, (slow, fast, kwargs) in HF_PROCESSORS.items():
        processor = slow(**kwargs)
        assert processor.backend == "pil"
        processors[family] = json.loads(json.dumps(processor.to_dict()))  # enums -> ints
        levels = denormalized(processor, image)
        whole = bool(np.abs(levels - np.round(levels)).max() < 1e-3)
        stored = np.round(levels).astype(np.uint8) if whole else levels.astype(np.float16)
        arrays[f"hf_{family}/{HF_PHOTO}"] = stored
        default = fast(**kwargs)  # transformers 5's default class: the torchvision backend
        references[family] = dict(
            key=f"hf_{family}/{HF_PHOTO}", shape=list(stored.shape), dtype=str(stored.dtype),
            processor_class=type(processor).__name__, backend=processor.backend,
            resampling="PIL (uint8 in, uint8 out), then NumPy crop / rescale / normalize",
            max_diff_levels_vs_torchvision_backend=float(
                np.abs(denormalized(default, image) - levels).max()),
            torchvision_backend_class=type(default).__name__)
    processors["_references"] = references
    processors["_generated_with"] = dict(versions(), transformers=transformers.__version__)
    dump_json(processors, "hf_processors.json")


def denormalized(processor, image) -> np.ndarray:
    pixels = processor(images=image, return_tensors="np")["pixel_values"][0]
    mean = np.asarray(processor.image_mean, np.float32)
    std = np.asarray(processor.image_std, np.float32)
    return (np.asarray(pixels).transpose(1, 2, 0) * std + mean) * 255.0


def bigvision_siglip(vectors: dict) -> str:
    """The `siglip` case in big_vision's layout, read back by timm's own `_load_weights`."""
    timm_weights = load_file(os.path.join(OUT, "siglip.safetensors"))
    d, heads = BASE["embed_dim"], BASE["num_heads"]
    hd = d // heads

    def dense(weight):  # torch (out, in) -> flax (in, out)
        return weight.T

    def attention(prefix, q_w, q_b, k_w, k_b, v_w, v_b, o_w, o_b):
        out = {}
        for n, (weight, bias) in (("query", (q_w, q_b)), ("key", (k_w, k_b)),
                                  ("value", (v_w, v_b))):
            out[f"{prefix}{n}/kernel"] = weight.T.reshape(d, heads, hd)  # (D, H, hd)
            out[f"{prefix}{n}/bias"] = bias.reshape(heads, hd)
        out[f"{prefix}out/kernel"] = o_w.T.reshape(heads, hd, d)  # (H, hd, D)
        out[f"{prefix}out/bias"] = o_b
        return out

    def norm(prefix, source):
        return {f"{prefix}scale": timm_weights[f"{source}.weight"],
                f"{prefix}bias": timm_weights[f"{source}.bias"]}

    def mlp(prefix, source):
        return {f"{prefix}Dense_{r}/{k}": (dense(timm_weights[f"{source}.fc{r + 1}.weight"])
                                          if k == "kernel" else
                                          timm_weights[f"{source}.fc{r + 1}.bias"])
                for r in range(2) for k in ("kernel", "bias")}

    img = BIGVISION_PREFIX
    arrays = {f"{img}embedding/kernel":  # OIHW -> HWIO
              timm_weights["patch_embed.proj.weight"].transpose(2, 3, 1, 0),
              f"{img}embedding/bias": timm_weights["patch_embed.proj.bias"],
              f"{img}pos_embedding": timm_weights["pos_embed"],  # (1, N, D)
              **norm(f"{img}Transformer/encoder_norm/", "norm")}
    for i in range(BASE["depth"]):
        block, source = f"{img}Transformer/encoderblock_{i}/", f"blocks.{i}"
        qkv_w = np.split(timm_weights[f"{source}.attn.qkv.weight"], 3)
        qkv_b = np.split(timm_weights[f"{source}.attn.qkv.bias"], 3)
        arrays.update(norm(f"{block}LayerNorm_0/", f"{source}.norm1"))
        arrays.update(norm(f"{block}LayerNorm_1/", f"{source}.norm2"))
        arrays.update(attention(f"{block}MultiHeadDotProductAttention_0/", qkv_w[0], qkv_b[0],
                                qkv_w[1], qkv_b[1], qkv_w[2], qkv_b[2],
                                timm_weights[f"{source}.attn.proj.weight"],
                                timm_weights[f"{source}.attn.proj.bias"]))
        arrays.update(mlp(f"{block}MlpBlock_0/", f"{source}.mlp"))
    head = f"{img}MAPHead_0/"
    kv_w = np.split(timm_weights["attn_pool.kv.weight"], 2)
    kv_b = np.split(timm_weights["attn_pool.kv.bias"], 2)
    arrays[f"{head}probe"] = timm_weights["attn_pool.latent"]  # (1, 1, D)
    arrays.update(attention(f"{head}MultiHeadDotProductAttention_0/",
                            timm_weights["attn_pool.q.weight"], timm_weights["attn_pool.q.bias"],
                            kv_w[0], kv_b[0], kv_w[1], kv_b[1],
                            timm_weights["attn_pool.proj.weight"],
                            timm_weights["attn_pool.proj.bias"]))
    arrays.update(norm(f"{head}LayerNorm_0/", "attn_pool.norm"))
    arrays.update(mlp(f"{head}MlpBlock_0/", "attn_pool.mlp"))
    # A two-tower file also holds the text tower and the logit temperature and bias.
    rng = np.random.default_rng(BIGVISION_SEED)
    dummies = {"params/txt/Embed_0/embedding": (64, d), "params/txt/pos_embedding": (1, 16, d),
               "params/txt/Encoder_0/encoderblock_0/LayerNorm_0/scale": (d,),
               "params/txt/Encoder_0/encoderblock_0/MlpBlock_0/Dense_0/kernel": (d, 4 * d),
               "params/txt/Encoder_0/encoder_norm/scale": (d,), "params/txt/head/kernel": (d, d),
               "params/txt/head/bias": (d,), "params/t": (1,), "params/b": (1,)}
    arrays.update({k: rng.normal(0.0, 0.2, shape) for k, shape in dummies.items()})
    arrays = {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in arrays.items()}
    path = os.path.join(OUT, "bigvision_siglip.npz")
    np.savez(path, **arrays)
    os.chmod(path, 0o644)

    model = build(CASES["siglip"])
    randomize(model, BIGVISION_SEED)  # anything _load_weights misses would show
    _load_weights(model, path, prefix=BIGVISION_PREFIX)
    with torch.no_grad():
        outputs = model(nchw(vectors["siglip/images"])).numpy()
    diff = float(np.abs(outputs - vectors["siglip/outputs"]).max())
    return (f"timm _load_weights(prefix={BIGVISION_PREFIX!r}) of {len(arrays)} arrays: "
            f"max |outputs - siglip/outputs| = {diff:.2e}")


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
    hf_processors(arrays)
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
    notes.update(hf_cases(vectors, configs))
    notes["bigvision_siglip"] = bigvision_siglip(vectors)
    assert all(v.dtype == np.float32 for v in vectors.values())
    np.savez_compressed(os.path.join(OUT, "parity.npz"), **vectors)
    os.chmod(os.path.join(OUT, "parity.npz"), 0o644)
    configs["_generated_with"] = dict(versions(), transformers=transformers.__version__)
    dump_json(configs, "configs.json")
    preprocessing()
    os.chmod(os.path.join(OUT, "preprocessing.npz"), 0o644)
    deit_e2e()
    for key, note in notes.items():
        print(f"{key}: {note}")


if __name__ == "__main__":
    main()
