"""TFLite export: every precision loads in LiteRT with builtin ops only and matches Keras."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import assert_builtin_tflite_ops, random_pixels, randomize_weights, record_calls

from vit_keras import VisionTransformer, export, preprocess_input
from vit_keras import atomic


def _classifier(config, **kwargs):
    """A tiny ViT whose head is not the zero init, so logits differ between images."""
    model = VisionTransformer(config, **kwargs)
    randomize_weights(model.get_layer("head"), seed=1, stddev=0.3)
    return model


def test_the_float_files_of_a_model_share_one_frozen_graph(tiny_config, tmp_path,
                                                           monkeypatch):
    """Inside `graphs_shared` (as `vit export` writes its files) the float32 and fp16 files are
    converted from one traced and frozen graph of the model, and each still matches Keras."""
    from vit_keras.export import lite

    model, traced = _classifier(tiny_config), record_calls(monkeypatch, lite, "_trace")
    with export.graphs_shared():
        reports = [export.tflite(model, str(tmp_path / f"{name}.tflite"), quantization=name)
                   for name in (None, "fp16")]
    assert len(traced) == 1
    assert reports[0]["max_abs_logit_diff"] <= 1e-4 and reports[1]["max_abs_logit_diff"] <= 1e-2


@pytest.mark.parametrize("quantization,bound", [(None, 1e-4), ("fp16", 1e-2),
                                                ("dynamic_int8", None), ("int8", None)])
def test_each_precision_loads_in_litert_with_builtin_ops(tiny_config, tmp_path, quantization,
                                                         bound):
    model = _classifier(tiny_config)
    images = random_pixels(tiny_config, batch=48)
    path = str(tmp_path / "model.tflite")
    report = export.tflite(model, path, quantization=quantization, representative_data=images)
    lite = export.TFLiteModel(path)
    assert lite.input_shape == (32, 32, 3) and lite.num_classes == 5
    assert_builtin_tflite_ops(lite.ops)
    assert report["ops"] == export.check_builtin_ops(open(path, "rb").read())
    assert report["size_bytes"] == len(open(path, "rb").read())
    logits = lite(images[:4])
    assert logits.dtype == np.float32 and logits.shape == (4, 5)
    if bound is not None:
        assert report["max_abs_logit_diff"] <= bound
        assert report["top1_agreement"] == 1.0
    else:
        assert report["top1_agreement"] >= 0.5  # random weights and inputs: a loose sanity bar


def test_int8_without_representative_data_raises(tiny_config, tmp_path):
    model = VisionTransformer(tiny_config)
    path = tmp_path / "model.tflite"
    with pytest.raises(ValueError, match="needs representative_data"):
        export.tflite(model, str(path), quantization="int8")
    with pytest.raises(ValueError, match="quantization must be one of"):
        export.tflite(model, str(path), quantization="int4")
    with pytest.raises(ValueError, match="needs quantization='int8'"):
        export.tflite(model, str(path), io_type="int8")
    assert not path.exists()


def test_exact_erf_gelu_also_converts_to_builtins(tiny_config, tmp_path):
    model = _classifier(tiny_config.replace(gelu_approximate=False, classifier="gap"))
    report = export.tflite(model, str(tmp_path / "erf.tflite"))
    assert "GELU" in report["ops"]
    assert report["max_abs_logit_diff"] <= 1e-4


def test_softmax_model_exports_logits(tiny_config, tmp_path):
    model = _classifier(tiny_config, classifier_activation="softmax")
    images = random_pixels(tiny_config, batch=4)
    export.tflite(model, str(tmp_path / "m.tflite"))
    logits = export.TFLiteModel(str(tmp_path / "m.tflite"))(images)
    probabilities = model(preprocess_input(images)).numpy()
    np.testing.assert_allclose(tf.nn.softmax(logits).numpy(), probabilities, atol=1e-5)


def test_mixed_precision_model_exports_as_float32(tiny_config, tmp_path):
    import keras

    float_model = _classifier(tiny_config)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    mixed = VisionTransformer(tiny_config)
    mixed.set_weights(float_model.get_weights())
    keras.mixed_precision.set_global_policy("float32")
    images = random_pixels(tiny_config, batch=8)
    report = export.tflite(mixed, str(tmp_path / "m.tflite"), verify_images=images)
    assert report["max_abs_logit_diff"] <= 1e-4  # against the float32 copy it converts
    float_logits = float_model(preprocess_input(images)).numpy()
    lite_logits = export.TFLiteModel(str(tmp_path / "m.tflite"))(images)
    np.testing.assert_allclose(lite_logits, float_logits, atol=1e-4)


def test_non_builtin_operators_are_refused(tmp_path):
    import keras

    @keras.saving.register_keras_serializable(package="test_export")
    class Erfc(keras.layers.Layer):
        def call(self, inputs):
            return tf.math.erfc(inputs)

    inputs = keras.Input((8, 8, 3))
    outputs = keras.layers.Dense(3)(keras.layers.Flatten()(Erfc()(inputs)))
    model = keras.Model(inputs, outputs)
    path = tmp_path / "m.tflite"
    with pytest.raises(export.NonBuiltinOpsError, match="outside the TFLite builtin set"):
        export.tflite(model, str(path))
    assert not path.exists()


def test_runner_checks_shapes_and_batches(tiny_config, tmp_path):
    model = _classifier(tiny_config)
    images = random_pixels(tiny_config, batch=3)
    export.tflite(model, str(tmp_path / "fixed.tflite"), verify_images=images)
    export.tflite(model, str(tmp_path / "dynamic.tflite"), batch_size=None, verify_images=images)
    fixed = export.TFLiteModel(str(tmp_path / "fixed.tflite"))
    dynamic = export.TFLiteModel(str(tmp_path / "dynamic.tflite"))
    np.testing.assert_allclose(fixed(images), dynamic(images), atol=1e-5)
    np.testing.assert_allclose(fixed(images[0]), fixed(images[:1]), atol=0)
    with pytest.raises(ValueError, match=r"expected images of shape \[batch, 32, 32, 3\]"):
        fixed(np.zeros((1, 16, 16, 3), np.float32))
    assert fixed.latency_ms(runs=3, warmup=1) > 0


def test_failed_write_leaves_nothing_under_the_final_name(tmp_path, monkeypatch):
    target = tmp_path / "model.tflite"
    target.write_bytes(b"previous")

    def broken_rename(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", broken_rename)
    with pytest.raises(OSError, match="disk full"):
        atomic.write_bytes(str(target), b"new contents")
    assert target.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.tflite"]


def _op_input_dtypes(path, op_name):
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=path)
    return {interpreter._get_tensor_details(op["inputs"][0], 0)["dtype"]
            for op in interpreter._get_ops_details() if op["op_name"] == op_name}


@pytest.mark.slow
def test_int8_is_full_integer_with_float_ops_and_int8_io_options(tiny_config, tmp_path):
    model = _classifier(tiny_config)
    images = random_pixels(tiny_config, batch=32)
    paths = {name: str(tmp_path / f"{name}.tflite") for name in ("full", "mixed", "int_io")}
    full = export.tflite(model, paths["full"], quantization="int8", representative_data=images)
    assert {"QUANTIZE", "DEQUANTIZE"} <= set(full["ops"])  # float32 I/O around an int8 graph
    assert export.float_operators(open(paths["full"], "rb").read()) == []  # integer-only inside
    assert _op_input_dtypes(paths["full"], "BATCH_MATMUL") == {np.int8}
    assert _op_input_dtypes(paths["full"], "FULLY_CONNECTED") == {np.int8}
    mixed = export.tflite(model, paths["mixed"], quantization="int8", representative_data=images,
                          float_ops=("BATCH_MATMUL", "SOFTMAX"))
    assert mixed["float_ops"] == ["BATCH_MATMUL", "SOFTMAX"]
    assert _op_input_dtypes(paths["mixed"], "BATCH_MATMUL") == {np.float32}
    assert {"BATCH_MATMUL", "SOFTMAX"} <= set(
        export.float_operators(open(paths["mixed"], "rb").read()))
    assert _op_input_dtypes(paths["mixed"], "FULLY_CONNECTED") == {np.int8}
    # Every operator named is checked to be float in the file, and to be in the graph at all.
    layer_norm = export.tflite(model, paths["mixed"], quantization="int8",
                               representative_data=images, float_ops=("MEAN", "RSQRT"))
    assert {"MEAN", "RSQRT"} <= set(export.float_operators(open(paths["mixed"], "rb").read()))
    assert layer_norm["float_ops"] == ["MEAN", "RSQRT"]
    with pytest.raises(ValueError, match=r"float_ops names \['SQUARED_DIFFERENCE'\], which the "
                                         r"converted graph does not have"):
        export.tflite(model, paths["mixed"], quantization="int8", representative_data=images,
                      float_ops=("SOFTMAX", "SQUARED_DIFFERENCE"))
    int_io = export.tflite(model, paths["int_io"], quantization="int8",
                           representative_data=images, io_type="int8")
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=paths["int_io"])
    assert interpreter.get_input_details()[0]["dtype"] == np.int8
    assert interpreter.get_output_details()[0]["dtype"] == np.int8
    # The runner quantizes/dequantizes, so both files answer alike on float pixels.
    assert int_io["top1_agreement"] >= full["top1_agreement"] - 0.1
    with pytest.raises(ValueError, match="float_ops needs quantization='int8'"):
        export.tflite(model, paths["mixed"], quantization="fp16", float_ops=("SOFTMAX",))


@pytest.mark.parametrize("options", [
    {"classifier": "map", "num_register_tokens": 2},
    {"layer_scale_init": 0.1, "posemb": "sincos2d", "classifier": "gap", "drop_path_rate": 0.1},
    {"resnet_layers": (), "resnet_width": 1},
    {"distilled": True},
    {"stem": "conv", "locality_attention": True},
    {"stem": "shifted_patches", "locality_attention": True, "classifier": "gap"},
    {"activation": "quick_gelu", "pre_norm": True, "layer_norm_epsilon": 1e-5,
     "projection_size": 12},
    {"activation": "swiglu", "pooled_norm": True, "classifier": "gap", "layer_scale_init": 0.1},
    {"resnet_layers": (), "patch_size": 2, "distilled": True, "posemb": "learn2d",
     "gelu_approximate": False},
], ids=["map_registers", "layerscale_sincos_gap", "hybrid", "deit", "conv_stem_locality",
        "shifted_patches_locality", "clip_like", "swiglu_fc_norm", "hybrid_deit_learn2d"])
@pytest.mark.slow
def test_models_with_options_export_to_builtin_tflite(tiny_config, tmp_path, options):
    import dataclasses

    model = _classifier(dataclasses.replace(tiny_config, **options))
    images = random_pixels(tiny_config, batch=8)
    path = str(tmp_path / "model.tflite")
    report = export.tflite(model, path, verify_images=images)
    assert_builtin_tflite_ops(report["ops"])
    assert report["max_abs_logit_diff"] <= 1e-4 and report["top1_agreement"] == 1.0
    # LayerNorm and the hybrid's GroupNorm leave no float island in a full-integer file (the
    # export raises if any operator stays float).
    export.tflite(model, str(tmp_path / "int8.tflite"), quantization="int8",
                  representative_data=images)


def test_int8_unrolls_large_attention_heads_into_fully_connected(tiny_config, tmp_path):
    """64 tokens of head_dim 16 cross the unrolling threshold: no int8 BATCH_MATMUL left."""
    import dataclasses

    config = dataclasses.replace(tiny_config, image_size=64, hidden_size=32, num_heads=2,
                                 classifier="gap")
    model = _classifier(config)
    images = random_pixels(config, batch=16)
    report = export.tflite(model, str(tmp_path / "model.tflite"), quantization="int8",
                           representative_data=images)
    assert "BATCH_MATMUL" not in report["ops"] and "FULLY_CONNECTED" in report["ops"]
    assert report["top1_agreement"] >= 0.5  # random weights and inputs: a loose sanity bar
    fp32 = export.tflite(model, str(tmp_path / "fp32.tflite"), verify_images=images)
    assert "BATCH_MATMUL" in fp32["ops"]  # float files keep the plain graph (XNNPACK's best)


@keras.saving.register_keras_serializable(package="test_export_tflite")
class _Negate(keras.layers.Layer):
    def call(self, inputs):
        return keras.ops.negative(inputs)


def test_int8_export_refuses_operators_left_in_float(tmp_path):
    inputs = keras.Input((8, 8, 3))
    features = keras.layers.Dense(4)(keras.layers.GlobalAveragePooling2D()(inputs))
    model = keras.Model(inputs, _Negate()(features))  # TFLite has no int8 NEG
    path = tmp_path / "model.tflite"
    with pytest.raises(ValueError, match=r"full-integer graph.*\['NEG'\].*float_ops"):
        export.tflite(model, str(path), quantization="int8",
                      representative_data=random_pixels(8, batch=8))
    assert not path.exists()


def test_int8_of_a_layer_dead_on_every_image_runs_under_xnnpack(tmp_path):
    """A ReLU that no calibration image switches on used to give the next layer a
    requantisation XNNPACK refuses, so the file could not be loaded; its range is widened."""
    inputs = keras.Input((8, 8, 3))
    features = keras.layers.GlobalAveragePooling2D()(inputs)
    dead = keras.layers.Dense(16, activation="relu",
                              bias_initializer=keras.initializers.Constant(-1e3))(features)
    outputs = keras.layers.Add()([keras.layers.Dense(3)(dead), keras.layers.Dense(3)(features)])
    model = keras.Model(inputs, outputs)
    path = tmp_path / "model.tflite"
    pixels = random_pixels(8, batch=16)
    report = export.tflite(model, str(path), quantization="int8", representative_data=pixels,
                           verify_images=pixels)
    assert report["top1_agreement"] >= 0.98 and path.exists()


@pytest.mark.slow
def test_tensor_names_are_dropped_unless_kept_and_per_tensor_scales(tiny_config, tmp_path):
    from ai_edge_litert.interpreter import Interpreter

    model = _classifier(tiny_config)
    images = random_pixels(tiny_config, batch=16)
    stripped = export.tflite(model, str(tmp_path / "stripped.tflite"))
    named = export.tflite(model, str(tmp_path / "named.tflite"), keep_tensor_names=True)
    assert stripped["size_bytes"] < named["size_bytes"]
    assert stripped["max_abs_logit_diff"] <= 1e-4
    names = [t["name"] for t in Interpreter(model_path=stripped["path"]).get_tensor_details()]
    assert not any(names)
    assert any(t["name"] for t in Interpreter(model_path=named["path"]).get_tensor_details())
    np.testing.assert_array_equal(export.TFLiteModel(stripped["path"])(images[:2]),
                                  export.TFLiteModel(named["path"])(images[:2]))

    per_channel = export.tflite(model, str(tmp_path / "channel.tflite"), quantization="int8",
                                representative_data=images)
    per_tensor = export.tflite(model, str(tmp_path / "tensor.tflite"), quantization="int8",
                               representative_data=images, per_channel=False)
    assert per_tensor["per_channel"] is False and per_channel["per_channel"] is True
    assert per_tensor["size_bytes"] < per_channel["size_bytes"]
    scales = [len(t["quantization_parameters"]["scales"]) for t in
              Interpreter(model_path=per_tensor["path"]).get_tensor_details()]
    assert max(scales) == 1
    with pytest.raises(ValueError, match="per_channel=False needs quantization='int8'"):
        export.tflite(model, str(tmp_path / "x.tflite"), per_channel=False)


@pytest.mark.slow
def test_a_file_below_its_bar_raises_and_is_not_left_at_its_path(trained_tiny, tmp_path):
    """Given held-out images, `tflite` holds the file to its bar: int8 calibrated on black
    images raises (nothing at the path), or warns when asked to and writes it."""
    model = trained_tiny.model()
    black = np.zeros((8, *trained_tiny.held_out.shape[1:]), np.float32)
    path = tmp_path / "model_int8.tflite"
    with pytest.raises(export.LowAgreementError, match="must reach 98.0%") as raised:
        export.tflite(model, str(path), quantization="int8", representative_data=black,
                      verify_images=trained_tiny.held_out)
    assert raised.value.report["top1_agreement"] < 0.98 and not path.exists()
    assert not list(tmp_path.iterdir())  # no temporary file either
    with pytest.warns(UserWarning, match="names the Keras model's class on only"):
        report = export.tflite(model, str(path), quantization="int8", representative_data=black,
                               verify_images=trained_tiny.held_out, on_low_agreement="warn")
    assert path.exists() and report["min_agreement"] == export.INT8_MIN_AGREEMENT
    good = export.tflite(model, str(path), quantization="int8",
                         representative_data=trained_tiny.train[:100],
                         verify_images=trained_tiny.held_out, min_agreement=0.0)
    assert good["verified_images"] == 200 and path.exists() and good["min_agreement"] == 0.0
    # Without verify_images the agreement (on calibration images) is reported, not enforced.
    unchecked = export.tflite(model, str(path), quantization="int8", representative_data=black)
    assert "min_agreement" not in unchecked
    with pytest.raises(ValueError, match="on_low_agreement must be one of"):
        export.tflite(model, str(path), on_low_agreement="ignore")
    with pytest.raises(ValueError, match="min_agreement must be a fraction"):
        export.onnx(model, str(tmp_path / "model.onnx"), min_agreement=2)
    onnx_report = export.onnx(model, str(tmp_path / "model.onnx"),
                              verify_images=trained_tiny.held_out)
    assert onnx_report["min_agreement"] == export.FLOAT_MIN_AGREEMENT
    assert onnx_report["top1_agreement"] == 1.0


@pytest.mark.parametrize("width,epsilon", [(32, 1e-6), (384, 1e-5)])
def test_int8_layer_norm_normalises_rows_of_small_values_as_exactly_as_large_ones(
        tmp_path, width, epsilon):
    """Half the tokens are 10x smaller than the others. Spelled out in int8, LayerNorm's
    squares and variances share one scale set by the large tokens, and the small ones came out
    wrong by their own size (mean error 0.95 on values of unit spread); the full-integer file
    normalises through one L2_NORMALIZATION, which sums each row's squares in int32. With
    epsilon 1e-5 (PyTorch's default) at ViT-S's width, width * epsilon is a floor the converter
    would not fuse."""
    from vit_keras.core.normalization import LayerNorm

    inputs = keras.Input((8, 8, 3))
    tokens = keras.layers.Dense(width, use_bias=False)(keras.layers.Reshape((64, 3))(inputs))
    scaled = keras.layers.EinsumDense("btd,td->btd", output_shape=(64, width), name="scale")
    normalised = LayerNorm(epsilon=epsilon)(scaled(tokens))
    model = keras.Model(inputs, keras.layers.Flatten()(normalised))
    scaled.set_weights([np.repeat([[0.1]] * 32 + [[1.0]] * 32, width, axis=1).astype("float32")])
    pixels = random_pixels(8, batch=64) / 127.5 - 1.0
    path = str(tmp_path / "model.tflite")
    report = export.tflite(model, path, quantization="int8", representative_data=pixels,
                           include_preprocessing=False)
    assert "L2_NORMALIZATION" in report["ops"] and "RSQRT" not in report["ops"]
    keras_rows = keras.ops.convert_to_numpy(model(pixels[:8])).reshape(8, 64, width)
    file_rows = export.TFLiteModel(path)(pixels[:8]).reshape(8, 64, width)
    errors = np.abs(file_rows - keras_rows).mean(axis=(0, 2))
    assert errors[32:].mean() < 0.1   # measured 0.019 (32 wide), 0.043 (384); 0.043, 0.044
    assert errors[:32].mean() < 0.3   # measured 0.137, 0.158; spelled out 0.948, 1.599
