"""Work-arounds for two Keras 3 (3.15) gaps with tf.distribute, applied to one model instance.

1. `fit` builds the compile metrics by pulling one batch from the training iterator through
   `Model._maybe_symbolic_build`: that batch is never trained on (the data stream shifts by one
   batch under any non-default strategy) and its cross-replica reduce fails under
   MultiWorkerMirroredStrategy. `build_without_peeking` builds the same state from a zero batch.
2. Under MultiWorkerMirroredStrategy, `fit`/`evaluate` reduce every log value with
   `strategy.reduce("MEAN", value, axis=0)`, which fails on scalar losses and metrics
   ("Invalid reduction dimension 0 for input with 0 dimensions", tensorflow/tensorflow#72388).
   `vector_logs` returns each log as a [1] vector, whose axis-0 mean is the scalar again.
"""

from __future__ import annotations

import numpy as np
from keras import ops


def build_without_peeking(model, input_shape: tuple[int, ...], num_classes: int,
                          batch_size: int) -> None:
    """Makes `fit`/`evaluate` build metrics from a zero batch instead of a real one."""
    sample = (np.zeros((batch_size, *input_shape), np.float32),
              np.zeros((batch_size, num_classes), np.float32))

    def symbolic_build(iterator=None, data_batch=None):
        with model.distribute_strategy.scope():
            model._symbolic_build(data_batch=sample)

    model._maybe_symbolic_build = symbolic_build


def vector_logs(model) -> None:
    """Makes `train_step`/`test_step` return [1]-shaped logs (multi-worker reduce needs an axis)."""
    train_step, test_step = model.train_step, model.test_step

    def as_vectors(logs):
        return {name: ops.reshape(value, [1]) for name, value in logs.items()}

    model.train_step = lambda data: as_vectors(train_step(data))
    model.test_step = lambda data: as_vectors(test_step(data))
