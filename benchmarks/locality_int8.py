"""Full-integer int8 TFLite of a locality-attention model, side by side in one run: the masked
form the layer had before (the diagonal of the logits set to -1e9) and its form now (each
query's own key left out of its softmax). Both files come from the same trained weights, the
same 300 calibration images, and are checked on the whole test split.

-1e9 inside the logits sets the range of their int8 scale, so every real logit falls into one
quantization step and the attention turns uniform: that is what the default job's
model_int8.tflite shipped (40% top-1). The two forms are equal in float (tests/test_locality.py).

    python benchmarks/locality_int8.py [--model saved_models/digits_tiny/model.keras]
"""

import argparse
import os
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras import ops  # noqa: E402

import vit_keras  # noqa: E402,F401
from vit_app.data import evaluation  # noqa: E402
from vit_app.tasks.classify.data import readers  # noqa: E402
from vit_keras import export  # noqa: E402
from vit_keras.core.attention import MultiHeadSelfAttention  # noqa: E402
from vit_keras.export import graph  # noqa: E402
from vit_keras.fast_paths import project  # noqa: E402


def masked_locality(self, query, key, value, cross, training, return_attention_scores):
    """The earlier form: the logits' diagonal replaced by -1e9 before the softmax."""
    temperature = ops.cast(self.temperature, query.dtype)[:, None]
    logits = ops.cast(ops.einsum("btnh,bsnh->bnts", query * temperature, key), "float32")
    own = ops.eye(ops.shape(query)[1], ops.shape(key)[1], dtype="bool")
    probs = ops.softmax(ops.where(own, ops.cast(-1e9, "float32"), logits), axis=-1)
    outputs = project(self.out, ops.einsum("bnts,bsnh->btnh", probs, value))
    return (outputs, probs) if return_attention_scores else outputs


def int8_figures(model, calibration, images, labels, keras_logits, folder, name) -> dict:
    path = os.path.join(folder, f"{name}.tflite")
    export.tflite(model, path, quantization="int8", representative_data=calibration,
                  verify_images=images, min_agreement=0.0)
    logits = export.TFLiteModel(path)(images)
    return {"accuracy": float(np.mean(logits.argmax(-1) == labels)),
            "agreement": float(np.mean(logits.argmax(-1) == keras_logits.argmax(-1))),
            "diff": float(np.max(np.abs(logits - keras_logits)))}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="saved_models/digits_tiny/model.keras")
    parser.add_argument("--calibration-images", type=int, default=300)
    args = parser.parse_args()
    model = keras.saving.load_model(args.model, safe_mode=True)
    if not model.config.locality_attention:
        raise SystemExit(f"{args.model} has no locality attention: nothing to compare")
    height, _ = graph.image_size(model)
    calibration, _ = evaluation.take_raw_images(readers.load_source("digits", "train"), height,
                                                args.calibration_images)
    images, labels = evaluation.take_raw_images(readers.load_source("digits", "val"), height,
                                                10_000)
    keras_logits = np.asarray(graph.logits_function(graph.split_activation(model)[0])(images))
    keras_accuracy = float(np.mean(keras_logits.argmax(-1) == labels))
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        rows["own key left out (now)"] = int8_figures(model, calibration, images, labels,
                                                      keras_logits, folder, "now")
        now = MultiHeadSelfAttention._attend_locally
        MultiHeadSelfAttention._attend_locally = masked_locality
        try:
            rows["diagonal masked with -1e9 (before)"] = int8_figures(
                model, calibration, images, labels, keras_logits, folder, "before")
        finally:
            MultiHeadSelfAttention._attend_locally = now
    print(f"{args.model}: Keras top-1 {100 * keras_accuracy:.2f}% on {len(labels)} test images")
    print("\n| int8 TFLite form | top-1 | top-1 agreement with Keras | max logit diff |")
    print("|---|---|---|---|")
    for name, row in rows.items():
        print(f"| {name} | {100 * row['accuracy']:.2f}% | {100 * row['agreement']:.2f}% | "
              f"{row['diff']:.2f} |")


if __name__ == "__main__":
    main()
