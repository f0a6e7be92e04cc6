"""Using a trained model: load it (any format), predict, evaluate, export, serve, inspect,
bench, and the `vit weights` cache. Imports the base and `vit_keras`, never `training`."""
