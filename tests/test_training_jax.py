"""`vit train --backend jax`: data parallel over simulated devices, model parallel, two processes
over loopback, kill -9 and --resume, the NaN stop, every objective and the TensorFlow export.

Each run is a subprocess: the Keras backend and the number of XLA host devices are fixed when a
process starts. Runs use float32, so sharded and unsharded runs agree to float tolerance.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from artifacts import shared
from runs import jax_env, kill_after_backup, start_vit

TINY = ["--backend", "jax", "--mixed-precision", "float32", "--batch-size", "32",
        "--set", "model.image_size=8", "--set", "model.patch_size=4",
        "--set", "model.hidden_size=16", "--set", "model.mlp_dim=32",
        "--set", "model.num_heads=2", "--set", "model.num_layers=1",
        "--set", "loop.eval_every=1", "--seed", "3", "--no-inspect", "--no-export"]


def _start(args, output, devices=1, **kwargs):
    """Starts `vit train ARGS --output OUTPUT` in the folder holding `output`."""
    return start_vit(["train", *args, "--output", output], os.path.dirname(output),
                     jax_env(devices), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                     **kwargs)


def _train(args, output, devices=1):
    """Runs `vit train` to the end; returns its output (fails the test on a non-zero exit)."""
    process = _start(args, output, devices)
    log = process.communicate(timeout=600)[0]
    assert process.returncode == 0, log[-4000:]
    return log


def _weights(output):
    import keras

    import vit_keras  # noqa: F401  (registers the layers)

    path = os.path.join(output, "model.keras")
    return keras.saving.load_model(path, safe_mode=True, compile=False).get_weights()


def _losses(output):
    rows = (output / "history.csv").read_text().splitlines()
    header = rows[0].split(",")
    return np.array([[float(value) for value in row.split(",")] for row in rows[1:]])[
        :, [header.index("loss"), header.index("val_loss")]]


def _assert_same_training(output, reference, atol=2e-5):
    np.testing.assert_allclose(_losses(output), _losses(reference), rtol=1e-4)
    for got, want in zip(_weights(output), _weights(reference)):
        np.testing.assert_allclose(got, want, atol=atol)


ONE_EPOCH = [*TINY, "--epochs", "1"]


def _one_device_reference():
    """`vit train ONE_EPOCH` on one JAX device, trained once for every test that compares a
    sharded or reshaped run with it (`artifacts.shared`): (its run folder, its output)."""
    def build(folder):
        (folder / "log.txt").write_text(_train(ONE_EPOCH, folder / "run", devices=1))

    folder = shared("jax-one-device-run", ONE_EPOCH, build)
    return folder / "run", (folder / "log.txt").read_text()


@pytest.mark.slow  # a JAX training process (about 45 s) besides the shared reference
def test_data_parallel_over_four_devices_equals_one_device(tmp_path):
    reference, single = _one_device_reference()
    four = _train(ONE_EPOCH, tmp_path / "four", devices=4)
    assert "JAX on 1 cpu device x1" in single
    assert "DataParallel on 4 cpu devices x4" in four
    _assert_same_training(tmp_path / "four", reference)
    metrics = json.loads((tmp_path / "four" / "metrics.json").read_text())
    assert metrics["backend"] == "jax" and metrics["replicas"] == 4


@pytest.mark.slow
def test_two_way_model_parallel_equals_unsharded(tmp_path):
    reference, _ = _one_device_reference()
    log = _train([*ONE_EPOCH, "--model-parallel", "2"], tmp_path / "sharded", devices=2)
    assert "ModelParallel 1x2 (batch x model)" in log
    _assert_same_training(tmp_path / "sharded", reference)


SHARDING_PROBE = textwrap.dedent("""
    import json, keras
    from training import jax_distribution
    from vit_keras import ViTConfig, VisionTransformer
    keras.distribution.set_distribution(jax_distribution.make_distribution(model_parallel=2))
    model = VisionTransformer(ViTConfig(image_size=8, patch_size=4, hidden_size=16, mlp_dim=32,
                                        num_heads=2, num_layers=1, num_classes=3))
    print(json.dumps({v.path: [None if axis is None else str(axis)
                               for axis in v.value.sharding.spec] for v in model.weights}))
""")


@pytest.mark.slow
def test_model_parallel_shards_attention_heads_and_mlp_units(tmp_path):
    probe = subprocess.run([sys.executable, "-c", SHARDING_PROBE], env=dict(
        jax_env(devices=2), KERAS_BACKEND="jax"), cwd=tmp_path, capture_output=True, text=True,
        timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    specs = json.loads(probe.stdout.strip().splitlines()[-1])
    block = "encoderblock_0/"
    assert specs[block + "MultiHeadDotProductAttention_1/query/kernel"] == [None, "model", None]
    assert specs[block + "MultiHeadDotProductAttention_1/out/kernel"] == ["model", None, None]
    assert specs[block + "MlpBlock_3/Dense_0/kernel"] == [None, "model"]
    assert specs[block + "MlpBlock_3/Dense_1/kernel"] == ["model", None]
    assert not any(specs["head/kernel"]) and not any(specs["embedding/projection/kernel"])


@pytest.mark.slow
def test_killed_and_resumed_equals_uninterrupted_and_exports_through_tensorflow(tmp_path):
    args = [*TINY, "--epochs", "2", "--set", "loop.backup_every=4"]
    # The export runs in a TensorFlow process, of the formats asked for; the tiny model's
    # files are not held to the bars (both passed on to `vit export` as given).
    reference = _start([*(arg for arg in args if arg != "--no-export"), "--min-agreement", "0",
                        "--formats", "saved_model,tflite"], tmp_path / "ref")
    victim_dir = tmp_path / "victim"
    victim = _start(args, victim_dir)
    state = kill_after_backup(victim, victim_dir, min_step=12, timeout=300)
    log = _train([*args, "--resume"], victim_dir)
    assert f"continuing at epoch {state['epoch'] + 1}, step {state['step']}" in log
    reference_log = reference.communicate(timeout=600)[0]
    assert reference.returncode == 0, reference_log[-4000:]
    for got, want in zip(_weights(victim_dir), _weights(tmp_path / "ref")):
        np.testing.assert_allclose(got, want, atol=1e-5)
    assert len((victim_dir / "history.csv").read_text().splitlines()) == 3
    export = json.loads((tmp_path / "ref" / "export.json").read_text())
    assert list(export["formats"]) == ["saved_model", "tflite"]
    assert export["formats"]["saved_model"]["max_abs_logit_diff"] < 1e-4
    assert export["formats"]["tflite"]["top1_agreement"] == 1.0


@pytest.mark.parametrize("config", ["mpp_digits", "deit_distill"])
@pytest.mark.slow
def test_every_objective_trains_on_jax(tmp_path, config):
    import keras

    args = [*TINY, "--config", config, "--epochs", "1"]
    if config == "deit_distill":
        teacher = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten(),
                                    keras.layers.Dense(10)])
        teacher.save(tmp_path / "teacher.keras")
        args += ["--set", f"objective.teacher={tmp_path / 'teacher.keras'}"]
    _train(args, tmp_path / "out", devices=2)
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["backend"] == "jax" and metrics["replicas"] == 2
    assert np.isfinite(_losses(tmp_path / "out")).all()


NAN_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    from training import callbacks, pipeline, run
    from training.presets import get_preset
    preset = get_preset("digits_tiny").replace(schedule={"epochs": 1, "batch_size": 128}).replace_model(
        image_size=8, patch_size=4, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=1)
    original = pipeline.train_dataset
    pipeline.train_dataset = lambda *a, **k: original(*a, **k).map(
        lambda images, labels: (images * np.nan, labels))
    try:
        run.train(preset, output=sys.argv[1], export=False, inspect=False)
    except callbacks.NonFiniteLossError as error:
        print("stopped:", error)
""")


@pytest.mark.slow
def test_nan_loss_stops_a_jax_run(tmp_path):
    finished = subprocess.run([sys.executable, "-c", NAN_RUN, str(tmp_path / "out")],
                              env=dict(jax_env(), KERAS_BACKEND="jax"), cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)
    assert "stopped:" in finished.stdout and "no earlier check" in finished.stdout, (
        finished.stdout[-2000:] + finished.stderr[-3000:])
    assert not (tmp_path / "out" / "model.keras").exists()


def test_auto_backend_keeps_keras_backend_else_jax_on_accelerators(monkeypatch):
    from vit_app import backend

    monkeypatch.setenv("KERAS_BACKEND", "tensorflow")
    assert backend.choose("auto") == "tensorflow" and backend.choose("jax") == "jax"
    monkeypatch.delenv("KERAS_BACKEND")
    for name in ("COLAB_TPU_ADDR", "TPU_NAME", "TPU_ACCELERATOR_TYPE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(backend, "nvidia_gpu_present", lambda: False)
    monkeypatch.setattr(backend.glob, "glob", lambda pattern: [])
    assert backend.choose("auto") == backend.CPU_BACKEND
    assert backend.choose("auto", tpu="my-tpu") == "jax"
    monkeypatch.setattr(backend, "nvidia_gpu_present", lambda: True)
    assert backend.choose("auto") == "jax"
    with pytest.raises(ValueError, match="backend must be one of"):
        backend.choose("torch")


def test_jax_only_flags_are_refused_on_tensorflow(capsys):
    from vit import cli

    assert cli.main(["train", "--backend", "tensorflow", "--model-parallel", "2",
                     "--no-export", "--epochs", "1"]) == 2
    assert "need the JAX backend" in capsys.readouterr().err


def test_jax_step_forms_are_refused_on_tensorflow(capsys, tmp_path):
    from vit import cli

    assert cli.main(["train", "--backend", "tensorflow", "--set", "loop.fused_qkv=true",
                     "--output", str(tmp_path / "run"), "--no-export", "--epochs", "1"]) == 2
    assert "loop.fused_qkv shape the JAX training step: train with --backend jax" in \
        capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_header_says_what_each_step_form_does_in_the_run():
    from training.report import describe_step_forms
    from vit_keras import ViTConfig

    config = ViTConfig(image_size=8, patch_size=4, hidden_size=16, mlp_dim=32, num_heads=2,
                       num_layers=1, num_classes=3)
    both = dict(fused_qkv=True, attention_kernel=True)
    assert describe_step_forms(dict(fused_qkv=False, attention_kernel=False), config,
                               "jax") == ""
    assert describe_step_forms(both, config.replace(remat="dots"), "jax") == \
        "fused_qkv, attention_kernel, remat=dots"
    assert describe_step_forms(both, config.replace(attention_dropout_rate=0.1), "jax") == \
        "fused_qkv, attention_kernel (not taken: attention_dropout_rate 0.1)"
    assert describe_step_forms({}, config.replace(remat="dots"), "tensorflow") == \
        "remat=dots (a JAX policy: tensorflow rematerialises whole blocks)"
    assert describe_step_forms({}, config.replace(remat=True), "jax") == ""


@pytest.mark.slow
def test_step_forms_train_as_the_plain_step(tmp_path):
    """One matrix product for q, k, v, the attention kernel in training and remat='dots'
    give the plain run's losses and weights, with the heads sharded over two devices."""
    forms = ["--set", "loop.fused_qkv=true", "--set", "loop.attention_kernel=true",
             "--set", "model.remat=dots"]
    reference, _ = _one_device_reference()
    log = _train([*ONE_EPOCH, *forms, "--model-parallel", "2"], tmp_path / "sharded", devices=2)
    assert "step forms: fused_qkv, attention_kernel, remat=dots" in log
    _assert_same_training(tmp_path / "sharded", reference)


LORA_RESUME_RUN = textwrap.dedent("""
    import sys
    import numpy as np
    import keras
    from training import callbacks, run
    from training.presets import get_preset

    class Killed(Exception):
        pass

    preset = get_preset("digits_tiny").replace(
        schedule={"epochs": 2, "batch_size": 64, "warmup_epochs": 0},
        loop={"mixed_precision": "", "backup_every": 5}, augment={"translate": 0.0, "zoom": 0.0},
        finetune={"mode": "lora", "lora_rank": 2}, optim={"layer_decay": 0.8},
        data={"classes": "5,6,7,8,9"},
        model={"image_size": 8, "patch_size": 4, "hidden_size": 16, "mlp_dim": 32,
               "num_heads": 2, "num_layers": 1})
    options = dict(export=False, inspect=False)
    run.train(preset, output=sys.argv[1] + "/whole", **options)
    original = callbacks.ResumableBackup.save

    def save_then_die(self, epoch, step):
        original(self, epoch, step)
        if epoch == 1 and step > 0:
            raise Killed

    callbacks.ResumableBackup.save = save_then_die
    try:
        run.train(preset, output=sys.argv[1] + "/killed", **options)
    except Killed:
        print("killed")
    callbacks.ResumableBackup.save = original
    run.train(preset, output=sys.argv[1] + "/killed", resume=True, **options)
    load = lambda name: keras.saving.load_model(sys.argv[1] + f"/{name}/model.keras",
                                                compile=False).get_weights()
    print("max difference", max(float(np.max(np.abs(a - b)))
                                for a, b in zip(load("whole"), load("killed"))))
""")


@pytest.mark.slow
def test_lora_with_layer_decay_killed_and_resumed_on_jax(tmp_path):
    finished = subprocess.run([sys.executable, "-c", LORA_RESUME_RUN, str(tmp_path)],
                              env=dict(jax_env(), KERAS_BACKEND="jax"), cwd=tmp_path,
                              capture_output=True, text=True, timeout=600)
    assert finished.returncode == 0, finished.stderr[-4000:]
    assert "killed" in finished.stdout and "finetune lora (rank 2" in finished.stdout
    difference = float(finished.stdout.split("max difference")[1].split()[0])
    assert difference < 1e-6


@pytest.mark.slow
def test_probe_and_head_modes_on_two_jax_devices(tmp_path):
    for mode in ("probe", "head"):
        log = _train([*TINY, "--epochs", "1", "--finetune", mode], tmp_path / mode, devices=2)
        assert f"finetune {mode}" in log
        metrics = json.loads((tmp_path / mode / "metrics.json").read_text())
        assert metrics["finetune"] == mode and metrics["replicas"] == 2
        assert metrics["trainable_weights"] == 16 * 10 + 10        # the head alone
