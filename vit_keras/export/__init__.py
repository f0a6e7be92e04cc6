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

from vit_keras import _lazy

__getattr__, __dir__, __all__ = _lazy.lazy_names(__name__, globals(), {
    "vit_keras.export.agreement": ("LowAgreementError", "compare_with_keras"),
    "vit_keras.export.bars": ("FLOAT_MIN_AGREEMENT", "INT8_MIN_AGREEMENT"),
    "vit_keras.export.lite": ("IO_TYPES", "QUANTIZATIONS", "NonBuiltinOpsError",
                              "check_builtin_ops", "float_operators", "graphs_shared",
                              "strip_tensor_names", "tflite"),
    "vit_keras.export.onnx": ("onnx",),
    "vit_keras.export.onnx_runtime": ("ONNXModel",),
    "vit_keras.export.runtime": ("TFLiteModel",),
    "vit_keras.export.serving": ("SERVE_BYTES", "SERVING_DEFAULT", "saved_model"),
})
