"""kill -9 at random instants of `vit train` (training, backups, final save, export): every
time, nothing under a final name is corrupt and `--resume` finishes the run.

The trials are `slow`. CI kills 3 runs (one at a random instant, one while a backup is being
written, one during the export); `VIT_FULL_SWEEPS=1` kills 6 (two of each, the figures in
RELIABILITY.md):

    VIT_FULL_SWEEPS=1 pytest -m slow tests/reliability/test_crash_consistency.py -s
"""

import json
import os
import random
import signal
import subprocess
import time

import numpy as np
import pytest
from helpers import FULL_SWEEPS
from runs import start_vit, wait_for_backup

EPOCHS = 3
STEPS_PER_EPOCH = 1437 // 32  # digits' training split at batch 32
COMMON = ["train", "--epochs", str(EPOCHS), "--batch-size", "32", "--seed", "1",
          "--no-inspect", "--strategy", "default",
          "--set", "model.image_size=8", "--set", "model.patch_size=4",
          "--set", "model.hidden_size=16",
          "--set", "model.mlp_dim=32", "--set", "model.num_heads=2", "--set", "model.num_layers=1",
          "--set", "loop.eval_every=1", "--set", "loop.backup_every=4"]


def _launch(output, resume, export=True):
    # The tiny model's int8 files are not held to the export's bars: the trials are about files
    # surviving a kill, not about quantization (tests/test_export_matrix.py is).
    args = [*COMMON, "--output", output] + (["--resume"] if resume else []) + \
        (["--min-agreement", "0"] if export else ["--no-export"])
    return start_vit(args, output.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                     text=True)


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
    if (output / "metrics.json").exists() and not (output / "backup").exists():
        return "done"
    if (output / "model.keras").exists():
        return "export"
    return "training" if state_path.exists() else "startup"


def _kill_when(process, output, target, rng):
    """Sends SIGKILL at the `target` moment; returns False when the run ended first.

    Targets: 'random' (a random instant in the first half of training: after a random
    backup, then up to 50 ms more), 'backup_write' (while a backup temp file exists), 'export'
    (0-2 s after model.keras appears: the SavedModel/TFLite writes).
    """
    wait_for_backup(process, output, timeout=120, poll=0.02)  # TensorFlow is up, steps run
    deadline = time.time() + 120
    if target == "random":
        wait_for_backup(process, output, rng.randint(4, EPOCHS * STEPS_PER_EPOCH // 2),
                        timeout=deadline - time.time(), poll=0.005)
        time.sleep(rng.uniform(0.0, 0.05))
    elif target == "backup_write":
        backup = output / "backup"
        while process.poll() is None and time.time() < deadline and not any(
                "tmp" in entry.name for entry in os.scandir(backup)):
            time.sleep(0.0005)
    elif target == "export":
        while process.poll() is None and time.time() < deadline and not (
                output / "model.keras").exists():
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 2.0))
    if process.poll() is not None:
        return False
    process.send_signal(signal.SIGKILL)
    process.wait()
    return True


def run_trial(tmp_path, target, seed, export=True):
    """One fresh run killed at `target`, checked, then finished by `--resume`."""
    output = tmp_path / f"{target}-{seed}"
    process = _launch(output, resume=False, export=export)
    if not _kill_when(process, output, target, random.Random(seed)):
        process.communicate()
        return "finished before the kill"
    phase = check_consistent(output)
    leftovers = sorted(path.name for path in output.rglob("*tmp*"))  # half-written, never final
    finish = _launch(output, resume=True, export=export)
    log, _ = finish.communicate(timeout=300)
    assert finish.returncode == 0, log[-3000:]
    assert check_consistent(output) == "done"
    assert not (output / "backup").exists()
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["epochs"] == EPOCHS and np.isfinite(metrics["val_loss"])
    from vit_app import outputs

    history = outputs.read_history(str(output / "history.csv"))
    assert max(history["epoch"]) == EPOCHS - 1
    print(f"\ncrash trial {target} seed {seed}: killed during {phase}, temp files left "
          f"{leftovers}; --resume finished")
    return phase


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2] if FULL_SWEEPS else [1])
@pytest.mark.parametrize("target", ["random", "backup_write", "export"])
def test_kills_during_backups_and_export(tmp_path, target, seed):
    phase = run_trial(tmp_path, target, seed)
    assert phase == {"random": phase, "backup_write": "training", "export": "export"}[target]
