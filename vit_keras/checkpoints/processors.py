"""The preprocessing a weight file's companion config records: timm's `pretrained_cfg` (its
`config.json` on the Hub) and a Hugging Face image processor (`preprocessor_config.json`),
each read into a `vit_keras.preprocessing.Preprocessing`."""

from __future__ import annotations

from vit_keras.preprocessing import (IMAGENET_MEAN, IMAGENET_STD, INTERPOLATIONS, OFFICIAL,
                                     Preprocessing)


def from_timm_config(pretrained_cfg: dict) -> Preprocessing:
    """The preprocessing of a timm `pretrained_cfg` (its `config.json` on the Hub).

    Args:
        pretrained_cfg: with `mean`, `std` and optionally `interpolation` (default bicubic),
            `crop_pct` (default 0.875, timm's) and `crop_mode` (default 'center').

    Returns:
        The `Preprocessing`.
    """
    interpolation = pretrained_cfg.get("interpolation") or "bicubic"
    return Preprocessing(mean=pretrained_cfg.get("mean", IMAGENET_MEAN),
                         std=pretrained_cfg.get("std", IMAGENET_STD),
                         interpolation=interpolation if interpolation in INTERPOLATIONS
                         else "bicubic",
                         crop_fraction=pretrained_cfg.get("crop_pct") or 0.875,
                         crop_mode="squash" if pretrained_cfg.get("crop_mode") == "squash"
                         else "center")


# PIL's resampling codes, as transformers' image processors store them.
_PIL_RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}


def from_hf_processor(processor: dict) -> Preprocessing:
    """The preprocessing of a Hugging Face image processor (`preprocessor_config.json`).

    Args:
        processor: with `image_mean`, `image_std`, `resample` (PIL's code: 2 bilinear,
            3 bicubic), `size` ({'shortest_edge': s} or {'height', 'width'}) and optionally
            `do_center_crop` with `crop_size`.

    Returns:
        The `Preprocessing`: a shorter-side resize and centre crop (crop fraction
        crop / shortest edge), or a squash to (height, width).

    Raises:
        ValueError: a resampling filter or size this library does not run.
    """
    resample = processor.get("resample", 3)
    if resample not in _PIL_RESAMPLE:
        raise ValueError(f"image processor resample={resample!r}: expected one of "
                         f"{sorted(_PIL_RESAMPLE)} (PIL nearest, bilinear, bicubic)")
    size, crop = processor.get("size") or {}, processor.get("crop_size") or {}
    if isinstance(size, int):  # older files: "size": 224 (the shorter side)
        size = {"shortest_edge": size}
    if isinstance(crop, int):
        crop = {"height": crop, "width": crop}
    common = dict(mean=processor.get("image_mean", OFFICIAL.mean),
                  std=processor.get("image_std", OFFICIAL.std),
                  interpolation=_PIL_RESAMPLE[resample])
    if "shortest_edge" in size:
        crop_side = crop.get("height", size["shortest_edge"]) if processor.get(
            "do_center_crop", True) else size["shortest_edge"]
        return Preprocessing(crop_fraction=min(crop_side / size["shortest_edge"], 1.0),
                             crop_mode="center", **common)
    if "height" in size and "width" in size:
        return Preprocessing(crop_mode="squash", **common)
    raise ValueError(f"image processor size={size!r}: expected {{'shortest_edge': N}} or "
                     "{'height': H, 'width': W}")
