"""Every use of a private Keras or TensorFlow API, in one place, behind a version check.

The project relies on a few internals that have no public equivalent:

1. `Model._maybe_symbolic_build` / `Model._symbolic_build` (TensorFlow trainer): `fit` builds
   the compile metrics by pulling one batch from the training iterator; that batch is never
   trained on (the stream shifts by one batch under any non-default strategy) and its
   cross-replica reduce fails under MultiWorkerMirroredStrategy. `build_without_peeking`
   builds the same state from a zero batch.
2. `Optimizer._clip_gradients`: Keras clips each replica's partial gradient before the
   TensorFlow backend all-reduces them; `ClipAfterAllReduce` clips the summed gradient.
3. `Adam._momentums` / `Adam._velocities` / `Optimizer._get_variable_index`: the slots the
   one-kernel Adam update (`adam_slots`) writes.
4. `Layer._flatten_layers`: the nested layers of a preprocessing layer (RandAugment holds
   several), whose seed generators `training.augment` swaps (`nested_layers`).
5. `Dense._kernel` / `EinsumDense._kernel`: the stored kernel variable, which the public
   `kernel` property returns with LoRA merged in (`stored_kernel`, for `vit_keras.lora`).
6. TensorFlow's `convert_variables_to_constants_v2` and the TFLite converter's
   `_experimental_disable_per_channel` (`freeze_concrete_function`, `set_per_channel`); its
   `_experimental_calibrate_only`, `convert.mlir_quantize` and `_deduplicate_readonly_buffers`,
   the two steps of a full-integer conversion with the calibrated ranges readable between them
   (`quantize_calibrated`).
7. `Layer.__delattr__` runs a full `gc.collect()` after each variable a layer drops, so that a
   device buffer goes at once; `Model.quantize` drops every projection's kernel
   (`no_collection_per_variable`).
8. `Model._distribute_strategy` (TensorFlow trainer): the strategy a model was made under, if
   any. Without one, Keras builds the optimizer inside the first traced step, and TensorFlow,
   seeing variables made, traces the step twice, with an initialisation guard per slot
   (`build_optimizer_before_tracing`).
9. `keras.src.saving.saving_lib.get_attr_skipset`: which attributes of a layer, model or
   optimizer the `.keras`/`.weights.h5` writers and readers skip as Keras' own. Keras caches
   it under one key and looks it up under another, so every object of every save and load
   builds a throw-away `Layer()` for its `dir()` (a third of a small model's backup time);
   `cache_saving_skipsets` caches it per object type, as Keras means to.

Under MultiWorkerMirroredStrategy `fit` reduces every log with `strategy.reduce("MEAN", value,
axis=0)`, which fails on scalars (tensorflow/tensorflow#72388); `vector_logs` (public API only)
returns each log as a [1] vector.

`TESTED_KERAS` is the Keras minor version these were checked on, and the `keras` pin in
pyproject.toml admits only it. `check()` raises a clear error when an internal is missing and
warns once on an untested version; tests/test_keras_compat.py fails loudly when an upgrade
changes any of them.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import warnings

import keras
from keras import ops
from keras.src.saving import saving_lib

TESTED_KERAS = (3, 15)
_warned = False


def keras_minor() -> tuple[int, int]:
    """The installed Keras (major, minor)."""
    major, minor = keras.__version__.split(".")[:2]
    return int(major), int(minor)


def check(owner, attribute: str) -> None:
    """Raises RuntimeError when `owner.attribute` is gone; warns once on an untested Keras."""
    global _warned
    if not hasattr(owner, attribute):
        raise RuntimeError(
            f"vit_keras uses {_name(owner)}.{attribute}, a private API "
            f"checked on Keras {TESTED_KERAS[0]}.{TESTED_KERAS[1]}; Keras {keras.__version__} "
            f"no longer has it. Install keras=={TESTED_KERAS[0]}.{TESTED_KERAS[1]}.*")
    if keras_minor() != TESTED_KERAS and not _warned:
        _warned = True
        warnings.warn(f"vit_keras was tested with Keras {TESTED_KERAS[0]}.{TESTED_KERAS[1]}, "
                      f"this is {keras.__version__}: its private-API work-arounds may misbehave",
                      RuntimeWarning, stacklevel=3)


def _name(owner) -> str:
    return owner.__name__ if isinstance(owner, type) else type(owner).__name__


def build_without_peeking(model, sample) -> None:
    """Makes `fit`/`evaluate` build metrics from `sample` (a zero batch) instead of a real one.

    Args:
        model: a compiled model under a tf.distribute strategy.
        sample: an (inputs, targets) batch of the right shapes and dtypes.
    """
    check(keras.Model, "_symbolic_build")
    check(keras.Model, "_maybe_symbolic_build")

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


class ClipAfterAllReduce:
    """Gradient clipping on the replica-summed gradient (a mixin for Keras optimizers).

    Keras 3 clips in `apply()` before its TensorFlow backend all-reduces the gradients, so under
    a multi-replica strategy each replica would clip its own partial gradient and the global
    norm would not be the global norm. Here the replicas' gradients are summed first, clipped,
    then divided by the replica count, so the backend's sum gives exactly the clipped total:
    the update equals the single-device update at the same global batch.
    """

    def _clip_gradients(self, grads):
        check(keras.optimizers.Optimizer, "_clip_gradients")
        if keras.backend.backend() != "tensorflow":
            return super()._clip_gradients(grads)
        import tensorflow as tf

        context = tf.distribute.get_replica_context()
        replicas = context.num_replicas_in_sync if context is not None else 1
        if replicas == 1 or not (self.clipnorm or self.global_clipnorm or self.clipvalue):
            return super()._clip_gradients(grads)
        total = context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        return [grad / replicas for grad in super()._clip_gradients(total)]


def adam_slots(optimizer, variable):
    """The (first moment, second moment) slot variables of `variable` in a Keras Adam/AdamW."""
    for attribute in ("_momentums", "_velocities", "_get_variable_index"):
        check(optimizer, attribute)
    index = optimizer._get_variable_index(variable)
    return optimizer._momentums[index], optimizer._velocities[index]


def nested_layers(layer) -> list:
    """`layer` and every layer nested in it, however deep."""
    check(keras.layers.Layer, "_flatten_layers")
    return list(layer._flatten_layers(include_self=True, recursive=True))


def stored_kernel(layer):
    """The kernel variable of a Keras `Dense`/`EinsumDense`, without any LoRA update."""
    check(layer, "_kernel")
    return layer._kernel


def freeze_concrete_function(concrete_function):
    """A TensorFlow concrete function with its variables folded into constants."""
    from tensorflow.python.framework import convert_to_constants

    return convert_to_constants.convert_variables_to_constants_v2(concrete_function)


def set_per_channel(converter, per_channel: bool) -> None:
    """Chooses per-channel (default) or per-tensor int8 weight scales on a TFLite converter:
    the converter's only switch for it is a private attribute."""
    if not hasattr(converter, "_experimental_disable_per_channel"):
        raise RuntimeError("this TensorFlow's TFLite converter has no "
                           "_experimental_disable_per_channel: per-tensor int8 is unavailable")
    converter._experimental_disable_per_channel = not per_channel


def quantize_calibrated(converter, adjust) -> bytes:
    """A full-integer TFLite conversion in its two steps, as `converter.convert()` runs them
    (the same tensors, scales and weights), with `adjust` between them.

    Args:
        converter: a `TFLiteConverter` set for int8 (optimizations, representative data,
            integer ops and the input/output types).
        adjust: the calibrated file's bytes (float, each activation's min and max recorded)
            -> the bytes to quantize.

    Returns:
        The quantized file's bytes.
    """
    import tensorflow as tf
    from tensorflow.lite.python import convert as tf_convert
    from tensorflow.lite.python import lite as tf_lite

    for name in ("_experimental_calibrate_only", "_experimental_disable_per_channel",
                 "_experimental_disable_per_channel_quantization_for_dense_layers"):
        check(converter, name)
    for module, name in ((tf_convert, "mlir_quantize"),
                         (tf_lite, "_deduplicate_readonly_buffers")):
        check(module, name)
    converter._experimental_calibrate_only = True
    try:
        calibrated = converter.convert()
    finally:
        converter._experimental_calibrate_only = False
    quantized = tf_convert.mlir_quantize(
        adjust(calibrated), converter._experimental_disable_per_channel,
        input_data_type=converter.inference_input_type or tf.float32,
        output_data_type=converter.inference_output_type or tf.float32,
        disable_per_channel_for_dense_layers=(
            converter._experimental_disable_per_channel_quantization_for_dense_layers))
    return tf_lite._deduplicate_readonly_buffers(quantized)


@contextlib.contextmanager
def no_collection_per_variable():
    """Runs the block with `gc.collect` a no-op: Keras' `Layer.__delattr__` calls it after
    every variable a layer drops. Quantizing ViT-B/16 drops 74 kernels: 16.5 s with a full
    collection for each, 0.6 s without, and reference counting freed every dropped kernel all
    the same (none was alive after; tests/test_quantization_lora.py holds both)."""
    collect = gc.collect
    gc.collect = lambda generation=2: 0
    try:
        yield
    finally:
        gc.collect = collect


def build_optimizer_before_tracing(model) -> None:
    """Builds a compiled model's optimizer for its trainable variables now, where Keras'
    TensorFlow trainer would build it inside the first traced training step.

    Only there: a model made under a tf.distribute strategy has it built by Keras before the
    step is traced, in the strategy's scope; JAX and PyTorch always build it first. The same
    variables as Keras would build at the first step, so the same training; one trace instead
    of two (a 2-block ViT's first epoch 5.1 -> 3.2 s on a 2-core CPU).
    """
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None or optimizer.built or keras.backend.backend() != "tensorflow":
        return
    import tensorflow as tf

    if getattr(model, "_distribute_strategy", None) is None and not tf.distribute.has_strategy():
        optimizer.build(model.trainable_variables)


def cache_saving_skipsets() -> None:
    """Makes Keras' saving code compute each object type's skipped attributes once per process
    (see the module's item 9); the sets, and so every file written or read, are unchanged."""
    check(saving_lib, "get_attr_skipset")
    if not getattr(saving_lib.get_attr_skipset, "_vit_keras_cached", False):
        cached = functools.lru_cache(maxsize=None)(saving_lib.get_attr_skipset)
        cached._vit_keras_cached = True
        saving_lib.get_attr_skipset = cached


cache_saving_skipsets()
