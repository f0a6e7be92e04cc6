"""Training: presets, the input pipeline and augmentation, recipes, objectives, distribution,
callbacks and one training run (`run`), driven by `vit train` (`train`); each task's objective,
pipeline and preset in its folder (`tasks/`)."""
