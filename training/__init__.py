"""The `vit` application: data pipelines, recipes, distribution and the training loop."""
