"""kill -9 at random instants of `vit train` (training, backups, final save, export): every
time, nothing under a final name is corrupt and `--resume` finishes the run.

The default run does 1 kill; the `slow` test does 8 (the figures in RELIABILITY.md).
"""

import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EPOCHS = 3
COMMON = ["train", "--epochs", str(EPOCHS), "--batch-size", "32", "--seed", "1",
          "--no-inspect", "--strategy", "default",
          "--set", "image_size=8", "--set", "patch_size=4", "--set", "hidden_size=16",
          "--set", "mlp_dim=32", "--set", "num_heads=2", "--set", "num_layers=1",
          "--set", "eval_every=1", "--set", "backup_every=4"]


def _env():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO, CUDA_VISIBLE_DEVICES="")
    env.pop("TF_CONFIG", None)
    return env


def _launch(output, resume):
    command = [sys.executable, "-m", "training.cli", *COMMON, "--output", str(output)]
    return subprocess.Popen(command + (["--resume"] if resume else []), env=_env(), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for_training(process, output, timeout=120):
    """Returns once the first backup exists (TensorFlow is up and steps are running)."""
    state = output / "backup" / "state.json"
    deadline = time.time() + timeout
    while time.time() < deadline and process.poll() is None and not state.exists():
        time.sleep(0.02)


def _h5_arrays(path):
    import h5py

    arrays = []
    with h5py.File(path, "r") as weights:
        weights.visititems(lambda name, item: arrays.append(item[()])
                           if isinstance(item, h5py.Dataset) else None)
    return arrays


def check_consistent(output):
    """Every file under a final name is complete; returns the phase the run had reached."""
    import keras

    import vit_keras  # noqa: F401  registers the layers

    state_path = output / "backup" / "state.json"
    if state_path.exists():
        state = json.loads(state_path.read_text())
        arrays = _h5_arrays(output / "backup" / state["weights"])
        assert arrays and all(np.all(np.isfinite(a)) for a in arrays if a.dtype.kind == "f")
    for name in ("best.weights.h5",):
        if (output / name).exists():
            assert _h5_arrays(output / name)
    for name in ("metrics.json", "config.json", "export.json"):
        if (output / name).exists():
            json.loads((output / name).read_text())
    if (output / "model.keras").exists():
        keras.saving.load_model(str(output / "model.keras"), compile=False, safe_mode=True)
    if (output / "saved_model").exists():
        assert (output / "saved_model" / "saved_model.pb").stat().st_size > 0
        assert os.listdir(output / "saved_model" / "variables")
    for tflite in output.glob("*.tflite"):
        from vit_keras.export import TFLiteModel

        TFLiteModel(str(tflite))
    if (output / "export.json").exists():
        return "done"
    if (output / "model.keras").exists():
        return "export"
    return "training" if state_path.exists() else "startup"


def run_trials(tmp_path, kills, seed):
    """Kills one run `kills` times at random instants, then lets `--resume` finish it."""
    rng = random.Random(seed)
    output = tmp_path / "run"
    outcomes = []
    for trial in range(kills):
        process = _launch(output, resume=trial > 0)
        _wait_for_training(process, output)
        time.sleep(rng.uniform(0.0, 4.0))
        if process.poll() is not None:  # finished before the kill: a complete run
            outcomes.append("finished")
            break
        process.send_signal(signal.SIGKILL)
        process.wait()
        outcomes.append(check_consistent(output))
    finish = _launch(output, resume=True)
    log, _ = finish.communicate(timeout=300)
    assert finish.returncode == 0, log[-3000:]
    assert check_consistent(output) == "done"
    assert not (output / "backup").exists()
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["epochs"] == EPOCHS and np.isfinite(metrics["val_loss"])
    from training import outputs

    history = outputs.read_history(str(output / "history.csv"))
    assert max(history["epoch"]) == EPOCHS - 1
    print(f"\ncrash trials (seed {seed}): kills at {outcomes}; --resume finished every time")
    return outcomes


def test_killed_runs_stay_consistent_and_resume(tmp_path):
    outcomes = run_trials(tmp_path, kills=1, seed=0)
    assert outcomes


@pytest.mark.slow
def test_many_kills_across_training_and_export(tmp_path):
    outcomes = run_trials(tmp_path, kills=8, seed=1)
    assert len(outcomes) >= 3
