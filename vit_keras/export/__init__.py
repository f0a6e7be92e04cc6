"""Export to SavedModel (TF Serving / Vertex AI), TFLite (LiteRT) and ONNX (ONNX Runtime), and
runners for the files.

Every exported format takes the same input: float32 RGB pixels in 0..255, NHWC, at the model's
resolution; the [-1, 1] preprocessing is inside the exported graph.

    from vit_keras import export
    export.saved_model(model, "out/saved_model")
    export.tflite(model, "out/model_int8.tflite", quantization="int8",
                  representative_data=train_images)
    logits = export.TFLiteModel("out/model_int8.tflite")(images)
    export.onnx(model, "out/model.onnx")
    logits = export.ONNXModel("out/model.onnx")(images)
"""

from vit_keras.export.agreement import (FLOAT_MIN_AGREEMENT, INT8_MIN_AGREEMENT,
                                        LowAgreementError, compare_with_keras)
from vit_keras.export.lite import (IO_TYPES, QUANTIZATIONS, NonBuiltinOpsError,
                                   check_builtin_ops, float_operators, strip_tensor_names, tflite)
from vit_keras.export.onnx import onnx
from vit_keras.export.onnx_runtime import ONNXModel
from vit_keras.export.runtime import TFLiteModel
from vit_keras.export.serving import SERVE_BYTES, SERVING_DEFAULT, saved_model

__all__ = ["saved_model", "tflite", "TFLiteModel", "onnx", "ONNXModel", "NonBuiltinOpsError", "check_builtin_ops",
           "LowAgreementError", "FLOAT_MIN_AGREEMENT", "INT8_MIN_AGREEMENT",
           "float_operators", "strip_tensor_names", "compare_with_keras", "QUANTIZATIONS",
           "IO_TYPES", "SERVING_DEFAULT", "SERVE_BYTES"]
