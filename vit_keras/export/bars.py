"""The top-1 agreement with Keras each kind of exported file must clear, read without a
framework (`vit export` checks its --min-agreement before TensorFlow is imported).

A float file (float32, or float16 weights) computes what Keras computes up to rounding: at
least 99.9% of images get the same class. An int8 file (dynamic-range or full-integer): 98%.
"""

from __future__ import annotations

FLOAT_MIN_AGREEMENT = 0.999
INT8_MIN_AGREEMENT = 0.98
ON_LOW_AGREEMENT = ("raise", "warn")


def default_min_agreement(quantization: str | None) -> float:
    """The top-1 agreement a file of this quantization must reach.

    Args:
        quantization: None or 'float32' (float), 'fp16', 'dynamic_int8' or 'int8'.

    Returns:
        `FLOAT_MIN_AGREEMENT` for float files, `INT8_MIN_AGREEMENT` for int8 ones.
    """
    if quantization in (None, "float32", "fp16"):
        return FLOAT_MIN_AGREEMENT
    if quantization in ("dynamic_int8", "int8"):
        return INT8_MIN_AGREEMENT
    raise ValueError(f"quantization must be None, 'float32', 'fp16', 'dynamic_int8' or 'int8', "
                     f"got {quantization!r}")


def check_options(min_agreement, on_low_agreement: str) -> None:
    """Refuses a threshold outside [0, 1] or an unknown `on_low_agreement`."""
    if min_agreement is not None and not 0.0 <= float(min_agreement) <= 1.0:
        raise ValueError(f"min_agreement must be a fraction in [0, 1], got {min_agreement!r}")
    if on_low_agreement not in ON_LOW_AGREEMENT:
        raise ValueError(f"on_low_agreement must be one of {ON_LOW_AGREEMENT}, got "
                         f"{on_low_agreement!r}")
