"""The `vit` application's parts over the `vit_keras` library, below the command line (`vit`),
in layers that import one way only:

- the base (`console`, `outputs`, `backend`, `hardware`, `paths`, `images`, `data/`): what every
  command shares: printing, run files, the Keras backend, the one image reader, the data
  sources;
- `inference/`: loading a trained model and using it: predict, evaluate, export, serve,
  inspect, embed, weights;
- `tasks/`: a folder per task: its data (at the base's rank) and what it does in those
  commands (at inference's).

`training` builds on both (a finished run exports and inspects through `inference`); this
package imports neither `training` nor the command line (`vit`).
"""
