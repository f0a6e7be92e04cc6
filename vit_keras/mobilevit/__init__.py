"""MobileViT v1 and v2 for phones (`config`: the variants; `layers`; `model`: `MobileViT`;
`weights`: timm's state dicts onto it)."""
