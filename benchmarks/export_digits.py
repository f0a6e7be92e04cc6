"""The digits preset's model through every export: accuracy on the whole test split, parity,
size and batch-1 LiteRT latency, checked against the issue-5 bars. `*_named` files keep their
tensor names (the default drops them) and are compared with the named float32 file. Latency is
reported as the median and the best of the interleaved rounds: on a shared machine the rounds of
these sub-millisecond files are often bimodal.

Uses the model `vit train` wrote (default saved_models/digits_tiny/model.keras), calibrates int8
on 300 training images and evaluates on all 360 test digits, at the model's resolution, the way
`vit train` resizes them for evaluation.

    python benchmarks/export_digits.py [--model saved_models/digits_tiny/model.keras]
"""

import argparse
import os
import statistics
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import vit_keras  # noqa: E402,F401
from vit_app.data import evaluation  # noqa: E402
from vit_app.tasks.classify.data import readers  # noqa: E402
from vit_app.inference.export.formats import tflite_arguments, tflite_precisions  # noqa: E402
from vit_keras import export  # noqa: E402
from vit_keras.export import graph  # noqa: E402

FLOAT_ATTENTION = ("BATCH_MATMUL", "SOFTMAX")
VARIANTS = {  # name -> tflite() keyword arguments, as `vit export` writes each format
    **tflite_precisions(),  # fp32, fp16, dynamic_int8, int8
    "int8_per_tensor": tflite_arguments("tflite_int8", int8_per_channel=False),
    "int8_float_attention": tflite_arguments("tflite_int8", int8_float_ops=FLOAT_ATTENTION),
    "fp32_named": tflite_arguments("tflite", keep_tensor_names=True),
    "int8_named": tflite_arguments("tflite_int8", keep_tensor_names=True),
}
INT8_VARIANTS = ("int8", "int8_per_tensor", "int8_float_attention", "int8_named")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="saved_models/digits_tiny/model.keras")
    parser.add_argument("--calibration-images", type=int, default=300)
    parser.add_argument("--runs", type=int, default=200, help="timed calls per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    model = keras.saving.load_model(args.model, safe_mode=True)
    height, _ = graph.image_size(model)
    train_images, _ = evaluation.take_raw_images(readers.load_source("digits", "train"), height,
                                                 args.calibration_images)
    test_images, test_labels = evaluation.take_raw_images(readers.load_source("digits", "val"),
                                                          height, 10_000)
    logits_model, _ = graph.split_activation(model)
    keras_logits = np.asarray(graph.logits_function(logits_model)(test_images))
    keras_accuracy = float(np.mean(keras_logits.argmax(-1) == test_labels))
    print(f"model {args.model}: {height}px, test split {len(test_labels)} images, "
          f"Keras top-1 {100 * keras_accuracy:.2f}%")
    results, runners = {}, {}
    with tempfile.TemporaryDirectory() as directory:
        for name, kwargs in VARIANTS.items():
            path = os.path.join(directory, f"{name}.tflite")
            report = export.tflite(model, path, representative_data=train_images,
                                   verify_images=test_images[:32], on_low_agreement="warn",
                                   **kwargs)
            runners[name] = export.TFLiteModel(path, num_threads=2)
            logits = runners[name](test_images)
            results[name] = {
                "size": report["size_bytes"],
                "accuracy": float(np.mean(logits.argmax(-1) == test_labels)),
                "agreement": float(np.mean(logits.argmax(-1) == keras_logits.argmax(-1))),
                "diff": float(np.max(np.abs(logits - keras_logits))),
                "times": [],
            }
        for _ in range(args.rounds):  # interleaved: background load hits every file alike
            for name, runner in runners.items():
                results[name]["times"].append(runner.latency_ms(runs=args.runs, warmup=10))
    fp32 = results["fp32"]
    fp32_latency = statistics.median(fp32["times"])
    fp32_best = min(fp32["times"])
    print("\n| format | size (KB) | x fp32 | latency median (ms) | x fp32 | latency best (ms) "
          "| x fp32 | top-1 | drop (points) | agreement | max logit diff |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, result in results.items():
        latency, best = statistics.median(result["times"]), min(result["times"])
        print(f"| {name} | {result['size'] / 1e3:.1f} | {result['size'] / fp32['size']:.2f} | "
              f"{latency:.3f} | {latency / fp32_latency:.2f} | {best:.3f} | "
              f"{best / fp32_best:.2f} | "
              f"{100 * result['accuracy']:.2f}% | "
              f"{100 * (keras_accuracy - result['accuracy']):+.2f} | "
              f"{100 * result['agreement']:.2f}% | {result['diff']:.2e} |")
    print("\nbars: fp32 diff <= 1e-4: {}; fp16 diff <= 1e-2: {}".format(
        fp32["diff"] <= 1e-4, results["fp16"]["diff"] <= 1e-2))
    for name in INT8_VARIANTS:
        result = results[name]
        reference = results["fp32_named"] if name.endswith("_named") else fp32
        size = result["size"] / reference["size"]
        latency = statistics.median(result["times"]) / statistics.median(reference["times"])
        print(f"{name}: drop <= 1.0 point: {keras_accuracy - result['accuracy'] <= 0.01}; "
              f"size {size:.3f}x <= 0.3x: {size <= 0.3}; "
              f"latency <= 0.6x: {latency <= 0.6}")


if __name__ == "__main__":
    main()
