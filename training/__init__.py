"""The `vit` application: data sources and pipeline, recipes, distribution and one training
run for every objective."""
