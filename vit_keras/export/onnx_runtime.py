"""Runs an `.onnx` file with ONNX Runtime on the CPU, the way a server would."""

from __future__ import annotations

import numpy as np

from vit_keras.export.runtime import median_latency_ms, run_in_batches


class ONNXModel:
    """An `.onnx` image classifier exported by `vit_keras.export.onnx`, run by ONNX Runtime.

    Same contract as `TFLiteModel`: float32 NHWC RGB images in 0..255 at the model's resolution
    in, float32 logits out; files with a fixed batch of 1 are run image by image.

    Args:
        path: the `.onnx` file.
        num_threads: intra-op threads (inter-op: 1).

    Attributes:
        input_shape: (height, width, channels) the model expects.
        num_classes: width of the logits.
        output_rank: dimensions of the logits, batch included.
    """

    def __init__(self, path: str, num_threads: int = 2):
        import onnxruntime

        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = num_threads
        options.inter_op_num_threads = 1
        options.log_severity_level = 3  # errors only
        self.path = path
        self._session = onnxruntime.InferenceSession(path, options,
                                                     providers=["CPUExecutionProvider"])
        model_input = self._session.get_inputs()[0]
        shape = model_input.shape
        if len(shape) not in (4, 5) or not all(isinstance(side, int) for side in shape[1:]):
            raise ValueError(f"{path}: expected one NHWC image input of fixed size (or [batch, "
                             f"frames, H, W, C] clips), got input shape {shape}")
        self._input_name = model_input.name
        self.input_shape = tuple(shape[1:])
        self._fixed_batch = shape[0] if isinstance(shape[0], int) else None
        classes = self._session.get_outputs()[0].shape[-1]
        self.output_rank = len(self._session.get_outputs()[0].shape)
        if not isinstance(classes, int):  # a file whose converter left the output unnamed
            classes = self._run(np.zeros((self._fixed_batch or 1, *self.input_shape),
                                         np.float32)).shape[-1]
        self.num_classes = int(classes)

    def __call__(self, images) -> np.ndarray:
        """Classifies images.

        Args:
            images: float32 [batch, height, width, 3] (or one image [height, width, 3]) in
                0..255.

        Returns:
            float32 logits [batch, num_classes] (a segmenter's: [batch, H, W, num_classes]).
        """
        return run_in_batches(self._run, images, self.input_shape, self._fixed_batch, self.path,
                              chunk=64)

    def _run(self, images: np.ndarray) -> np.ndarray:
        return self._session.run(None, {self._input_name: images})[0].astype(np.float32)

    def latency_ms(self, runs: int = 50, warmup: int = 5) -> float:
        """Median wall time of one batch-1 call, in milliseconds."""
        return median_latency_ms(self, self.input_shape, runs, warmup)

    def operators(self) -> list[str]:
        """Sorted operator types of the file as written (before ONNX Runtime's fusions)."""
        import onnx

        return sorted({node.op_type for node in onnx.load(self.path).graph.node})
