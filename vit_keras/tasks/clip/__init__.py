"""The space-time task's library part: the ViT on clips and volumes (`model`), its layers
(`layers`: tubelets, space-time positions, attention across frames) and an image model
inflated to it (`inflate`)."""
