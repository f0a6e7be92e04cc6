"""TF Serving's REST API, as JSON in and out: predict requests and responses, model status and
metadata, for the two signatures of a SavedModel written by `vit export`.

A client written for TF Serving hosting that SavedModel works unchanged against `vit serve`:
- `serving_default` takes `images`, float RGB pixels 0..255, [H, W, 3] per instance;
- `serve_bytes` takes `image_bytes`, encoded JPEG/PNG/BMP/GIF files as `{"b64": "..."}`;
- both give `probabilities` and `logits`, in the row ("instances" -> "predictions") or the
  columnar ("inputs" -> "outputs") format.
A clip model's `images` are [frames, H, W, 3] windows, and its `{"b64": ...}` files are
videos or volumes, each read by its task (its windows' scores averaged).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses

import numpy as np

from vit_keras.export.serving import SERVE_BYTES, SERVING_DEFAULT

INPUT_NAMES = {SERVING_DEFAULT: "images", SERVE_BYTES: "image_bytes"}
VERSION = "1"  # one model, one version, as TF Serving numbers a lone SavedModel


@dataclasses.dataclass
class PredictRequest:
    """A parsed predict request.

    Attributes:
        signature: `serving_default` or `serve_bytes`.
        images: float32 [n, H, W, 3] pixels (a clip model's [n, frames, H, W, 3])
            (serving_default), else None.
        files: the n encoded image files (serve_bytes), else None.
        columnar: the request used "inputs", so the answer uses "outputs".
    """

    signature: str
    images: np.ndarray | None
    files: list[bytes] | None
    columnar: bool


def parse_predict(body, sample_rank: int = 3) -> PredictRequest:
    """Reads a decoded JSON predict request.

    Args:
        body: the request's JSON, decoded (`json.loads`).
        sample_rank: the dimensions of one input: 3 for an image ([H, W, 3]), 4 for a clip.

    Returns:
        The `PredictRequest`: pixels for serving_default, the decoded files for serve_bytes.

    Raises:
        ValueError: saying what was expected and what came.
    """
    if not isinstance(body, dict):
        raise ValueError(f"expected a JSON object with \"instances\" or \"inputs\", got a JSON "
                         f"{_json_type(body)}")
    unknown = set(body) - {"signature_name", "instances", "inputs"}
    if unknown:
        raise ValueError(f"unknown request fields {sorted(unknown)}; expected "
                         "\"signature_name\" and one of \"instances\" or \"inputs\"")
    if ("instances" in body) == ("inputs" in body):
        raise ValueError("expected exactly one of \"instances\" (row format) or \"inputs\" "
                         "(columnar format)")
    signature = body.get("signature_name") or SERVING_DEFAULT
    if not isinstance(signature, str) or signature not in INPUT_NAMES:
        raise ValueError(f"unknown signature_name {signature!r}; this model has "
                         f"{sorted(INPUT_NAMES)}")
    columnar = "inputs" in body
    values = _unwrap_columnar(body["inputs"], signature) if columnar else \
        [_unwrap_instance(value, signature) for value in _non_empty_list(body["instances"])]
    if signature == SERVE_BYTES:
        return PredictRequest(signature, None, [_b64_file(value, i)
                                                for i, value in enumerate(values)], columnar)
    return PredictRequest(signature, _float_images(values, sample_rank), None, columnar)


def _non_empty_list(values) -> list:
    if not isinstance(values, list) or not values:
        raise ValueError(f"expected a non-empty JSON list of instances, got "
                         f"{_describe(values)}")
    return values


def _unwrap_instance(instance, signature: str):
    """An instance is the input itself or {input name: input}."""
    name = INPUT_NAMES[signature]
    if isinstance(instance, dict) and "b64" not in instance:
        if set(instance) != {name}:
            raise ValueError(f"instance fields {sorted(instance)} do not match signature "
                             f"{signature!r}, whose one input is {name!r}")
        return instance[name]
    return instance


def _unwrap_columnar(inputs, signature: str) -> list:
    name = INPUT_NAMES[signature]
    if isinstance(inputs, dict):
        if set(inputs) != {name}:
            raise ValueError(f"input names {sorted(inputs)} do not match signature "
                             f"{signature!r}, whose one input is {name!r}")
        inputs = inputs[name]
    return _non_empty_list(inputs)


def _b64_file(value, index: int) -> bytes:
    if not (isinstance(value, dict) and set(value) == {"b64"} and isinstance(value["b64"], str)):
        raise ValueError(f"instance {index}: signature {SERVE_BYTES!r} takes encoded image files "
                         f"as {{\"b64\": \"...\"}}, got {_describe(value)}")
    text = value["b64"]
    try:  # TF Serving also takes base64 without its "=" padding
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"instance {index}: \"b64\" is not valid base64") from None


def _float_images(values: list, sample_rank: int) -> np.ndarray:
    shape = "[H, W, 3]" if sample_rank == 3 else "[frames, H, W, 3]"
    if any(isinstance(value, dict) for value in values):
        raise ValueError(f"{{\"b64\": ...}} files go to \"signature_name\": "
                         f"\"{SERVE_BYTES}\"; {SERVING_DEFAULT!r} takes float pixels {shape}")
    try:
        images = np.asarray(values, dtype=np.float32)
    except (ValueError, TypeError, OverflowError):
        raise ValueError(f"{SERVING_DEFAULT!r} takes instances of float RGB pixels 0..255, each "
                         f"{shape} and all of one shape; got ragged or non-numeric lists") \
            from None
    if images.ndim != sample_rank + 1 or images.shape[-1] != 3:
        raise ValueError(f"{SERVING_DEFAULT!r} takes instances of shape {shape} (RGB pixels), "
                         f"got instances of shape {list(images.shape[1:])}")
    if not np.isfinite(images).all():
        raise ValueError("pixels must be finite numbers (0..255), got NaN or infinity")
    return images


def predict_response(outputs: dict[str, np.ndarray], columnar: bool) -> dict:
    """The JSON of a predict answer.

    Args:
        outputs: the task's answer: {'probabilities', 'logits'} arrays [batch, classes], or a
            segmenter's {'class_ids'} [batch, height, width] (or a list of [height, width]
            arrays, one per image at its own size).
        columnar: answer in the columnar format.

    Returns:
        {"predictions": [one object per instance]}, or {"outputs": {name: [per instance]}}.
    """
    names = list(outputs)
    outputs = {name: [np.asarray(one).tolist() for one in outputs[name]]
               if isinstance(outputs[name], list) else np.asarray(outputs[name]).tolist()
               for name in names}
    if columnar:
        return {"outputs": outputs}
    count = len(outputs[names[0]])
    return {"predictions": [{name: outputs[name][i] for name in names}
                            for i in range(count)]}


def model_status() -> dict:
    """`GET /v1/models/NAME`: the one version, available."""
    return {"model_version_status": [{"version": VERSION, "state": "AVAILABLE",
                                      "status": {"error_code": "OK", "error_message": ""}}]}


def model_metadata(name: str, sample_shape, outputs: dict) -> dict:
    """`GET /v1/models/NAME/metadata`: both signature definitions, as TF Serving lists them.

    Args:
        name: the served model's name.
        sample_shape: one instance of `images`: (height, width, 3), a clip model's (frames,
            height, width, 3); None for a side of any size.
        outputs: {output name: (TF dtype name, shape)} of the answer, as the model's task
            gives it (`vit_app.inference.inference_task.InferenceTask.serving_outputs`).
    """
    sides = [-1 if side is None else int(side) for side in sample_shape]
    outputs = {output: _tensor_info(output, dtype, shape)
               for output, (dtype, shape) in outputs.items()}
    signatures = {
        SERVING_DEFAULT: _signature(SERVING_DEFAULT, "DT_FLOAT", [-1, *sides], outputs),
        SERVE_BYTES: _signature(SERVE_BYTES, "DT_STRING", [-1], outputs),
    }
    return {"model_spec": {"name": name, "signature_name": "", "version": VERSION},
            "metadata": {"signature_def": {"signature_def": signatures}}}


def _signature(signature: str, dtype: str, shape: list[int], outputs: dict) -> dict:
    name = INPUT_NAMES[signature]
    return {"inputs": {name: _tensor_info(f"{signature}_{name}", dtype, shape)},
            "outputs": outputs, "method_name": "tensorflow/serving/predict"}


def _tensor_info(name: str, dtype: str, shape: list[int]) -> dict:
    return {"dtype": dtype, "name": f"{name}:0",
            "tensor_shape": {"dim": [{"size": str(size), "name": ""} for size in shape],
                             "unknown_rank": False}}


def _describe(value) -> str:
    text = repr(value)
    return f"a JSON {_json_type(value)} {text[:60]}{'...' if len(text) > 60 else ''}"


def _json_type(value) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), "number")
