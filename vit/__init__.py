"""The `vit` application over the `vit_keras` library, in layers that import one way only:

- the base (`console`, `outputs`, `backend`, `hardware`, `images`, `data/`): what every command
  shares: printing, run files, the Keras backend, the one image reader, the data sources;
- `inference/`: loading a trained model and using it: predict, evaluate, export, serve, inspect,
  bench, weights;
- `training/`: presets, the input pipeline, recipes, objectives, distribution and one training
  run; a finished run exports and inspects through `inference`;
- `cli`: the command registry on top.

`inference` never imports `training`, the base imports neither, and nothing imports `cli`.
"""
