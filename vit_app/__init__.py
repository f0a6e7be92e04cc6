"""The `vit` application's parts over the `vit_keras` library, below the command line (`vit`),
in layers that import one way only:

- the base (`console`, `outputs`, `backend`, `hardware`, `paths`, `images`, `data/`): what every
  command shares: printing, run files, the Keras backend, the one image reader, the data
  sources;
- `inference/`: loading a trained model and using it: predict, evaluate, export, serve,
  inspect, embed, weights; what each task does in them (`inference/tasks/`).

`training` builds on both (a finished run exports and inspects through `inference`); this
package imports neither `training` nor the command line (`vit`).
"""
