"""Worker loss under MultiWorkerMirroredStrategy: kill one of two local workers mid-run, then
the documented recovery (restart every worker with --resume) continues from the last backup
and completes the run; the two workers end with the same weights and only the chief writes the
run's files. Slow: four TensorFlow processes."""

import json
import signal
import subprocess

import pytest
from localhost import free_ports
from runs import read_state, start_vit, vit_env, wait_for_backup

# Two epochs: the kill comes after a backup at step 10 or later, well before the end, and the
# restart trains the rest (a third epoch only made each of the four processes longer).
EPOCHS = 2
ARGS = ["train", "--strategy", "multi_worker", "--epochs", str(EPOCHS), "--batch-size", "32",
        "--no-export", "--no-inspect", "--seed", "2",
        "--set", "model.image_size=8", "--set", "model.patch_size=4", "--set", "model.hidden_size=16",
        "--set", "model.mlp_dim=32", "--set", "model.num_heads=2", "--set", "model.num_layers=1",
        "--set", "loop.eval_every=2", "--set", "loop.backup_every=5"]


def _start_workers(output, resume):
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(2)]}
    processes = []
    for index in range(2):
        env = vit_env(TF_CONFIG=json.dumps({"cluster": cluster,
                                            "task": {"type": "worker", "index": index}}))
        args = [*ARGS, "--output", output] + (["--resume"] if resume else [])
        processes.append(start_vit(args, output.parent, env, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True))
    return processes


@pytest.mark.slow
def test_killed_worker_then_restart_resumes_from_backup(tmp_path):
    chief, worker = _start_workers(tmp_path, resume=False)
    wait_for_backup(chief, tmp_path, min_step=10)
    assert chief.poll() is None, "the run ended before the worker could be killed"
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    try:  # the survivor fails (or blocks in a collective): it is stopped like a preempted VM
        chief.wait(timeout=30)
        survivor = f"exited {chief.returncode}"
    except subprocess.TimeoutExpired:
        chief.send_signal(signal.SIGKILL)
        chief.wait()
        survivor = "blocked, killed after 30 s"
    state = read_state(tmp_path)
    assert 0 < state["global_step"] and not (tmp_path / "model.keras").exists()

    processes = _start_workers(tmp_path, resume=True)
    logs = [process.communicate(timeout=300)[0] for process in processes]
    assert [process.returncode for process in processes] == [0, 0], logs[0][-2000:] + \
        logs[1][-2000:]
    assert f"continuing at epoch {state['epoch'] + 1}, step {state['step']}" in logs[0]
    assert "MultiWorkerMirroredStrategy x2" in logs[0]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["epochs"] == EPOCHS and metrics["replicas"] == 2
    assert not (tmp_path / "backup").exists()
    _assert_only_the_chief_wrote_and_the_workers_agree(tmp_path)
    print(f"\nworker loss: killed worker 1 after global step {state['global_step']}; chief "
          f"{survivor}; restart with --resume completed {EPOCHS} epochs")


def _assert_only_the_chief_wrote_and_the_workers_agree(output):
    """The chief's model.keras and metrics.json, none in the worker's own folder, whose final
    weights equal the chief's."""
    import keras
    import numpy as np

    import vit_keras

    assert (output / "model.keras").exists() and (output / "metrics.json").exists()
    worker_dir = output / ".worker-1"
    assert not (worker_dir / "model.keras").exists() and not (worker_dir / "metrics.json").exists()
    chief = keras.saving.load_model(str(output / "model.keras"), compile=False)
    worker = vit_keras.VisionTransformer(vit_keras.config_from_model(chief))
    worker.load_weights(str(worker_dir / "final.weights.h5"))
    for a, b in zip(chief.get_weights(), worker.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-6)
