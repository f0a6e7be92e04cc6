"""Makes the parity vectors of tests/test_checkpoints_parity.py with timm and transformers.

Not run by CI (it needs torch, timm, transformers and scipy). Run it in a separate venv:

    python3.11 -m venv /work/venv-timm
    /work/venv-timm/bin/pip install torch==2.14.1 torchvision==0.29.1 timm safetensors numpy \
        scipy transformers
    python tests/data/make_our_npz.py                        # project env: ours_*.npz
    /work/venv-timm/bin/python tests/data/make_timm_vectors.py

Every model is tiny, built with the official model's choices (tanh GELU, LayerNorm eps 1e-6,
norm before pooling), and gets random non-zero weights everywhere, head included. Written here:

- timm_token.safetensors, timm_gap.safetensors: timm `VisionTransformer` state dicts
  (class token + 'token' pooling; no class token + 'avg' pooling on a 32x48 image).
- hf_classifier.safetensors: a `ViTForImageClassification` (`vit.` prefix, `classifier`).
- hf_model.safetensors: a bare `ViTModel` with its pooler (dense + tanh on the class token).
- parity_vectors.npz: for each case, `<case>/images` (NHWC, in [-1, 1]) and `<case>/outputs`:
  * timm_token, timm_gap: timm logits.
  * timm_token_resized_6x6, timm_token_resized_5x7: timm logits of timm_token at 48x48 and
    40x56 px, its position-embedding grid resized by the OFFICIAL rule
    (scipy.ndimage.zoom(order=1) on the 4x4 grid, class-token row kept) and loaded into a timm
    model built at the new size. (timm's own resampling is half-pixel bilinear, not the
    official aligned-corners zoom, so it is not the reference.)
  * hf_classifier: logits; hf_model: `pooler_output`.
  * ours_token_in_timm, ours_gap_in_timm: timm logits after timm's own `.npz` reader
    (`timm.models.vision_transformer._load_weights`) loaded our save_npz files.
- parity_configs.json: the architecture of each case, for the tests to build our model.
"""

import json
import os
from functools import partial

import numpy as np
import scipy.ndimage
import timm
import torch
import transformers
from safetensors.numpy import save_file
from timm.models.vision_transformer import VisionTransformer, _load_weights

HERE = os.path.dirname(os.path.abspath(__file__))
BATCH = 2

TIMM_CASES = {
    "timm_token": dict(image_size=32, patch_size=8, hidden_size=32, mlp_dim=64, num_heads=4,
                       num_layers=2, num_classes=7, classifier="token"),
    "timm_gap": dict(image_size=[32, 48], patch_size=8, hidden_size=32, mlp_dim=64,
                     num_heads=2, num_layers=2, num_classes=5, classifier="gap"),
}
HF_CASE = dict(image_size=32, patch_size=8, hidden_size=40, mlp_dim=80, num_heads=2,
               num_layers=2, num_classes=6, classifier="token")
RESIZED = {"timm_token_resized_6x6": [48, 48], "timm_token_resized_5x7": [40, 56]}


def timm_model(config: dict, image_size=None) -> VisionTransformer:
    """A timm ViT computing exactly what the official model (and ours) computes."""
    size = image_size or config["image_size"]
    token = config["classifier"] == "token"
    model = VisionTransformer(
        img_size=tuple(size) if isinstance(size, list) else size,
        patch_size=config["patch_size"], num_classes=config["num_classes"],
        global_pool="token" if token else "avg", class_token=token, fc_norm=False,
        embed_dim=config["hidden_size"], depth=config["num_layers"],
        num_heads=config["num_heads"], mlp_ratio=config["mlp_dim"] / config["hidden_size"],
        qkv_bias=True, act_layer=partial(torch.nn.GELU, approximate="tanh"),
        norm_layer=partial(torch.nn.LayerNorm, eps=1e-6))
    return model.eval()


def randomize(module: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in module.named_parameters():
            values = torch.randn(parameter.shape, generator=generator) * 0.2
            if "norm" in name and name.endswith("weight"):  # LayerNorm scales around 1
                values = 1.0 + 0.5 * values
            parameter.copy_(values)


def random_images(seed: int, size) -> np.ndarray:
    height, width = (size, size) if isinstance(size, int) else size
    rng = np.random.default_rng(1000 + seed)
    return rng.uniform(-1.0, 1.0, (BATCH, height, width, 3)).astype(np.float32)


def run(model, images_nhwc: np.ndarray, **kwargs) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(images_nhwc.transpose(0, 3, 1, 2)), **kwargs)


def state_dict_numpy(module) -> dict:
    return {name: tensor.detach().numpy().copy() for name, tensor in module.state_dict().items()}


def official_resize(pos_embed: np.ndarray, old: int, new_hw) -> np.ndarray:
    """The official interpolate_posembed rule, generalised to a (rows, cols) target."""
    cls_row, grid = pos_embed[:, :1], pos_embed[0, 1:].reshape(old, old, -1)
    zoom = (new_hw[0] / old, new_hw[1] / old, 1)
    grid = scipy.ndimage.zoom(grid, zoom, order=1).reshape(1, new_hw[0] * new_hw[1], -1)
    return np.concatenate([cls_row, grid], axis=1)


def timm_cases(vectors: dict, configs: dict) -> None:
    for seed, (name, config) in enumerate(TIMM_CASES.items()):
        model = timm_model(config)
        randomize(model, seed)
        weights = state_dict_numpy(model)
        write_safetensors(weights, f"{name}.safetensors")
        images = random_images(seed, config["image_size"])
        vectors[f"{name}/images"] = images
        vectors[f"{name}/outputs"] = run(model, images).numpy()
        configs[name] = dict(config, weights=f"{name}.safetensors")
    token = TIMM_CASES["timm_token"]
    source = _load_safetensors("timm_token.safetensors")
    old_grid = token["image_size"] // token["patch_size"]
    for seed, (name, size) in enumerate(RESIZED.items(), start=10):
        model = timm_model(token, image_size=size)
        new_hw = [side // token["patch_size"] for side in size]
        resized = dict(source, pos_embed=official_resize(source["pos_embed"], old_grid, new_hw))
        model.load_state_dict({k: torch.from_numpy(v) for k, v in resized.items()})
        images = random_images(seed, size)
        vectors[f"{name}/images"] = images
        vectors[f"{name}/outputs"] = run(model, images).numpy()
        configs[name] = dict(token, image_size=size, weights="timm_token.safetensors")


def write_safetensors(weights: dict, filename: str) -> None:
    path = os.path.join(HERE, filename)
    save_file(weights, path)
    os.chmod(path, 0o644)  # safetensors writes 0600


def _load_safetensors(filename: str) -> dict:
    from safetensors.numpy import load_file

    return load_file(os.path.join(HERE, filename))


def hf_config() -> transformers.ViTConfig:
    return transformers.ViTConfig(
        hidden_size=HF_CASE["hidden_size"], num_hidden_layers=HF_CASE["num_layers"],
        num_attention_heads=HF_CASE["num_heads"], intermediate_size=HF_CASE["mlp_dim"],
        hidden_act="gelu_pytorch_tanh", hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, layer_norm_eps=1e-6,
        image_size=HF_CASE["image_size"], patch_size=HF_CASE["patch_size"], num_channels=3,
        qkv_bias=True, num_labels=HF_CASE["num_classes"])


def hf_cases(vectors: dict, configs: dict) -> None:
    classifier = transformers.ViTForImageClassification(hf_config()).eval()
    randomize(classifier, 20)
    write_safetensors(state_dict_numpy(classifier), "hf_classifier.safetensors")
    images = random_images(20, HF_CASE["image_size"])
    vectors["hf_classifier/images"] = images
    vectors["hf_classifier/outputs"] = run(classifier, images).logits.numpy()
    configs["hf_classifier"] = dict(HF_CASE, weights="hf_classifier.safetensors")

    bare = transformers.ViTModel(hf_config(), add_pooling_layer=True).eval()
    randomize(bare, 21)
    write_safetensors(state_dict_numpy(bare), "hf_model.safetensors")
    images = random_images(21, HF_CASE["image_size"])
    vectors["hf_model/images"] = images
    vectors["hf_model/outputs"] = run(bare, images).pooler_output.numpy()
    configs["hf_model"] = dict(HF_CASE, representation_size=HF_CASE["hidden_size"],
                               include_top=False, pooling="token", weights="hf_model.safetensors")


def our_npz_cases(vectors: dict, configs: dict) -> None:
    with open(os.path.join(HERE, "ours_configs.json")) as file:
        ours = json.load(file)
    for seed, (name, config) in enumerate(sorted(ours.items()), start=30):
        model = timm_model(config)
        _load_weights(model, os.path.join(HERE, f"{name}.npz"))
        images = random_images(seed, config["image_size"])
        vectors[f"{name}_in_timm/images"] = images
        vectors[f"{name}_in_timm/outputs"] = run(model, images).numpy()
        configs[f"{name}_in_timm"] = dict(config, weights=f"{name}.npz")


def main():
    torch.manual_seed(0)
    vectors, configs = {}, {}
    timm_cases(vectors, configs)
    hf_cases(vectors, configs)
    our_npz_cases(vectors, configs)
    np.savez(os.path.join(HERE, "parity_vectors.npz"), **vectors)
    configs["_generated_with"] = {"torch": torch.__version__, "timm": timm.__version__,
                                  "transformers": transformers.__version__,
                                  "scipy": scipy.__version__}
    with open(os.path.join(HERE, "parity_configs.json"), "w") as file:
        json.dump(configs, file, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
