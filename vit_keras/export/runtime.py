"""Runs a `.tflite` file with the LiteRT interpreter, the way a phone or a board would."""

from __future__ import annotations

import numpy as np

from vit_keras.timing import median_seconds


class TFLiteModel:
    """A `.tflite` image classifier exported by `vit_keras.export.tflite`, run through LiteRT.

    Call it on float32 NHWC RGB images in 0..255 at the model's resolution (a clip model's
    file: clips [batch, frames, H, W, 3]); it returns float32 logits. Files with integer
    input/output are quantized/dequantized here, so the contract is the same for every
    precision. Files with a fixed batch of 1 are run image by image.

    Args:
        path: the `.tflite` file.
        num_threads: interpreter threads.

    Attributes:
        input_shape: (height, width, channels) the model expects ((frames, height, width,
            channels) for clips).
        num_classes: width of the logits.
        output_rank: dimensions of the logits, batch included.
        ops: sorted names of the operators in the file.
    """

    def __init__(self, path: str, num_threads: int = 2):
        from ai_edge_litert.interpreter import Interpreter

        self.path = path
        self.num_threads = num_threads
        self._interpreter = Interpreter(model_path=path, num_threads=num_threads)
        self._input = self._interpreter.get_input_details()[0]
        self._output = self._interpreter.get_output_details()[0]
        signature = self._input["shape_signature"]
        if len(signature) not in (4, 5):
            raise ValueError(f"{path}: expected one NHWC image input (or [batch, frames, H, W, "
                             f"C] clips), got input shape {signature}")
        self.input_shape = tuple(int(size) for size in signature[1:])
        self.num_classes = int(self._output["shape_signature"][-1])
        self.output_rank = len(self._output["shape_signature"])
        self._fixed_batch = int(signature[0]) if signature[0] > 0 else None
        self._batch = None
        if self._fixed_batch is not None:
            self._interpreter.allocate_tensors()
            self._batch = self._fixed_batch
        self.ops = sorted({op["op_name"] for op in self._interpreter._get_ops_details()})

    def __call__(self, images) -> np.ndarray:
        """Classifies images.

        Args:
            images: float32 array [batch, height, width, 3] (or one image [height, width, 3])
                with values in 0..255.

        Returns:
            float32 logits [batch, num_classes].
        """
        return run_in_batches(self._invoke, images, self.input_shape, self._fixed_batch,
                              self.path)

    def _invoke(self, images: np.ndarray) -> np.ndarray:
        if self._batch != len(images):
            self._interpreter.resize_tensor_input(self._input["index"], images.shape)
            self._interpreter.allocate_tensors()
            self._batch = len(images)
        self._interpreter.set_tensor(self._input["index"], _quantize(images, self._input))
        self._interpreter.invoke()
        return _dequantize(self._interpreter.get_tensor(self._output["index"]), self._output)

    def latency_ms(self, runs: int = 50, warmup: int = 5) -> float:
        """Median wall time of one batch-1 call, in milliseconds (see `median_latency_ms`)."""
        return median_latency_ms(self, self.input_shape, runs, warmup)


def run_in_batches(run, images, input_shape, fixed_batch, path: str, chunk: int | None = None):
    """Checks an image batch against a file's input and runs it through `run` batch by batch.

    Args:
        run: function(images [n, H, W, C] float32) -> logits [n, classes].
        images: float32 [batch, H, W, C] (or one image [H, W, C]) in 0..255; clips [batch,
            frames, H, W, C] for a clip model's file.
        input_shape: the file's (H, W, C), or (frames, H, W, C).
        fixed_batch: the file's fixed batch size, or None (dynamic).
        path: the file, for messages.
        chunk: with a dynamic batch, at most this many images per call (None: all at once).

    Returns:
        float32 logits [batch, classes].
    """
    images = np.asarray(images, dtype=np.float32)
    if images.ndim == len(input_shape):
        images = images[None]
    if images.shape[1:] != tuple(input_shape):
        raise ValueError(f"expected images of shape [batch, {', '.join(map(str, input_shape))}]"
                         f", got {images.shape}")
    if fixed_batch and len(images) % fixed_batch:
        raise ValueError(f"{path} has a fixed batch of {fixed_batch}; got {len(images)} images")
    step = fixed_batch or chunk
    if step is None:
        return run(images)
    return np.concatenate([run(images[i:i + step]) for i in range(0, len(images), step)], axis=0)


def median_latency_ms(run, input_shape, runs: int = 50, warmup: int = 5) -> float:
    """Median wall time of `run` on one random image, in milliseconds.

    Args:
        run: function(images [1, H, W, C] float32 0..255) -> anything, blocking.
        input_shape: (H, W, C).
        runs: timed calls.
        warmup: untimed calls first (XNNPACK packs weights on the first call, ONNX Runtime
            allocates its arenas).

    Returns:
        The median over `runs`.
    """
    image = np.random.default_rng(0).uniform(0, 255, (1, *input_shape)).astype(np.float32)
    return 1000.0 * median_seconds(lambda: run(image), runs, warmup)


def _quantize(values: np.ndarray, details: dict) -> np.ndarray:
    dtype = details["dtype"]
    if dtype == np.float32:
        return values
    scale, zero_point = details["quantization"]
    info = np.iinfo(dtype)
    quantized = np.round(values / scale) + zero_point
    return np.clip(quantized, info.min, info.max).astype(dtype)


def _dequantize(values: np.ndarray, details: dict) -> np.ndarray:
    if details["dtype"] == np.float32:
        return values.copy()
    scale, zero_point = details["quantization"]
    return ((values.astype(np.float32) - zero_point) * scale).astype(np.float32)
