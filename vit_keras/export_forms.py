"""Graph forms for TFLite and ONNX export: the same values, traced as operators the runtimes
run well.

`vit_keras.export.tflite` traces the model inside `tflite_form()`; layers that have a better
form for the converter ask `active()` / `integer()` while they are traced:

- `LayerNorm` and `GroupNorm` (every TFLite export) use (x - mean) / std * gamma + beta, whose
  operators all have int8 kernels (Keras' form leaves a float NEG in int8 files);
- `MultiHeadSelfAttention` (full-integer int8 with a static batch) computes each head's q.k^T
  and probs.v as FULLY_CONNECTED operators with activation weights: LiteRT's int8
  FULLY_CONNECTED is several times faster than its int8 BATCH_MATMUL, which XNNPACK does not
  take (benchmarks/litert_int8_kernels.py).
"""

import contextlib
import contextvars

_FORM = contextvars.ContextVar("vit_keras_export_form", default=None)


@contextlib.contextmanager
def onnx_form():
    """Layers traced inside this context take their ONNX forms: the TFLite float forms, whose
    LayerNorm `vit_keras.export.onnx_graph` recognises and fuses."""
    token = _FORM.set("float")
    try:
        yield
    finally:
        _FORM.reset(token)


@contextlib.contextmanager
def tflite_form(integer: bool = False):
    """Layers traced inside this context take their TFLite forms.

    Args:
        integer: the file is full-integer int8 (enables the forms that only pay off there).
    """
    token = _FORM.set("integer" if integer else "float")
    try:
        yield
    finally:
        _FORM.reset(token)


def active() -> bool:
    """True while a TFLite export traces the model."""
    return _FORM.get() is not None


def integer() -> bool:
    """True while a full-integer int8 TFLite export traces the model."""
    return _FORM.get() == "integer"
