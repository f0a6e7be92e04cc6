"""ONNX export: every model option converts, runs in ONNX Runtime with Keras' logits, and its
LayerNorms become single LayerNormalization nodes; int8 files through ONNX Runtime's quantizer;
`vit predict --onnx`."""

import shutil

import numpy as np
import onnx
import pytest
from conftest import TINY_CONFIG
from helpers import random_pixels, randomize_weights

from vit import cli
from vit_keras import VisionTransformer, export, preprocess_input
from vit_keras.export import onnx_quantize

OPTIONS = {
    "token": {},
    "gap_sincos_layer_scale": dict(classifier="gap", posemb="sincos2d", layer_scale_init=0.5),
    "map_registers": dict(classifier="map", num_register_tokens=2),
    "deit_exact_gelu": dict(distilled=True, gelu_approximate=False),
    "learn2d_pre_logits": dict(posemb="learn2d", representation_size=16),
    "hybrid": dict(resnet_layers=(1,), patch_size=1),
    "conv_stem_locality": dict(stem="conv", locality_attention=True),
    "shifted_patches_locality": dict(stem="shifted_patches", locality_attention=True),
    # CLIP's pieces, with its preprocessing inside the graph.
    "clip_like": dict(activation="quick_gelu", pre_norm=True, layer_norm_epsilon=1e-5,
                      projection_size=12),
    "swiglu_fc_norm": dict(activation="swiglu", pooled_norm=True, classifier="gap",
                           layer_scale_init=0.1),
}
MODEL_PREPROCESSING = {"clip_like": dict(mean=(0.48145466, 0.4578275, 0.40821073),
                                         std=(0.26862954, 0.26130258, 0.27577711))}


def _model(config, preprocessing=None):
    return randomize_weights(VisionTransformer(config, classifier_activation="softmax",
                                               preprocessing=preprocessing), stddev=0.2)


@pytest.fixture(scope="module")
def tiny_onnx(tmp_path_factory):
    """`_model(TINY_CONFIG)`, its float `.onnx` file and the static int8 file calibrated on 8
    random images, converted once for the tests that only read them: (model, float path,
    int8 path)."""
    folder = tmp_path_factory.mktemp("tiny_onnx")
    model = _model(TINY_CONFIG)
    float_path, int8_path = str(folder / "model.onnx"), str(folder / "int8.onnx")
    export.onnx(model, float_path)
    onnx_quantize.quantize(float_path, int8_path, "int8",
                           representative_data=random_pixels(TINY_CONFIG, batch=8))
    return model, float_path, int8_path


def _keras_logits(model, pixels):
    logits_model = export.graph.split_activation(model)[0]
    return np.asarray(logits_model(preprocess_input(pixels, model=model)))


@pytest.mark.parametrize("name", sorted(OPTIONS))
@pytest.mark.slow
def test_every_option_exports(name, tiny_config, tmp_path):
    config = tiny_config.replace(**OPTIONS[name])
    model = _model(config, MODEL_PREPROCESSING.get(name))
    pixels = random_pixels(config, batch=4, seed=2)
    path = str(tmp_path / "model.onnx")
    report = export.onnx(model, path, verify_images=pixels)
    assert report["max_abs_logit_diff"] <= 1e-4 and report["top1_agreement"] == 1.0
    # The MAP head and CLIP's pre-norm have one more; the shifted-patch stem's norm of 4-D
    # patches and the pooled norm of a [batch, D] vector stay spelled out.
    assert report["fused_layer_norms"] == (2 * config.num_layers + (not config.pooled_norm)
                                           + (name == "map_registers") + config.pre_norm)
    # The ResNet's GroupNorms and the shifted-patch stem's norm stay spelled out.
    assert "LayerNormalization" in report["ops"] and "Reciprocal" not in report["ops"] or \
        name in ("hybrid", "shifted_patches_locality", "swiglu_fc_norm")
    expected = _keras_logits(model, pixels)
    runner = export.ONNXModel(path)
    assert runner.input_shape == (32, 32, 3) and runner.num_classes == config.num_classes
    np.testing.assert_allclose(runner(pixels), expected, atol=1e-4)
    assert np.abs(expected).max() > 0.1


def test_fixed_batch_and_errors(tiny_config, tmp_path):
    model = _model(tiny_config)
    path = str(tmp_path / "model.onnx")
    export.onnx(model, path, dynamic_batch=False)
    graph_input = onnx.load(path).graph.input[0]
    assert [d.dim_value for d in graph_input.type.tensor_type.shape.dim] == [1, 32, 32, 3]
    runner = export.ONNXModel(path)
    pixels = random_pixels(tiny_config, batch=3)
    np.testing.assert_allclose(runner(pixels), _keras_logits(model, pixels), atol=1e-4)
    with pytest.raises(ValueError, match=r"expected images of shape \[batch, 32, 32, 3\]"):
        runner(random_pixels((48, 48), batch=1))
    with pytest.raises(ValueError, match="opset must be >= 17"):
        export.onnx(model, str(tmp_path / "old.onnx"), opset=13)
    assert not (tmp_path / "old.onnx").exists()


def test_tf2onnx_passes_run_without_copies_and_a_failing_pass_is_undone(tiny_config, tmp_path,
                                                                       monkeypatch):
    """The conversion runs tf2onnx's graph passes on the graph itself (no copy of the graph
    before each pass); a pass that raises sends the conversion again through tf2onnx's own
    undo copies, and the file is still written and checked."""
    import tf2onnx.optimizer as passes
    from helpers import record_calls

    model = _model(tiny_config)
    copies = record_calls(monkeypatch, passes.copy, "deepcopy",
                          lambda value, *rest: type(value).__name__)
    report = export.onnx(model, str(tmp_path / "model.onnx"),
                         verify_images=random_pixels(tiny_config, batch=4))
    assert "Graph" not in copies and report["top1_agreement"] == 1.0

    class Failing:
        graph_been_opt = False

        def optimize(self, graph, iteration):
            raise RuntimeError("a pass that fails on this graph")

    monkeypatch.setattr(passes, "_optimizers", {"failing": Failing, **passes._optimizers})
    copies.clear()
    report = export.onnx(model, str(tmp_path / "again.onnx"),
                         verify_images=random_pixels(tiny_config, batch=4))
    assert "Graph" in copies and report["top1_agreement"] == 1.0
    assert (tmp_path / "again.onnx").exists()


def test_int8_files(tiny_onnx, tiny_config, tmp_path):
    model, float_path, _ = tiny_onnx
    calibration = random_pixels(tiny_config, batch=32, seed=3)
    pixels = random_pixels(tiny_config, batch=16, seed=4)
    expected = _keras_logits(model, pixels)
    spread = expected.max() - expected.min()
    for quantization, op in (("dynamic_int8", "MatMulInteger"), ("int8", "QuantizeLinear")):
        path = str(tmp_path / f"{quantization}.onnx")
        report = onnx_quantize.quantize(float_path, path, quantization,
                                        representative_data=calibration)
        runner = export.ONNXModel(path)
        assert op in runner.operators()
        assert np.abs(runner(pixels) - expected).max() <= 0.1 * spread, quantization
        assert report["calibration_images"] == (32 if quantization == "int8" else 0)
        assert report["calibration"] == ("percentile" if quantization == "int8" else None)
    with pytest.raises(ValueError, match="needs representative_data"):
        onnx_quantize.quantize(float_path, str(tmp_path / "x.onnx"), "int8")
    assert not (tmp_path / "x.onnx").exists()


def test_static_int8_calibrates_in_groups_where_the_images_tensors_are_large(
        tiny_onnx, tiny_config, tmp_path, monkeypatch):
    """ONNX Runtime holds every calibrated tensor of every image at once (a MobileViT at 256 px
    ran out of 24 GiB on 300 images): past the byte budget the images go in equal groups as
    large as fit, whose histograms merge (the rest, under a group, left out), and the file is
    as good."""
    import onnx

    model, float_path, _ = tiny_onnx
    per_image = onnx_quantize.calibrated_bytes_per_image(onnx.load(float_path))
    assert per_image > 4 * tiny_config.hidden_size * tiny_config.num_layers
    assert onnx_quantize.calibration_group(per_image, 32) == 32
    monkeypatch.setattr(onnx_quantize, "CALIBRATION_BYTES_AT_ONCE", 9 * per_image)
    assert onnx_quantize.calibration_group(per_image, 32) == 9
    with pytest.raises(ValueError, match="at least one calibration image"):
        onnx_quantize.calibration_group(per_image, 0)
    ranges = []
    set_range = onnx_quantize._Calibration.set_range
    monkeypatch.setattr(onnx_quantize._Calibration, "set_range", lambda self, start_index,
                        end_index: ranges.append((start_index, end_index)) or
                        set_range(self, start_index, end_index))
    path = str(tmp_path / "grouped.onnx")
    report = onnx_quantize.quantize(float_path, path, "int8", representative_data=random_pixels(
        tiny_config, batch=32, seed=3))
    assert ranges == [(0, 9), (9, 18), (18, 27)] and report["calibration_images"] == 27
    pixels = random_pixels(tiny_config, batch=16, seed=4)
    expected = _keras_logits(model, pixels)
    error = np.abs(export.ONNXModel(path)(pixels) - expected).max()
    assert error <= 0.1 * (expected.max() - expected.min())


def test_static_int8_calibrates_by_min_max_where_a_tensor_is_too_narrow_to_bin(tiny_config,
                                                                               tmp_path):
    """Attention near uniform (queries and keys of 1e-6, as untrained weights come close to):
    every probability is 1/tokens to a few float32 steps, which the percentile's 2048-bin
    histogram cannot split; the file is calibrated by min/max, with a warning, and agrees."""
    model = _model(tiny_config)
    rng = np.random.default_rng(0)
    for variable in model.weights:
        if variable.path.endswith(("query/kernel", "key/kernel")):
            variable.assign(rng.normal(0.0, 1e-6, variable.shape).astype("float32"))
    float_path, path = str(tmp_path / "model.onnx"), str(tmp_path / "int8.onnx")
    export.onnx(model, float_path)
    with pytest.warns(UserWarning, match="calibrated by min/max instead"):
        report = onnx_quantize.quantize(float_path, path, "int8",
                                        representative_data=random_pixels(tiny_config, 32))
    assert report["calibration"] == "minmax"
    pixels = random_pixels(tiny_config, batch=16, seed=4)
    expected = _keras_logits(model, pixels)
    error = np.abs(export.ONNXModel(path)(pixels) - expected).max()
    assert error <= 0.1 * (expected.max() - expected.min())


def test_vit_predict_onnx_equals_keras(tiny_onnx, tiny_config, tmp_path, capsys):
    from PIL import Image

    model, float_path, _ = tiny_onnx
    model.save(tmp_path / "model.keras")
    shutil.copy(float_path, tmp_path / "model.onnx")
    (tmp_path / "labels.txt").write_text("\n".join(f"class{i}" for i in range(5)) + "\n")
    image = tmp_path / "image.png"
    Image.fromarray(random_pixels(tiny_config, batch=1)[0].astype("uint8")).save(image)
    outputs = {}
    for flag, path in (("--model", "model.keras"), ("--onnx", "model.onnx")):
        assert cli.main(["predict", str(image), flag, str(tmp_path / path), "--top-k", "1"]) == 0
        outputs[flag] = capsys.readouterr().out.splitlines()[1].split()[:2]  # file, top-1
    assert outputs["--onnx"] == outputs["--model"]


def test_any_size_classifier_with_softmax_exports_at_a_fixed_size(tiny_config, tmp_path):
    model = _model(tiny_config.replace(dynamic_image_size=True))
    pixels = random_pixels((24, 40), batch=3, seed=5)
    report = export.onnx(model, str(tmp_path / "model.onnx"), image_size=(24, 40),
                         verify_images=pixels)
    assert report["max_abs_logit_diff"] <= 1e-4
    runner = export.ONNXModel(str(tmp_path / "model.onnx"))
    assert runner.input_shape == (24, 40, 3)
    np.testing.assert_allclose(runner(pixels), _keras_logits(model, pixels), atol=1e-4)


def test_int8_weights_are_7_bit_for_cpus_without_vnni(tiny_onnx, tiny_config, tmp_path):
    """ONNX Runtime's uint8 x int8 kernels on AVX2 saturate with full-range int8 weights
    (onnx_quantize's docstring); both int8 files keep theirs within +-64, not +-127."""
    _, float_path, int8_path = tiny_onnx
    dynamic_path = str(tmp_path / "dynamic_int8.onnx")
    onnx_quantize.quantize(float_path, dynamic_path, "dynamic_int8")
    for quantization, path in (("dynamic_int8", dynamic_path), ("int8", int8_path)):
        weights = [onnx.numpy_helper.to_array(tensor) for tensor in
                   onnx.load(path).graph.initializer
                   if tensor.data_type == onnx.TensorProto.INT8 and tensor.dims]
        assert len(weights) >= 6 * tiny_config.num_layers, quantization
        for weight in weights:
            assert np.abs(weight.astype(np.int32)).max() <= 64, quantization


def test_static_int8_keeps_probabilities_times_values_in_float(tiny_onnx, tiny_config):
    graph = onnx.load(tiny_onnx[2]).graph
    producers = {output: node.op_type for node in graph.node for output in node.output}
    after_softmax = [node for node in graph.node if node.op_type == "MatMul"
                     and any(producers.get(name) == "Softmax" for name in node.input)]
    assert len(after_softmax) == tiny_config.num_layers
    quantized = [node for node in graph.node if node.op_type == "MatMul"
                 and all(producers.get(name) == "DequantizeLinear" for name in node.input)]
    assert len(quantized) >= 6 * tiny_config.num_layers  # q, k, v, out, 2 MLP, q.k^T per block


def test_int8_export_never_quantizes_a_stale_float_file(tiny_config, tmp_path):
    from vit_app.inference.export import command as export_command

    calibration = random_pixels(tiny_config, batch=16)
    other = _model(tiny_config.replace(num_classes=3))  # a leftover model.onnx, other head
    export.onnx(other, str(tmp_path / "model.onnx"))
    report = export_command.export_model(_model(tiny_config), str(tmp_path),
                                         formats=("onnx_int8",), latency_runs=1,
                                         representative_images=calibration)
    entry = report["formats"]["onnx_int8"]  # random weights: published or under rejected/
    written = entry.get("rejected_file") or entry["file"]
    assert export.ONNXModel(str(tmp_path / written)).num_classes == 5
    assert entry["top1_agreement"] >= 0.75


def test_a_layer_with_keras_exact_gelu_exports(tmp_path):
    """Keras' exact GELU on TensorFlow is an `Erfc`, which ONNX has no operator for (a task's
    own head may use it): the file computes it as `1 - Erf`, and matches Keras."""
    import keras

    images = keras.Input((8, 8, 3))
    hidden = keras.layers.Dense(6, activation="gelu")(keras.layers.Flatten()(images))
    model = keras.Model(images, keras.layers.Dense(3)(hidden))
    pixels = np.random.default_rng(0).uniform(0, 255, (4, 8, 8, 3)).astype(np.float32)
    report = export.onnx(model, str(tmp_path / "model.onnx"), verify_images=pixels)
    assert "Erf" in report["ops"] and "Erfc" not in report["ops"]
    assert report["max_abs_logit_diff"] <= 1e-4
